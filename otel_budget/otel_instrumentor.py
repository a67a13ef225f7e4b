"""The `opentelemetry_instrumentor` entry point: `opentelemetry-instrument python app.py` enables otel-budget.

`OTEL_BUDGET_DEFAULT` (JSON of Budget fields) sets the default budget and
`OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=otel_budget` leaves it off, as for any OpenTelemetry instrumentation.

An error here must not abort the auto-instrumentation (it stops loading every instrumentation after ours). So a
malformed `OTEL_BUDGET_DEFAULT` is logged as an error at start-up, and every run is then refused with that error:
nothing is sent unbudgeted, and the other instrumentations load as usual.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

log = logging.getLogger(__name__)


class OtelBudgetInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """`otel_budget.instrument()` / `uninstrument()` in the shape OpenTelemetry's auto-instrumentation loads."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return ()  # each provider and framework is patched only if installed, on its first import

    def _instrument(self, **kwargs: Any) -> None:
        import otel_budget
        from otel_budget.core import config
        from otel_budget.telemetry import environment

        providers = {"tracer_provider": kwargs.get("tracer_provider"), "meter_provider": kwargs.get("meter_provider")}
        try:
            budget = environment.default_budget()
        except ValueError as exc:
            refusal = (f"{exc}. Fix it (or unset it) and restart the application; until then every run is refused, "
                       "so nothing is sent unbudgeted")
            log.error("otel-budget: %s (the other instrumentations are loaded as usual).", refusal)
            try:
                otel_budget.instrument(otel_budget.Budget(), **providers)  # patched, so runs see their calls
            finally:
                config.get().refusal = refusal
            return
        try:
            otel_budget.instrument(budget, **providers)
        except Exception:  # noqa: BLE001 - our failure must not stop the other instrumentations from loading
            log.exception("otel-budget: could not instrument under opentelemetry-instrument; a run opened later "
                          "tries again and raises the error there")

    def _uninstrument(self, **kwargs: Any) -> None:
        import otel_budget

        otel_budget.uninstrument()

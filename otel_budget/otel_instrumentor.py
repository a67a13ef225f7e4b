"""The `opentelemetry_instrumentor` entry point: `opentelemetry-instrument python app.py` enables otel-budget.

`OTEL_BUDGET_DEFAULT` (JSON of Budget fields) sets the default budget and
`OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=otel_budget` leaves it off, as for any OpenTelemetry instrumentation.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]


class OtelBudgetInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """`otel_budget.instrument()` / `uninstrument()` in the shape OpenTelemetry's auto-instrumentation loads."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return ()  # each provider and framework is patched only if installed, on its first import

    def _instrument(self, **kwargs: Any) -> None:
        import otel_budget

        otel_budget.instrument(tracer_provider=kwargs.get("tracer_provider"),
                               meter_provider=kwargs.get("meter_provider"))

    def _uninstrument(self, **kwargs: Any) -> None:
        import otel_budget

        otel_budget.uninstrument()

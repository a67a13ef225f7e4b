"""otel-budget: a meter and a brake for LLM agents.

    import otel_budget
    otel_budget.instrument()
    with otel_budget.run("invoice-agent", budget=otel_budget.Budget(max_steps=25, max_usd=0.80)) as run:
        while run.allows():
            ...  # instrumented model calls are checked before they are sent, spanned and charged
    print(run.outcome.stop_reason, run.outcome.wrap_up)

The guides, one page per provider and framework, are the docs site (`docs/`, `make docs`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from ._version import __version__
from .core import config as _config
from .core.ledger import LedgerStore, MemoryLedger
from .core.pricing import PriceBook as _PriceBook
from .core.resume import resume  # completes Budget and RunOutcome
from .core.run import Run, current_run, run
from .core.tools import tool
from .fleet import propagation
from .fleet.redis_ledger import RedisLedger
from .instrumentation import instrument_all as _instrument_all
from .instrumentation import patched as _patched
from .instrumentation import uninstrument_all as _uninstrument_all
from .instrumentation._patch import Patches as _Patches
from .model.budget import Budget, Price, Scope, StopReason, Usage
from .model.outcome import BudgetExceeded, RunOutcome, UnknownPriceError
from .model.paused import PausedRun, PendingCall  # completes Budget and RunOutcome
from .model.policy import ApprovalPolicy  # completes Budget and RunOutcome
from .model.trust import InvalidRunState
from .telemetry import environment as _environment
from .telemetry.exporters import FileSpanExporter
from .telemetry.recorder import Telemetry as _Telemetry

__all__ = [
    "ApprovalPolicy",
    "FileSpanExporter",
    "InvalidRunState",
    "PausedRun",
    "PendingCall",
    "Budget",
    "BudgetExceeded",
    "LedgerStore",
    "MemoryLedger",
    "Price",
    "RedisLedger",
    "Run",
    "RunOutcome",
    "Scope",
    "StopReason",
    "UnknownPriceError",
    "Usage",
    "__version__",
    "current_run",
    "propagation",
    "instrument",
    "instrumented_libraries",
    "resume",
    "run",
    "tool",
    "uninstrument",
]

_lock = threading.Lock()
_patches = _Patches()
_instrumented = False
_uninstrumented = False  # uninstrument() was called: a run opened now warns instead of instrumenting
_log = logging.getLogger(__name__)


def instrument(
    budget: Budget | None = None,
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    prices: Mapping[str, Price | Mapping[str, float]] | None = None,
    capture_content: bool | None = None,
    ledger: LedgerStore | None = None,
    openinference: bool | None = None,
    secret: str | bytes | None = None,
) -> None:
    """Patch the installed provider clients and agent frameworks, and set the defaults for runs.

    Idempotent: a second call updates the settings and patches nothing twice. `budget` is the default for
    runs that bring none; `prices` override the bundled price table (keys: model names); content (prompts,
    completions, tool arguments) is recorded only with `capture_content=True` or
    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT. Spans carry the GenAI semantic-convention names;
    `openinference=True` (or OTEL_BUDGET_OPENINFERENCE=true) adds their OpenInference twins for Arize AX and
    Phoenix before 15.10 (Phoenix 15.10 and later convert the GenAI names themselves).

    Given no providers while none is set globally, it exports what the standard OTEL_* variables ask for (as
    `opentelemetry-instrument` does); given no budget, OTEL_BUDGET_DEFAULT (JSON of Budget fields) is the default.

    `secret` (or OTEL_BUDGET_SECRET) signs paused runs and run tokens with HMAC-SHA256: one edited after it left
    the process is refused. Give every process that resumes or attaches the same secret. Without one, they are
    accepted unsigned (one warning per process). See docs/security.md.
    """
    if secret is not None and (not isinstance(secret, (str, bytes)) or not secret):
        raise ValueError(f"instrument(secret=...) must be a non-empty str or bytes, not {type(secret).__name__}; "
                         "or set OTEL_BUDGET_SECRET")
    if tracer_provider is None and meter_provider is None:
        _environment.configure_export()
    if budget is None:
        budget = _environment.default_budget()
    settings = _config.Settings(
        telemetry=_Telemetry(tracer_provider, meter_provider, openinference),
        prices=_PriceBook(prices),  # type: ignore[arg-type]  # mappings become Price
        default_budget=budget,
        ledger=ledger,
        instrumented=True,
    )
    if capture_content is not None:
        settings.capture_content = capture_content
    if secret is not None:
        settings.secret = secret.encode() if isinstance(secret, str) else bytes(secret)
    global _instrumented, _uninstrumented
    with _lock:
        _config.install(settings)
        _uninstrumented = False
        if not _instrumented:
            _instrumented = True
            _instrument_all(_patches)


def uninstrument() -> None:
    """Restore every patched attribute to the very object it was before `instrument()`."""
    global _instrumented, _uninstrumented
    with _lock:
        _uninstrument_all(_patches)
        _instrumented = False
        _uninstrumented = True
        _config.install(_config.Settings())


def _ensure_instrumented(run_name: str) -> None:
    """A run opened while nothing is instrumented: instrument with the defaults (logged once at INFO), or, after
    an explicit `uninstrument()`, warn that its budget sees no calls."""
    if _uninstrumented:
        _log.warning("otel-budget: run %r was opened after uninstrument(): no client is instrumented, so its budget "
                     "sees no calls. Call otel_budget.instrument() to enforce it.", run_name)
        return
    instrument()
    _log.info("otel-budget: run %r was opened before instrument(); instrumented the installed libraries with the "
              "defaults (call otel_budget.instrument() first to choose providers, prices or a default budget)",
              run_name)


def instrumented_libraries() -> list[str]:
    """The libraries patched so far (a library is patched on its first import after `instrument()`)."""
    return _patched()


_config.ensure_instrumented = _ensure_instrumented

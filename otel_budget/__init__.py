"""otel-budget: a meter and a brake for LLM agents.

    import otel_budget
    otel_budget.instrument()
    with otel_budget.run("invoice-agent", budget=otel_budget.Budget(max_steps=25, max_usd=0.80)) as run:
        while run.allows():
            ...  # instrumented model calls are checked before they are sent, spanned and charged
    print(run.outcome.stop_reason, run.outcome.wrap_up)
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

__version__ = "0.1.0"

from . import config as _config
from .budget import Budget, BudgetExceeded, Price, RunOutcome, Scope, StopReason, UnknownPriceError, Usage
from .instrumentation import instrument_all as _instrument_all
from .instrumentation._patch import Patches as _Patches
from .ledger import LedgerStore, MemoryLedger
from .pricing import PriceBook as _PriceBook
from .run import Run, current_run, run
from .telemetry import Telemetry as _Telemetry
from .tools import tool

__all__ = [
    "Budget",
    "BudgetExceeded",
    "LedgerStore",
    "MemoryLedger",
    "Price",
    "Run",
    "RunOutcome",
    "Scope",
    "StopReason",
    "UnknownPriceError",
    "Usage",
    "__version__",
    "current_run",
    "instrument",
    "instrumented_libraries",
    "run",
    "tool",
    "uninstrument",
]

_lock = threading.Lock()
_patches = _Patches()
_libraries: list[str] = []


def instrument(
    budget: Budget | None = None,
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    prices: Mapping[str, Price | Mapping[str, float]] | None = None,
    capture_content: bool | None = None,
    ledger: LedgerStore | None = None,
) -> None:
    """Patch the installed provider clients and agent frameworks, and set the defaults for runs.

    Idempotent: a second call updates the settings and patches nothing twice. `budget` is the default for
    runs that bring none; `prices` override the bundled price table (keys: model names); content (prompts,
    completions, tool arguments) is recorded only with `capture_content=True` or
    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT.
    """
    settings = _config.Settings(
        telemetry=_Telemetry(tracer_provider, meter_provider),
        prices=_PriceBook(prices),
        default_budget=budget,
        ledger=ledger,
        instrumented=True,
    )
    if capture_content is not None:
        settings.capture_content = capture_content
    with _lock:
        _config.install(settings)
        if not len(_patches):
            _libraries[:] = _instrument_all(_patches)


def uninstrument() -> None:
    """Restore every patched attribute to the very object it was before `instrument()`."""
    with _lock:
        _patches.undo()
        _libraries.clear()
        _config.install(_config.Settings())


def instrumented_libraries() -> list[str]:
    """The libraries `instrument()` patched."""
    return list(_libraries)

"""The settings that `instrument()` installs, read by runs and instrumentation."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from ..model.budget import Budget
from ..telemetry import exporters
from ..telemetry import semconv as sc
from ..telemetry.messages import content_capture_from_env
from ..telemetry.recorder import Telemetry
from .ledger import LedgerStore
from .pricing import PriceBook


def secret_from_env() -> bytes | None:
    """OTEL_BUDGET_SECRET as bytes, or None when unset or empty."""
    value = os.environ.get(sc.ENV_BUDGET_SECRET, "")
    return value.encode() if value else None


@dataclass
class Settings:
    """What `instrument()` was given; a default instance serves code that never called it."""

    telemetry: Telemetry = field(default_factory=Telemetry)
    prices: PriceBook = field(default_factory=PriceBook)
    default_budget: Budget | None = None
    capture_content: bool = field(default_factory=content_capture_from_env)
    ledger: LedgerStore | None = None
    instrumented: bool = False
    secret: bytes | None = field(default_factory=secret_from_env)
    """Signs paused runs and run tokens (HMAC-SHA256); None: they are accepted unsigned, with one warning."""
    refusal: str | None = None
    """Why every run is refused (a setup error, e.g. a malformed OTEL_BUDGET_DEFAULT under auto-instrumentation,
    that could not be raised to the application): nothing is sent unbudgeted while it is set."""


_settings: Settings | None = None
#: What a run opened before `instrument()` calls with its name: the package sets it to its own instrument()
#: with the defaults (a hook, so the core never imports the package above it).
def _not_set(run_name: str) -> None:
    return None


ensure_instrumented: Callable[[str], None] = _not_set


def get() -> Settings:
    """The current settings (created on first use, so telemetry binds to the providers set by then)."""
    global _settings
    if _settings is None:
        _settings = Settings()
    return _settings


def install(settings: Settings) -> None:
    global _settings
    _settings = settings


exporters.capture_on = lambda: get().capture_content  # a span file is created 0600 while content is captured

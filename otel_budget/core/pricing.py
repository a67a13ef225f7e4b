"""Model prices: the user's overrides first, then the bundled genai-prices table (offline).

Lookups are cached per (provider, model), so the per-call cost is a dict lookup and a few multiplications.
An unknown model is `None` ("unpriced"), never $0.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..model.budget import Price

log = logging.getLogger(__name__)

#: Our provider names -> genai-prices provider ids.
_PROVIDER_IDS = {"openai": "openai", "anthropic": "anthropic", "gcp.gemini": "google", "gcp.vertex_ai": "google",
                 "google": "google"}


@dataclass(frozen=True, slots=True)
class ModelPricing:
    """A model's price, with input-size tiers (the tier whose start the prompt exceeds applies)."""

    base: Price
    tiers: tuple[tuple[int, Price], ...] = ()
    #: The base price's rates per million tokens (input, cache read, cache write, output), read once: a call is
    #: priced several times (admission, settlement) and a tier-less model needs nothing else.
    rates: tuple[float, float, float, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rates", _rates(self.base))

    def rates_at(self, input_tokens: int) -> tuple[float, float, float, float]:
        """The rates per million tokens (input, cache read, cache write, output) of the tier a prompt of
        `input_tokens` tokens is priced at."""
        if not self.tiers:
            return self.rates
        price = self.base
        for start, tier in self.tiers:
            if input_tokens > start:
                price = tier
        return _rates(price)

    def cost(self, input_tokens: int, output_tokens: int, cache_read: int = 0, cache_write: int = 0) -> float:
        # Price.cost on the tier's price, term for term (the same float result).
        fresh_rate, read, write, out = self.rates if not self.tiers else self.rates_at(input_tokens)
        fresh = input_tokens - cache_read - cache_write
        if fresh < 0:
            fresh = 0
        return (fresh * fresh_rate + cache_read * read + cache_write * write + output_tokens * out) / 1e6


def _rates(price: Price) -> tuple[float, float, float, float]:
    fresh = price.input_per_mtok
    read, write = price.cache_read_per_mtok, price.cache_write_per_mtok
    return fresh, fresh if read is None else read, fresh if write is None else write, price.output_per_mtok


class PriceBook:
    """Resolves and caches prices; thread-safe."""

    def __init__(self, overrides: Mapping[str, Price] | None = None) -> None:
        self._overrides = {k: _as_price(v) for k, v in (overrides or {}).items()}
        self._cache: dict[tuple[str, str], ModelPricing | None] = {}
        self._lock = threading.Lock()

    def lookup(self, provider: str, model: str) -> ModelPricing | None:
        """The price of `model` at `provider`, or None when nobody knows it."""
        key = (provider, model)
        try:
            return self._cache[key]
        except KeyError:
            pass
        found = self._resolve(provider, model)
        with self._lock:
            self._cache[key] = found
        return found

    def _resolve(self, provider: str, model: str) -> ModelPricing | None:
        override = self._overrides.get(model) or self._overrides.get(f"{provider}/{model}")
        if override is not None:
            return ModelPricing(override)
        return _from_genai_prices(provider, model)


def _as_price(value: Price | Mapping[str, Any]) -> Price:
    return value if isinstance(value, Price) else Price(**value)


def _from_genai_prices(provider: str, model: str) -> ModelPricing | None:
    try:
        from genai_prices import Usage as GPUsage
        from genai_prices import calc_price
    except ImportError:  # pragma: no cover - a hard dependency, but never break a call over it
        return None
    try:
        calc = calc_price(GPUsage(input_tokens=1, output_tokens=1), model, provider_id=_PROVIDER_IDS.get(provider))
    except LookupError:
        try:
            calc = calc_price(GPUsage(input_tokens=1, output_tokens=1), model)
        except LookupError:
            return None
    except Exception:  # noqa: BLE001 - price data problems must not break the agent
        log.debug("genai-prices failed for %s/%s", provider, model, exc_info=True)
        return None
    mp = calc.model_price
    fields = ("input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok")
    raw: dict[str, Any] = {f: getattr(mp, f, None) for f in fields}
    starts = sorted({t.start for v in raw.values() if hasattr(v, "tiers") for t in v.tiers})

    def at(value: Any, tokens: int) -> float | None:
        if value is None:
            return None
        if hasattr(value, "tiers"):
            chosen = value.base
            for tier in value.tiers:
                if tokens > tier.start:
                    chosen = tier.price
            return float(chosen)
        return float(value)

    def price_at(tokens: int) -> Price:
        return Price(
            input_per_mtok=at(raw["input_mtok"], tokens) or 0.0,
            output_per_mtok=at(raw["output_mtok"], tokens) or 0.0,
            cache_read_per_mtok=at(raw["cache_read_mtok"], tokens),
            cache_write_per_mtok=at(raw["cache_write_mtok"], tokens),
        )

    return ModelPricing(price_at(0), tuple((s, price_at(s + 1)) for s in starts))

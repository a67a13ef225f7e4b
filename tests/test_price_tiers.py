"""Input-size price tiers (long-context prices): a call is priced, and admitted, at the tier its prompt falls in.

claude-sonnet-4-5 and gemini-2.5-pro cost more per token above 200,000 input tokens (the bundled genai-prices
table). The price of a call is the tier's `Price.cost`, term for term, with cache reads and writes; the admission
reserves a prompt above the start at the dearer rates.
"""

from __future__ import annotations

import pytest

import otel_budget
from otel_budget.core.pricing import PriceBook
from otel_budget.core.run import current_run


@pytest.mark.parametrize(("provider", "model"), [("anthropic", "claude-sonnet-4-5"), ("gcp.gemini", "gemini-2.5-pro")])
@pytest.mark.parametrize("input_tokens", [1, 199_999, 200_000, 200_001, 1_000_000])
def test_a_call_is_priced_at_the_tier_its_prompt_falls_in(provider: str, model: str, input_tokens: int) -> None:
    pricing = PriceBook().lookup(provider, model)
    assert pricing is not None and pricing.tiers, "the bundled table has a long-context tier for this model"
    start, dearer = pricing.tiers[0]
    price = dearer if input_tokens > start else pricing.base
    for cache_read, cache_write, output in [(0, 0, 0), (0, 0, 700), (input_tokens // 3, input_tokens // 5, 1234)]:
        got = pricing.cost(input_tokens, output, cache_read, cache_write)
        assert got == price.cost(input_tokens, output, cache_read, cache_write)
    write = price.input_per_mtok if price.cache_write_per_mtok is None else price.cache_write_per_mtok
    assert pricing.rates_at(input_tokens) == (price.input_per_mtok, price.cache_read_per_mtok, write,
                                              price.output_per_mtok)
    if input_tokens > start:  # the dearer tier really is dearer: a prompt past the start costs more per token
        assert pricing.cost(input_tokens, 0) > pricing.base.cost(input_tokens, 0)


def test_a_prompt_past_the_tier_start_is_reserved_at_the_dearer_rates() -> None:
    otel_budget.instrument()
    try:
        with otel_budget.run("tiers", budget=otel_budget.Budget(max_usd=100, max_output_tokens=1000)):
            node = current_run()
            assert node is not None
            small = node.admit("anthropic", "claude-sonnet-4-5", 100, lambda: 4 * 150_000)
            usd_small = small.amounts["usd"]
            node.release(small)
            large = node.admit("anthropic", "claude-sonnet-4-5", 100, lambda: 4 * 250_000)
            usd_large = large.amounts["usd"]
            node.release(large)
    finally:
        otel_budget.uninstrument()
    # The larger prompt's reservation is more than its size alone explains: its tokens are reserved at the dearer
    # tier's input rate (6 USD per million against 3 for claude-sonnet-4-5).
    assert usd_large / usd_small > 250_000 / 150_000 * 1.5

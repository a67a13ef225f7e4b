"""Limit pauses on every provider path next to the raw openai chat loop: the async openai client, anthropic, the
Responses API, LiteLLM and google-genai (real SDKs over ScriptedLLM). Each pauses at its money cap without sending
the refused call, round-trips its PausedRun through JSON, goes on under a larger cap without passing it, and a
decline ends it with the limit's own reason."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before LiteLLM's import: no price fetch

import litellm  # noqa: E402 - imported before instrument(), as an application would
from google import genai  # noqa: E402
from google.genai import types  # noqa: E402

import otel_budget  # noqa: E402
from otel_budget import Budget, PausedRun, StopReason  # noqa: E402
from otel_budget.testing import ScriptedLLM, Turn  # noqa: E402

from ._limit_agent import MODEL, PRICES  # noqa: E402

CAP, LARGER = 0.40, 1.60
PROMPT = "next invoice"
Ask = Callable[[], Any]


@dataclass
class Provider:
    """One provider path: `ask` makes one model call allowing 100 output tokens (a coroutine when `is_async`)."""

    ask: Ask
    is_async: bool = False
    aclose: Callable[[], Awaitable[None]] | None = None
    """Closes what `ask` opened on the running event loop (before that loop ends)."""
    close: Callable[[], None] | None = None
    """Closes the client after the test."""


def _openai_async(llm: ScriptedLLM) -> Provider:
    clients: dict[int, openai.AsyncOpenAI] = {}  # one per event loop: its connections belong to that loop

    def ask() -> Any:
        loop = id(asyncio.get_running_loop())
        client = clients.get(loop) or clients.setdefault(
            loop, openai.AsyncOpenAI(base_url=llm.openai_base_url, api_key="test", max_retries=0))
        return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": PROMPT}],
                                              max_tokens=100)

    async def aclose() -> None:
        client = clients.pop(id(asyncio.get_running_loop()), None)
        if client is not None:
            await client.close()

    return Provider(ask, is_async=True, aclose=aclose)


def _anthropic(llm: ScriptedLLM) -> Provider:
    client = anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="test", max_retries=0)
    return Provider(lambda: client.messages.create(
        model=MODEL, max_tokens=100, messages=[{"role": "user", "content": PROMPT}]), close=client.close)


def _responses(llm: ScriptedLLM) -> Provider:
    client = openai.OpenAI(base_url=llm.openai_base_url, api_key="test", max_retries=0)
    return Provider(lambda: client.responses.create(model=MODEL, input=PROMPT, max_output_tokens=100),
                    close=client.close)


def _litellm(llm: ScriptedLLM) -> Provider:
    return Provider(lambda: litellm.completion(
        model=f"openai/{MODEL}", messages=[{"role": "user", "content": PROMPT}], api_base=llm.openai_base_url,
        api_key="test", max_tokens=100, num_retries=0))


def _genai(llm: ScriptedLLM) -> Provider:
    client = genai.Client(api_key="test", http_options=types.HttpOptions(base_url=llm.base_url))
    config = types.GenerateContentConfig(max_output_tokens=100)
    return Provider(lambda: client.models.generate_content(model=MODEL, contents=PROMPT, config=config),
                    close=client.close)


PROVIDERS = {"openai-async": _openai_async, "anthropic": _anthropic, "responses": _responses,
             "litellm": _litellm, "google-genai": _genai}


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        server.default = Turn(text="invoice read", output_tokens=100)
        otel_budget.instrument(prices=PRICES)
        try:
            yield server
        finally:
            otel_budget.uninstrument()


@pytest.fixture(params=sorted(PROVIDERS))
def provider(request: pytest.FixtureRequest, llm: ScriptedLLM) -> Iterator[Provider]:
    made = PROVIDERS[request.param](llm)
    yield made
    if made.close is not None:
        made.close()


@dataclass
class Drive:
    """A finished run and how many calls the loop attempted in it (the refused one included)."""

    run: otel_budget.Run
    attempts: int

    @property
    def outcome(self) -> otel_budget.RunOutcome:
        assert self.run.outcome is not None
        return self.run.outcome


def _drive(provider: Provider, open_run: Callable[[], otel_budget.Run], calls: int = 40) -> Drive:
    """Ask until a call is refused: it raises BudgetExceeded, which the run catches (no `run.allows()` first, so
    the refused call is always attempted and the server's count shows it was not sent)."""
    attempts = 0
    if provider.is_async:
        async def main() -> otel_budget.Run:
            nonlocal attempts
            try:
                async with open_run() as run:
                    for _ in range(calls):
                        attempts += 1
                        await provider.ask()
            finally:
                if provider.aclose is not None:
                    await provider.aclose()
            return run

        return Drive(asyncio.run(main()), attempts)
    with open_run() as run:
        for _ in range(calls):
            attempts += 1
            provider.ask()
    return Drive(run, attempts)


def _pause(provider: Provider) -> Drive:
    return _drive(provider, lambda: otel_budget.run("invoices", budget=Budget(max_usd=CAP, on_limit="pause")))


def _round_trip(paused: PausedRun | None) -> PausedRun:
    assert paused is not None
    return PausedRun.model_validate_json(paused.model_dump_json())


def test_a_limit_pauses_the_run_and_the_refused_call_never_reaches_the_server(provider: Provider,
                                                                               llm: ScriptedLLM) -> None:
    first = _pause(provider)
    out = first.outcome
    assert out.stop_reason is StopReason.AWAITING_APPROVAL and out.limit == "max_usd"
    sent = len(llm.requests)
    assert sent >= 2, "a call or more fits in the cap before the pause"
    assert first.attempts == sent + 1  # the loop's last call was refused before it was sent
    assert out.usage.model_calls == sent
    assert out.usage.cost_usd <= CAP
    back = _round_trip(out.paused)
    assert back.pending is not None and back.pending.kind == "limit" and back.pending.limit == "max_usd"
    assert back.pending.cap == CAP and back.pending.used == pytest.approx(out.usage.cost_usd)
    assert back.budget["on_limit"] == "pause"
    assert back.usage.model_calls == sent
    assert out.wrap_up.startswith("Paused: the run reached max_usd")


def test_a_resume_with_a_larger_cap_goes_on_and_never_exceeds_it(provider: Provider, llm: ScriptedLLM) -> None:
    first = _pause(provider)
    paused = _round_trip(first.outcome.paused)
    before = len(llm.requests)
    second = _drive(provider, lambda: otel_budget.resume(paused, approved=True, budget=Budget(max_usd=LARGER)))
    out = second.outcome
    more = len(llm.requests) - before
    assert more >= 2, "the larger cap lets more calls go"
    assert second.attempts == more + 1  # and the one that would pass the new cap was not sent
    assert out.usage.model_calls == len(llm.requests)  # the paused part is counted with the new part
    assert first.outcome.usage.cost_usd < out.usage.cost_usd <= LARGER
    per_call = out.usage.cost_usd / out.usage.model_calls
    assert out.usage.cost_usd + per_call > LARGER  # it went on until the next call no longer fit
    assert out.stop_reason is StopReason.AWAITING_APPROVAL and out.limit == "max_usd"
    assert out.paused is not None and out.paused.pending is not None and out.paused.pending.cap == LARGER


def test_a_decline_ends_the_run_with_the_limits_own_reason_and_sends_nothing(provider: Provider,
                                                                            llm: ScriptedLLM) -> None:
    paused = _round_trip(_pause(provider).outcome.paused)
    before = len(llm.requests)
    declined = _drive(provider, lambda: otel_budget.resume(paused, approved=False))
    out = declined.outcome
    assert out.stop_reason is StopReason.COST and out.limit == "max_usd"
    assert out.paused is None
    assert len(llm.requests) == before and declined.attempts == 1  # its first call was refused
    assert out.wrap_up.startswith("Stopped at a limit: max_usd")


@pytest.mark.parametrize(("limit", "cap", "larger", "per_call"), [
    ("max_steps", 2, 5, 1), ("max_output_tokens", 250, 800, 100)], ids=["steps", "output-tokens"])
def test_count_limits_pause_and_resume_under_the_larger_cap(provider: Provider, llm: ScriptedLLM, limit: str,
                                                            cap: int, larger: int, per_call: int) -> None:
    def used(u: otel_budget.Usage) -> int:
        return u.model_calls if limit == "max_steps" else u.output_tokens

    first = _drive(provider, lambda: otel_budget.run("pages", budget=Budget(**{limit: cap}, on_limit="pause")))
    out = first.outcome
    assert out.stop_reason is StopReason.AWAITING_APPROVAL and out.limit == limit
    assert first.attempts == len(llm.requests) + 1 and used(out.usage) <= cap
    paused = _round_trip(out.paused)
    assert paused.pending is not None and paused.pending.kind == "limit" and paused.pending.cap == cap
    second = _drive(provider, lambda: otel_budget.resume(paused, approved=True, budget=Budget(**{limit: larger})))
    again = second.outcome
    assert again.stop_reason is StopReason.AWAITING_APPROVAL and again.limit == limit
    assert again.usage.model_calls == len(llm.requests) > out.usage.model_calls
    assert used(again.usage) <= larger
    assert used(again.usage) + per_call > larger  # the next call (1 step, 100 output tokens) did not fit

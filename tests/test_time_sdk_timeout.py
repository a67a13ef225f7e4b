"""`max_seconds` lowers the SDK's per-attempt timeout to the time the run has left, and never raises it: a run with
an hour left keeps the client's 5 s connect and 600 s read timeouts, as outside a run. Read at the HTTP client, the
timeout each request really went out with (the real openai and anthropic SDKs, against ScriptedLLM)."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import openai
import pytest

import otel_budget as ob
from otel_budget.testing import ScriptedLLM, Turn

MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture
def sent() -> list[dict[str, Any]]:
    """The timeout of every request the HTTP client sent ({connect, read, write, pool})."""
    return []


def _client(provider: str, llm: ScriptedLLM, sent: list[dict[str, Any]], is_async: bool = False, **kw: Any) -> Any:
    sdk: Any = openai if provider == "openai" else anthropic
    url = llm.openai_base_url if provider == "openai" else llm.anthropic_base_url
    if is_async:
        async def ahook(request: Any) -> None:
            sent.append(request.extensions["timeout"])

        http: Any = sdk.DefaultAsyncHttpxClient(event_hooks={"request": [ahook]})
        cls = sdk.AsyncOpenAI if provider == "openai" else sdk.AsyncAnthropic
    else:
        http = sdk.DefaultHttpxClient(event_hooks={"request": [lambda request: sent.append(request.extensions["timeout"])]})
        cls = sdk.OpenAI if provider == "openai" else sdk.Anthropic
    return cls(base_url=url, api_key="t", max_retries=0, http_client=http, **kw)


def _create(client: Any, provider: str, **kw: Any) -> Any:
    if provider == "openai":
        return client.chat.completions.create(model="gpt-4o", messages=MSG, **kw)
    return client.messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=MSG, **kw)


@pytest.fixture
def llm(otel: Any) -> Any:
    with ScriptedLLM() as server:
        server.default = Turn(text="ok")
        yield server


PROVIDERS = pytest.mark.parametrize("provider", ["openai", "anthropic"])


@PROVIDERS
def test_a_run_with_more_time_than_the_client_timeout_keeps_the_client_timeout(llm: Any, sent: list, provider: str):
    client = _client(provider, llm, sent)
    _create(client, provider)  # outside a run: what the SDK sends by itself
    with ob.run("long", budget=ob.Budget(max_seconds=3600)):
        _create(client, provider)
    assert sent[0] == {"connect": 5.0, "read": 600, "write": 600, "pool": 600}
    assert sent[1] == sent[0]  # not raised to the hour the run has left


@PROVIDERS
def test_a_shorter_run_lowers_each_longer_phase_and_keeps_the_shorter_ones(llm: Any, sent: list, provider: str):
    client = _client(provider, llm, sent)
    with ob.run("short", budget=ob.Budget(max_seconds=30)):
        _create(client, provider)
    assert sent[0]["connect"] == 5.0  # already shorter than the time left: as it was
    assert all(25 < sent[0][phase] <= 30 for phase in ("read", "write", "pool")), sent[0]


@PROVIDERS
def test_the_request_s_own_timeout_wins_when_shorter_and_no_timeout_becomes_the_time_left(
        llm: Any, sent: list, provider: str):
    client = _client(provider, llm, sent)
    with ob.run("own", budget=ob.Budget(max_seconds=30)):
        _create(client, provider, timeout=2.0)
        _create(client, provider, timeout=None)  # no timeout at all: bounded by the run
    assert sent[0] == {"connect": 2.0, "read": 2.0, "write": 2.0, "pool": 2.0}
    assert all(25 < value <= 30 for value in sent[1].values()), sent[1]


def test_a_client_timeout_object_is_kept_phase_by_phase_async(llm: Any, sent: list) -> None:
    client = _client("openai", llm, sent, is_async=True, timeout=openai.Timeout(20.0, connect=1.0))

    async def main() -> None:
        async with ob.run("phases", budget=ob.Budget(max_seconds=3600)):
            await _create(client, "openai")
        async with ob.run("phases", budget=ob.Budget(max_seconds=10)):
            await _create(client, "openai")

    asyncio.run(main())
    assert sent[0] == {"connect": 1.0, "read": 20.0, "write": 20.0, "pool": 20.0}
    assert sent[1]["connect"] == 1.0 and all(5 < sent[1][p] <= 10 for p in ("read", "write", "pool")), sent[1]


@PROVIDERS
def test_a_retry_that_outlasts_the_client_timeout_lowers_it_phase_by_phase(llm: Any, sent: list, provider: str):
    """The first attempt fits the client's timeout and goes out with it; the SDK's retry, 1.5 s later, does not:
    its longer phases are lowered to the time left then, and the client's shorter connect timeout is kept."""
    sdk: Any = openai if provider == "openai" else anthropic
    client = _client(provider, llm, sent, timeout=sdk.Timeout(20.0, connect=1.0)).with_options(max_retries=1)
    llm.script(Turn(status=500, error_message="busy", retry_after=1.5), Turn(text="ok"))
    with ob.run("retry", budget=ob.Budget(max_seconds=21)):
        _create(client, provider)
    assert len(llm.requests) == 2
    assert sent[0] == {"connect": 1.0, "read": 20.0, "write": 20.0, "pool": 20.0}
    assert sent[1]["connect"] == 1.0 and all(18 < sent[1][p] < 20 for p in ("read", "write", "pool")), sent[1]

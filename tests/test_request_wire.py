"""The request body is serialized once (instrumentation/providers/_wire.py): the wrapper writes it as the SDK would,
measures those bytes for the admission and hands them to the SDK, which sends them as they are.

What reaches the server is read off the wire (an httpx event hook on the client the SDK sends through) and compared
with what the bare SDK sends for the same call, against ScriptedLLM.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import anthropic
import httpx2
import openai
import pytest

import otel_budget as ob
from otel_budget.testing import ScriptedLLM, Turn

#: Every limit on, far from reach: the enforcer sets no output limit, so the request goes as the caller made it.
BIG = ob.Budget(max_steps=10**6, max_tool_calls=10**6, max_seconds=3600, max_input_tokens=10**12,
                max_output_tokens=10**12, max_total_tokens=10**12, max_usd=10**6)
TEXT = "Zürich, 東京, \U0001f600, a line\u2028separator, \"quotes\", a back\\slash and\na newline"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": TEXT}]
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Find a word.", "parameters": {
    "type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}}}]


class Wire:
    """The bodies and URLs of the requests a client sent, read from the HTTP requests themselves."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.urls: list[str] = []

    def hook(self, request: Any) -> None:
        self.bodies.append(request.content)
        self.urls.append(str(request.url))

    async def ahook(self, request: Any) -> None:
        self.hook(request)


def _openai(llm: ScriptedLLM, wire: Wire) -> openai.OpenAI:
    return openai.OpenAI(base_url=llm.openai_base_url, api_key="k", max_retries=0,
                         http_client=httpx2.Client(event_hooks={"request": [wire.hook]}))


def _chat(client: openai.OpenAI, **kwargs: Any) -> None:
    client.chat.completions.create(model="gpt-4o", messages=MESSAGES, tools=TOOLS, temperature=0.25, **kwargs)


def _chat_stream(client: openai.OpenAI, **kwargs: Any) -> None:
    for _ in client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True,
                                            stream_options={"include_usage": True}, **kwargs):
        pass


def _responses(client: openai.OpenAI, **kwargs: Any) -> None:
    client.responses.create(model="gpt-4o", input=TEXT, max_output_tokens=64, **kwargs)


@pytest.fixture
def served() -> Any:
    with ScriptedLLM(default=Turn(text="fine", input_tokens=40, output_tokens=2)) as llm:
        yield llm


def _bare_and_run(llm: ScriptedLLM, call: Any) -> tuple[Wire, Wire, dict[str, float]]:
    bare, ours = Wire(), Wire()
    call(_openai(llm, bare))
    ob.instrument()
    try:
        with ob.run("wire", budget=BIG) as run:
            call(_openai(llm, ours))
        used = dict(run.node.account.used)
    finally:
        ob.uninstrument()
    return bare, ours, used


def _extra_body(client: openai.OpenAI, **kwargs: Any) -> None:
    _chat(client, extra_body={"user_tag": "é"}, **kwargs)  # merged into the body by the SDK itself


@pytest.mark.parametrize("call", [_chat, _chat_stream, _responses, _extra_body],
                         ids=["chat", "chat stream", "responses", "extra_body"])
def test_a_call_in_a_run_sends_the_very_bytes_the_bare_sdk_sends(served, call):
    bare, ours, used = _bare_and_run(served, call)
    assert len(ours.bodies) == 1 and ours.bodies == bare.bodies
    assert "東京".encode() in ours.bodies[0]  # UTF-8 as the SDK writes it, not escaped
    assert used["steps"] == 1 and used["input_tokens"] == 40  # the run counted the call, from the server's usage


def test_the_sdk_does_not_serialize_a_body_it_was_handed(served, monkeypatch):
    """The SDK's own serialization of request bodies (`openapi_dumps` in `_build_request`) runs for a bare call and
    not for a call in a run, whose body the wrapper wrote already."""
    import openai._base_client as base

    dumps, counted = base.openapi_dumps, []

    def counting(obj: Any) -> bytes:
        counted.append(1)
        return dumps(obj)

    monkeypatch.setattr(base, "openapi_dumps", counting)
    bare, ours, _ = _bare_and_run(served, _chat)
    assert ours.bodies == bare.bodies and len(counted) == 1  # the bare call's, none for the call in the run


def test_a_strict_run_reserves_one_token_per_byte_of_the_request_as_sent(served):
    """The bound of the input is the request's own size: its bytes as the server receives them."""
    wire, reserved = Wire(), []
    ob.instrument()
    try:
        with ob.run("strict", budget=BIG.model_copy(update={"strict": True})) as run:
            served.responder = lambda request: reserved.append(run.node.account.reserved["input_tokens"])
            _chat(_openai(served, wire))
    finally:
        ob.uninstrument()
    assert reserved == [len(wire.bodies[0])]


def test_an_azure_client_builds_its_deployment_url_from_the_body(served):
    """Azure's client reads the model from the body to build the URL: its bodies are left to it."""
    urls = []
    for instrumented in (False, True):
        wire = Wire()
        client = openai.AzureOpenAI(azure_endpoint=served.openai_base_url.removesuffix("/v1"), api_key="k",
                                    api_version="2024-10-21", max_retries=0,
                                    http_client=httpx2.Client(event_hooks={"request": [wire.hook]}))
        if instrumented:
            ob.instrument()
        try:
            with ob.run("azure", budget=BIG):
                with pytest.raises(openai.APIStatusError):  # ScriptedLLM serves no Azure path
                    _chat(client)
        finally:
            if instrumented:
                ob.uninstrument()
        urls.append(wire.urls)
    assert urls[0] == urls[1] and "/openai/deployments/gpt-4o/chat/completions" in urls[1][0]


def test_a_body_the_sdk_cannot_serialize_fails_as_without_us(served):
    """A NaN parameter: the SDK raises its own error, nothing is sent, and the run counts no tokens."""
    errors = []
    for instrumented in (False, True):
        client = _openai(served, Wire())
        if instrumented:
            ob.instrument()
        try:
            with ob.run("nan", budget=BIG) as run, pytest.raises(Exception) as raised:
                client.chat.completions.create(model="gpt-4o", messages=MESSAGES, temperature=math.nan)
            errors.append((type(raised.value), str(raised.value)))
        finally:
            if instrumented:
                ob.uninstrument()
    assert errors[0] == errors[1] and errors[0][0] is ValueError
    assert served.requests == [] and run.node.account.used["input_tokens"] == 0


def test_async_and_anthropic_clients_send_the_very_bytes_too(served):
    bodies: dict[bool, list[bytes]] = {}
    for instrumented in (False, True):
        wire = Wire()
        aclient = openai.AsyncOpenAI(base_url=served.openai_base_url, api_key="k", max_retries=0,
                                     http_client=httpx2.AsyncClient(event_hooks={"request": [wire.ahook]}))
        claude = anthropic.Anthropic(base_url=served.anthropic_base_url, api_key="k", max_retries=0,
                                     http_client=httpx2.Client(event_hooks={"request": [wire.hook]}))
        if instrumented:
            ob.instrument()
        try:
            with ob.run("both", budget=BIG):
                asyncio.run(aclient.chat.completions.create(model="gpt-4o", messages=MESSAGES, tools=TOOLS))
                claude.messages.create(model="claude-sonnet-4-5", max_tokens=64, system="Be brief.",
                                       messages=[{"role": "user", "content": TEXT}])
        finally:
            if instrumented:
                ob.uninstrument()
        bodies[instrumented] = wire.bodies
    assert len(bodies[True]) == 2 and bodies[True] == bodies[False]


@pytest.mark.parametrize("extra", [{}, {"stream_options": None}, {"stream_options": {"include_usage": False}}],
                         ids=["usage added", "caller's null replaced", "caller's own options"])
def test_a_stream_whose_usage_the_run_asks_for_sends_what_the_sdk_writes_for_that_body(served, extra):
    """Inside a run the wrapper adds `stream_options.include_usage` to the caller's body (a new field, or the
    caller's own replaced in its place): the bytes sent are the SDK's serialization of the body the server got."""
    from openai._utils._json import openapi_dumps

    wire = Wire()
    ob.instrument()
    try:
        with ob.run("stream", budget=BIG) as run:
            for _ in _openai(served, wire).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True,
                                                                   **extra):
                pass
    finally:
        ob.uninstrument()
    sent = wire.bodies[0]
    assert served.requests[0].body["stream_options"]["include_usage"] is True
    assert sent == openapi_dumps(json.loads(sent)) and json.loads(sent) == served.requests[0].body
    assert run.node.account.used["input_tokens"] == 40  # the usage the server reported, which the run asked for


def test_a_patch_of_ours_left_behind_inside_is_not_another_instrumentor(served, monkeypatch):
    """An instrumentor that wrapped over ours puts back what it found when it unwraps: our earlier patch, which
    passes every call through. Instrumented again, the call's body is still handed to the SDK serialized."""
    import openai._base_client as base
    import wrapt

    pristine = base.SyncAPIClient.__dict__["request"]
    monkeypatch.setattr(base.SyncAPIClient, "request", pristine)  # put back as it was whatever the test does
    dumps, counted = base.openapi_dumps, []
    monkeypatch.setattr(base, "openapi_dumps", lambda obj: counted.append(1) or dumps(obj))

    ob.instrument()
    wrapt.wrap_function_wrapper(base.SyncAPIClient, "request", lambda wrapped, instance, a, k: wrapped(*a, **k))
    theirs = base.SyncAPIClient.__dict__["request"]
    ob.uninstrument()  # ours stays inside theirs, passing calls through
    base.SyncAPIClient.request = theirs.__wrapped__  # their unwrap: our left-behind patch is on the class again
    bare, ours, used = _bare_and_run(served, _chat)
    assert ours.bodies == bare.bodies and len(counted) == 1 and used["steps"] == 1


def test_an_sdk_that_would_serialize_a_bytes_body_again_keeps_its_bodies():
    """An SDK version whose `_build_request` has no branch for a body that is bytes already (it would write the bytes
    as JSON) is never handed one: its code is read to tell, once per client class."""
    from otel_budget.instrumentation.providers import _wire

    class BaseClient:  # as an older SDK's: every body through openapi_dumps
        def _prepare_options(self, options: Any) -> Any:
            return options

        def _build_request(self, options: Any) -> Any:
            return {"content": openapi_dumps(options.json_data), "tag": bytes(2)}  # names `bytes`, for other things

    class Client(BaseClient):
        pass

    build, prepare = BaseClient._build_request, BaseClient._prepare_options  # named as the SDK's: only code differs
    build.__qualname__, build.__module__ = "BaseClient._build_request", openai._base_client.__name__
    prepare.__qualname__, prepare.__module__ = "SyncAPIClient._prepare_options", openai._base_client.__name__
    assert _wire.encoder(Client()) is None
    assert _wire.encoder(openai.OpenAI(api_key="k")) is not None  # the installed SDK's: bytes are sent as they are


def test_clients_whose_sdk_reads_the_body_inside_request_keep_their_bodies():
    """Azure builds its URL from the body; the anthropic SDK prepares the body inside `request` and its own spans read
    it (its Bedrock and Vertex clients move the model to the URL): none of them is handed bytes."""
    from otel_budget.instrumentation.providers import _wire

    assert _wire.encoder(openai.AzureOpenAI(api_key="k", api_version="2024-10-21",
                                            azure_endpoint="http://a.invalid")) is None
    assert _wire.encoder(anthropic.Anthropic(api_key="k")) is None
    assert _wire.encoder(anthropic.AnthropicBedrock(aws_region="us-east-1", aws_access_key="a",
                                                    aws_secret_key="b")) is None
    assert _wire.encoder(openai.OpenAI(api_key="k")) is not None


def openapi_dumps(data: Any) -> bytes:
    """(The older SDK's serializer, named as the SDK names it: a global its `_build_request` calls.)"""
    return json.dumps(data).encode()

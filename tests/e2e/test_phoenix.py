"""A real consumer: Phoenix (arize-phoenix, in its own virtual environment, started offline) reads our OTLP spans.

An agent loop that stops on its budget, with our default GenAI names (Phoenix 15.10+ converts them) and with
our OpenInference twins, each with and without OpenInference's OpenAI instrumentor (before or after ours), and
what Phoenix reports through its API: span kinds AGENT / LLM / TOOL, token counts with cache reads and writes,
the session, the captured messages, and the trace's cost summary, which Phoenix computes itself from the token
counts and the model name, equal to the budget's `used.usd`. Nothing counted twice. Run by `make e2e` (which builds the Phoenix environment first).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import otel_budget as ob
from otel_budget.testing import ScriptedLLM, ToolCall, Turn

ROOT = Path(__file__).resolve().parents[2]
STEPS = 3
IN, OUT = 1000, 50  # tokens per call; gpt-4o is priced by Phoenix and by genai-prices alike ($2.50 / $10 per M)
CACHE_READ, CACHE_WRITE = 200, 300  # of IN, on claude-sonnet-4-5 (cache writes at 1.25x input, reads at 0.1x)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Phoenix server on free loopback ports, with its data in a temporary directory."""
    phoenix_bin = subprocess.run(["bash", str(ROOT / "scripts/phoenix_venv.sh")], check=True, capture_output=True,
                                 text=True).stdout.strip().splitlines()[-1]
    port, grpc = _free_port(), _free_port()
    workdir = tmp_path_factory.mktemp("phoenix")
    env = {**os.environ, "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(grpc),
           "PHOENIX_WORKING_DIR": str(workdir), "PHOENIX_TELEMETRY_ENABLED": "false"}
    log = (workdir / "phoenix.log").open("w")
    proc = subprocess.Popen([str(ROOT / phoenix_bin), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                urllib.request.urlopen(f"{base}/healthz", timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"Phoenix did not start: {(workdir / 'phoenix.log').read_text()[-2000:]}")
                time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


_TRACE = """query ($project: ID!, $trace: ID!) { node(id: $project) { ... on Project { trace(traceId: $trace) {
  numSpans session { sessionId } costSummary { total { cost tokens } prompt { tokens } completion { tokens } }
  spans(first: 100) { edges { node { name spanKind tokenCountPrompt tokenCountCompletion attributes } } } } } } }"""


def _trace(base: str, project: str, trace_id: str, spans: int, root: str) -> dict[str, Any]:
    """The trace as Phoenix reports it, once all its spans are in (ingestion is asynchronous, in any order): at
    least `spans` of them, the run span named `root` (which ends last) among them."""
    deadline = time.monotonic() + 60
    while True:
        projects = _get(f"{base}/v1/projects")["data"]
        found = next((p["id"] for p in projects if p["name"] == project), None)
        if found is not None:
            data = _get(f"{base}/graphql", {"query": _TRACE, "variables": {"project": found, "trace": trace_id}})
            trace = ((data.get("data") or {}).get("node") or {}).get("trace")
            if (trace is not None and trace["numSpans"] >= spans and trace["costSummary"]["total"]["cost"]
                    and any(s["name"] == root for s in _spans(trace))):
                return trace
        if time.monotonic() > deadline:
            raise AssertionError(f"Phoenix has not got the trace's {spans} spans: {found and data}")
        time.sleep(0.5)


def _spans(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [edge["node"] for edge in trace["spans"]["edges"]]


TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]


def _agent(llm: ScriptedLLM, session: str) -> tuple[Any, int]:
    """An openai tool loop that never finishes by itself: the budget stops it after STEPS calls."""

    @ob.tool
    def lookup(q: str) -> str:
        return f"found {q}"

    turns = iter(range(100))
    llm.responder = lambda req: Turn(tool_calls=[ToolCall("lookup", {"q": f"q{next(turns)}"})],
                                     input_tokens=IN, output_tokens=OUT)
    client = openai.OpenAI(base_url=llm.openai_base_url, api_key="x", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "research"}]
    with ob.run("phoenix-agent", budget=ob.Budget(max_steps=STEPS), conversation_id=session) as run:
        while True:
            reply = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS, max_tokens=200)
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls or ():
                messages.append({"role": "tool", "tool_call_id": call.id,
                                 "content": lookup(**json.loads(call.function.arguments))})
    llm.responder = None
    return run.outcome, len(llm.requests)


def _cached_call(llm: ScriptedLLM) -> Any:
    """One anthropic call that reads and writes the prompt cache (claude-sonnet-4-5: both tables price it)."""
    llm.default = Turn(text="cached", input_tokens=IN, cache_read_tokens=CACHE_READ, cache_write_tokens=CACHE_WRITE,
                       output_tokens=OUT)
    client = anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="x", max_retries=0)
    with ob.run("phoenix-cache") as run:
        client.messages.create(model="claude-sonnet-4-5", max_tokens=200, messages=[{"role": "user", "content": "c"}])
    return run.outcome


@pytest.mark.timeout(400)
@pytest.mark.parametrize("ours", ["genai", "openinference"])
@pytest.mark.parametrize("openinference", ["none", "before", "after"])
def test_phoenix_reports_one_llm_span_per_call_and_the_budgets_cost(phoenix: str, openinference: str,
                                                                    ours: str) -> None:
    """By default (GenAI names only, which Phoenix converts) and with our OpenInference twins, alone or beside
    OpenInference's own OpenAI instrumentor instrumented before or after ours: span kinds, tokens with cache
    reads and writes, Phoenix's own cost equal to the budget's, the session, and the captured messages."""
    from openinference.instrumentation.openai import OpenAIInstrumentor

    project = f"otel-budget-e2e-{ours}-{openinference}-{uuid.uuid4().hex[:8]}"
    provider = TracerProvider(resource=Resource.create({"service.name": "otel-budget-e2e",
                                                        "openinference.project.name": project}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix}/v1/traces")))
    peer = OpenAIInstrumentor()
    if openinference == "before":  # as phoenix.otel.register(auto_instrument=True) does at start-up
        peer.instrument(tracer_provider=provider)
    ob.uninstrument()
    ob.instrument(tracer_provider=provider, capture_content=True, openinference=ours == "openinference")
    if openinference == "after":
        peer.instrument(tracer_provider=provider)
    session = f"session-{uuid.uuid4().hex[:8]}"
    try:
        with ScriptedLLM() as llm:
            done, sent = _agent(llm, session)
            cached = _cached_call(llm)
    finally:
        if openinference != "none":
            peer.uninstrument()
        ob.uninstrument()
        provider.shutdown()

    assert done is not None and done.stop_reason == "steps" and sent == STEPS == done.usage.model_calls
    trace = _trace(phoenix, project, done.trace_id or "", spans=1 + 2 * STEPS, root="invoke_agent phoenix-agent")
    spans = _spans(trace)
    kinds = sorted(s["spanKind"] for s in spans)
    assert kinds.count("agent") == 1 and kinds.count("llm") == STEPS and kinds.count("tool") == STEPS, spans
    llm_spans = [s for s in spans if s["spanKind"] == "llm"]
    assert all(s["tokenCountPrompt"] == IN and s["tokenCountCompletion"] == OUT for s in llm_spans)
    cost = trace["costSummary"]
    assert cost["prompt"]["tokens"] == STEPS * IN == done.usage.input_tokens  # nothing twice
    assert cost["completion"]["tokens"] == STEPS * OUT == done.usage.output_tokens
    assert cost["total"]["cost"] == pytest.approx(done.usage.cost_usd, rel=1e-9)
    assert done.usage.cost_usd == pytest.approx(STEPS * (IN * 2.5 + OUT * 10.0) / 1e6)
    assert (trace["session"] or {}).get("sessionId") == session
    for span in llm_spans:  # the messages Phoenix shows: converted from gen_ai.* or our twins
        messages = json.loads(span["attributes"])["llm"]["input_messages"]
        assert messages[0]["message"]["role"] == "user" and messages[0]["message"]["content"] == "research"

    assert cached is not None and cached.usage.cache_write_tokens == CACHE_WRITE
    cached_trace = _trace(phoenix, project, cached.trace_id or "", spans=2, root="invoke_agent phoenix-cache")
    (call,) = [s for s in _spans(cached_trace) if s["spanKind"] == "llm"]
    assert call["tokenCountPrompt"] == IN and call["tokenCountCompletion"] == OUT
    details = json.loads(call["attributes"])["llm"]["token_count"]["prompt_details"]
    assert (details["cache_read"], details["cache_write"]) == (CACHE_READ, CACHE_WRITE)
    assert cached_trace["costSummary"]["total"]["cost"] == pytest.approx(cached.usage.cost_usd, rel=1e-9)

"""Which names a span carries: the GenAI conventions by default, the OpenInference twins only on request
(`instrument(openinference=True)` or OTEL_BUDGET_OPENINFERENCE), and the cache-write name that
OTEL_SEMCONV_STABILITY_OPT_IN chooses."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import otel_budget
from otel_budget.core import config
from otel_budget.testing import ToolCall, Turn

TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Looks a word up.",
                                           "parameters": {"type": "object"}}}]
#: What OpenInference names look like: none of these may appear on a span by default.
_OI_PREFIXES = ("openinference.", "llm.", "session.", "input.", "output.", "tool.")


def _agent(llm: Any, oai: Any, anth: Any) -> None:
    """A run with a conversation id, an openai tool turn, an executed @tool, and an anthropic call with cache
    reads and writes: every kind of span and every attribute that has a twin."""

    @otel_budget.tool
    def lookup(q: str) -> str:
        """Looks a word up."""
        return f"found {q}"

    llm.script(Turn(tool_calls=[ToolCall("lookup", {"q": "a"}, id="call_1")], input_tokens=10, output_tokens=4,
                    reasoning_tokens=2),
               Turn(text="done", input_tokens=100, output_tokens=5, cache_read_tokens=20, cache_write_tokens=30))
    with otel_budget.run("names", conversation_id="conv-7"):
        reply = oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                            tools=TOOLS, temperature=0.3)
        call = reply.choices[0].message.tool_calls[0]
        lookup(q="a")
        anth.messages.create(model="claude-sonnet-4-5", max_tokens=64, system="be brief", messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": call.id, "name": "lookup", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "found a"}]}])


def _twins(attrs: Any) -> list[str]:
    return sorted(k for k in attrs if k.startswith(_OI_PREFIXES))


@pytest.mark.parametrize("capture", [False, True], ids=["no-content", "content"])
def test_by_default_no_span_carries_an_openinference_name(otel, llm, oai, anth, monkeypatch, capture):
    monkeypatch.setattr(config.get(), "capture_content", capture)
    _agent(llm, oai, anth)
    spans = otel.exporter.get_finished_spans()
    ours = [s for s in spans if s.instrumentation_scope.name == "otel_budget"]
    assert {s.name for s in ours} >= {"invoke_agent names", "chat gpt-4o", "chat claude-sonnet-4-5",
                                      "execute_tool lookup"}
    for span in ours:
        assert _twins(span.attributes) == [], span.name
    chat = next(s for s in ours if s.name == "chat claude-sonnet-4-5").attributes
    assert chat["gen_ai.usage.input_tokens"] == 100 and chat["gen_ai.usage.cache_read.input_tokens"] == 20
    assert chat["gen_ai.conversation.id"] == "conv-7"
    assert ("gen_ai.input.messages" in chat) is capture and ("gen_ai.system_instructions" in chat) is capture


def _expect_every_twin(otel: Any) -> None:
    spans = {s.name: s.attributes for s in otel.exporter.get_finished_spans()
             if s.instrumentation_scope.name == "otel_budget"}
    run = spans["invoke_agent names"]
    assert run["openinference.span.kind"] == "AGENT" and run["session.id"] == "conv-7"
    tool = spans["execute_tool lookup"]
    assert tool["openinference.span.kind"] == "TOOL" and tool["tool.name"] == "lookup"
    assert tool["tool.description"] == "Looks a word up."
    oai_call = spans["chat gpt-4o"]
    assert oai_call["llm.token_count.completion_details.reasoning"] == 2
    assert oai_call["llm.provider"] == "openai" and oai_call["llm.model_name"] == "gpt-4o"
    assert '"temperature": 0.3' in oai_call["llm.invocation_parameters"]
    chat = spans["chat claude-sonnet-4-5"]
    assert chat["openinference.span.kind"] == "LLM" and chat["session.id"] == "conv-7"
    assert (chat["llm.token_count.prompt"], chat["llm.token_count.completion"], chat["llm.token_count.total"]) == (
        100, 5, 105)
    assert chat["llm.token_count.prompt_details.cache_read"] == 20
    assert chat["llm.token_count.prompt_details.cache_write"] == 30
    assert chat["llm.cost.total"] == chat["otel_budget.cost.usd"] > 0
    assert chat["llm.cost.prompt"] + chat["llm.cost.completion"] == pytest.approx(chat["llm.cost.total"])
    assert chat["llm.input_messages.0.message.role"] == "system"  # content captured: the message twins
    assert chat["llm.output_messages.0.message.content"] == "done"
    assert "input.value" in chat and chat["output.value"] == "done"


def test_the_opt_in_adds_every_twin(otel_oi, llm, oai, anth, monkeypatch):
    monkeypatch.setattr(config.get(), "capture_content", True)
    _agent(llm, oai, anth)
    _expect_every_twin(otel_oi)


def test_the_environment_variable_opts_in_too(otel, llm, oai, anth, monkeypatch):
    monkeypatch.setenv("OTEL_BUDGET_OPENINFERENCE", "true")
    otel_budget.instrument(meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]),
                           capture_content=True)
    _agent(llm, oai, anth)
    _expect_every_twin(otel)


def test_an_explicit_false_wins_over_the_environment(otel, llm, oai, anth, monkeypatch):
    monkeypatch.setenv("OTEL_BUDGET_OPENINFERENCE", "true")
    otel_budget.instrument(openinference=False)
    _agent(llm, oai, anth)
    assert all(_twins(s.attributes) == [] for s in otel.exporter.get_finished_spans()
               if s.instrumentation_scope.name == "otel_budget")


@pytest.mark.parametrize(("opt_in", "name", "other"), [
    ("", "gen_ai.usage.cache_creation.input_tokens", "gen_ai.usage.cache_write.input_tokens"),
    ("gen_ai_latest_experimental", "gen_ai.usage.cache_write.input_tokens", "gen_ai.usage.cache_creation.input_tokens"),
], ids=["released", "latest-experimental"])
def test_the_cache_write_name_follows_the_stability_opt_in(otel, llm, anth, monkeypatch, opt_in, name, other):
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", opt_in)
    otel_budget.instrument()
    llm.default = Turn(text="ok", input_tokens=100, output_tokens=5, cache_write_tokens=300)
    with otel_budget.run("cache"):
        anth.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=[{"role": "user", "content": "hi"}])
    (span,) = otel.spans("chat ")
    assert span.attributes[name] == 300
    assert other not in span.attributes

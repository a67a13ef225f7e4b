"""Captured content follows the GenAI conventions' message schema (validated against the conventions' own JSON
schemas) and OpenInference's flattened messages; the capture mode chooses span attributes, an event, or both."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

import otel_budget
from otel_budget.core import config
from otel_budget.testing import ToolCall, Turn

SCHEMAS = Path(__file__).parent / "data" / "genai_schemas"
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def _schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"gen-ai-{name}.json").read_text())


def _valid(attrs, key: str, schema: str) -> list:
    value = json.loads(attrs[key])
    jsonschema.validate(value, _schema(schema))
    return value


@pytest.fixture
def capture(otel, monkeypatch):
    """Content captured, with the OpenInference twins (the tests below check both schemas)."""
    monkeypatch.setattr(config.get(), "capture_content", True)
    monkeypatch.setattr(config.get().telemetry, "openinference", True)
    return otel


def _chat_spans(otel):
    return [s for s in otel.exporter.get_finished_spans() if s.name.startswith("chat ")]


def test_openai_chat_tool_turn_and_tool_result_in_the_message_schema(capture, llm, oai):
    llm.script(Turn(tool_calls=[ToolCall("lookup", {"q": "x"}, id="call_1")], input_tokens=10, output_tokens=5),
               Turn(text="found it", input_tokens=20, output_tokens=3))
    history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "find x"}]
    with otel_budget.run("chat-content"):
        first = oai.chat.completions.create(model="gpt-4o", messages=history, tools=TOOLS)
        tc = first.choices[0].message.tool_calls[0]
        history += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": tc.id, "type": "function", "function": {"name": "lookup", "arguments": tc.function.arguments}}]},
            {"role": "tool", "tool_call_id": tc.id, "content": "x is 42"}]
        oai.chat.completions.create(model="gpt-4o", messages=history, tools=TOOLS)
    one, two = _chat_spans(capture)
    a1, a2 = one.attributes, two.attributes
    inputs = _valid(a1, "gen_ai.input.messages", "input-messages")
    assert inputs[0] == {"role": "system", "parts": [{"type": "text", "content": "be brief"}]}  # stays in history
    assert "gen_ai.system_instructions" not in a1
    out = _valid(a1, "gen_ai.output.messages", "output-messages")
    assert out == [{"role": "assistant", "finish_reason": "tool_call",
                    "parts": [{"type": "tool_call", "id": "call_1", "name": "lookup", "arguments": {"q": "x"}}]}]
    assert a1["llm.output_messages.0.message.role"] == "assistant"
    assert a1["llm.output_messages.0.message.tool_calls.0.tool_call.function.name"] == "lookup"
    assert json.loads(a1["llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments"]) == {"q": "x"}
    assert a1["llm.input_messages.1.message.content"] == "find x"

    inputs2 = _valid(a2, "gen_ai.input.messages", "input-messages")
    assert inputs2[2]["parts"][0]["type"] == "tool_call"
    assert inputs2[3] == {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1",
                                                      "response": "x is 42"}]}
    assert a2["llm.input_messages.2.message.tool_calls.0.tool_call.function.name"] == "lookup"
    assert a2["llm.input_messages.3.message.role"] == "tool"
    assert a2["llm.input_messages.3.message.tool_call_id"] == "call_1"
    assert a2["llm.input_messages.3.message.content"] == "x is 42"
    out2 = _valid(a2, "gen_ai.output.messages", "output-messages")
    assert out2 == [{"role": "assistant", "finish_reason": "stop", "parts": [{"type": "text", "content": "found it"}]}]
    assert a2["llm.output_messages.0.message.content"] == "found it"
    assert a2["output.value"] == "found it"


def test_openai_stream_tool_turn_is_captured_as_a_tool_call(capture, llm, oai):
    llm.script(Turn(tool_calls=[ToolCall("lookup", {"q": "y"}, id="call_7")], input_tokens=10, output_tokens=5))
    with otel_budget.run("stream-content"):
        for _ in oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "go"}],
                                             tools=TOOLS, stream=True):
            pass
    (span,) = _chat_spans(capture)
    out = _valid(span.attributes, "gen_ai.output.messages", "output-messages")
    assert out[0]["parts"] == [{"type": "tool_call", "id": "call_7", "name": "lookup", "arguments": {"q": "y"}}]


def test_responses_instructions_are_system_instructions(capture, llm, oai):
    llm.script(Turn(tool_calls=[ToolCall("lookup", {"q": "z"}, id="fc_1")], input_tokens=10, output_tokens=5),
               Turn(text="done", input_tokens=12, output_tokens=2))
    with otel_budget.run("responses-content"):
        first = oai.responses.create(model="gpt-4o", instructions="answer in French", input="find z",
                                     tools=[{"type": "function", "name": "lookup", "parameters": {"type": "object"}}])
        call = [o for o in first.output if o.type == "function_call"][0]
        oai.responses.create(model="gpt-4o", instructions="answer in French", input=[
            {"role": "user", "content": "find z"},
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "z is 7"}])
    one, two = _chat_spans(capture)
    system = _valid(one.attributes, "gen_ai.system_instructions", "system-instructions")
    assert system == [{"type": "text", "content": "answer in French"}]
    assert _valid(one.attributes, "gen_ai.input.messages", "input-messages") == [
        {"role": "user", "parts": [{"type": "text", "content": "find z"}]}]
    out = _valid(one.attributes, "gen_ai.output.messages", "output-messages")
    assert out[0]["parts"][0]["name"] == "lookup" and out[0]["finish_reason"] == "tool_call"
    assert one.attributes["llm.input_messages.0.message.role"] == "system"
    assert one.attributes["llm.input_messages.0.message.content"] == "answer in French"
    inputs = _valid(two.attributes, "gen_ai.input.messages", "input-messages")
    assert [m["role"] for m in inputs] == ["user", "assistant", "tool"]
    assert inputs[2]["parts"] == [{"type": "tool_call_response", "id": call.call_id, "response": "z is 7"}]
    assert json.loads(two.attributes["gen_ai.output.messages"])[0]["parts"] == [{"type": "text", "content": "done"}]


def test_anthropic_system_tool_use_and_tool_result(capture, llm, anth):
    llm.script(Turn(tool_calls=[ToolCall("lookup", {"q": "w"}, id="toolu_1")], input_tokens=10, output_tokens=5),
               Turn(text="w found", input_tokens=12, output_tokens=2))
    tools = [{"name": "lookup", "input_schema": {"type": "object"}}]
    history = [{"role": "user", "content": "find w"}]
    with otel_budget.run("anthropic-content"):
        first = anth.messages.create(model="claude-sonnet-4-5", max_tokens=100, system="be kind", messages=history,
                                     tools=tools)
        block = [b for b in first.content if b.type == "tool_use"][0]
        history += [{"role": "assistant", "content": [{"type": "tool_use", "id": block.id, "name": block.name,
                                                       "input": block.input}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block.id,
                                                  "content": [{"type": "text", "text": "w is 1"}]}]}]
        anth.messages.create(model="claude-sonnet-4-5", max_tokens=100, system="be kind", messages=history,
                             tools=tools)
    one, two = _chat_spans(capture)
    assert _valid(one.attributes, "gen_ai.system_instructions", "system-instructions") == [
        {"type": "text", "content": "be kind"}]
    out = _valid(one.attributes, "gen_ai.output.messages", "output-messages")
    assert out == [{"role": "assistant", "finish_reason": "tool_call",
                    "parts": [{"type": "tool_call", "id": "toolu_1", "name": "lookup", "arguments": {"q": "w"}}]}]
    inputs = _valid(two.attributes, "gen_ai.input.messages", "input-messages")
    assert inputs[1]["parts"] == [{"type": "tool_call", "id": "toolu_1", "name": "lookup", "arguments": {"q": "w"}}]
    assert inputs[2]["parts"] == [{"type": "tool_call_response", "id": "toolu_1", "response": "w is 1"}]
    assert two.attributes["llm.input_messages.0.message.role"] == "system"
    assert two.attributes["llm.input_messages.2.message.tool_calls.0.tool_call.function.name"] == "lookup"
    assert json.loads(two.attributes["gen_ai.output.messages"])[0]["finish_reason"] == "stop"


@pytest.mark.parametrize(("mode", "on_span", "as_event"),
                         [("SPAN_ONLY", True, False), ("EVENT_ONLY", False, True), ("SPAN_AND_EVENT", True, True)])
def test_capture_modes_choose_span_attributes_or_the_details_event(capture, llm, oai, monkeypatch, mode, on_span,
                                                                    as_event):
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", mode)
    llm.script(Turn(text="MODE-ANSWER", input_tokens=5, output_tokens=2))
    with otel_budget.run("modes"):
        oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "MODE-PROMPT"}])
    (span,) = _chat_spans(capture)
    assert ("gen_ai.input.messages" in span.attributes) is on_span
    assert ("gen_ai.output.messages" in span.attributes) is on_span
    events = [e for e in span.events if e.name == "gen_ai.client.inference.operation.details"]
    assert len(events) == (1 if as_event else 0)
    if as_event:
        ev = events[0].attributes
        assert "MODE-PROMPT" in _valid(ev, "gen_ai.input.messages", "input-messages")[0]["parts"][0]["content"]
        assert _valid(ev, "gen_ai.output.messages", "output-messages")[0]["parts"][0]["content"] == "MODE-ANSWER"


def test_no_content_and_no_event_by_default(otel, llm, oai):
    llm.script(Turn(text="HIDDEN-ANSWER", tool_calls=[ToolCall("lookup", {"q": "HIDDEN-ARG"})],
                    input_tokens=5, output_tokens=2))
    with otel_budget.run("default"):
        oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "HIDDEN-PROMPT"}],
                                    tools=TOOLS)
    (span,) = _chat_spans(otel)
    blob = repr(dict(span.attributes)) + repr([e.name for e in span.events])
    for secret in ("HIDDEN", "gen_ai.input.messages", "llm.input_messages", "operation.details"):
        assert secret not in blob

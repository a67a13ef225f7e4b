"""Convention names on framework spans: Gemini's operation, provider and parameters; LiteLLM's Vertex AI
provider; LangGraph's thread as the conversation; a LangChain tool's description."""

from __future__ import annotations

import json
from typing import Any

import pytest

import otel_budget
from otel_budget.testing import ScriptedLLM, ToolCall, Turn


def _spans(otel: Any, prefix: str) -> list[Any]:
    return [s for s in otel.get_finished_spans() if s.name.startswith(prefix)]


def test_gemini_calls_are_generate_content_with_google_as_openinference_provider(
        scripted_llm: ScriptedLLM, otel: Any, instrument_with: Any) -> None:
    genai = pytest.importorskip("google.genai")
    instrument_with(openinference=True)
    from google.genai import types

    scripted_llm.script(Turn(text="ok", input_tokens=10, output_tokens=3))
    client = genai.Client(api_key="x", http_options=types.HttpOptions(base_url=scripted_llm.base_url))
    with otel_budget.run("gemini-names"):
        client.models.generate_content(model="gemini-2.5-flash", contents="hi", config=types.GenerateContentConfig(
            temperature=0.2, top_p=0.8, top_k=20, seed=3, stop_sequences=["END"], candidate_count=2,
            response_mime_type="application/json"))
    (span,) = _spans(otel, "generate_content ")
    a = span.attributes
    assert span.name == "generate_content gemini-2.5-flash"
    assert a["gen_ai.operation.name"] == "generate_content"
    assert a["gen_ai.provider.name"] == "gcp.gemini"
    assert a["llm.provider"] == "google"
    assert (a["gen_ai.request.temperature"], a["gen_ai.request.top_p"], a["gen_ai.request.top_k"]) == (0.2, 0.8, 20)
    assert a["gen_ai.request.seed"] == 3
    assert tuple(a["gen_ai.request.stop_sequences"]) == ("END",)
    assert a["gen_ai.request.choice.count"] == 2
    assert a["gen_ai.output.type"] == "json"
    assert a["server.address"] == "127.0.0.1"
    assert json.loads(a["llm.invocation_parameters"])["temperature"] == 0.2


def test_litellm_vertex_ai_is_gcp_vertex_ai(otel: Any, instrument_with: Any) -> None:
    litellm = pytest.importorskip("litellm")
    instrument_with(openinference=True)
    with otel_budget.run("vertex"):
        litellm.completion(model="vertex_ai/gemini-2.5-flash", messages=[{"role": "user", "content": "hi"}],
                           mock_response="ok", temperature=0.4)
    (span,) = _spans(otel, "chat ")
    assert span.attributes["gen_ai.provider.name"] == "gcp.vertex_ai"
    assert span.attributes["llm.provider"] == "google"
    assert span.attributes["gen_ai.request.temperature"] == 0.4


def test_langgraph_thread_is_the_conversation_and_tool_descriptions_are_recorded(
        scripted_llm: ScriptedLLM, otel: Any) -> None:
    pytest.importorskip("langgraph")
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        return f"found {q}"

    model = ChatOpenAI(model="m", base_url=scripted_llm.openai_base_url, api_key="x", max_retries=0).bind_tools(
        [lookup])
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = builder.compile(name="threaded")
    scripted_llm.script(Turn(tool_calls=[ToolCall("lookup", {"q": "a"})], input_tokens=10, output_tokens=3),
                        Turn(text="done", input_tokens=12, output_tokens=2))
    graph.invoke({"messages": [("user", "go")]}, {"configurable": {"thread_id": "thread-9"}})
    chats = _spans(otel, "chat ")
    assert len(chats) == 2
    assert all(s.attributes["gen_ai.conversation.id"] == "thread-9" for s in chats)
    (run_span,) = _spans(otel, "invoke_agent threaded")
    assert run_span.attributes["gen_ai.conversation.id"] == "thread-9"
    (tool_span,) = _spans(otel, "execute_tool ")
    assert tool_span.attributes["gen_ai.tool.type"] == "function"
    assert tool_span.attributes["gen_ai.tool.description"] == "Look something up."


def test_gemini_content_follows_the_message_schema(scripted_llm: ScriptedLLM, otel: Any, monkeypatch: Any) -> None:
    genai = pytest.importorskip("google.genai")
    jsonschema = pytest.importorskip("jsonschema")
    from pathlib import Path

    from google.genai import types

    from otel_budget.core import config

    schemas = Path(__file__).parent.parent / "data" / "genai_schemas"

    def valid(attrs: Any, key: str, name: str) -> Any:
        value = json.loads(attrs[key])
        jsonschema.validate(value, json.loads((schemas / f"gen-ai-{name}.json").read_text()))
        return value

    def lookup(q: str) -> str:
        """Look something up."""
        return "nothing yet"

    monkeypatch.setattr(config.get(), "capture_content", True)
    scripted_llm.script(Turn(tool_calls=[ToolCall("lookup", {"q": "a"})], input_tokens=10, output_tokens=3),
                        Turn(text="Found it.", input_tokens=12, output_tokens=2))
    client = genai.Client(api_key="x", http_options=types.HttpOptions(base_url=scripted_llm.base_url))
    with otel_budget.run("gemini-content"):
        client.models.generate_content(model="gemini-2.5-flash", contents="find it", config=types.GenerateContentConfig(
            system_instruction="be brief", tools=[lookup]))
    one, two = _spans(otel, "generate_content ")
    assert valid(one.attributes, "gen_ai.system_instructions", "system-instructions") == [
        {"type": "text", "content": "be brief"}]
    out = valid(one.attributes, "gen_ai.output.messages", "output-messages")
    assert out[0]["parts"][0]["type"] == "tool_call" and out[0]["parts"][0]["name"] == "lookup"
    inputs = valid(two.attributes, "gen_ai.input.messages", "input-messages")
    assert [m["role"] for m in inputs] == ["user", "assistant", "tool"]
    assert inputs[2]["parts"][0]["type"] == "tool_call_response"
    assert valid(two.attributes, "gen_ai.output.messages", "output-messages")[0]["parts"] == [
        {"type": "text", "content": "Found it."}]

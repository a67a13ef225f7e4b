"""Attributes the GenAI conventions and OpenInference name, on real spans: request parameters, server, output
type, conversation id, invocation parameters, reasoning tokens, tool type/description/call id, clean costs."""

from __future__ import annotations

import json

import otel_budget
from otel_budget.testing import ToolCall, Turn


def _calls(otel, prefix: str = "chat "):
    return [s for s in otel.exporter.get_finished_spans() if s.name.startswith(prefix)]


def _port(llm) -> int:
    return int(llm.openai_base_url.split(":")[2].split("/")[0])


def test_openai_chat_request_parameters_server_and_output_type(otel_oi, llm, oai):
    llm.default = Turn(text='{"a": 1}', input_tokens=10, output_tokens=4)
    with otel_budget.run("params"):
        oai.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], temperature=0.2, top_p=0.9, seed=7,
            stop=["END"], frequency_penalty=0.5, presence_penalty=-0.25, n=2, max_completion_tokens=50,
            response_format={"type": "json_object"},
        )
    (span,) = _calls(otel_oi)
    a = span.attributes
    assert a["gen_ai.request.temperature"] == 0.2
    assert a["gen_ai.request.top_p"] == 0.9
    assert a["gen_ai.request.seed"] == 7
    assert tuple(a["gen_ai.request.stop_sequences"]) == ("END",)
    assert a["gen_ai.request.frequency_penalty"] == 0.5
    assert a["gen_ai.request.presence_penalty"] == -0.25
    assert a["gen_ai.request.choice.count"] == 2
    assert a["gen_ai.output.type"] == "json"
    assert a["server.address"] == "127.0.0.1"
    assert a["server.port"] == _port(llm)
    invocation = json.loads(a["llm.invocation_parameters"])
    assert invocation == {"model": "gpt-4o", "max_tokens": 50, "temperature": 0.2, "top_p": 0.9, "seed": 7,
                          "frequency_penalty": 0.5, "presence_penalty": -0.25, "stop_sequences": ["END"], "n": 2,
                          "output_type": "json"}


def test_unset_parameters_are_not_recorded_and_one_choice_is_no_choice_count(otel_oi, llm, oai):
    llm.default = Turn(text="ok", input_tokens=10, output_tokens=4)
    with otel_budget.run("plain"):
        oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], n=1)
    (span,) = _calls(otel_oi)
    for key in ("gen_ai.request.temperature", "gen_ai.request.choice.count", "gen_ai.output.type",
                "gen_ai.request.stop_sequences", "gen_ai.conversation.id"):
        assert key not in span.attributes
    assert json.loads(span.attributes["llm.invocation_parameters"]) == {"model": "gpt-4o"}


def test_invocation_parameters_follow_each_call_even_when_equal_in_python(otel_oi, llm, oai):
    """The JSON is cached per call shape: 1 and 1.0 compare equal in Python but are different JSON."""
    llm.default = Turn(text="ok", input_tokens=10, output_tokens=4)
    sent = [{"temperature": 1}, {"temperature": 1.0}, {"temperature": 1, "seed": 1}, {"temperature": 1.0, "seed": 1},
            {"temperature": 1}, {"temperature": 1, "max_completion_tokens": 9}, {"stop": ["A"]}, {"stop": ["B"]}]
    with otel_budget.run("invocations"):
        for params in sent:
            oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], **params)
    texts = [s.attributes["llm.invocation_parameters"] for s in _calls(otel_oi)]

    def typed(value):  # the JSON's own types: 1, 1.0 and true stay apart
        return {k: typed(v) for k, v in value.items()} if isinstance(value, dict) else (type(value), value)

    names = {"max_completion_tokens": "max_tokens", "stop": "stop_sequences"}
    expected = [typed({"model": "gpt-4o", **{names.get(k, k): v for k, v in p.items()}}) for p in sent]
    assert [typed(json.loads(t)) for t in texts] == expected


def test_responses_parameters_and_text_output_type(otel, llm, oai):
    llm.default = Turn(text="ok", input_tokens=10, output_tokens=4)
    with otel_budget.run("responses-params"):
        oai.responses.create(model="gpt-4o", input="hi", temperature=0.3, top_p=0.5, text={"format": {"type": "text"}})
    (span,) = _calls(otel)
    assert span.attributes["gen_ai.request.temperature"] == 0.3
    assert span.attributes["gen_ai.request.top_p"] == 0.5
    assert span.attributes["gen_ai.output.type"] == "text"
    assert span.attributes["server.port"] == _port(llm)


def test_anthropic_parameters(otel, llm, anth):
    llm.default = Turn(text="ok", input_tokens=10, output_tokens=4)
    with otel_budget.run("anthropic-params"):
        anth.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=[{"role": "user", "content": "hi"}],
                             stop_sequences=["STOP", "HALT"],
                             output_config={"format": {"type": "json_schema", "schema": {"type": "object"}}})
    (span,) = _calls(otel)
    a = span.attributes  # (anthropic 2.x has no temperature / top_k arguments any more)
    assert a["gen_ai.output.type"] == "json"
    assert tuple(a["gen_ai.request.stop_sequences"]) == ("STOP", "HALT")
    assert a["server.address"] == "127.0.0.1"


def test_reasoning_tokens_have_their_openinference_twin(otel_oi, llm, oai):
    llm.default = Turn(text="ok", input_tokens=10, output_tokens=12, reasoning_tokens=8)
    with otel_budget.run("reasoning"):
        oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    (span,) = _calls(otel_oi)
    assert span.attributes["gen_ai.usage.reasoning.output_tokens"] == 8
    assert span.attributes["llm.token_count.completion_details.reasoning"] == 8


def test_costs_carry_no_float_noise(otel_oi, llm, oai):
    llm.default = Turn(text="ok", input_tokens=1, output_tokens=10)  # gpt-4o: 10 * $10/M = $0.0001 exactly
    with otel_budget.run("money"):
        oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    (span,) = _calls(otel_oi)
    a = span.attributes
    assert a["llm.cost.completion"] == 0.0001  # 9.999999999999999e-05 before rounding
    assert a["llm.cost.prompt"] == 0.0000025
    assert a["llm.cost.total"] == a["otel_budget.cost.usd"] == 0.0001025
    assert otel_oi.run_span("money").attributes["otel_budget.used.usd"] == 0.0001025


def test_conversation_id_is_on_the_run_span_and_every_call_in_the_run(otel_oi, llm, oai):
    llm.default = Turn(text="ok", input_tokens=10, output_tokens=4)
    with otel_budget.run("conv", conversation_id="conv-42"):
        oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        with otel_budget.run("child-of-conv"):
            oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    with otel_budget.run("other"):
        oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    calls = _calls(otel_oi)
    assert [s.attributes.get("gen_ai.conversation.id") for s in calls] == ["conv-42", "conv-42", None]
    assert calls[0].attributes["session.id"] == "conv-42"
    assert otel_oi.run_span("conv").attributes["gen_ai.conversation.id"] == "conv-42"
    assert otel_oi.run_span("child-of-conv").attributes["gen_ai.conversation.id"] == "conv-42"
    assert "gen_ai.conversation.id" not in otel_oi.run_span("other").attributes


def test_the_decorator_records_the_conversation_id_too(otel, llm, oai):
    llm.default = Turn(text="ok", input_tokens=10, output_tokens=4)

    @otel_budget.run("decorated", conversation_id="conv-7")
    def agent() -> None:
        oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])

    agent()
    (span,) = _calls(otel)
    assert span.attributes["gen_ai.conversation.id"] == "conv-7"


@otel_budget.tool
def weather(city: str) -> str:
    """Tell the weather in a city.

    Longer notes that are not part of the description.
    """
    return f"sunny in {city}"


@otel_budget.tool
def undocumented(x: int) -> int:
    return x


def test_direct_tool_spans_carry_type_description_and_the_model_s_call_id(otel_oi, llm, oai):
    llm.script(Turn(tool_calls=[ToolCall("weather", {"city": "Oslo"}, id="call_w1")], input_tokens=10,
                    output_tokens=4))
    with otel_budget.run("tools"):
        reply = oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "weather?"}])
        tc = reply.choices[0].message.tool_calls[0]
        weather(**json.loads(tc.function.arguments))
        weather("Bergen")  # not asked for by the model: no call id
        undocumented(1)
    oslo, bergen, plain = _calls(otel_oi, "execute_tool ")
    assert oslo.attributes["gen_ai.tool.type"] == "function"
    assert oslo.attributes["gen_ai.tool.description"] == "Tell the weather in a city."
    assert oslo.attributes["tool.description"] == "Tell the weather in a city."
    assert oslo.attributes["gen_ai.tool.call.id"] == "call_w1"
    assert "gen_ai.tool.call.id" not in bergen.attributes
    assert plain.attributes["gen_ai.tool.type"] == "function"
    assert "gen_ai.tool.description" not in plain.attributes


def _metric_names(reader) -> dict:
    data = reader.get_metrics_data()
    out = {}
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out[m.name] = m
    return out


def test_metrics_keep_the_released_names_by_default(otel, llm, oai):
    llm.default = Turn(text="ok", input_tokens=10, output_tokens=4)
    with otel_budget.run("metrics-default"):
        oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    names = _metric_names(otel.metrics)
    assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"} <= set(names)
    assert not [n for n in names if n.startswith("gen_ai.client.inference.")]
    (point,) = names["gen_ai.client.operation.duration"].data.data_points
    assert point.attributes["server.address"] == "127.0.0.1"
    assert point.attributes["server.port"] == _port(llm)


def test_latest_experimental_opt_in_emits_the_newest_metric_names(otel, llm, oai, monkeypatch):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "http, gen_ai_latest_experimental")
    reader = InMemoryMetricReader()
    otel_budget.instrument(meter_provider=MeterProvider(metric_readers=[reader]))
    llm.default = Turn(text="ok", input_tokens=100, output_tokens=12, cache_read_tokens=40, cache_write_tokens=10,
                       reasoning_tokens=5)
    with otel_budget.run("metrics-latest"):
        oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    names = _metric_names(reader)
    assert "gen_ai.client.token.usage" not in names
    assert "gen_ai.client.operation.duration" not in names
    assert names["gen_ai.client.inference.duration"].unit == "s"
    assert names["gen_ai.client.inference.duration"].data.data_points[0].count == 2
    (hist,) = names["gen_ai.client.inference.operation.input_tokens"].data.data_points
    assert (hist.count, hist.sum) == (2, 200)
    assert "gen_ai.token.modality" not in hist.attributes
    (out_hist,) = names["gen_ai.client.inference.operation.output_tokens"].data.data_points
    assert out_hist.sum == 24
    expected = {"input_tokens": 200, "output_tokens": 24, "cache_read.input_tokens": 80,
                "reasoning.output_tokens": 10}
    assert "gen_ai.client.inference.usage.cache_write.input_tokens" not in names  # openai reports none
    for suffix, total in expected.items():
        metric = names[f"gen_ai.client.inference.usage.{suffix}"]
        (point,) = metric.data.data_points
        assert metric.unit == "{token}"
        assert point.value == total, suffix
        assert point.attributes["gen_ai.token.modality"] == "unknown"
        assert point.attributes["gen_ai.provider.name"] == "openai"


def test_latest_metrics_count_cache_writes_anthropic_reports(otel, llm, anth, monkeypatch):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    reader = InMemoryMetricReader()
    otel_budget.instrument(meter_provider=MeterProvider(metric_readers=[reader]))
    llm.default = Turn(text="ok", input_tokens=100, output_tokens=5, cache_write_tokens=30, cache_read_tokens=20)
    with otel_budget.run("metrics-anthropic"):
        anth.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=[{"role": "user", "content": "hi"}])
    names = _metric_names(reader)
    (write,) = names["gen_ai.client.inference.usage.cache_write.input_tokens"].data.data_points
    (read,) = names["gen_ai.client.inference.usage.cache_read.input_tokens"].data.data_points
    (total,) = names["gen_ai.client.inference.usage.input_tokens"].data.data_points
    assert (write.value, read.value, total.value) == (30, 20, 100)
    assert write.attributes["gen_ai.provider.name"] == "anthropic"

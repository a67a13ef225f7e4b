"""A bad exporter setting in the environment (`OTEL_BSP_MAX_QUEUE_SIZE=abc`) used to turn off all trace export
with a log line naming neither the variable nor its value. Now the warning names both, the setting's default
is used, and traces and metrics still reach the collector (a real OTLP/HTTP receiver; the app is its own process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from otel_budget.testing import ScriptedLLM, Turn

from ._otlp import Receiver

APP = textwrap.dedent("""
    import json, logging, os, sys
    import openai
    import otel_budget
    from opentelemetry import metrics, trace
    logging.basicConfig(level=logging.WARNING)
    otel_budget.instrument()
    client = openai.OpenAI(base_url=os.environ["APP_LLM_URL"], api_key="offline", max_retries=0)
    with otel_budget.run("env-app", budget=otel_budget.Budget(max_steps=2)) as run:
        for _ in range(2):
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    providers = [type(trace.get_tracer_provider()).__name__, type(metrics.get_meter_provider()).__name__]
    if os.environ.get("APP_EXIT_NOW"):  # nothing listens: leave without flushing
        print(json.dumps({"stop_reason": run.outcome.stop_reason.value, "providers": providers}))
        sys.stdout.flush()
        os._exit(0)
    trace.get_tracer_provider().shutdown()
    metrics.get_meter_provider().shutdown()
    print(json.dumps({"stop_reason": run.outcome.stop_reason.value, "providers": providers}))
""")


def _run(env: dict[str, str]) -> tuple[dict, str]:
    with ScriptedLLM() as llm:
        llm.default = Turn(text="ok", input_tokens=10, output_tokens=5)
        clean = {"PATH": os.environ.get("PATH", ""), "APP_LLM_URL": llm.openai_base_url, **env}
        done = subprocess.run([sys.executable, "-c", APP], env=clean, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert len(llm.requests) == 2
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.mark.parametrize(("variable", "value"), [
    ("OTEL_BSP_MAX_QUEUE_SIZE", "abc"), ("OTEL_BSP_MAX_QUEUE_SIZE", "0"), ("OTEL_BSP_SCHEDULE_DELAY", "-5"),
    ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "99999"), (None, None),
])
def test_a_bad_batch_setting_is_named_and_traces_and_metrics_still_arrive(variable, value):
    with Receiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
               "OTEL_SERVICE_NAME": "env-app"}
        if variable:
            env[variable] = value
        out, stderr = _run(env)
        assert out["stop_reason"] == "done"
        names = sorted(name for scope, name, _, _ in receiver.spans() if scope == "otel_budget")
        assert names == ["chat gpt-4o", "chat gpt-4o", "invoke_agent env-app"]
        assert "otel_budget.runs" in receiver.metric_names()
    if variable:
        warned = [line for line in stderr.splitlines() if f"{variable}={value!r}" in line]
        assert warned and "otel-budget" in warned[0]
    else:
        assert "otel-budget" not in stderr  # a healthy environment: not a word


@pytest.mark.parametrize(("variable", "value"), [("OTEL_EXPORTER_OTLP_TIMEOUT", "abc"),
                                                 ("OTEL_EXPORTER_OTLP_COMPRESSION", "zip")])
def test_a_bad_grpc_exporter_setting_is_named_and_export_stays_on(variable, value):
    """The gRPC exporter refuses these in its constructor (HTTP's falls back itself); it is made again with the
    setting's default. Nothing listens on the port: what is checked is that both signals are set up."""
    out, stderr = _run({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", variable: value, "APP_EXIT_NOW": "1"})
    assert out["providers"] == ["TracerProvider", "MeterProvider"]
    assert sum(f"{variable}={value!r}" in line for line in stderr.splitlines()) == 2  # traces, metrics

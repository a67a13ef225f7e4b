"""A user's own app, installed from the wheel and run as its own process: export and budget from the environment
alone, the zero-code way through `opentelemetry-instrument`, and a run() that finds nothing instrumented."""

from __future__ import annotations

import pytest

from .conftest import run_app

OTLP = {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_SERVICE_NAME": "user-app",
        "OTEL_BUDGET_DEFAULT": '{"max_steps": 2}'}


def _ours(receiver) -> list:
    return [s for s in receiver.spans() if s[0] == "otel_budget"]


def test_environment_alone_exports_traces_and_metrics_and_sets_the_budget(user_venv, receiver, scripted):
    out = run_app(user_venv, "instrument", {**OTLP, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}, scripted)
    assert (out["stop_reason"], out["model_calls"]) == ("steps", 2)
    assert len(scripted.requests) == 2  # OTEL_BUDGET_DEFAULT: the third call was never sent
    spans = _ours(receiver)
    names = sorted(name for _, name, _, _ in spans)
    assert names == ["chat gpt-4o", "chat gpt-4o", "invoke_agent user-app"]
    (run_span,) = [s for s in spans if s[1] == "invoke_agent user-app"]
    assert run_span[2]["stop.reason"] == "steps" and run_span[2]["otel_budget.limit.steps"] == 2
    assert run_span[3]["service.name"] == "user-app"
    assert {"otel_budget.runs", "gen_ai.client.token.usage"} <= receiver.metric_names()


def test_none_opts_out_of_each_signal(user_venv, receiver, scripted):
    env = {**OTLP, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_METRICS_EXPORTER": "none"}
    run_app(user_venv, "instrument", env, scripted)
    assert _ours(receiver) and not receiver.metrics
    receiver.traces.clear()
    run_app(user_venv, "instrument", {**env, "OTEL_TRACES_EXPORTER": "none"}, scripted)
    assert receiver.paths.count("/v1/traces") == 1 and not receiver.metrics  # only the first run's traces
    assert len(scripted.requests) == 4  # still enforced: 2 calls per run


def test_no_otel_variables_export_nothing(user_venv, receiver, scripted):
    out = run_app(user_venv, "instrument", {"APP_MAX_STEPS": "1"}, scripted)
    assert out["model_calls"] == 1 and not receiver.paths


def test_an_application_provider_is_used_as_it_is(user_venv, receiver, scripted):
    out = run_app(user_venv, "own-provider", {**OTLP, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}, scripted)
    assert sorted(out["own_spans"]) == ["chat gpt-4o", "chat gpt-4o", "invoke_agent user-app"]
    assert not _ours(receiver)  # its provider exports nowhere; we added no exporter to it


def test_zero_code_with_opentelemetry_instrument(user_venv, receiver, scripted):
    out = run_app(user_venv, "zero-code", {**OTLP, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                                           "APP_LOG": "INFO"}, scripted, zero_code=True)
    assert (out["stop_reason"], out["model_calls"]) == ("steps", 2)
    assert "opened before instrument()" not in out["stderr"]  # the entry point had instrumented it
    assert "openai" in out["instrumented"]
    assert len(scripted.requests) == 2
    assert sorted(name for _, name, _, _ in _ours(receiver)) == ["chat gpt-4o", "chat gpt-4o", "invoke_agent user-app"]


def test_disabled_instrumentations_leave_it_off(user_venv, receiver, scripted):
    env = {**OTLP, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
           "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "otel_budget", "APP_MAX_STEPS": "2", "APP_LOG": "INFO"}
    out = run_app(user_venv, "zero-code", env, scripted, zero_code=True)
    # The entry point was skipped: the app's run() found nothing instrumented and instrumented it itself.
    assert "run 'user-app' was opened before instrument()" in out["stderr"]
    assert out["model_calls"] == 2


@pytest.mark.parametrize("value", ["{max_steps: 2}", "[2]", '{"max_steps": -1}', '{"max_stepz": 2}'])
def test_a_bad_default_budget_is_a_clear_error(monkeypatch, value):
    import otel_budget

    monkeypatch.setenv("OTEL_BUDGET_DEFAULT", value)
    with pytest.raises(ValueError, match="OTEL_BUDGET_DEFAULT"):
        otel_budget.instrument()
    otel_budget.uninstrument()


def test_a_run_with_nothing_instrumented_instruments_first(user_venv, receiver, scripted):
    out = run_app(user_venv, "none", {"APP_MAX_STEPS": "1", "APP_LOG": "INFO"}, scripted)
    assert (out["stop_reason"], out["model_calls"]) == ("steps", 1)
    assert len(scripted.requests) == 1  # the README's loop no longer runs forever
    assert out["stderr"].count("was opened before instrument(); instrumented") == 1


def test_a_run_after_uninstrument_warns(caplog):
    import otel_budget

    otel_budget.instrument()
    otel_budget.uninstrument()
    with caplog.at_level("WARNING", logger="otel_budget"):
        with otel_budget.run("after", budget=otel_budget.Budget(max_steps=1)):
            pass
    assert any("opened after uninstrument()" in r.getMessage() for r in caplog.records)

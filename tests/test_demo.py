"""`otel-budget demo`: the invoice agent healthy, stuck without a budget, and stuck under a budget."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_budget
from otel_budget.demo import rows as demo


@pytest.fixture(autouse=True)
def _no_otlp(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)


def test_demo_main_prints_the_table_wrap_ups_and_span_tree(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main(["--turns", "30"]) == 0
    out = capsys.readouterr().out
    rows = {line.split("  ")[0]: line for line in out.splitlines() if line.startswith(("healthy", "stuck"))}
    assert "done" in rows["healthy"]
    assert " 30 " in rows["stuck, no budget"] and "cancelled (demo cut-off)" in rows["stuck, no budget"]
    assert "repeat (max_repeats)" in rows["stuck, budget"]
    assert " 25 " in rows["stuck, budget, no repeat check"]
    assert "steps (max_steps)" in rows["stuck, budget, no repeat check"]
    assert " 7 " in rows["stuck portal, changing page numbers"]
    assert "stalled (max_stalls)" in rows["stuck portal, changing page numbers"]
    assert ("- stuck portal, changing page numbers: Stopped: no progress (max_stalls). next_page returned the same "
            "result 3 times in a row.") in out
    assert "- healthy: Completed:" in out
    assert "- stuck, budget: Stopped at a limit: max_repeats" in out
    assert "The task is NOT complete" in out
    assert out.count("invoke_agent invoice-agent") == 5
    assert "stop.reason=repeat otel_budget.stop.limit=max_repeats" in out


def test_demo_runs_reproduce_the_illustration_and_leave_nothing_patched() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    was_instrumented = bool(otel_budget.instrumented_libraries())
    results = demo.run_scenarios(demo.load_agent(), 40, provider)
    assert bool(otel_budget.instrumented_libraries()) == was_instrumented
    healthy, stuck, capped, capped_steps, stalled = (r.outcome for r in results)

    assert healthy.completed and healthy.usage.model_calls == 10
    assert 45_000 < healthy.usage.input_tokens < 60_000  # "10 turns, about 52k tokens"
    assert stuck.stop_reason == "cancelled" and stuck.usage.model_calls == 40 and not stuck.completed
    assert capped.stop_reason == "repeat" and capped.limit == "max_repeats"
    assert capped.usage.model_calls < 10 and capped.usage.input_tokens < 40_000  # far less with repetition
    assert capped_steps.stop_reason == "steps" and capped_steps.usage.model_calls == 25
    assert 170_000 < capped_steps.usage.input_tokens < 230_000  # "capped about 200k"
    assert capped_steps.usage.cost_usd <= 0.80
    # page=2, 3, 4 each returned page 1 again: the 3rd unchanged result stops it before the 8th call
    assert stalled.stop_reason == "stalled" and stalled.limit == "max_stalls" and stalled.usage.model_calls == 7
    for outcome in (stuck, capped, capped_steps, stalled):
        assert "NOT complete" in outcome.wrap_up

    chats = [s for s in exporter.get_finished_spans() if s.name == "chat gpt-4o"]
    assert len(chats) == 10 + 40 + capped.usage.model_calls + 25 + 7

"""`otel-budget demo`: the invoice agent run healthy, stuck without a budget, stuck under a budget, and stuck
with changing page numbers (stopped by the stall check).

Everything runs offline: the real openai SDK talks to `ScriptedLLM` on loopback, whose scripted policy plays
gpt-4o (priced from the bundled table). Spans go to `OTEL_EXPORTER_OTLP_ENDPOINT` when it is set; otherwise a
compact span tree is printed.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ..core import config
from ..model.budget import Budget, StopReason
from ..model.outcome import RunOutcome
from ..telemetry import semconv as sc

#: The budget of the docs' example.
DEMO_BUDGET = Budget(max_steps=25, max_seconds=300, max_usd=0.80)


@dataclass
class Scenario:
    """One way to run the agent."""

    label: str
    budget_text: str
    budget: Budget
    stuck: bool
    numbered: bool = False


@dataclass
class Result:
    """A finished scenario."""

    scenario: Scenario
    outcome: RunOutcome
    cut_off: bool


SCENARIOS = [
    Scenario("healthy", "25 steps, 300 s, $0.80", DEMO_BUDGET, stuck=False),
    Scenario("stuck, no budget", "none", Budget(max_repeats=None, max_stalls=None), stuck=True),
    Scenario("stuck, budget", "25 steps, 300 s, $0.80", DEMO_BUDGET, stuck=True),
    Scenario("stuck, budget, no repeat check", "same, max_repeats=max_stalls=None",
             DEMO_BUDGET.model_copy(update={"max_repeats": None, "max_stalls": None}), stuck=True),
    Scenario("stuck portal, changing page numbers", "25 steps, 300 s, $0.80", DEMO_BUDGET, stuck=True,
             numbered=True),
]


def load_agent() -> ModuleType:
    """The invoice agent the demo runs (`otel_budget/demo/agent.py`)."""
    from . import agent as demo_agent

    return demo_agent


def _otlp(provider: TracerProvider, endpoint: str) -> Any:
    """Add OTLP span (and metric) export; returns the MeterProvider to shut down, or None."""
    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or ("grpc" if endpoint.rstrip("/").endswith(":4317") else "http/protobuf"))
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # type: ignore[assignment]
            OTLPMetricExporter,
        )
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[assignment]
            OTLPSpanExporter,
        )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(timeout=5)))
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(timeout=5), export_interval_millis=5000)
    return MeterProvider(metric_readers=[reader])


@contextmanager
def plain_message_history() -> Iterator[None]:
    """Skip the openai SDK's client-side type walk over `messages` while the demo runs.

    The SDK walks every message of the history against a union of TypedDicts on every call: O(turns^2) CPU,
    over 10 s for the 200-turn run on two cores, and a no-op for messages that are plain wire-format dicts,
    as the agent's are. The request that goes out, and that otel-budget meters, is the same.
    """
    try:
        from openai.resources.chat.completions import completions as module
    except ImportError:
        yield
        return
    original = module.__dict__.get("maybe_transform")
    if original is None:
        yield
        return

    def maybe_transform(data: Any, expected_type: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("messages"), list):
            rest = original({k: v for k, v in data.items() if k != "messages"}, expected_type)
            return {"messages": data["messages"], **rest}
        return original(data, expected_type)

    module.maybe_transform = maybe_transform
    try:
        yield
    finally:
        module.maybe_transform = original


def run_scenarios(agent: ModuleType, turns: int, tracer_provider: Any, meter_provider: Any = None) -> list[Result]:
    """Run every scenario against one ScriptedLLM; `turns` is the demo's own cut-off per run."""
    from openai import OpenAI

    import otel_budget

    from ..testing import ScriptedLLM

    previous = config.get() if otel_budget.instrumented_libraries() else None
    otel_budget.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    results = []
    try:
        with ScriptedLLM() as llm, plain_message_history():
            llm.responder = agent.scripted_model
            client = OpenAI(base_url=llm.openai_base_url, api_key="offline-demo", max_retries=0)
            for scenario in SCENARIOS:
                cut_off = False
                with otel_budget.run("invoice-agent", budget=scenario.budget) as run:
                    answer = agent.solve(client, agent.Portal(stuck=scenario.stuck, numbered=scenario.numbered), max_turns=turns)
                    if answer.answer is None:
                        cut_off = True
                        run.stop(StopReason.CANCELLED, f"cut off by the demo after {turns} turns.")
                results.append(Result(scenario, run.outcome, cut_off))
    finally:
        if previous is None:
            otel_budget.uninstrument()
        else:
            config.install(previous)
    return results


def _tokens(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1_000_000 else f"{n / 1e3:.1f}k" if n >= 10_000 else f"{n:,}"


def table(results: Sequence[Result]) -> str:
    """The comparison table, one row per run."""
    head = ("run", "budget", "turns", "tokens sent", "cost", "stop reason")
    rows = []
    for r in results:
        u = r.outcome.usage
        stop = r.outcome.stop_reason.value
        if r.cut_off:
            stop += " (demo cut-off)"
        elif r.outcome.limit:
            stop += f" ({r.outcome.limit})"
        rows.append((r.scenario.label, r.scenario.budget_text, str(u.model_calls), _tokens(u.input_tokens),
                     f"${u.cost_usd:,.2f}", stop))
    widths = [max(len(row[i]) for row in (head, *rows)) for i in range(len(head))]
    right = {2, 3, 4}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    return "\n".join([line(head), "  ".join("-" * w for w in widths), *(line(row) for row in rows)])


def _number(span: ReadableSpan, key: str) -> float:
    value = (span.attributes or {}).get(key)
    return float(value) if isinstance(value, (int, float)) else 0.0


def span_tree(spans: Sequence[ReadableSpan]) -> str:
    """One run span per trace, then one summary line for its chat spans and one for its tool spans."""
    by_trace: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        by_trace.setdefault(span.context.trace_id, []).append(span)
    out = []
    for group in by_trace.values():
        root = next((s for s in group if s.parent is None), None)
        if root is None:
            continue
        attrs = root.attributes or {}
        stop = f"{sc.STOP_REASON}={attrs.get(sc.STOP_REASON)}"
        if attrs.get(sc.STOP_LIMIT):
            stop += f" {sc.STOP_LIMIT}={attrs.get(sc.STOP_LIMIT)}"
        out.append(f"{root.name}  trace {root.context.trace_id:032x}  {stop}")
        chats = [s for s in group if (s.attributes or {}).get(sc.GEN_AI_OPERATION_NAME) == sc.OP_CHAT]
        tools = Counter(str((s.attributes or {}).get(sc.GEN_AI_TOOL_NAME)) for s in group
                        if (s.attributes or {}).get(sc.GEN_AI_OPERATION_NAME) == sc.OP_EXECUTE_TOOL)
        if chats:
            turns = [_number(s, sc.TURN) for s in chats]
            tokens = sum(_number(s, sc.GEN_AI_USAGE_INPUT_TOKENS) for s in chats)
            cost = sum(_number(s, sc.COST_USD) for s in chats)
            out.append(f"  ├─ {len(chats)} x {chats[0].name}  {sc.TURN} {min(turns):.0f}..{max(turns):.0f}, "
                       f"{sc.GEN_AI_USAGE_INPUT_TOKENS} {tokens:,.0f}, {sc.COST_USD} {cost:.4f}")
        tool_text = ", ".join(f"{name} {n}" for name, n in tools.most_common())
        out.append(f"  └─ {sum(tools.values())} x {sc.OP_EXECUTE_TOOL}  {tool_text or '-'}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Run the demo and print the table, the wrap-ups and the spans."""
    parser = argparse.ArgumentParser(prog="otel-budget demo", description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200, help="the demo's own cut-off per run (default 200)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    agent = load_agent()
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    meter_provider = _otlp(provider, endpoint) if endpoint else None
    try:
        results = run_scenarios(agent, args.turns, provider, meter_provider)
    finally:
        provider.shutdown()
        if meter_provider is not None:
            meter_provider.shutdown()
    print(f"The invoice agent, {len(results)} runs (openai SDK -> ScriptedLLM on loopback, priced as "
          f"{agent.MODEL}; offline):\n")
    print(table(results))
    print("\nWrap-ups:")
    for r in results:
        print(f"- {r.scenario.label}: {r.outcome.wrap_up}")
    spans = memory.get_finished_spans()
    if endpoint:
        print(f"\nSpans: {len(spans)} handed to the OTLP exporter for {endpoint}; find the runs by trace id:")
        for r in results:
            print(f"- {r.scenario.label}: {r.outcome.trace_id}")
    else:
        print("\nSpans (set OTEL_EXPORTER_OTLP_ENDPOINT to export them):")
        print(span_tree(spans))
    print(f"\n{time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Render the key panels of the "Agent budgets" dashboard from a real Prometheus scrape to docs/dashboard.png.

Four instrumented agents (real openai and anthropic SDKs against ScriptedLLM) run for about half a minute;
their metrics are served by the OpenTelemetry Prometheus exporter on 127.0.0.1 and scraped every second by
a real Prometheus (Debian's 2.42, installed by scripts/ensure_services.sh) that also evaluates the shipped
alert rules (with `for:` cut to 2 s). The panels are the dashboard's own PromQL, read through the HTTP API;
the stopped-runs table lists the run spans that the dashboard's Jaeger search returns (stop.reason != done).

    .venv/bin/python scripts/render_dashboard.py [--out docs/dashboard.png] [--seconds 30]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import yaml  # noqa: E402
from anthropic import Anthropic  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from openai import OpenAI  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

import otel_budget  # noqa: E402
from otel_budget.telemetry import semconv as sc  # noqa: E402
from otel_budget.testing import RecordedRequest, ScriptedLLM, ToolCall, Turn  # noqa: E402
from tests.ops.prometheus_server import MetricsEndpoint, PrometheusProcess  # noqa: E402

RESEARCH_MODEL = "claude-sonnet-4-6"
DASHBOARD = ROOT / "grafana" / "dashboards" / "agent-budgets.json"
RULES = ROOT / "grafana" / "prometheus" / "rules"

# Grafana look: dark canvas, panels a shade lighter.
BG, PANEL, TEXT, GRID, MUTED = "#111217", "#181b1f", "#ccccdc", "#2c3235", "#8e8e9a"
PALETTE = ["#73bf69", "#f2cc0c", "#5794f2", "#ff9830", "#f2495c", "#b877d9", "#8ab8ff", "#fade2a"]


# --- the agents ------------------------------------------------------------------------------------------


class Agents:
    """Four agents with different budgets, run concurrently for about `seconds`."""

    def __init__(self, llm: ScriptedLLM, seconds: float) -> None:
        self.openai = OpenAI(base_url=llm.openai_base_url, api_key="demo", max_retries=0)
        self.anthropic = Anthropic(base_url=llm.anthropic_base_url, api_key="demo", max_retries=0)
        self.seconds = seconds
        self.rng = random.Random(7)
        self.lock = threading.Lock()
        self.researcher_calls = 0
        llm.responder = self.respond

    def respond(self, request: RecordedRequest) -> Turn:
        """Output tokens vary by model (input tokens are counted from the prompt sent); the researcher ends up
        asking for the same tool call again and again."""
        with self.lock:
            r = self.rng
            if request.model == RESEARCH_MODEL:
                self.researcher_calls += 1
                if self.researcher_calls > 15:
                    return Turn(tool_calls=[ToolCall("web_search", {"q": "budget caps"})])
                return Turn(text="reading sources", output_tokens=r.randint(200, 900))
            low, high = {"gpt-4o": (300, 700), "gpt-4.1": (30, 120)}.get(request.model or "", (10, 90))
            return Turn(text="done with this step", output_tokens=r.randint(low, high))

    def prompt(self, tokens: tuple[int, int]) -> list[dict[str, str]]:
        """A user message of a random size in `tokens` (about 4 characters per token)."""
        with self.lock:
            n = self.rng.randint(*tokens)
        return [{"role": "user", "content": "lorem " * (n * 4 // 6)}]

    def _chat(self, model: str, tokens: tuple[int, int]) -> None:
        self.openai.chat.completions.create(model=model, messages=self.prompt(tokens))  # type: ignore[arg-type]

    def support_bot(self) -> None:
        """Short runs, gpt-4o-mini, max_steps=6: most finish, every fourth loops until the step limit."""
        end = time.monotonic() + self.seconds
        n = 0
        while time.monotonic() < end:
            n += 1
            with otel_budget.run("support-bot", budget=otel_budget.Budget(max_steps=6)):
                for _ in range(100 if n % 4 == 0 else 2 + n % 3):
                    self._chat("gpt-4o-mini", (150, 900))
                    time.sleep(0.3)
            time.sleep(0.8)

    def invoice_agent(self) -> None:
        """gpt-4o with max_usd=0.04: long invoices run out of money."""
        end = time.monotonic() + self.seconds
        n = 0
        while time.monotonic() < end:
            n += 1
            with otel_budget.run("invoice-agent", budget=otel_budget.Budget(max_usd=0.04, max_steps=20)):
                for _ in range(100 if n % 2 == 0 else 1):
                    self._chat("gpt-4o", (3000, 6000))
                    time.sleep(0.6)
            time.sleep(1.5)

    def researcher(self) -> None:
        """One long Claude run, max_steps=20, that ends repeating one tool call (stop: repeat)."""
        time.sleep(2)
        with otel_budget.run("researcher", budget=otel_budget.Budget(max_steps=20, max_repeats=3)):
            for _ in range(100):
                self.anthropic.messages.create(
                    model=RESEARCH_MODEL,
                    max_tokens=1024,
                    messages=self.prompt((1500, 4000)),  # type: ignore[arg-type]
                )
                time.sleep(1.2)

    def triage(self) -> None:
        """gpt-4.1 with max_seconds=14, started late: its time runs out (stop: time)."""
        time.sleep(self.seconds * 0.3)
        with otel_budget.run("triage", budget=otel_budget.Budget(max_seconds=14)):
            for _ in range(1000):
                self._chat("gpt-4.1", (400, 1500))
                time.sleep(1.0)

    def run_all(self) -> None:
        threads = [
            threading.Thread(target=f, name=f.__name__, daemon=True)
            for f in (self.support_bot, self.invoice_agent, self.researcher, self.triage)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.seconds + 60)


# --- queries ---------------------------------------------------------------------------------------------


def dashboard_exprs() -> dict[str, list[str]]:
    """Panel title -> PromQL of its Prometheus targets, as the dashboard file has them."""
    dashboard = json.loads(DASHBOARD.read_text())
    out: dict[str, list[str]] = {}
    for panel in dashboard["panels"]:
        exprs = [t["expr"] for t in panel.get("targets", []) if "expr" in t]
        if exprs:
            out[panel["title"]] = exprs
    return out


def grafana(expr: str, rate_interval: str, range_: str) -> str:
    """Substitute the Grafana variables the way Grafana would for this window."""
    return (
        expr.replace('run_name=~"$run_name"', 'run_name=~".*"')
        .replace("$__rate_interval", rate_interval)
        .replace("$__range", range_)
        .replace("$token_type", "output")
    )


def rules_with_short_for() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(RULES.glob("*.rules.yaml")):
        doc = yaml.safe_load(path.read_text())
        for group in doc["groups"]:
            for rule in group["rules"]:
                if "for" in rule:
                    rule["for"] = "2s"
        docs.append(doc)
    return docs


def wait_until_up(prom: PrometheusProcess, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not prom.targets_up():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the scrape target never came up: {prom.log()}")
        time.sleep(0.2)


# --- drawing ---------------------------------------------------------------------------------------------


def style(ax: Axes, title: str) -> None:
    ax.set_facecolor(PANEL)
    ax.set_title(title, color=TEXT, loc="left", fontsize=11, pad=8)
    ax.tick_params(colors=MUTED, labelsize=8)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.grid(True, color=GRID, linewidth=0.6)
    ax.set_axisbelow(True)


def lines(ax: Axes, result: list[dict[str, Any]], label: str, t0: float, scale: float = 1.0) -> None:
    for i, series in enumerate(sorted(result, key=lambda s: label.format(**s["metric"]))):
        xs = [float(t) - t0 for t, _ in series["values"]]
        ys = [float(v) * scale for _, v in series["values"]]
        ax.plot(
            xs, ys, color=PALETTE[i % len(PALETTE)], linewidth=1.8, label=label.format(**series["metric"])
        )
    if result:
        ax.legend(loc="upper left", fontsize=7.5, frameon=False, labelcolor=TEXT, ncol=4)
        ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.3)
    ax.set_xlabel("seconds", color=MUTED, fontsize=8)


def stat_row(fig: plt.Figure, stats: list[tuple[str, str]]) -> None:
    for i, (title, value) in enumerate(stats):
        ax = fig.add_axes((0.03 + i * 0.2425, 0.835, 0.225, 0.085))
        ax.set_facecolor(PANEL)
        ax.set_xticks([])
        ax.set_yticks([])
        for spine in ax.spines.values():
            spine.set_visible(False)
        ax.text(0.04, 0.78, title, color=TEXT, fontsize=10, transform=ax.transAxes, va="center")
        ax.text(
            0.5,
            0.33,
            value,
            color="#5794f2",
            fontsize=22,
            weight="bold",
            transform=ax.transAxes,
            ha="center",
            va="center",
        )


def render(
    out: Path,
    prom: PrometheusProcess,
    spans: list[ReadableSpan],
    t0: float,
    t1: float,
    runs: int,
) -> None:
    exprs = dashboard_exprs()
    window = f"{int(t1 - t0) + 5}s"

    def instant(title: str, i: int = 0) -> list[dict[str, Any]]:
        return prom.query(grafana(exprs[title][i], "5s", window))

    def ranged(title: str, i: int = 0) -> list[dict[str, Any]]:
        return prom.query_range(grafana(exprs[title][i], "5s", window), t0, t1, 1)

    def scalar(title: str) -> float:
        result = instant(title)
        return float(result[0]["value"][1]) if result else 0.0

    fig = plt.figure(figsize=(16, 12.5), dpi=100, facecolor=BG)
    fig.text(0.03, 0.965, "Agent budgets", color=TEXT, fontsize=18, weight="bold")
    fig.text(
        0.03,
        0.94,
        f"{runs} runs of 4 agents, real openai/anthropic SDKs against ScriptedLLM; scraped every 1 s by Prometheus "
        "2.42; panels use the dashboard's PromQL (grafana/dashboards/agent-budgets.json)",
        color=MUTED,
        fontsize=9.5,
    )
    stat_row(
        fig,
        [
            ("Spend in range", f"${scalar('Spend in range'):.3f}"),
            ("Runs finished", f"{scalar('Runs finished'):.0f}"),
            ("Stopped at a limit", f"{scalar('Stopped at a limit'):.0f}"),
            ("Runs that crossed near", f"{scalar('Runs that crossed near'):.0f}"),
        ],
    )
    grid = fig.add_gridspec(3, 2, left=0.05, right=0.98, top=0.8, bottom=0.04, hspace=0.38, wspace=0.14)

    ax = fig.add_subplot(grid[0, 0])
    style(ax, "Cost per model (USD per minute)")
    lines(ax, ranged("Cost per model (USD per minute)"), "{gen_ai_request_model}", t0)

    ax = fig.add_subplot(grid[0, 1])
    style(ax, "Utilization of active runs (near line at 0.8)")
    result = [
        s
        for s in ranged("Utilization of active runs (near line at 0.8)")
        if max(float(v) for _, v in s["values"]) > 0
    ]
    lines(ax, result, "{run_name} / {dimension}", t0)
    ax.set_ylim(0, 1.3)
    ax.axhline(0.8, color="#ff9830", linewidth=1.2, linestyle="--")
    ax.axhspan(0.8, 1.0, color="#ff9830", alpha=0.08)
    ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0], ["0%", "20%", "40%", "60%", "80%", "100%"])
    firing = prom.query_range('ALERTS{alertname="AgentRunNearCap", alertstate="firing"}', t0, t1, 1)
    firing_at = sorted({float(t) - t0 for series in firing for t, _ in series["values"]})
    for x in firing_at:
        ax.axvspan(x - 0.5, x + 0.5, color="#f2495c", alpha=0.18, linewidth=0)
    if firing_at:
        ax.text(
            0.99,
            1.01,
            "shaded: AgentRunNearCap firing",
            color="#f2495c",
            fontsize=8,
            ha="right",
            va="bottom",
            transform=ax.transAxes,
        )

    ax = fig.add_subplot(grid[1, 0])
    style(ax, "Cost per run name (USD per minute)")
    lines(ax, ranged("Cost per run name (USD per minute)"), "{run_name}", t0)

    ax = fig.add_subplot(grid[1, 1])
    style(ax, "Runs by stop reason")
    counts = sorted(
        ((s["metric"]["stop_reason"], float(s["value"][1])) for s in instant("Runs by stop reason")),
        key=lambda kv: -kv[1],
    )
    colors = [
        "#73bf69" if r == "done" else "#f2495c" if r in ("error", "denied") else "#ff9830" for r, _ in counts
    ]
    ax.barh([r for r, _ in counts], [n for _, n in counts], color=colors)
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=9, labelcolor=TEXT)
    for i, (_, n) in enumerate(counts):
        ax.text(n, i, f" {n:.0f}", va="center", color=TEXT, fontsize=9)

    ax = fig.add_subplot(grid[2, 0])
    style(ax, "Tokens per turn (model calls per bucket)")
    buckets = prom.query("sum by (le, gen_ai_token_type) (gen_ai_client_token_usage_bucket)")
    for i, token_type in enumerate(("input", "output")):
        cumulative = sorted(
            (float(s["metric"]["le"]), float(s["value"][1]))
            for s in buckets
            if s["metric"]["gen_ai_token_type"] == token_type
        )
        per_bucket = [(le, c - (cumulative[j - 1][1] if j else 0.0)) for j, (le, c) in enumerate(cumulative)]
        shown = [(le, n) for le, n in per_bucket if 1 <= le <= 65536]
        xs = [k + (i - 0.5) * 0.4 for k in range(len(shown))]
        ax.bar(xs, [n for _, n in shown], width=0.4, color=PALETTE[2 + i], label=token_type)
        ax.set_xticks(range(len(shown)), [f"≤{le:,.0f}" for le, _ in shown], fontsize=8)
    ax.legend(fontsize=8, frameon=False, labelcolor=TEXT)
    ax.set_xlabel("tokens per model call (gen_ai.client.token.usage buckets)", color=MUTED, fontsize=8)

    ax = fig.add_subplot(grid[2, 1])
    style(ax, "Latest stopped runs (Jaeger search: stop.reason != done)")
    ax.grid(False)
    ax.set_xticks([])
    ax.set_yticks([])
    stopped = sorted(
        (s for s in spans if (s.attributes or {}).get(sc.STOP_REASON) not in (None, "done")),
        key=lambda s: s.end_time or 0,
        reverse=True,
    )[:7]
    rows = [
        [
            str((s.attributes or {}).get(sc.GEN_AI_AGENT_NAME, "")),
            str((s.attributes or {}).get(sc.STOP_REASON)),
            str((s.attributes or {}).get(sc.STOP_LIMIT, "")),
            f"{float((s.attributes or {}).get(sc.UTILIZATION, 0)):.0%}",
            f"{s.context.trace_id:032x}"[:16] + "…",
        ]
        for s in stopped
    ]
    if rows:
        table = ax.table(
            cellText=rows,
            colLabels=["run", "stop reason", "limit", "utilization", "trace ID"],
            loc="upper center",
            cellLoc="left",
            colWidths=[0.2, 0.17, 0.17, 0.14, 0.32],
        )
        table.auto_set_font_size(False)
        table.set_fontsize(9)
        table.scale(1, 1.45)
        for (row, col), cell in table.get_celld().items():
            cell.set_facecolor(PANEL if row else "#22252b")
            cell.set_edgecolor(GRID)
            cell.get_text().set_color("#6e9fff" if col == 4 and row else TEXT)

    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, facecolor=BG)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png")
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()

    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    with MetricsEndpoint(service_name="otel-budget-demo") as metrics, ScriptedLLM() as llm:
        otel_budget.instrument(meter_provider=metrics.meter_provider, tracer_provider=tracer_provider)
        try:
            with PrometheusProcess([metrics.target], rules=rules_with_short_for(), interval="1s") as prom:
                wait_until_up(prom)
                t0 = time.time()
                print(f"running the agents for about {args.seconds:.0f} s ...", file=sys.stderr)
                Agents(llm, args.seconds).run_all()
                print(f"agents done after {time.time() - t0:.0f} s; rendering", file=sys.stderr)
                time.sleep(4)  # a few more scrapes: utilization back to 0, last counters in
                t1 = time.time()
                finished = spans.get_finished_spans()
                runs = sum(
                    1
                    for s in finished
                    if (s.attributes or {}).get(sc.GEN_AI_OPERATION_NAME) == sc.OP_INVOKE_AGENT
                )
                render(args.out, prom, list(finished), t0, t1, runs)
        finally:
            otel_budget.uninstrument()
            tracer_provider.shutdown()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

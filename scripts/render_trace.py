"""Draw the trace of a stopped run, as a trace viewer shows it, to docs/img/trace.png.

Runs the demo's invoice agent (`otel_budget/demo/agent.py`) on the stuck portal whose `next_page` takes a page
number and always shows page 1, under the demo's budget, offline against ScriptedLLM (each answer delayed a
little, as a real model's would be, so the bars have a length). The spans are kept in memory and drawn as a
waterfall (HTML, screenshotted by headless Chromium from `make services`): the run span with its stop reason,
limit and wrap-up, each model call with its tokens and cost, each tool call. Not run by `make test`.
    .venv/bin/python scripts/render_trace.py [--out docs/img/trace.png]
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from openai import OpenAI
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_budget
from otel_budget.demo import agent
from otel_budget.testing import RecordedRequest, ScriptedLLM, Turn

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]
STYLE = """
body { font: 13px/1.35 system-ui, sans-serif; margin: 0; color: #1c1c1c; background: #fff; }
header { background: #1f2a37; color: #fff; padding: 10px 16px; font-size: 15px; }
header b { font-weight: 600; } header span { color: #b8c4d0; margin-left: 12px; font-size: 13px; }
table { border-collapse: collapse; width: 100%; }
td { padding: 3px 8px; border-bottom: 1px solid #eef0f3; vertical-align: middle; white-space: nowrap; }
td.name { width: 430px; } td.dur { width: 70px; text-align: right; color: #555; }
.bar { position: relative; height: 14px; } .bar i { position: absolute; top: 0; height: 14px; border-radius: 2px; }
.run i { background: #c2410c; } .chat i { background: #2563eb; } .tool i { background: #16a34a; }
.svc { display: inline-block; width: 6px; height: 14px; margin-right: 6px; vertical-align: middle; }
.attrs { color: #4b5563; font-size: 12px; padding-left: 8px; }
.stop { background: #fff7ed; } .stop td { border-bottom: 1px solid #fed7aa; }
dl { margin: 10px 16px; display: grid; grid-template-columns: 260px 1fr; gap: 3px 12px; font-size: 12.5px; }
dt { color: #6b7280; font-family: ui-monospace, monospace; } dd { margin: 0; font-family: ui-monospace, monospace; }
h2 { font-size: 14px; margin: 14px 16px 4px; }
"""


def _delayed(request: RecordedRequest) -> Turn:
    return dataclasses.replace(agent.scripted_model(request), delay=0.35)


def record() -> list[ReadableSpan]:
    """Run the stuck agent once; return its spans."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel_budget.instrument(tracer_provider=provider)
    with ScriptedLLM() as llm:
        llm.responder = _delayed
        client = OpenAI(base_url=llm.openai_base_url, api_key="offline", max_retries=0)
        budget = otel_budget.Budget(max_steps=25, max_seconds=300, max_usd=0.80)
        with otel_budget.run("invoice-agent", budget=budget) as run:
            agent.solve(client, agent.Portal(stuck=True, numbered=True))
    otel_budget.uninstrument()
    print("stop reason:", run.outcome.stop_reason.value, run.outcome.limit)
    return list(exporter.get_finished_spans())


def _attrs(span: ReadableSpan, keys: list[str]) -> str:
    values = span.attributes or {}
    shown = [f"{key.rsplit('.', 1)[-1] if key.startswith('gen_ai.usage') else key}={values[key]!s}"
             for key in keys if key in values]
    return html.escape("  ".join(shown))


def page(spans: list[ReadableSpan]) -> str:
    """The waterfall of one trace, as HTML."""
    root = next(s for s in spans if s.parent is None)
    start, end = root.start_time or 0, root.end_time or 1
    width = max(end - start, 1)
    children: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        if span.parent is not None:
            children.setdefault(span.parent.span_id, []).append(span)
    rows: list[str] = []

    def walk(span: ReadableSpan, depth: int) -> None:
        kind = "run" if span is root else ("tool" if span.name.startswith("execute_tool") else "chat")
        left = 100 * ((span.start_time or start) - start) / width
        size = max(100 * ((span.end_time or end) - (span.start_time or start)) / width, 0.4)
        keys = {"run": ["stop.reason", "otel_budget.stop.limit", "otel_budget.utilization"],
                "chat": ["otel_budget.turn", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
                         "otel_budget.cost.usd"],
                "tool": []}[kind]
        ms = ((span.end_time or end) - (span.start_time or start)) / 1e6
        rows.append(
            f'<tr class="{kind}"><td class="name" style="padding-left:{8 + 18 * depth}px">'
            f'<span class="svc" style="background:{ {"run": "#c2410c", "chat": "#2563eb", "tool": "#16a34a"}[kind]}">'
            f"</span>{html.escape(span.name)}<span class=attrs>{_attrs(span, keys)}</span></td>"
            f'<td class="dur">{ms:.0f} ms</td><td><div class="bar {kind}"><i style="left:{left:.2f}%;'
            f'width:{size:.2f}%"></i></div></td></tr>')
        for child in sorted(children.get(span.context.span_id, []), key=lambda s: s.start_time or 0):
            walk(child, depth + 1)

    walk(root, 0)
    attributes = dict(root.attributes or {})
    shown = ["stop.reason", "otel_budget.stop.limit", "otel_budget.limit.steps", "otel_budget.used.steps",
             "otel_budget.used.usd", "otel_budget.limit.usd", "otel_budget.utilization"]
    details = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(str(attributes[k]))}</dd>"
                      for k in shown if k in attributes)
    for event in root.events:
        for key, value in (event.attributes or {}).items():
            details += f"<dt>event {html.escape(event.name)}: {html.escape(key)}</dt><dd>{html.escape(str(value))}</dd>"
    wrap_up = str(attributes.get("otel_budget.wrap_up", ""))
    details += f"<dt>otel_budget.wrap_up</dt><dd style='white-space:pre-wrap'>{html.escape(wrap_up)}</dd>"
    trace_id = format(root.context.trace_id, "032x")
    return (f"<!doctype html><meta charset=utf-8><style>{STYLE}</style>"
            f"<header><b>{html.escape(root.name)}</b><span>trace {trace_id[:16]}  ·  {len(spans)} spans  ·  "
            f"{width / 1e9:.2f} s  ·  stop.reason={html.escape(str(attributes.get('stop.reason')))}</span></header>"
            f"<table>{''.join(rows)}</table><h2>The run span</h2><dl>{details}</dl>")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "trace.png")
    args = parser.parse_args()
    browser = next((found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))), None)
    if browser is None:
        raise SystemExit("no chromium on PATH: run `make services`")
    text = page(record())
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "trace.html"
        source.write_text(text, encoding="utf-8")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        command: list[Any] = [browser, *FLAGS, f"--user-data-dir={tmp}/profile", "--window-size=1400,760",
                              f"--screenshot={args.out.resolve()}", source.as_uri()]
        subprocess.run(command, check=True, capture_output=True, timeout=120)
    print(f"{args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

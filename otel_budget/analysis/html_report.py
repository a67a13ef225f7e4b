"""`otel-budget report FILE --html report.html`: one self-contained page with plots (matplotlib, PNG inline).

Three plots: the tokens sent per turn by run (the context-growth curve that makes a stuck run's cost
superlinear), the distribution of steps per run name with the recommended cap marked, and cost by stop reason.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from typing import Any

from .recommend import recommend
from .records import RunRecord, final_runs
from .report import report

#: At most this many runs get a line in the context-growth plot (the longest ones first).
MAX_CURVES = 40
_COLORS = {"done": "#2b8a3e", "cost": "#c92a2a", "steps": "#e67700", "repeat": "#862e9c", "stalled": "#5f3dc4",
           "tokens": "#d9480f", "time": "#1864ab"}


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError(
            "otel-budget report --html needs matplotlib: pip install 'otel-budget[report]'"
        ) from exc
    return plt


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _growth(plt: Any, runs: Sequence[RunRecord]) -> str:
    fig, ax = plt.subplots(figsize=(8, 4))
    shown = sorted((r for r in runs if r.turns), key=lambda r: -len(r.turns))[:MAX_CURVES]
    labelled: set[str] = set()
    for rec in shown:
        xs = [t.turn or i for i, t in enumerate(rec.turns, 1)]
        ys = [t.input_tokens for t in rec.turns]
        label = rec.stop_reason if rec.stop_reason not in labelled else None
        labelled.add(rec.stop_reason)
        ax.plot(xs, ys, marker=".", linewidth=1.2, color=_COLORS.get(rec.stop_reason, "#495057"), label=label)
    ax.set_xlabel("turn (model call in the run)")
    ax.set_ylabel("input tokens sent")
    ax.set_title("Tokens sent per turn, by run")
    if shown:
        ax.legend(title="stop reason", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no model call spans in the input", ha="center", transform=ax.transAxes)
    ax.grid(alpha=0.3)
    out = _png(fig)
    plt.close(fig)
    return out


def _steps(plt: Any, runs: Sequence[RunRecord], advice: dict[str, Any]) -> str:
    names = sorted({r.run_name for r in runs})
    fig, ax = plt.subplots(figsize=(8, 4))
    for name in names:
        steps = [r.used.get("steps", 0) for r in runs if r.run_name == name]
        top = int(max(steps, default=0))
        ax.hist(steps, bins=range(0, top + 2), alpha=0.6, label=name)
        cap = advice.get(name, {}).get("budget", {}).get("max_steps")
        if cap is not None:
            ax.axvline(cap, linestyle="--", color="#c92a2a")
            ax.annotate(f"recommended max_steps={cap} ({name})", (cap, ax.get_ylim()[1] * 0.9), rotation=90,
                        fontsize=8, ha="right", va="top", color="#c92a2a")
    ax.set_xlabel("steps (model calls) per run")
    ax.set_ylabel("runs")
    ax.set_title("Distribution of steps, recommended cap marked")
    if names:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    out = _png(fig)
    plt.close(fig)
    return out


def _cost(plt: Any, summary: dict[str, Any]) -> str:
    reasons = list(summary["by_reason"])
    costs = [summary["by_reason"][r]["cost_usd"] for r in reasons]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    bars = ax.bar(reasons, costs, color=[_COLORS.get(r, "#495057") for r in reasons])
    for bar, reason in zip(bars, reasons, strict=True):
        ax.annotate(f"${summary['by_reason'][reason]['cost_usd']:.4f}\n{summary['by_reason'][reason]['runs']} runs",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("USD")
    ax.set_title("Cost by stop reason")
    ax.grid(axis="y", alpha=0.3)
    out = _png(fig)
    plt.close(fig)
    return out


def render(records: Sequence[RunRecord]) -> str:
    """The whole page as one HTML string (images inline, styles inline, no scripts)."""
    plt = _pyplot()
    runs = final_runs(records)
    summary = report(runs)
    advice = recommend(runs)
    total = summary["total"]
    rows = "".join(
        f"<tr><td>{html.escape(reason)}</td><td>{row['runs']}</td><td>{row['runs'] / max(1, total['runs']):.1%}</td>"
        f"<td>${row['cost_usd']:.4f}</td><td>${row['avg_usd']:.4f}</td></tr>"
        for reason, row in summary["by_reason"].items()
    )
    figures = [
        ("Context growth", _growth(plt, runs)),
        ("Steps", _steps(plt, runs, advice)),
        ("Cost", _cost(plt, summary)),
    ]
    images = "".join(
        f'<figure><img alt="{html.escape(title)}" src="data:image/png;base64,{data}"></figure>' for title, data in figures
    )
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>otel-budget report</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:2em;color:#212529;max-width:60em}"
        "table{border-collapse:collapse}td,th{padding:.3em .8em;border-bottom:1px solid #dee2e6;text-align:right}"
        "td:first-child,th:first-child{text-align:left}img{max-width:100%}figure{margin:1.5em 0}</style></head>"
        f"<body><h1>otel-budget report</h1><p>{total['runs']} finished runs, ${total['cost_usd']:.4f} in all.</p>"
        "<table><tr><th>stop reason</th><th>runs</th><th>share</th><th>cost</th><th>avg</th></tr>"
        f"{rows}</table>{images}</body></html>\n"
    )

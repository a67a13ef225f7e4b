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
from .untrusted import printable

#: At most this many runs get a line in the context-growth plot (the longest ones first).
MAX_CURVES = 40
#: Run names plotted on their own (the costliest); the rest are drawn as one "other" series.
MAX_NAMES = 6
#: Stop reasons drawn on their own (the costliest); the rest are one "other" bar and legend entry.
MAX_REASONS = 8
#: Bars of a steps histogram at most (whole steps up to this many, wider bins above).
MAX_BINS = 60
#: Names and reasons are cut to this many characters in plots (the page's table has them whole).
LABEL_CHARS = 40
OTHER = "other"
_COLORS = {"done": "#2b8a3e", "cost": "#c92a2a", "steps": "#e67700", "repeat": "#862e9c", "stalled": "#5f3dc4",
           "tokens": "#d9480f", "time": "#1864ab"}
#: Names are plain text: a `$` in a run name is not TeX math, and TeX is never run on them.
_PLAIN_TEXT = {"text.parse_math": False, "text.usetex": False}


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


def _label(text: str) -> str:
    """A name or reason as a plot label: control characters escaped, cut to LABEL_CHARS."""
    out = printable(text)
    return out if len(out) <= LABEL_CHARS else out[: LABEL_CHARS - 1] + "\u2026"


def _top(costs: dict[str, tuple[float, int]], keep: int) -> list[str]:
    """The `keep` keys with the highest (cost, runs), costliest first."""
    return sorted(costs, key=lambda k: (-costs[k][0], -costs[k][1], k))[:keep]


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _growth(plt: Any, runs: Sequence[RunRecord], reasons: Sequence[str]) -> Any:
    fig, ax = plt.subplots(figsize=(8, 4))
    shown = sorted((r for r in runs if r.turns), key=lambda r: -len(r.turns))[:MAX_CURVES]
    labelled: set[str] = set()
    for rec in shown:
        xs = [t.turn or i for i, t in enumerate(rec.turns, 1)]
        ys = [t.input_tokens for t in rec.turns]
        reason = rec.stop_reason if rec.stop_reason in reasons else OTHER
        label = _label(reason) if reason not in labelled else None
        labelled.add(reason)
        ax.plot(xs, ys, marker=".", linewidth=1.2, color=_COLORS.get(reason, "#495057"), label=label)
    ax.set_xlabel("turn (model call in the run)")
    ax.set_ylabel("input tokens sent")
    ax.set_title("Tokens sent per turn, by run")
    if shown:
        ax.legend(title="stop reason", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no model call spans in the input", ha="center", transform=ax.transAxes)
    ax.grid(alpha=0.3)
    return fig


def _bins(steps: Sequence[float]) -> Any:
    top = int(max(steps, default=0))
    return range(0, top + 2) if top < MAX_BINS else MAX_BINS


def _steps(plt: Any, runs: Sequence[RunRecord], advice: dict[str, Any]) -> Any:
    costs: dict[str, tuple[float, int]] = {}
    for r in runs:
        cost, count = costs.get(r.run_name, (0.0, 0))
        costs[r.run_name] = (cost + r.used.get("usd", 0.0), count + 1)
    named = _top(costs, MAX_NAMES)
    rest = len(costs) - len(named)
    groups: dict[str, list[float]] = {name: [] for name in named}
    others: list[float] = []
    for r in runs:
        groups.get(r.run_name, others).append(r.used.get("steps", 0))
    fig, ax = plt.subplots(figsize=(8, 4))
    for name, steps in groups.items():
        ax.hist(steps, bins=_bins(steps), alpha=0.6, label=_label(name))
    if others:
        ax.hist(others, bins=_bins(others), alpha=0.4, color="#868e96",
                label=f"{OTHER} ({rest} names, {len(others)} runs)")
    for name in named:
        cap = advice.get(name, {}).get("budget", {}).get("max_steps")
        if cap is not None:
            ax.axvline(cap, linestyle="--", color="#c92a2a")
            ax.annotate(f"recommended max_steps={cap} ({_label(name)})", (cap, ax.get_ylim()[1] * 0.9),
                        rotation=90, fontsize=8, ha="right", va="top", color="#c92a2a")
    ax.set_xlabel("steps (model calls) per run")
    ax.set_ylabel("runs")
    title = "Distribution of steps, recommended cap marked"
    ax.set_title(title if not rest else f"{title} (the {len(named)} costliest run names)")
    if costs:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def _cost(plt: Any, summary: dict[str, Any], reasons: Sequence[str]) -> Any:
    rows = summary["by_reason"]
    # (label, colour, cost, runs) per bar; a list, so a stop reason that is itself called "other" stays a bar.
    bars_of = [(_label(r), _COLORS.get(r, "#495057"), rows[r]["cost_usd"], rows[r]["runs"]) for r in reasons]
    rest = [r for r in rows if r not in reasons]
    if rest:
        bars_of.append((f"{OTHER} ({len(rest)})", "#868e96", sum(rows[r]["cost_usd"] for r in rest),
                        sum(rows[r]["runs"] for r in rest)))
    fig, ax = plt.subplots(figsize=(8, 3.5))
    bars = ax.bar(range(len(bars_of)), [b[2] for b in bars_of], color=[b[1] for b in bars_of],
                  tick_label=[b[0] for b in bars_of])
    for bar, (_, _, cost, count) in zip(bars, bars_of, strict=True):
        ax.annotate(f"${cost:.4f}\n{count} runs", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("USD")
    ax.set_title("Cost by stop reason")
    ax.grid(axis="y", alpha=0.3)
    return fig


def figures(records: Sequence[RunRecord]) -> list[tuple[str, Any]]:
    """The page's three plots as matplotlib figures, titled (close them with `matplotlib.pyplot.close`)."""
    plt = _pyplot()
    runs = final_runs(records)
    summary = report(runs)
    advice = recommend(runs)
    rows = summary["by_reason"]
    reasons = _top({r: (rows[r]["cost_usd"], rows[r]["runs"]) for r in rows}, MAX_REASONS)
    with plt.rc_context(_PLAIN_TEXT):
        return [
            ("Context growth", _growth(plt, runs, reasons)),
            ("Steps", _steps(plt, runs, advice)),
            ("Cost", _cost(plt, summary, reasons)),
        ]


def render(records: Sequence[RunRecord]) -> str:
    """The whole page as one HTML string (images inline, styles inline, no scripts)."""
    plt = _pyplot()
    runs = final_runs(records)
    summary = report(runs)
    total = summary["total"]
    rows = "".join(
        f"<tr><td>{html.escape(reason)}</td><td>{row['runs']}</td><td>{row['runs'] / max(1, total['runs']):.1%}</td>"
        f"<td>${row['cost_usd']:.4f}</td><td>${row['avg_usd']:.4f}</td></tr>"
        for reason, row in summary["by_reason"].items()
    )
    plots = figures(runs)
    try:
        with plt.rc_context(_PLAIN_TEXT):  # tick labels are made as the figure is drawn
            drawn = [(title, _png(fig)) for title, fig in plots]
    finally:
        for _, fig in plots:
            plt.close(fig)
    images = "".join(
        f'<figure><img alt="{html.escape(title)}" src="data:image/png;base64,{data}"></figure>' for title, data in drawn
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

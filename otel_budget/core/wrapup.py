"""The honest wrap-up: what a run did, what is missing, and which limit stopped it."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..model.budget import LIMITS, StopReason, plural, usd
from ..model.outcome import RunOutcome

if TYPE_CHECKING:
    from .node import RunNode

_ALLOWANCE = re.compile(r"\((?:max_repeats|polls\[.*?\])=(\d+)\)")
"""`(max_repeats=3)` or `(polls['wait_for_ci']=20)` in a repeat stop's detail (node.RunNode.allowance)."""

_REASON_TEXT = {
    StopReason.INCOMPLETE: "Stopped: the model stopped, but the work is not confirmed done (incomplete).",
    StopReason.CANCELLED: "Stopped: the run was cancelled before it finished.",
    StopReason.ERROR: "Stopped by an error before the run finished.",
    StopReason.AWAITING_APPROVAL: "Paused: the run is waiting for a person's approval before it goes on.",
    StopReason.DENIED: "Stopped: a person denied a tool call the run needed.",
}


def _number(value: float, dim: str, cap: float | None) -> str:
    """A used value or a cap, both in one format: $0.005 next to $0.006, 31,298 tokens, 1.5 seconds."""
    if dim == "usd":
        return usd(value, cap)
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.1f}"


def _limit_line(node: RunNode, outcome: RunOutcome) -> str:
    limit = outcome.limit
    if limit in LIMITS:
        return f"Stopped at a limit: {limit} ({_used_of(node, outcome, limit)})."
    if outcome.stop_reason is StopReason.REPEAT:
        what = "cycle of actions" if " the cycle " in outcome.detail else "tool call"
        return f"Stopped at a limit: max_repeats (the same {what} {_repeat_cap(outcome.detail, node)} times in a row)."
    if outcome.stop_reason is StopReason.DEPTH:
        return "Stopped at a limit: max_depth (delegation deeper than the budget allows)."
    return f"Stopped at a limit: {limit or outcome.stop_reason.value}."


def _used_of(node: RunNode, outcome: RunOutcome, limit: str) -> str:
    """`$0.40 of $0.40 USD used`, or `set by an enclosing run` when the limit is not this run's own."""
    u = outcome.usage
    dim, _, unit = LIMITS[limit]
    cap = getattr(node.budget, limit, None)
    values: dict[str, float] = {
        "steps": u.model_calls,
        "tool_calls": u.tool_calls,
        "seconds": round(u.seconds, 1),
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "total_tokens": u.input_tokens + u.output_tokens,
        "usd": u.cost_usd,
    }
    used = _number(values[dim], dim, cap)
    cap_text = _number(cap, dim, cap) if cap is not None else ""
    return f"{used} of {cap_text} {unit} used" if cap is not None else "set by an enclosing run"


def _repeat_cap(detail: str, node: RunNode) -> int | None:
    """The allowance a repeat stop met (a poll's own, or max_repeats), as its detail names it."""
    found = _ALLOWANCE.search(detail)
    return int(found.group(1)) if found else node.budget.max_repeats


def template_wrap_up(node: RunNode, outcome: RunOutcome, model_text: str | None = None) -> str:
    """The wrap-up text. A stopped run's text always starts by saying so; partial work is never called done."""
    u = outcome.usage
    tools = node.tools_executed or node.tools_requested
    tool_text = ", ".join(f"{name} x{count}" for name, count in tools.most_common(8)) or "none"
    cost = f"${u.cost_usd:.4f}" + (f" (+{u.unpriced_calls} unpriced calls)" if u.unpriced_calls else "")
    if node.charges:
        cost += " incl. " + ", ".join(f"{name} ${usd:.4f}" for name, usd in node.charges.items())
    done = (
        f"{plural(u.model_calls, 'model call')}, {u.input_tokens:,} input and {u.output_tokens:,} output tokens, {cost}, "
        f"{u.seconds:.1f} s; tools: {tool_text}."
    )
    if outcome.stop_reason is StopReason.DONE:
        return f"Completed: {done}"
    if outcome.stop_reason is StopReason.STALLED:
        return _stalled(node, outcome, done, model_text)
    head = _REASON_TEXT.get(outcome.stop_reason) or _limit_line(node, outcome)
    if outcome.stop_reason is StopReason.AWAITING_APPROVAL and outcome.limit in LIMITS:
        head = (f"Paused: the run reached {outcome.limit} ({_used_of(node, outcome, outcome.limit)}) and waits for a "
                f"person's decision: resume it with a larger {outcome.limit} to go on, or decline to end it.")
    parts = [head, "The task is NOT complete; whatever the run produced so far is partial.", f"Done so far: {done}"]
    if outcome.stop_reason is StopReason.INCOMPLETE and outcome.detail:
        parts.append(f"Missing: {outcome.detail[0].upper()}{outcome.detail[1:]}")
    elif outcome.detail:
        parts.append(f"Missing: the rest of the task. {outcome.detail[0].upper()}{outcome.detail[1:]}")
    else:
        parts.append("Missing: the rest of the task.")
    if model_text:
        parts.append(f"Summary: {model_text.strip()}")
    return " ".join(parts)


def _stalled(node: RunNode, outcome: RunOutcome, done: str, model_text: str | None) -> str:
    """`Stopped: no progress (max_stalls). next_page returned the same result 3 times in a row. ...`"""
    detail = outcome.detail.split(", whatever", 1)[0].split(" (max_stalls", 1)[0]
    tool = detail.split(" ", 1)[0] if detail else ""
    kinds, exact = node.progress.distinct_count(tool)
    parts = [f"Stopped: no progress (max_stalls). {detail}." if detail else "Stopped: no progress (max_stalls).",
             "The task is NOT complete; whatever the run produced so far is partial.", f"Done: {done}"]
    if tool:
        calls = node.tools_executed.get(tool) or node.tools_requested.get(tool) or 0
        gave = plural(kinds, "distinct result") if exact else f"at least {plural(kinds, 'distinct result')}"
        parts.append(f"Missing: what {tool} should have returned next (it gave {gave} "
                     f"in {plural(calls, 'call')}); the rest of the task.")
    else:
        parts.append("Missing: the rest of the task.")
    if model_text:
        parts.append(f"Summary: {model_text.strip()}")
    return " ".join(parts)


def recorded_wrap_up(node: RunNode, outcome: RunOutcome, capture_content: bool) -> str:
    """The wrap-up for the run span: a model-written one carries content, so without content capture the
    template (counts, limits and tool names only) is recorded instead."""
    if outcome.wrap_up and node.budget.wrap_up == "model" and not capture_content:
        return template_wrap_up(node, outcome, None)
    return outcome.wrap_up

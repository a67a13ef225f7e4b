"""What the agent-framework adapters share: the per-call budget hook, the run they open, the outcome they attach,
the stop they answer with the wrap-up (and turn into the final output), the tools they run, and what a limit
pause shows through a framework's own pause."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from opentelemetry import trace

from ...core.resume import resume
from ...core.run import Run, RunNode, current_run
from ...core.tools import end_tool
from ...core.wrapup import template_wrap_up
from ...model.budget import Budget, StopReason
from ...model.outcome import BudgetExceeded, RunOutcome
from ...model.paused import PausedRun, PendingCall

#: The key (or attribute) under which a framework call carries its own budget.
BUDGET_KEY = "otel_budget"
#: The attribute under which a framework's result (or error) carries its run's RunOutcome.
OUTCOME_ATTR = "otel_budget_outcome"


def budget_from(carrier: Any) -> Budget | None:
    """The Budget a framework call brings: `carrier["otel_budget"]` or `carrier.otel_budget`, else None.

    A mapping of Budget fields is accepted too (a context restored from JSON, e.g. an Agents SDK `RunState`)."""
    if carrier is None:
        return None
    value = carrier.get(BUDGET_KEY) if isinstance(carrier, Mapping) else getattr(carrier, BUDGET_KEY, None)
    if isinstance(value, Mapping):
        return Budget.model_validate(value)
    return value if isinstance(value, Budget) else None


def stop_text(node: RunNode | None, exc: BudgetExceeded) -> str:
    """The wrap-up of a run stopped by `exc`, as the final answer a framework hands its user."""
    if node is None:
        return f"Stopped at a limit: {exc.limit or exc.reason.value}. The task is NOT complete. {exc.message}"
    return template_wrap_up(node, node.snapshot(exc.reason, exc.limit, exc.message))


def limit_pause(node: RunNode | None, exc: BudgetExceeded) -> PendingCall | None:
    """The limit the run waits on when `exc` is a pause at a limit (`Budget(on_limit="pause")`), else None: a
    framework then pauses through its own mechanism instead of answering with the wrap-up."""
    if node is None or exc.reason is not StopReason.AWAITING_APPROVAL or node.approval is None:
        return None
    pending = node.approval.pending
    return pending if pending is not None and pending.kind == "limit" else None


def limit_value(pending: PendingCall, node: RunNode) -> dict[str, Any]:
    """What a framework's pause shows a person for a limit pause: the limit, what was used of it, its value, and
    the run's wrap-up so far."""
    return {"kind": "limit", "limit": pending.limit, "used": pending.used, "cap": pending.cap,
            "run": node.name, "detail": node.stop_state[2] if node.stop_state else ""}


# --- runs and their outcome ----------------------------------------------------------------------------------


def run_name(obj: Any, default: str = "agent") -> str:
    """A run's name: the framework object's `name` (an agent, a graph), else `default`."""
    return str(getattr(obj, "name", None) or default)


def open_run(name: str, budget: Budget | None, paused: PausedRun | None = None, approved: bool | None = None,
             conversation_id: str | None = None) -> Run:
    """A fresh run, or `paused` going on (`approved`: the person's decision on its pending call) under `budget`."""
    if paused is not None:
        return resume(paused, approved=approved, budget=budget)
    return Run(name, budget, conversation_id=conversation_id)


def outcome_of(obj: Any) -> RunOutcome | None:
    """The RunOutcome `attach` put on a framework's result (None if it was not budgeted)."""
    return getattr(obj, OUTCOME_ATTR, None)


def attach(obj: Any, run: Run) -> None:
    """Put the run's outcome on `obj` (a result, a stream, an error); an object that takes no attributes is left."""
    with contextlib.suppress(Exception):
        setattr(obj, OUTCOME_ATTR, run.node.outcome)


# --- stops answered by the wrap-up ---------------------------------------------------------------------------


def own_stop(node: RunNode | None, exc: BudgetExceeded) -> RunNode | None:
    """`node`, when `exc` is its own stop or one of its ancestors', else None."""
    return node if node is not None and node.id in getattr(exc, "run_path", ()) else None


def refused_here(exc: BudgetExceeded) -> RunNode | None:
    """The current run, when `exc` is its own stop (or its ancestors'), else None."""
    return own_stop(current_run(), exc)


def cut_stop(node: RunNode | None, was_cut: bool = False) -> BudgetExceeded | None:
    """The stop of a run whose answer was just cut at the output limit the budget set (`RunNode.note_truncation`;
    `was_cut`: it already was before this call), else None."""
    if node is None or was_cut or not node.truncated_by_budget or node.stop_state is None:
        return None
    return node.stop(*node.stop_state)


class Answers:
    """The wrap-up texts an adapter answered its runs' refused calls with, so a run's final output becomes the
    final wrap-up (with a model-written summary, if configured)."""

    def __init__(self) -> None:
        self._texts: weakref.WeakKeyDictionary[RunNode, str] = weakref.WeakKeyDictionary()

    def answer(self, node: RunNode, exc: BudgetExceeded) -> str:
        """The wrap-up text that answers a refused (or cut) model call of `node`'s run."""
        text = stop_text(node, exc)
        self._texts[node] = text
        return text

    def finish(self, result: Any, run: Run, output: str) -> None:
        """Attach the run's outcome to `result`; after a stop answered here, `result.<output>` is the final wrap-up."""
        attach(result, run)
        done = run.node.outcome
        if done is None or done.completed:
            return
        answered = self._texts.pop(run.node, None)
        if answered is not None and getattr(result, output, None) == answered:
            with contextlib.suppress(Exception):
                setattr(result, output, done.wrap_up)


# --- tools ---------------------------------------------------------------------------------------------------


async def run_tool(state: tuple, call: Callable[[], Awaitable[Any]],
                   output: Callable[[Any], Any] = lambda result: result) -> Any:
    """Run a tool execution admitted by `core.tools.begin_tool` inside its span; it ends once, with `output(result)`
    or the error."""
    span = state[3]
    try:
        with trace.use_span(span, end_on_exit=False) if span is not None else contextlib.nullcontext():
            result = await call()
    except BaseException as exc:
        end_tool(state, None, exc)
        raise
    end_tool(state, output(result))
    return result


# --- shared by langchain and claude_agent_sdk (below) ---

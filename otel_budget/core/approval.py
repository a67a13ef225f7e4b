"""Soft stops: tool calls that wait for a person's yes, and resuming a paused run with the quota it used.

    budget = otel_budget.Budget(max_steps=25, approve=["git_push", "send_email"])
    with otel_budget.run("release-agent", budget=budget) as run:
        run.checkpoint(messages)           # what to go on from after a pause (kept by reference)
        ...                                # the model asks for git_push: the run pauses before it runs
    paused = run.outcome.paused            # stop_reason "awaiting_approval"; a PausedRun, JSON round trip
    text = paused.model_dump_json()        # store it, ask a person, then, in any process:
    with otel_budget.resume(otel_budget.PausedRun.model_validate_json(text), approved=True) as run:
        messages = run.state               # same trace, same quota (time spent waiting excluded)
        ...                                # the approved call runs once; tools done before the pause are not rerun

Where the run pauses: when the model asks for a gated tool (the adapters report tool requests), the run stops
before anything else runs: `@tool` executions, the next model call and `run.allows()` all refuse. A gated tool
executed by code through `@tool` without a model request pauses the same way.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol

from ..model import budget as _budget
from ..model.budget import Budget, StopReason, Usage
from ..model.outcome import BudgetExceeded
from ..model.paused import PausedRun, PendingCall, ToolRecord, _describe, _jsonable, _key, _pending
from ..model.policy import ApprovalPolicy
from . import config, trust

log = logging.getLogger(__name__)


class ApprovalNode(Protocol):
    """What approvals read and set of a run (the run tree's node has it): the decisions below, the tree above."""

    stop_state: tuple[StopReason, str | None, str] | None
    framework_approval: bool
    limit_declined: bool
    saved_state: Any

    @property
    def name(self) -> str: ...
    @property
    def budget(self) -> Budget: ...
    @property
    def chain(self) -> Sequence[ApprovalNode]: ...
    @property
    def tools_requested(self) -> Counter[str]: ...
    @property
    def tools_executed(self) -> Counter[str]: ...
    @property
    def pending_tools(self) -> Counter[str]: ...
    @property
    def trace_id(self) -> str | None: ...
    @property
    def span_id(self) -> str | None: ...
    def usage(self) -> Usage: ...
    def stop(self, reason: StopReason, limit: str | None, detail: str) -> BudgetExceeded: ...


class ApprovalState:
    """Approvals, denials, the pending call and the tool record of one run tree (shared through the tree)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.grants: dict[str, set[str]] = {}  # call key -> unused passes: "request", "execute"
        self.denied: set[str] = set()
        self.pending: PendingCall | None = None
        self.completed: list[ToolRecord] = []
        self.replays: dict[str, list[ToolRecord]] = {}

    # --- decisions ------------------------------------------------------------------------------------

    @staticmethod
    def policies(node: ApprovalNode) -> list[ApprovalPolicy]:
        return [p for n in node.chain if isinstance(p := n.budget.approve, ApprovalPolicy)]  # coerced on validation

    def operation(self, node: ApprovalNode, tool: str, arguments: Any) -> str | None:
        for policy in self.policies(node):
            op = policy.operation(tool, arguments)
            if op is not None:
                return op
        return None

    def needs_approval(self, node: ApprovalNode, tool: str, arguments: Any) -> bool:
        """Whether this call would pause (or be refused) now; consumes nothing."""
        op = self.operation(node, tool, arguments)
        if op is None:
            return False
        with self.lock:
            return op in self.denied or "execute" not in self.grants.get(_key(tool, arguments), ())

    def on_request(self, node: ApprovalNode, tool: str, arguments: Any, call_id: str | None) -> None:
        """The model asked for a tool: a gated call without a grant pauses the run (before anything runs)."""
        op = self.operation(node, tool, arguments)
        if op is None:
            return
        with self.lock:
            if op in self.denied:
                stop = (StopReason.DENIED, f"the model asked for {tool}, which performs '{op}': a person denied "
                        "that operation in this run, so nothing more was sent.")
            else:
                passes = self.grants.get(_key(tool, arguments))
                if passes and "request" in passes:
                    passes.discard("request")
                    return
                if node.framework_approval:
                    return  # the framework asks `needs_approval` and pauses itself (`pause`)
                if node.stop_state is None:
                    self.pending = _pending(tool, arguments, call_id, op)
                stop = (StopReason.AWAITING_APPROVAL, f"the model asked for {describe_call(tool, arguments)}, which "
                        "needs a person's approval; the run paused before it ran.")
        if node.stop_state is None:
            node.stop_state = (stop[0], None, stop[1])

    def on_execute(self, node: ApprovalNode, tool: str, arguments: Any) -> None:
        """A tool is about to run: raise BudgetExceeded (awaiting_approval or denied) unless it may."""
        op = self.operation(node, tool, arguments)
        if op is None:
            return
        with self.lock:
            if op in self.denied:
                reason, detail = StopReason.DENIED, (
                    f"the tool {tool} was not run: it performs '{op}', which a person denied in this run."
                )
            else:
                passes = self.grants.get(_key(tool, arguments))
                if passes and "execute" in passes:
                    passes.discard("execute")
                    return
                if node.stop_state is None:
                    self.pending = _pending(tool, arguments, None, op)
                reason, detail = StopReason.AWAITING_APPROVAL, (
                    f"the tool {describe_call(tool, arguments)} needs a person's approval; it was not run."
                )
        raise node.stop(reason, None, detail)

    def grant(self, call: PendingCall) -> None:
        """Approve exactly this tool with these arguments: one model request and one execution."""
        with self.lock:
            self.grants[_key(call.tool, call.arguments)] = {"request", "execute"}

    def deny(self, operation: str) -> None:
        with self.lock:
            self.denied.add(operation)

    def decide(self, node: ApprovalNode, call: PendingCall, approved: bool | None) -> None:
        """Apply a person's decision on `call`: approval grants exactly that call; a rejection denies its operation
        and ends the run with `denied` unless a policy names an alternative. A call that no policy gates (a
        framework's own approval) is the framework's business: nothing is granted or denied. None: no decision."""
        if call.kind == "limit":
            self._decide_limit(node, call, approved)
            return
        if approved is None or self.operation(node, call.tool, call.arguments) is None:
            return
        if approved:
            self.grant(call)
            return
        self.deny(call.operation)
        if not any(pol.alternative for pol in self.policies(node)) and node.stop_state is None:
            node.stop_state = (StopReason.DENIED, None, f"a person denied "
                               f"{call.describe(config.get().capture_content)}; the run ended there.")

    @staticmethod
    def _decide_limit(node: ApprovalNode, call: PendingCall, approved: bool | None) -> None:
        """A limit pause: approval goes on under the resumed run's limits (the quota used counts against them, so
        nothing grows unless they are larger); a rejection ends the run with the limit's own stop reason, and
        nothing more is sent whatever limits the resumed run has."""
        if approved is not False or node.stop_state is not None or call.limit not in _budget.LIMITS:
            return
        node.limit_declined = True
        reason = _budget.LIMITS[call.limit][1]
        node.stop_state = (reason, call.limit, f"a person declined to raise {call.limit} after the run reached it; "
                           "the run ended there.")

    # --- work done ------------------------------------------------------------------------------------

    def record(self, tool: str, arguments: Any, result: Any) -> None:
        """Keep a finished tool call (the work done) for a later pause."""
        try:
            replayable = json.loads(json.dumps(result)) == result
        except (TypeError, ValueError):
            replayable = False
        rec = ToolRecord(tool=tool, arguments=_jsonable(arguments), result=result if replayable else None,
                         replayable=replayable)
        with self.lock:
            self.completed.append(rec)

    def replay(self, tool: str, arguments: Any) -> tuple[Any] | None:
        """The recorded result of this call when it ran before the pause (each record answers once)."""
        if not self.replays:
            return None
        with self.lock:
            records = self.replays.get(_key(tool, arguments))
            if not records:
                return None
            return (records.pop(0).result,)

    def load(self, paused: PausedRun) -> None:
        """Take over the decisions and the work record of a paused run."""
        with self.lock:
            self.denied.update(paused.denied)
            self.completed.extend(paused.completed)
            for rec in paused.completed:
                if rec.replayable:
                    self.replays.setdefault(_key(rec.tool, rec.arguments), []).append(rec)

    # --- pause ----------------------------------------------------------------------------------------

    def paused_run(self, node: ApprovalNode) -> PausedRun:
        """The serializable pause of `node` (called when its outcome is awaiting_approval)."""
        policy = next((p for p in self.policies(node)), None)
        try:
            limits = node.budget.model_dump(mode="json", exclude={"approve", "scope"}, exclude_defaults=True)
        except Exception:  # noqa: BLE001
            limits = {}
        with self.lock:
            completed = list(self.completed)
            pending = self.pending
            denied = sorted(self.denied)
        return trust.seal(PausedRun(
            run_name=node.name,
            pending=pending,
            usage=node.usage(),
            budget=limits,
            policy=policy,
            completed=completed,
            state=_jsonable(node.saved_state),
            tools_requested=dict(node.tools_requested),
            tools_executed=dict(node.tools_executed),
            pending_tools={k: v for k, v in node.pending_tools.items() if v > 0},
            denied=denied,
            trace_id=node.trace_id,
            span_id=node.span_id,
            paused_at=time.time(),
            detail=node.stop_state[2] if node.stop_state else "",
        ))


# --- resume -----------------------------------------------------------------------------------------------


# --- hooks for framework integrations ----------------------------------------------------------------------


# --- helpers ------------------------------------------------------------------------------------------------


def describe_call(tool: str, arguments: Any) -> str:
    """A tool call as stop details name it: its argument signature, or with content capture, its arguments."""
    return _describe(tool, arguments, config.get().capture_content)



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
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import to_jsonable_python

from . import budget as _budget
from . import semconv as sc
from .budget import Budget, StopReason, Usage, plural
from .run import Run, canonical_arguments, current_run

if TYPE_CHECKING:
    from .run import RunNode

log = logging.getLogger(__name__)

#: (tool name, arguments as a dict) -> True, or an operation name, when the call needs approval.
Predicate = Callable[[str, dict[str, Any]], Any]

#: Argument names whose value is shown as the target of a pending call (first one present wins).
TARGET_KEYS = ("target", "to", "recipient", "recipients", "remote", "branch", "repo", "url", "path", "table")


class ApprovalPolicy(BaseModel):
    """Which tool calls need a person's yes. A call needs approval when its tool is in `tools` or in
    `operations`, or when `when(tool, arguments)` says so.

    An *operation* names what a call does, whatever tool does it: `operations={"push": ["git_push",
    "gh_push"]}`, or `when` returning "push" for `run_shell` with a `git push` command. A denied operation stays
    denied for the whole run: asking for it again, through any tool, ends the run with `denied`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    tools: tuple[str, ...] = ()
    """Tool names that need approval; each is its own operation."""
    operations: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Operation name -> the tools that perform it (give a dict); all need approval, a denial covers all."""
    when: Predicate | None = Field(default=None, exclude=True)
    """A predicate on (tool, arguments): True, or an operation name, when the call needs approval. Not
    serialized: pass the budget again to `resume` in a new process to keep it."""
    alternative: str | None = None
    """What the run does after a rejection, told to the model as the rejected call's result (e.g. "save a
    draft with save_draft instead"). None: a rejection ends the run with `denied`."""

    @field_validator("tools", mode="before")
    @classmethod
    def _tools(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    @field_validator("operations", mode="before")
    @classmethod
    def _operations(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return tuple((op, (tools,) if isinstance(tools, str) else tuple(tools)) for op, tools in value.items())
        return value

    @classmethod
    def coerce(cls, value: Any) -> ApprovalPolicy | None:
        """A policy from what `Budget(approve=...)` accepts: a policy, tool names, a predicate or a dict."""
        if value is None or isinstance(value, ApprovalPolicy):
            return value
        if isinstance(value, str):
            return cls(tools=(value,))
        if isinstance(value, Mapping):
            return cls.model_validate(value)
        if callable(value):
            return cls(when=value)
        if isinstance(value, Iterable):
            return cls(tools=tuple(value))
        raise TypeError(f"approve= takes tool names, a predicate or an ApprovalPolicy, not {type(value).__name__}")

    def operation(self, tool: str, arguments: Any) -> str | None:
        """The operation a call performs when it needs approval, else None."""
        for op, names in self.operations:
            if tool in names:
                return op
        if tool in self.tools:
            return tool
        if self.when is not None:
            try:
                verdict = self.when(tool, _as_dict(arguments))
            except Exception:  # noqa: BLE001 - a broken predicate fails closed: ask a person
                log.warning("otel-budget: the approval predicate failed for %s; asking for approval", tool,
                            exc_info=True)
                return tool
            if isinstance(verdict, str) and verdict:
                return verdict
            if verdict:
                return tool
        return None


class PendingCall(BaseModel):
    """What a paused run waits on: a tool call that needs approval (`kind` "tool"), or a limit the run reached
    under `Budget(on_limit="pause")` (`kind` "limit", with the limit and the numbers)."""

    kind: Literal["tool", "limit"] = "tool"
    tool: str = ""
    arguments: Any = None
    """As the model or the code gave them (a dict, or the raw JSON text)."""
    call_id: str | None = None
    """The model's tool call id, when the model asked for it; answer the call with this id after a resume."""
    operation: str = ""
    target: str | None = None
    """What the call acts on (a recipient, a remote, a path), when its arguments name it."""
    limit: str | None = None
    """For kind "limit": the Budget field reached, e.g. `max_usd`."""
    used: float | None = None
    """For kind "limit": what the run had used of it (seconds for `max_seconds`)."""
    cap: float | None = None
    """For kind "limit": the limit's value when the run paused."""

    def describe(self) -> str:
        if self.kind == "limit":
            return f"more than {self.limit}={self.cap:g}" if self.cap is not None else f"more than {self.limit}"
        return f"{self.tool}({_short(self.arguments)})"


class ToolRecord(BaseModel):
    """A tool call that ran before the pause, with its result when that is plain JSON."""

    tool: str
    arguments: Any = None
    result: Any = None
    replayable: bool = True
    """False when the result could not be kept as JSON; such a call is then not answered from the record."""


class PausedRun(BaseModel):
    """A run paused for approval: the pending call, the work done, the quota used. JSON round trip:
    `paused.model_dump_json()` / `PausedRun.model_validate_json(text)`."""

    model_config = ConfigDict(extra="ignore")

    version: int = 1
    run_name: str
    pending: PendingCall | None = None
    usage: Usage = Field(default_factory=Usage)
    """The quota consumed before the pause; `seconds` is run time, the wait for a person is not in it."""
    budget: dict[str, Any] = Field(default_factory=dict)
    """The run's limits (Budget fields), to resume with when no budget is given."""
    policy: ApprovalPolicy | None = None
    completed: list[ToolRecord] = Field(default_factory=list)
    """Tool calls that ran before the pause (through `@tool`); a resume answers them from here, once each."""
    state: Any = None
    """What the code saved with `run.checkpoint(...)`, as JSON (e.g. the messages so far)."""
    tools_requested: dict[str, int] = Field(default_factory=dict)
    tools_executed: dict[str, int] = Field(default_factory=dict)
    pending_tools: dict[str, int] = Field(default_factory=dict)
    """Tool calls the model asked for that have not run yet (already counted as tool calls)."""
    denied: list[str] = Field(default_factory=list)
    """Operations a person denied earlier in this run."""
    trace_id: str | None = None
    span_id: str | None = None
    """The paused run span: the resumed run span is its child, in the same trace."""
    paused_at: float = 0.0
    """Unix time of the pause."""
    detail: str = ""

    def make_budget(self) -> Budget:
        """The budget the run had (the policy's predicate, not serializable, is not in it)."""
        return Budget(**self.budget, approve=self.policy)

    def rejection_message(self) -> str:
        """The text to give the model as the result of the rejected call."""
        what = self.pending.describe() if self.pending is not None else "the call"
        text = f"A person denied {what}. Do not try it again, by this or any other tool."
        if self.policy is not None and self.policy.alternative:
            text += f" Instead: {self.policy.alternative}"
        return text


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
    def policies(node: RunNode) -> list[ApprovalPolicy]:
        return [p for n in node.chain if isinstance(p := n.budget.approve, ApprovalPolicy)]  # coerced on validation

    def operation(self, node: RunNode, tool: str, arguments: Any) -> str | None:
        for policy in self.policies(node):
            op = policy.operation(tool, arguments)
            if op is not None:
                return op
        return None

    def needs_approval(self, node: RunNode, tool: str, arguments: Any) -> bool:
        """Whether this call would pause (or be refused) now; consumes nothing."""
        op = self.operation(node, tool, arguments)
        if op is None:
            return False
        with self.lock:
            return op in self.denied or "execute" not in self.grants.get(_key(tool, arguments), ())

    def on_request(self, node: RunNode, tool: str, arguments: Any, call_id: str | None) -> None:
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
                stop = (StopReason.AWAITING_APPROVAL, f"the model asked for {_describe(tool, arguments)}, which "
                        "needs a person's approval; the run paused before it ran.")
        if node.stop_state is None:
            node.stop_state = (stop[0], None, stop[1])

    def on_execute(self, node: RunNode, tool: str, arguments: Any) -> None:
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
                    f"the tool {_describe(tool, arguments)} needs a person's approval; it was not run."
                )
        raise node.stop(reason, None, detail)

    def grant(self, call: PendingCall) -> None:
        """Approve exactly this tool with these arguments: one model request and one execution."""
        with self.lock:
            self.grants[_key(call.tool, call.arguments)] = {"request", "execute"}

    def deny(self, operation: str) -> None:
        with self.lock:
            self.denied.add(operation)

    def decide(self, node: RunNode, call: PendingCall, approved: bool | None) -> None:
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
            node.stop_state = (StopReason.DENIED, None, f"a person denied {call.describe()}; the run ended there.")

    @staticmethod
    def _decide_limit(node: RunNode, call: PendingCall, approved: bool | None) -> None:
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

    def paused_run(self, node: RunNode) -> PausedRun:
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
        return PausedRun(
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
        )


# --- resume -----------------------------------------------------------------------------------------------


def resume(
    paused: PausedRun | str | Mapping[str, Any],
    approved: bool | None,
    *,
    budget: Budget | None = None,
    by: str | None = None,
) -> ResumedRun:
    """Go on with a paused run after a person's decision: `with otel_budget.resume(paused, approved=True) as run:`.

    The run keeps the quota it used (a run paused at 20 of 25 steps has 5 left), its trace (the new run span is
    a child of the paused one) and its decisions. Approval covers exactly the pending tool with the same
    arguments, once; a rejection ends the run with `denied`, or, when the policy names an `alternative`, goes
    on with `run.rejection` as the text to answer the call with. `budget` replaces the saved limits (pass it
    to keep a policy's `when` predicate across processes); time spent waiting for the decision is not run time.
    `approved=None` (a framework resumed without a decision): nothing is granted or denied, the call pauses again.
    A run paused at a limit (`Budget(on_limit="pause")`, pending kind "limit") goes on under `budget`'s limits with
    the quota used counted, so only larger limits let it send more; a rejection ends it with the limit's reason.
    """
    if not isinstance(paused, PausedRun):
        try:
            paused = PausedRun.model_validate_json(paused) if isinstance(paused, str) else PausedRun.model_validate(
                paused)
        except ValidationError as exc:
            given = f"{paused[:40]!r}" if isinstance(paused, str) else type(paused).__name__
            raise ValueError(
                f"resume() needs the paused run: run.outcome.paused, or its JSON (paused.model_dump_json()); "
                f"{given} is not that ({plural(exc.error_count(), 'problem')}; the first: {exc.errors()[0]['msg']})"
            ) from None
    if budget is None:
        budget = paused.make_budget()
    elif budget.approve is None and paused.policy is not None:
        budget = budget.model_copy(update={"approve": paused.policy})
    if "on_limit" not in budget.model_fields_set and paused.budget.get("on_limit") == "pause":
        budget = budget.model_copy(update={"on_limit": "pause"})  # a run that pauses at limits keeps doing so
    return ResumedRun(paused, approved, budget, by)


class ResumedRun(Run):
    """A run that goes on from a `PausedRun` (see `resume`)."""

    def __init__(self, paused: PausedRun, approved: bool | None, budget: Budget, by: str | None) -> None:
        super().__init__(paused.run_name, budget)
        self.resumed_from = paused
        self.approved = approved
        self.by = by

    @property
    def state(self) -> Any:
        """What the code saved with `run.checkpoint(...)` before the pause."""
        return self.resumed_from.state

    @property
    def pending(self) -> PendingCall | None:
        return self.resumed_from.pending

    @property
    def rejection(self) -> str | None:
        """After a rejection: the text to answer the rejected call with (None when approved)."""
        return self.resumed_from.rejection_message() if self.approved is False else None

    def _prepare(self, node: RunNode) -> dict[str, Any]:
        p = self.resumed_from
        node.carry_over(p.usage)
        node.tools_requested.update(p.tools_requested)
        node.tools_executed.update(p.tools_executed)
        node.pending_tools.update(p.pending_tools)
        state = node.approval
        if state is None:
            state = node.approval = ApprovalState()
        state.load(p)
        attrs: dict[str, Any] = {}
        if self.approved is not None:
            attrs[sc.APPROVAL_DECISION] = "approved" if self.approved else "denied"
        if p.pending is not None:
            attrs[sc.APPROVAL_TOOL] = p.pending.tool if p.pending.kind == "tool" else p.pending.operation
            state.decide(node, p.pending, self.approved)
        if self.by:
            attrs[sc.APPROVAL_BY] = self.by
        if p.paused_at:
            attrs[sc.APPROVAL_WAIT_SECONDS] = max(0.0, time.time() - p.paused_at)
        node.allows()  # re-check the limits now: a run with nothing left stops before its first call
        options: dict[str, Any] = {"attributes": attrs}
        if p.trace_id and p.span_id:
            attrs[sc.RESUMED_FROM] = p.span_id
            try:
                ctx = SpanContext(int(p.trace_id, 16), int(p.span_id, 16), is_remote=True,
                                  trace_flags=TraceFlags(TraceFlags.SAMPLED))
            except ValueError:
                return options
            options["links"] = [Link(ctx)]
            if node.parent is None:
                options["context"] = trace.set_span_in_context(NonRecordingSpan(ctx))
        return options


# --- hooks for framework integrations ----------------------------------------------------------------------


def needs_approval(tool: str, arguments: Any, node: RunNode | None = None) -> bool:
    """Whether a tool call in the current run needs a person's approval now (for a framework's own
    `needs_approval` hook); consumes nothing."""
    node = node or current_run()
    if node is None or node.approval is None:
        return False
    return node.approval.needs_approval(node, tool, arguments)


def pause(tool: str, arguments: Any, call_id: str | None = None, *, state: Any = None,
          node: RunNode | None = None) -> None:
    """Mark the current run as paused on this call (a framework paused it itself, e.g. an interruption):
    the run then ends with `awaiting_approval` and `outcome.paused` carries `state` (e.g. the framework's
    serialized run state)."""
    node = node or current_run()
    if node is None:
        return
    if node.approval is None:
        node.approval = ApprovalState()
    op = node.approval.operation(node, tool, arguments) or tool
    with node.approval.lock:
        node.approval.pending = _pending(tool, arguments, call_id, op)
    if state is not None:
        node.saved_state = state
    if node.stop_state is None:
        node.stop_state = (StopReason.AWAITING_APPROVAL, None,
                           f"{_describe(tool, arguments)} needs a person's approval; the run paused before it ran.")


# --- helpers ------------------------------------------------------------------------------------------------


def _as_dict(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return {"input": arguments}
        return value if isinstance(value, dict) else {"input": value}
    return {"input": arguments}


def _key(tool: str, arguments: Any) -> str:
    return f"{tool}\x00{canonical_arguments(arguments)}"


def _jsonable(value: Any) -> Any:
    if value is None:
        return None
    try:
        return to_jsonable_python(value, fallback=repr, exclude_none=True)
    except Exception:  # noqa: BLE001
        return repr(value)


def _short(arguments: Any, limit: int = 200) -> str:
    text = canonical_arguments(arguments)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe(tool: str, arguments: Any) -> str:
    return f"{tool}({_short(arguments)})"


def _pending(tool: str, arguments: Any, call_id: str | None, op: str) -> PendingCall:
    args = _as_dict(arguments)
    target = next((str(args[k]) for k in TARGET_KEYS if args.get(k) not in (None, "")), None)
    if isinstance(arguments, str) and args != {"input": arguments}:
        arguments = args  # the model's JSON text, as the dict it encodes
    return PendingCall(tool=tool, arguments=_jsonable(arguments), call_id=call_id, operation=op, target=target)


_budget.Budget.model_rebuild(_types_namespace={"ApprovalPolicy": ApprovalPolicy})
_budget.RunOutcome.model_rebuild(_types_namespace={"PausedRun": PausedRun})

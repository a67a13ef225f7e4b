"""A paused run as data: the pending call, the tools already run, the quota used; a JSON round trip."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, ValidationError, model_validator
from pydantic_core import to_jsonable_python

from ._text import redact_keys
from .budget import Budget, Usage
from .policy import TARGET_KEYS, ApprovalPolicy, _as_dict, _short
from .signatures import arguments_signature, canonical_arguments


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
    used: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """For kind "limit": what the run had used of it (seconds for `max_seconds`)."""
    cap: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """For kind "limit": the limit's value when the run paused."""

    def describe(self, capture: bool = True) -> str:
        """`send_email({"to":"a@b.c"})`; without `capture`, the arguments' signature in place of their values."""
        if self.kind == "limit":
            return f"more than {self.limit}={self.cap:g}" if self.cap is not None else f"more than {self.limit}"
        return _describe(self.tool, self.arguments, capture)


class ToolRecord(BaseModel):
    """A tool call that ran before the pause, with its result when that is plain JSON."""

    tool: str
    arguments: Any = None
    result: Any = None
    replayable: bool = True
    """False when the result could not be kept as JSON; such a call is then not answered from the record."""


class PausedRun(BaseModel):
    """A run paused for approval: the pending call, the work done, the quota used. JSON round trip:
    `paused.model_dump_json()` / `PausedRun.model_validate_json(text)`.

    Every number is checked on the way in (whole or finite numbers >= 0; `budget` as a Budget's fields): an
    edited one is refused with an error naming the field. With a secret (`instrument(secret=...)`) it carries
    a `signature`, and `resume` refuses one edited after it was signed."""

    model_config = ConfigDict(extra="ignore")

    version: int = 1
    run_name: str
    run_id: str = ""
    """Random id of this pause; with a `RedisLedger` its quota, limits and policy are kept there under it."""
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
    tools_requested: dict[str, NonNegativeInt] = Field(default_factory=dict)
    tools_executed: dict[str, NonNegativeInt] = Field(default_factory=dict)
    pending_tools: dict[str, NonNegativeInt] = Field(default_factory=dict)
    """Tool calls the model asked for that have not run yet (already counted as tool calls)."""
    denied: list[str] = Field(default_factory=list)
    """Operations a person denied earlier in this run."""
    trace_id: str | None = None
    span_id: str | None = None
    """The paused run span: the resumed run span is its child, in the same trace."""
    paused_at: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Unix time of the pause."""
    detail: str = ""
    signature: str | None = None
    """HMAC-SHA256 of the rest (see `otel_budget.model.trust`), when a secret was configured at the pause."""

    @model_validator(mode="after")
    def _check_budget(self) -> PausedRun:
        for key in ("approve", "scope"):
            if key in self.budget:
                raise ValueError(f"budget.{key} is not kept in a paused run (the policy is `policy`); remove it")
        try:
            Budget(**self.budget)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ValueError(f"budget.{where}: {first['msg']}") from None
        return self

    def signed_content(self) -> dict[str, Any]:
        """What the signature covers: everything but the signature, as JSON."""
        return self.model_dump(mode="json", exclude={"signature"})

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


def _key(tool: str, arguments: Any) -> str:
    return f"{tool}\x00{canonical_arguments(arguments)}"


#: How deep a value kept in a pause (tool arguments, checkpointed state) may nest; deeper parts are cut (pydantic
#: cannot serialize much deeper, and walking them recursively would exhaust the stack).
MAX_DEPTH = 100
#: What stands in for the part of a value nested deeper than MAX_DEPTH.
TOO_DEEP = f"<nested deeper than {MAX_DEPTH} levels: not kept>"
#: How many values a cut copy keeps (a structure that refers to itself would otherwise unfold without end).
MAX_VALUES = 10_000
TOO_MANY = f"<more than {MAX_VALUES} values: not kept>"


def _jsonable(value: Any) -> Any:
    """`value` as plain JSON data, never raising: values JSON cannot hold become their repr, and the parts of a
    value nested deeper than MAX_DEPTH are replaced by TOO_DEEP (walked without recursion)."""
    if value is None:
        return None
    if _depth_over(value, MAX_DEPTH):
        value = _cut(value, MAX_DEPTH)
    try:
        return to_jsonable_python(value, fallback=_safe_repr, exclude_none=True)
    except Exception:  # noqa: BLE001 - e.g. an object nested deep inside a model: keep what it is
        return _safe_repr(value)


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception:  # noqa: BLE001 - a repr that fails or recurses too deep
        return f"<{type(value).__name__} that could not be shown>"


def _children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    return []


def _depth_over(value: Any, limit: int) -> bool:
    """Whether dicts and sequences in `value` nest deeper than `limit` (walked without recursion)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = _children(item)
        if children and depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _cut(value: Any, limit: int) -> Any:
    """A copy of `value` whose dicts and sequences nested deeper than `limit` are TOO_DEEP (no recursion)."""
    kept = 0

    def shell(item: Any, depth: int) -> Any:
        nonlocal kept
        kept += 1
        if kept > MAX_VALUES:
            return TOO_MANY
        if not _children(item):
            return item
        if depth >= limit:
            return TOO_DEEP
        return {} if isinstance(item, dict) else []

    root = shell(value, 0)
    stack = [(value, root, 0)]
    while stack:
        item, copy, depth = stack.pop()
        if not isinstance(copy, (dict, list)):
            continue
        pairs = item.items() if isinstance(item, dict) else enumerate(item)
        for key, child in pairs:
            sub = shell(child, depth + 1)
            if isinstance(copy, dict):
                copy[key] = sub
            else:
                copy.append(sub)
            if isinstance(sub, (dict, list)) and sub is not child:
                stack.append((child, sub, depth + 1))
    return root


def _describe(tool: str, arguments: Any, capture: bool) -> str:
    """A tool call as a stop detail names it: with content capture, `send_email({"to":"a@b.c"})` (keys redacted);
    without, `send_email(arguments 1a2b3c4d5e6f7a8b)`, the signature the tool span carries, never the values."""
    if capture:
        return redact_keys(f"{tool}({_short(arguments)})")
    return f"{tool}(arguments {arguments_signature(arguments)})"


def _pending(tool: str, arguments: Any, call_id: str | None, op: str) -> PendingCall:
    args = _as_dict(arguments)
    target = next((str(args[k]) for k in TARGET_KEYS if args.get(k) not in (None, "")), None)
    if isinstance(arguments, str) and args != {"input": arguments}:
        arguments = args  # the model's JSON text, as the dict it encodes
    return PendingCall(tool=tool, arguments=_jsonable(arguments), call_id=call_id, operation=op, target=target)

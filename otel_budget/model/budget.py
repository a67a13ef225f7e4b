"""Budget and its limits, stop reasons, prices and usage: the data a run is given and counts."""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .policy import ApprovalPolicy


class StopReason(str, enum.Enum):
    """Why a run ended. `done` is the only reason that means the work is complete."""

    DONE = "done"
    STEPS = "steps"
    TOOL_CALLS = "tool_calls"
    TIME = "time"
    TOKENS = "tokens"
    COST = "cost"
    REPEAT = "repeat"
    DEPTH = "depth"
    ERROR = "error"
    CANCELLED = "cancelled"
    AWAITING_APPROVAL = "awaiting_approval"
    DENIED = "denied"
    STALLED = "stalled"
    INCOMPLETE = "incomplete"

    def __str__(self) -> str:
        return self.value


#: Budget field -> (ledger dimension, stop reason, unit for messages).
LIMITS: dict[str, tuple[str, StopReason, str]] = {
    "max_steps": ("steps", StopReason.STEPS, "model calls"),
    "max_tool_calls": ("tool_calls", StopReason.TOOL_CALLS, "tool calls"),
    "max_seconds": ("seconds", StopReason.TIME, "seconds"),
    "max_input_tokens": ("input_tokens", StopReason.TOKENS, "input tokens"),
    "max_output_tokens": ("output_tokens", StopReason.TOKENS, "output tokens"),
    "max_total_tokens": ("total_tokens", StopReason.TOKENS, "tokens"),
    "max_usd": ("usd", StopReason.COST, "USD"),
}


def _limit_value(value: Any, field: str) -> Any:
    """A limit as given, with infinity read as unlimited (None); a bool is refused, as it is no limit."""
    if isinstance(value, bool):
        raise ValueError(f"{field}={value!r}: a bool is not a limit; give a positive number, or None for unlimited")
    if isinstance(value, float) and math.isinf(value) and value > 0:
        return None
    return value


def check_cost(value: Any, what: str) -> float:
    """A cost in US dollars as a float, or ValueError naming the value: NaN, infinite, negative and bool
    costs would switch a money cap off or make no sense."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what}={value!r} is not a number of US dollars; give a finite amount >= 0, e.g. 0.002")
    cost = float(value)
    if not math.isfinite(cost) or cost < 0:
        raise ValueError(
            f"{what}={value!r} is not a cost: give a finite amount of US dollars >= 0 (e.g. 0.002); "
            "a NaN, infinite or negative cost would switch the money cap off"
        )
    return cost


class Polls(dict[str, int]):
    """`Budget.polls`: tool name -> identical calls in a row allowed; hashable, as a Budget is."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))


class Scope(BaseModel):
    """A named budget shared by many runs (a fleet), held in the ledger store given to `instrument(ledger=...)`.

    Every run whose Budget names this scope draws from it in addition to its own limits, in this process and,
    with `RedisLedger`, in every process that uses the same Redis.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    """The scope's key in the store, e.g. "nightly-invoices"."""
    max_steps: PositiveInt | None = None
    max_tool_calls: PositiveInt | None = None
    max_input_tokens: PositiveInt | None = None
    max_output_tokens: PositiveInt | None = None
    max_total_tokens: PositiveInt | None = None
    max_usd: PositiveFloat | None = None
    window_seconds: PositiveFloat | None = None
    """Counters start anew every `window_seconds` (aligned to the epoch), e.g. 86400 for "per day"; infinity
    means never (as None)."""

    @field_validator(
        "max_steps", "max_tool_calls", "max_input_tokens", "max_output_tokens", "max_total_tokens", "max_usd",
        "window_seconds", mode="before",
    )
    @classmethod
    def _limit(cls, value: Any, info: ValidationInfo) -> Any:
        return _limit_value(value, str(info.field_name))

    def limits(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for field, (dim, _, _) in LIMITS.items():
            value = getattr(self, field, None)
            if value is not None:
                out[dim] = float(value)
        return out


class Budget(BaseModel):
    """The limits of one run tree. Every limit is optional; `None` (or infinity) means unlimited; a bool is refused.

    All limits are checked BEFORE each model call or tool call; a call that does not fit is not sent.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_steps: PositiveInt | None = None
    """Model calls in the run tree (each call, retries included, is one step)."""
    max_tool_calls: PositiveInt | None = None
    """Tool calls requested by the model or executed through `@tool`."""
    max_seconds: PositiveFloat | None = None
    """Wall-clock seconds since the run started; also bounds the timeout of a call in flight."""
    max_input_tokens: PositiveInt | None = None
    """Input tokens, cached tokens included, summed over the run tree."""
    max_output_tokens: PositiveInt | None = None
    """Output tokens, reasoning tokens included, summed over the run tree."""
    max_total_tokens: PositiveInt | None = None
    """Input plus output tokens, summed over the run tree."""
    max_usd: PositiveFloat | None = None
    """Money in US dollars, priced from the usage the API reports (plus `run.charge` and paid tools)."""
    max_repeats: PositiveInt | None = 3
    """The same tool with the same canonical arguments this many times in a row stops the run."""
    max_stalls: PositiveInt | None = 3
    """The same tool returning the same result this many times in a row, whatever its arguments, stops the run
    (`stalled`: no progress)."""
    polls: Annotated[dict[str, PositiveInt], AfterValidator(lambda v: Polls(v))] = Field(default_factory=lambda: Polls())
    """Tools that legitimately repeat (polling), e.g. `{"wait_for_ci": 20}`: for each, the number replaces
    max_repeats and max_stalls."""
    confirm_done: bool = False
    """A run ends `done` only after `run.complete()`; otherwise `incomplete`."""
    on_limit: Literal["stop", "pause"] = "stop"
    """With "pause", a call refused by a limit pauses the run (`awaiting_approval`) for a person's decision."""
    max_depth: PositiveInt | None = None
    """Nesting depth of runs: the top run has depth 1, a subagent's run depth 2, and so on."""
    near: float = Field(default=0.8, gt=0, le=1)
    """Utilization (used / limit) at which a run counts as near its cap, for metrics and alerts."""
    wrap_up: Literal["template", "model"] = "template"
    """How the wrap-up text is written: from the ledger (no call) or by one short tool-less model call."""
    auto_max_tokens: bool = True
    """Set the request's output limit to what the budget leaves when the caller set none."""
    scope: Scope | None = None
    """A shared (fleet) budget this run also draws from; see `Scope`."""
    strict: bool = False
    """Reserve one input token per UTF-8 byte of the request, so money and token caps are never exceeded at all."""
    approve: ApprovalPolicy | Sequence[str] | None = None
    """Tool calls that need a person's yes before they run: tool names (`approve=["git_push"]`) or an
    `ApprovalPolicy`. The run pauses with `awaiting_approval` before such a call; `otel_budget.resume` goes on."""

    @field_validator(
        "max_steps", "max_tool_calls", "max_seconds", "max_input_tokens", "max_output_tokens", "max_total_tokens",
        "max_usd", "max_repeats", "max_stalls", "max_depth", "near", mode="before",
    )
    @classmethod
    def _limit(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name == "near" and not isinstance(value, bool):
            return value
        return _limit_value(value, str(info.field_name))

    @field_validator("polls", mode="before")
    @classmethod
    def _polls(cls, value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ValueError(f"polls={value!r}: give a dict of tool name -> how many identical calls in a row "
                             "are allowed, e.g. polls={'wait_for_ci': 20}")
        for tool, limit in value.items():
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise ValueError(f"polls[{tool!r}]={limit!r}: give a whole number >= 1 of identical calls in a "
                                 "row, e.g. polls={'wait_for_ci': 20}")
        return value

    @field_validator("approve", mode="before")
    @classmethod
    def _approval_policy(cls, value: Any) -> Any:
        return ApprovalPolicy.coerce(value)

    @model_validator(mode="after")
    def _check_tokens(self) -> Budget:
        total = self.max_total_tokens
        if total is not None:
            for name in ("max_input_tokens", "max_output_tokens"):
                part = getattr(self, name)
                if part is not None and part > total:
                    raise ValueError(
                        f"{name}={part} is larger than max_total_tokens={total}; "
                        "lower it or raise max_total_tokens"
                    )
        return self

    def limits(self) -> dict[str, float]:
        """The ledger dimensions this budget limits, with their limits (time is the clock's, not the ledger's)."""
        out: dict[str, float] = {}
        for field, (dim, _, _) in LIMITS.items():
            value = getattr(self, field)
            if value is not None and dim != "seconds":
                out[dim] = float(value)
        return out


class Price(BaseModel):
    """Prices of one model in US dollars per million tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_per_mtok: float = Field(ge=0, allow_inf_nan=False)
    output_per_mtok: float = Field(ge=0, allow_inf_nan=False)
    cache_read_per_mtok: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Defaults to the input price."""
    cache_write_per_mtok: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Defaults to the input price."""

    def cost(self, input_tokens: int, output_tokens: int, cache_read: int = 0, cache_write: int = 0) -> float:
        """Cost of a call; `input_tokens` includes the cached ones."""
        fresh = max(0, input_tokens - cache_read - cache_write)
        read = self.input_per_mtok if self.cache_read_per_mtok is None else self.cache_read_per_mtok
        write = self.input_per_mtok if self.cache_write_per_mtok is None else self.cache_write_per_mtok
        return (
            fresh * self.input_per_mtok
            + cache_read * read
            + cache_write * write
            + output_tokens * self.output_per_mtok
        ) / 1e6


class Usage(BaseModel):
    """What a run tree consumed: whole numbers >= 0 and finite amounts >= 0 (a paused run read back from JSON
    carries one, and a NaN or negative value there would give quota back)."""

    model_calls: NonNegativeInt = 0
    tool_calls: NonNegativeInt = 0
    input_tokens: NonNegativeInt = 0
    """Includes cached tokens."""
    output_tokens: NonNegativeInt = 0
    """Includes reasoning tokens."""
    cache_read_tokens: NonNegativeInt = 0
    cache_write_tokens: NonNegativeInt = 0
    reasoning_tokens: NonNegativeInt = 0
    cost_usd: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    seconds: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    unpriced_calls: NonNegativeInt = 0

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"{info.field_name}={value!r}: a bool is not a count; give a number >= 0")
        return value

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def plural(count: int, noun: str) -> str:
    """`1 model call`, `2 model calls`, with thousands separators."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def usd(value: float, cap: float | None = None) -> str:
    """Money with as many decimals as the cap (or the value) needs to show exactly, 2 to 6: $0.80, $0.005."""
    ref = cap if cap is not None else value
    for digits in range(2, 7):
        if abs(round(ref, digits) - ref) < 1e-12:
            break
    return f"${value:,.{digits}f}"



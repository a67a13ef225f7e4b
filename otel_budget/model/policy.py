"""Which tool calls need a person's approval (ApprovalPolicy), as data a Budget carries."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .signatures import canonical_arguments

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


def _as_dict(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):  # not JSON, or nested too deep to parse: the text itself
            return {"input": arguments}
        return value if isinstance(value, dict) else {"input": value}
    return {"input": arguments}


def _short(arguments: Any, limit: int = 200) -> str:
    text = canonical_arguments(arguments)
    return text if len(text) <= limit else text[: limit - 3] + "..."

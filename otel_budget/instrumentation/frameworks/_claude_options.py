"""How a Claude Agent SDK session is configured for its budget: the CLI pointed at the gateway (also through
its `--settings`), our hooks first, and `max_budget_usd` at what the budget leaves."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from ...core import ledger as lg
from ...core.run import RunNode
from ._claude_gateway import gateway
from ._claude_session import Session

log = logging.getLogger(__name__)

#: The model named on a refusal when the options name none.
DEFAULT_MODEL = "claude-sonnet-4-5"
_ENV_SESSION = "OTEL_BUDGET_SESSION"
_ENV_BASE_URL = "ANTHROPIC_BASE_URL"
_DEFAULT_UPSTREAM = "https://api.anthropic.com"
_OTHER_PROVIDERS = ("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY")


def has_session(options: Any) -> bool:
    """Whether these options already point the CLI at a session's gateway (the session is metered already)."""
    return _ENV_SESSION in (options.env or {})


def configure(options: Any, node: RunNode) -> tuple[Any, Session]:
    """A copy of the options with the CLI pointed at the gateway, our hooks, and `max_budget_usd` from the budget."""
    from claude_agent_sdk import HookMatcher

    env = dict(options.env or {})
    upstream = env.get(_ENV_BASE_URL) or os.environ.get(_ENV_BASE_URL) or _DEFAULT_UPSTREAM
    for flag in _OTHER_PROVIDERS:
        if str(env.get(flag, os.environ.get(flag, ""))).lower() not in ("", "0", "false"):
            log.warning("otel-budget: with %s, Claude Code does not send its model requests through "
                        "ANTHROPIC_BASE_URL, so the budget cannot check them before they are sent", flag)
    session = Session(node, str(options.model or DEFAULT_MODEL), upstream)
    env[_ENV_BASE_URL] = gateway().add(session.id, session)
    env[_ENV_SESSION] = session.id
    for key in ("NO_PROXY", "no_proxy"):  # the gateway is on loopback: never through an HTTP proxy
        current = env.get(key, os.environ.get(key, ""))
        env[key] = ",".join(p for p in (current, "127.0.0.1", "localhost") if p)
    hooks = {event: list(matchers) for event, matchers in (options.hooks or {}).items()}
    ours = {"PreToolUse": session.on_tool, "SubagentStart": session.on_subagent_start,
            "SubagentStop": session.on_subagent_stop}
    for event, hook in ours.items():  # ours first, before the user's
        hooks.setdefault(event, []).insert(0, HookMatcher(hooks=[hook]))  # type: ignore[list-item]
    changes: dict[str, Any] = {"env": env, "hooks": hooks, "settings": _settings(options, env[_ENV_BASE_URL])}
    usd_left = _usd_left(node)
    if usd_left is not None:
        current = options.max_budget_usd
        changes["max_budget_usd"] = usd_left if current is None else min(current, usd_left)
    try:
        return dataclasses.replace(options, **changes), session
    except Exception:
        session.close()
        raise


def _settings(options: Any, base_url: str) -> str | None:
    """The `--settings` value with the gateway as `env.ANTHROPIC_BASE_URL`: settings given on the command line win
    over the user's and the project's settings files, whose `env` would otherwise route the CLI around the gate."""
    given = options.settings
    try:
        loaded: Any = {}
        if given is not None and given.strip():
            text = given.strip()
            if not (text.startswith("{") and text.endswith("}")):
                text = (Path(options.cwd or "") / text).read_text(encoding="utf-8-sig")
            loaded = json.loads(text)
        if not isinstance(loaded, dict):
            raise ValueError("the settings are not a JSON object")
    except (OSError, ValueError) as exc:
        log.warning("otel-budget: could not read the Claude Code settings (%s); the CLI's settings files may route "
                    "its model requests around the budget's gateway", exc)
        return given
    env = loaded.get("env")
    return json.dumps({**loaded, "env": {**(env if isinstance(env, dict) else {}), _ENV_BASE_URL: base_url}})


def _usd_left(node: RunNode) -> float | None:
    room = lg.headroom(node.accounts, "usd")
    return None if room == math.inf else max(0.0, room)


__all__ = ["DEFAULT_MODEL", "configure", "has_session"]

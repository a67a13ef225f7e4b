"""How a Claude Agent SDK session is configured for its budget: the CLI pointed at the gateway, our hooks first,
and `max_budget_usd` at what the budget leaves.

The gateway's route and the session's key reach the CLI through its environment (`ANTHROPIC_BASE_URL`, and
`ANTHROPIC_CUSTOM_HEADERS`, which the CLI sends as headers on every API request) and through a settings file
created 0600 in a 0700 directory (`--settings PATH`: settings given there win over the user's and the project's
settings files, whose `env` would otherwise route the CLI around the gate). Never on the command line, which every
local user can read in /proc/PID/cmdline.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ...core import ledger as lg
from ...core.run import RunNode
from ._claude_gateway import gateway
from ._claude_http import SECRET_HEADER
from ._claude_session import Session

log = logging.getLogger(__name__)

#: The model named on a refusal when the options name none.
DEFAULT_MODEL = "claude-sonnet-4-5"
_ENV_SESSION = "OTEL_BUDGET_SESSION"
_ENV_BASE_URL = "ANTHROPIC_BASE_URL"
_ENV_HEADERS = "ANTHROPIC_CUSTOM_HEADERS"
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
    env[_ENV_HEADERS] = _with_key(env.get(_ENV_HEADERS, os.environ.get(_ENV_HEADERS, "")), session.secret)
    for key in ("NO_PROXY", "no_proxy"):  # the gateway is on loopback: never through an HTTP proxy
        current = env.get(key, os.environ.get(key, ""))
        env[key] = ",".join(p for p in (current, "127.0.0.1", "localhost") if p)
    hooks = {event: list(matchers) for event, matchers in (options.hooks or {}).items()}
    ours = {"PreToolUse": session.on_tool, "SubagentStart": session.on_subagent_start,
            "SubagentStop": session.on_subagent_stop}
    for event, hook in ours.items():  # ours first, before the user's
        hooks.setdefault(event, []).insert(0, HookMatcher(hooks=[hook]))  # type: ignore[list-item]
    changes: dict[str, Any] = {"env": env, "hooks": hooks}
    usd_left = _usd_left(node)
    if usd_left is not None:
        current = options.max_budget_usd
        changes["max_budget_usd"] = usd_left if current is None else min(current, usd_left)
    try:
        settings = _settings(options, env, session.secret)
        if settings is not None:
            # The SDK would read a settings file back onto the command line to merge `sandbox` into it: we do.
            changes["settings"], session.files = settings
            changes["sandbox"] = None
        return dataclasses.replace(options, **changes), session
    except Exception:
        session.close()
        raise


def _with_key(headers: str, secret: str) -> str:
    """`ANTHROPIC_CUSTOM_HEADERS` ("Name: value" lines) with the session's key added."""
    lines = [line for line in str(headers).splitlines() if line.strip()
             and line.partition(":")[0].strip().lower() != SECRET_HEADER]
    return "\n".join([*lines, f"{SECRET_HEADER}: {secret}"])


def _settings(options: Any, env: dict[str, str], secret: str) -> tuple[str, str] | None:
    """The path of a settings file (and its directory) made of the given settings, with the gateway's URL and the
    session's key in its `env`, and the options' `sandbox`; None when the given settings cannot be read."""
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
        return None
    given_env = loaded.get("env")
    given_env = given_env if isinstance(given_env, dict) else {}
    ours = {_ENV_BASE_URL: env[_ENV_BASE_URL],
            _ENV_HEADERS: _with_key(str(given_env.get(_ENV_HEADERS) or env[_ENV_HEADERS]), secret)}
    settings = {**loaded, "env": {**given_env, **ours}}
    if options.sandbox is not None:
        settings["sandbox"] = options.sandbox
    directory = tempfile.mkdtemp(prefix="otel-budget-claude-")  # 0700
    path = os.path.join(directory, "settings.json")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(settings, file)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return path, directory


def _usd_left(node: RunNode) -> float | None:
    room = lg.headroom(node.accounts, "usd")
    return None if room == math.inf else max(0.0, room)


__all__ = ["DEFAULT_MODEL", "configure", "has_session"]

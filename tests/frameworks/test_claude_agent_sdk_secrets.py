"""The Claude Agent SDK's gateway secrets, end to end through the real `query()` and the bundled Claude Code CLI:
the gateway's route and the session's key reach the CLI through its environment and a 0600 settings file, and
never through its command line (/proc/PID/cmdline, readable by every local user)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest

pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import ClaudeAgentOptions, create_sdk_mcp_server, query, tool  # noqa: E402

import otel_budget  # noqa: E402
from otel_budget.instrumentation.frameworks._claude_gateway import Gateway  # noqa: E402
from otel_budget.instrumentation.frameworks._claude_session import Session  # noqa: E402
from otel_budget.instrumentation.frameworks.claude_agent_sdk import outcome  # noqa: E402
from otel_budget.testing import RecordedRequest, ScriptedLLM, ToolCall, Turn  # noqa: E402

MODEL = "claude-sonnet-4-5"
LOOKUP = "mcp__docs__lookup"


@tool("lookup", "Look something up", {"q": str})
async def lookup(args: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "nothing yet"}]}


def options(llm: ScriptedLLM, home: Path, **kwargs: Any) -> ClaudeAgentOptions:
    """The CLI offline: its API at ScriptedLLM, a clean HOME, no non-essential traffic, no settings files."""
    env = {
        "ANTHROPIC_BASE_URL": llm.anthropic_base_url, "ANTHROPIC_API_KEY": "test", "HOME": str(home),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
    }
    return ClaudeAgentOptions(mcp_servers={"docs": create_sdk_mcp_server("docs", tools=[lookup])},
                              allowed_tools=[LOOKUP], model=MODEL, env=env, cwd=str(home), setting_sources=[], **kwargs)


def collect(prompt: str, opts: ClaudeAgentOptions) -> list[Any]:
    async def go() -> list[Any]:
        return [message async for message in query(prompt=prompt, options=opts)]

    return anyio.run(go)


def _descendants() -> list[int]:
    """This process's descendants (the CLI the SDK started, and its children)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [os.getpid()]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:
        return b""


def test_the_route_and_the_key_reach_the_cli_through_its_environment_never_its_command_line(
    scripted_llm: ScriptedLLM, otel: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[bytes, bytes]] = []  # (cmdline, environ) of every descendant while the CLI runs
    admitted: list[dict[str, str]] = []  # the headers of each request the gateway admitted

    def responder(request: RecordedRequest) -> Turn | None:
        seen.extend((_read(f"/proc/{pid}/cmdline"), _read(f"/proc/{pid}/environ")) for pid in _descendants())
        return None

    arrived: list[dict[bytes, bytes]] = []  # the headers of each request as it reached the gateway
    original_check, original_admit = Gateway._check, Session.admit

    def check(self: Gateway, request: Any) -> Any:
        arrived.append(dict(request.headers))
        return original_check(self, request)

    def admit(self: Session, headers: dict[str, str], body: bytes) -> Any:
        admitted.append(dict(headers))
        return original_admit(self, headers, body)

    monkeypatch.setattr(Gateway, "_check", check)
    monkeypatch.setattr(Session, "admit", admit)
    scripted_llm.responder = responder
    scripted_llm.script(Turn(tool_calls=[ToolCall(LOOKUP, {"q": "a"})], input_tokens=100, output_tokens=10),
                        Turn(text="Found it.", input_tokens=120, output_tokens=5))
    opts = options(scripted_llm, tmp_path, settings=json.dumps({"env": {"MY_SETTING": "1"}}))
    opts.otel_budget = otel_budget.Budget(max_steps=3)  # type: ignore[attr-defined]
    messages = collect("find it", opts)
    done = outcome(messages[-1])
    assert done is not None and done.stop_reason == "done" and messages[-1].result == "Found it."
    assert len(scripted_llm.requests) == 2 == done.usage.model_calls
    # The CLI's environment holds the gateway's URL (its route) ...
    cli_env = [dict(line.split(b"=", 1) for line in environ.split(b"\0") if b"=" in line)
               for _, environ in seen if b"OTEL_BUDGET_SESSION" in environ]
    assert cli_env
    base_url = cli_env[0][b"ANTHROPIC_BASE_URL"].decode()
    route = urlsplit(base_url).path.strip("/")
    assert base_url.startswith("http://127.0.0.1:") and route
    # ... which is on no command line, which every local user can read ...
    cmdlines = b"\n".join(cmdline for cmdline, _ in seen)
    assert b"--settings" in cmdlines  # the settings still reach the CLI, as a file
    assert route.encode() not in cmdlines
    # ... and the session's key, which is on no command line either ...
    header, _, key = cli_env[0][b"ANTHROPIC_CUSTOM_HEADERS"].decode().partition(": ")
    assert header == "x-otel-budget-key" and len(key) >= 32 and key.encode() not in cmdlines
    # ... and which reached the gateway on every request the CLI made, and was not passed on to the API.
    messages_requests = [h for h in arrived if h.get(b"x-otel-budget-key") is not None]
    assert arrived and all(h.get(b"x-otel-budget-key") == key.encode() for h in arrived)
    assert len(messages_requests) >= 2 and len(admitted) == 2
    assert all(h.get("x-otel-budget-key") is None for h in admitted)
    assert all("x-otel-budget-key" not in r.headers for r in scripted_llm.requests)
    # The settings file is gone with the session.
    assert all(not Path(arg.decode()).exists() for arg in cmdlines.split(b"\0") if b"otel-budget-claude-" in arg)


def test_the_options_own_settings_and_sandbox_go_into_the_0600_file_and_the_command_line_holds_neither_secret(
    tmp_path: Path, otel: Any
) -> None:
    from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport

    from otel_budget.instrumentation.frameworks._claude_options import configure

    opts = ClaudeAgentOptions(env={"ANTHROPIC_CUSTOM_HEADERS": "X-Team: blue"}, cwd=str(tmp_path),
                              settings=json.dumps({"env": {"MY_SETTING": "1"}, "model": "opus"}),
                              sandbox={"enabled": True})
    with otel_budget.run("settings") as run:
        configured, session = configure(opts, run.node)
        try:
            transport = SubprocessCLITransport("hi", configured)
            transport._cli_path = "claude"
            argv = "\0".join(transport._build_command())  # what the SDK would start the CLI with
            path = Path(configured.settings)
            modes = (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777)
            written = json.loads(path.read_text())
        finally:
            session.close()
    route = urlsplit(configured.env["ANTHROPIC_BASE_URL"]).path.strip("/")
    assert route not in argv and session.secret not in argv and f"--settings\0{path}" in argv
    assert modes == (0o600, 0o700) and not path.parent.exists()  # removed with the session
    assert written["sandbox"] == {"enabled": True} and configured.sandbox is None
    assert written["model"] == "opus" and written["env"]["MY_SETTING"] == "1"
    assert written["env"]["ANTHROPIC_BASE_URL"] == configured.env["ANTHROPIC_BASE_URL"]
    key_line = f"x-otel-budget-key: {session.secret}"
    assert configured.env["ANTHROPIC_CUSTOM_HEADERS"].splitlines() == ["X-Team: blue", key_line]
    assert written["env"]["ANTHROPIC_CUSTOM_HEADERS"].splitlines() == ["X-Team: blue", key_line]

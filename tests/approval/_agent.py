"""A hand-written tool loop over the real openai SDK, with a gated `git_push`; shared by the tests and the
child process that resumes a paused run from JSON.

Run as a script: `python _agent.py BASE_URL PAUSED_JSON_FILE approve|deny SPANS_FILE` resumes the paused run
against ScriptedLLM, writes its spans to SPANS_FILE (FileSpanExporter) and prints {"outcome": ..., "executed": ...} as JSON.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import openai

import otel_budget

EXECUTED: list[tuple[str, dict[str, Any]]] = []
"""Every real execution of a tool body (replayed or refused calls never land here)."""


@otel_budget.tool
def read_file(path: str) -> str:
    EXECUTED.append(("read_file", {"path": path}))
    return f"contents of {path}"


@otel_budget.tool
def git_push(remote: str, branch: str) -> str:
    EXECUTED.append(("git_push", {"remote": remote, "branch": branch}))
    return f"pushed {branch} to {remote}"


@otel_budget.tool
def gh_push(repo: str, branch: str) -> str:
    EXECUTED.append(("gh_push", {"repo": repo, "branch": branch}))
    return f"pushed {branch} to {repo}"


TOOLS = {"read_file": read_file, "git_push": git_push, "gh_push": gh_push}
SPECS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}
    for name in TOOLS
]


def answer_open_calls(messages: list[dict[str, Any]], rejected: tuple[str | None, str] | None = None) -> None:
    """Run the tool calls of the last assistant message that have no result yet (all through @tool)."""
    last = next(m for m in reversed(messages) if m["role"] == "assistant")
    answered = {m.get("tool_call_id") for m in messages if m["role"] == "tool"}
    for tc in last.get("tool_calls") or ():
        if tc["id"] in answered:
            continue
        if rejected is not None and tc["id"] == rejected[0]:
            result = rejected[1]
        else:
            result = TOOLS[tc["function"]["name"]](**json.loads(tc["function"]["arguments"]))
        messages.append({"role": "tool", "tool_call_id": tc["id"], "content": result})


def loop(client: openai.OpenAI, run: otel_budget.Run, messages: list[dict[str, Any]]) -> str | None:
    """The plain agent loop: ask, run the tools asked for, until the model answers or the run says stop."""
    while run.allows():
        reply = client.chat.completions.create(model="gpt-4o", messages=messages, tools=SPECS)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content
        answer_open_calls(messages)
    return None


def start(client: openai.OpenAI, budget: otel_budget.Budget, name: str = "release") -> otel_budget.Run:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "ship the release"}]
    with otel_budget.run(name, budget=budget) as run:
        run.checkpoint(messages)
        loop(client, run, messages)
    return run


def go_on(client: openai.OpenAI, paused: Any, approved: bool, **kwargs: Any) -> otel_budget.Run:
    """Resume: answer the calls left open at the pause (the approved one runs, a rejected one gets the
    rejection text), then keep looping."""
    with otel_budget.resume(paused, approved=approved, **kwargs) as run:
        messages = run.state
        run.checkpoint(messages)
        if run.allows():
            pending = run.pending
            answer_open_calls(messages, None if approved else (pending.call_id, run.rejection))
            loop(client, run, messages)
    return run


def main(argv: list[str]) -> int:
    base_url, path, decision, spans_path = argv
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(otel_budget.FileSpanExporter(spans_path)))
    otel_budget.instrument(tracer_provider=provider)
    client = openai.OpenAI(base_url=base_url, api_key="test", max_retries=0)
    with open(path, encoding="utf-8") as fh:
        paused = otel_budget.PausedRun.model_validate_json(fh.read())
    run = go_on(client, paused, decision == "approve")
    assert run.outcome is not None
    provider.shutdown()
    print(json.dumps({"outcome": run.outcome.model_dump(mode="json"), "executed": EXECUTED}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

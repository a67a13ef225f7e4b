"""How much of a money cap a run can use (spent / cap when it stops), with and without `Budget(strict=True)`.

A realistic agent loop: the real openai SDK against ScriptedLLM, a system prompt and two tool definitions, one
tool call per turn whose JSON result (0.8 to 4 kB) joins a growing message history. The server reports token
counts modelled on a BPE tokenizer (text 4 characters per token, JSON 3, 4 tokens of framing per message), not
the library's estimate. The run goes on until the budget refuses the next call; "usable" is what the server's
usage, priced at gpt-4o's rates, says was spent, divided by the cap. A storm of 50 concurrent calls is measured
too (every call but one reserves its worst case while others are in flight).

Run: `.venv/bin/python bench/usable_cap.py` (about 20 seconds). It replaces its own section of bench/results.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import math
import random
import statistics
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai

import otel_budget as ob
from otel_budget.core import config
from otel_budget.testing import RecordedRequest, ScriptedLLM, ToolCall, Turn

MODEL = "gpt-4o"
SYSTEM = ("You are a careful research agent. Use the tools to find facts, cite every source you use, and stop "
          "when the question is answered. " * 8)
TOOLS = [
    {"type": "function", "function": {
        "name": "search", "description": "Search the web; returns the top results as JSON.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}},
    {"type": "function", "function": {
        "name": "read_page", "description": "Read one page; returns its text and links as JSON.",
        "parameters": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}}},
]
SECTION = "## Usable cap"


def realistic_tokens(body: dict) -> int:
    """Prompt tokens as a BPE tokenizer would count them, roughly: text 4 chars/token, JSON 3, framing per message."""
    tokens = 3
    for message in body.get("messages") or ():
        tokens += 4
        content = message.get("content") or ""
        if not isinstance(content, str):
            content = json.dumps(content)
        tokens += math.ceil(len(content) / (3.0 if message.get("role") == "tool" else 4.0))
        for call in message.get("tool_calls") or ():
            tokens += 8 + math.ceil(len(call["function"]["arguments"]) / 3.0)
    for tool in body.get("tools") or ():
        tokens += math.ceil(len(json.dumps(tool)) / 4.0)
    return tokens


class Agent:
    """The scripted model side: a tool call per turn, realistic usage; spend added up from what it reported."""

    def __init__(self, llm: ScriptedLLM, seed: int, delay: float = 0.0) -> None:
        self.rng = random.Random(seed)
        self.reported: list[tuple[int, int]] = []
        self.lock = threading.Lock()
        self.delay = delay
        llm.responder = self.respond

    def respond(self, request: RecordedRequest) -> Turn:
        with self.lock:
            turn = len(self.reported)
            out = self.rng.randint(40, 220)
            limit = request.body.get("max_completion_tokens")
            reported_out = min(out, limit) if isinstance(limit, int) else out  # the server cuts at the limit
            self.reported.append((realistic_tokens(request.body), reported_out))
        name, key = ("search", "q") if turn % 2 == 0 else ("read_page", "url")
        text = " ".join(["noted"] * (out * 4 // 6))  # about 4 characters per output token
        return Turn(text=text, tool_calls=[ToolCall(name, {key: f"step {turn} {self.rng.random():.6f}"})],
                    input_tokens=self.reported[-1][0], output_tokens=out, delay=self.delay)

    def result(self) -> str:
        """A tool result: 0.8 to 4 kB of JSON."""
        items = [{"title": f"Result {i}", "url": f"https://example.org/{self.rng.randrange(10**6)}",
                  "snippet": " ".join(self.rng.choice(("alpha", "beta", "gamma", "delta", "epsilon", "zeta"))
                                      for _ in range(self.rng.randint(10, 40)))}
                 for i in range(self.rng.randint(3, 12))]
        return json.dumps({"results": items})

    def spent(self) -> float:
        price = config.get().prices.lookup("openai", MODEL)
        assert price is not None
        return sum(price.cost(i, o) for i, o in self.reported)


def agent_loop(client: openai.OpenAI, agent: Agent, budget: ob.Budget, max_tokens: int | None) -> ob.RunOutcome:
    messages: list[dict] = [{"role": "system", "content": SYSTEM},
                            {"role": "user", "content": "Which European capitals have more than two airports?"}]
    extra = {} if max_tokens is None else {"max_completion_tokens": max_tokens}
    with ob.run("agent", budget=budget) as run:
        while True:
            reply = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, **extra)
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls or ():
                messages.append({"role": "tool", "tool_call_id": call.id, "content": agent.result()})
    assert run.outcome is not None
    return run.outcome


def storm(client: openai.OpenAI, budget: ob.Budget, calls: int = 50) -> ob.RunOutcome:
    barrier = threading.Barrier(calls)
    prompt = "lorem ipsum dolor sit amet " * 70

    def one() -> None:
        barrier.wait()
        try:
            client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": prompt}],
                                           max_completion_tokens=200)
        except ob.BudgetExceeded:
            pass

    with ob.run("storm", budget=budget) as run, ThreadPoolExecutor(calls) as pool:
        for f in [pool.submit(contextvars.copy_context().run, one) for _ in range(calls)]:
            f.result()
    assert run.outcome is not None
    return run.outcome


def async_storm(base_url: str, budget: ob.Budget, calls: int = 50) -> ob.RunOutcome:
    prompt = "lorem ipsum dolor sit amet " * 70

    async def main() -> ob.RunOutcome:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
        async with ob.run("storm", budget=budget) as run:
            await asyncio.gather(*(client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": prompt}], max_completion_tokens=200)
                for _ in range(calls)), return_exceptions=True)
        await client.close()
        assert run.outcome is not None
        return run.outcome

    return asyncio.run(main())


def measure(seeds: int, caps: list[float]) -> list[dict]:
    rows = []
    ob.instrument()
    try:
        with ScriptedLLM() as llm:
            client = openai.OpenAI(base_url=llm.openai_base_url, api_key="x", max_retries=0)
            for cap in caps:
                for max_tokens in (1024, None):
                    for strict in (False, True):
                        usable, turns, stops = [], [], set()
                        for seed in range(seeds):
                            llm.reset()
                            agent = Agent(llm, seed)
                            outcome = agent_loop(client, agent, ob.Budget(max_usd=cap, strict=strict), max_tokens)
                            usable.append(agent.spent() / cap)
                            turns.append(len(agent.reported))
                            stops.add(str(outcome.stop_reason))
                        rows.append({"loop": "agent loop", "cap": cap, "max_tokens": max_tokens, "strict": strict,
                                     "usable": usable, "turns": turns, "stops": stops})
            for name, cap in (("threads", 0.25), ("threads", 0.10), ("asyncio tasks", 0.25), ("asyncio tasks", 0.10)):
                for strict in (False, True):
                    usable, sent, stops = [], [], set()
                    for seed in range(seeds):
                        llm.reset()
                        agent = Agent(llm, seed, delay=0.05)
                        budget = ob.Budget(max_usd=cap, strict=strict)
                        if name == "threads":
                            outcome = storm(client, budget)
                        else:
                            outcome = async_storm(llm.openai_base_url, budget)
                        usable.append(agent.spent() / cap)
                        sent.append(len(agent.reported))
                        stops.add(str(outcome.stop_reason))
                    rows.append({"loop": f"storm of 50 {name}", "cap": cap, "max_tokens": 200, "strict": strict,
                                 "usable": usable, "turns": sent, "stops": stops})
    finally:
        ob.uninstrument()
    return rows


def table(rows: list[dict], seeds: int) -> str:
    lines = [
        SECTION, "",
        f"`bench/usable_cap.py`: spent / cap when the run stops (server-reported usage priced at {MODEL}'s rates), "
        f"over {seeds} seeds; the agent loop grows its history with 0.8-4 kB JSON tool results, the model writes "
        "40-220 tokens a turn; prompt tokens as a BPE tokenizer counts them (text 4 chars/token, JSON 3).", "",
        "| workload | cap | caller's max_tokens | strict | usable: mean | min | max | calls sent (mean) | stop |",
        "|---|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        u = r["usable"]
        lines.append(
            f"| {r['loop']} | ${r['cap']:.2f} | {r['max_tokens'] or 'none (enforcer sets it)'} | "
            f"{'yes' if r['strict'] else 'no'} | {statistics.mean(u):.1%} | {min(u):.1%} | {max(u):.1%} | "
            f"{statistics.mean(r['turns']):g} | {', '.join(sorted(r['stops'])) or '-'} |"
        )
    return "\n".join(lines) + "\n"


def write_section(path: Path, text: str) -> None:
    """Replace this benchmark's section of `path` (or append it), leaving the rest as it is."""
    old = path.read_text() if path.exists() else ""
    start = old.find(SECTION)
    if start < 0:
        path.write_text(old.rstrip("\n") + "\n\n" + text if old else text)
        return
    end = old.find("\n## ", start + len(SECTION))
    path.write_text(old[:start] + text + (old[end + 1:] if end >= 0 else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("results.md"))
    args = parser.parse_args()
    text = table(measure(args.seeds, [0.25, 1.0]), args.seeds)
    print(text)
    write_section(args.out, text)


if __name__ == "__main__":
    main()

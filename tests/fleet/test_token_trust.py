"""Run tokens come from outside: a damaged one gives one clear error, an edited one cannot outspend its tree or
escape a fleet cap (the tree's record in Redis is the authority), a signed one round-trips across processes.
Counted at ScriptedLLM and in the worker process."""

from __future__ import annotations

import base64
import json
import math
import multiprocessing
from typing import Any

import openai
import pytest

import otel_budget
from otel_budget import Budget, InvalidRunState, RedisLedger, Scope
from otel_budget.fleet import propagation as prop
from otel_budget.testing import ScriptedLLM, Turn

from .redis_server import RedisServer
from .workers import attached_worker


def ask(client: openai.OpenAI) -> None:
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])


def _forge(payload: Any, signature: str = "") -> str:
    body = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")
    return f"otb1.{body}" + (f".{signature}" if signature else "")


def _edit(token: str, **changes: Any) -> str:
    """The token with its payload edited (its signature, if any, kept as it was)."""
    if not changes:
        return token
    body, _, signature = token[len("otb1."):].partition(".")
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    payload.update(changes)
    return _forge(payload, signature)


GOOD = {"v": 1, "run": "c", "tree": "run:abc:0001", "limits": {"steps": 2.0}, "scopes": []}


@pytest.mark.parametrize(("payload", "names"), [
    ([1, 2], "list"),
    ("text", "str"),
    ({**GOOD, "tree": None}, "tree"),
    ({k: v for k, v in GOOD.items() if k != "tree"}, "tree"),
    ({**GOOD, "v": 2}, "v=2"),
    ({**GOOD, "limits": [1]}, "limits"),
    ({**GOOD, "limits": {"steps": "many"}}, "limits.steps"),
    ({**GOOD, "limits": {"steps": float("nan")}}, "limits.steps"),
    ({**GOOD, "limits": {"usd": -100}}, "limits.usd"),
    ({**GOOD, "limits": {"usd": float("inf")}}, "limits.usd"),
    ({**GOOD, "limits": {"steps": 1.5}}, "limits.steps"),
    ({**GOOD, "limits": {"steps": True}}, "limits.steps"),
    ({**GOOD, "limits": {"dollars": 5}}, "limits.dollars"),
    ({**GOOD, "scopes": {"name": "x"}}, "scopes"),
    ({**GOOD, "scopes": [1]}, "scopes[0]"),
    ({**GOOD, "scopes": [{"limits": {}}]}, "scopes[0].name"),
    ({**GOOD, "scopes": [{"name": "f", "limits": {"steps": -1}}]}, "scopes[0].limits.steps"),
    ({**GOOD, "scopes": [{"name": "f", "limits": {}, "window": "daily"}]}, "scopes[0].window"),
    ({**GOOD, "deadline": "soon"}, "deadline"),
    ({**GOOD, "deadline": float("nan")}, "deadline"),
    ({**GOOD, "tp": 7}, "tp"),
    ({**GOOD, "run": {"x": 1}}, "run"),
])
def test_a_damaged_token_raises_one_clear_error_naming_the_field(payload: Any, names: str) -> None:
    token = _forge(payload)
    with pytest.raises(InvalidRunState, match=names.replace("[", r"\[").replace("]", r"\]")):
        prop.attach_run(token)
    with pytest.raises(ValueError):  # InvalidRunState is a ValueError
        prop.decode(token)


@pytest.mark.parametrize("token", ["otb1.@@@@", "otb1.", "otb1." + "W" * 7, "hello", None, 42,
                                   "otb1." + base64.urlsafe_b64encode(b"[" * 100_000).decode()])
def test_garbage_is_refused_with_the_same_error(token: Any) -> None:
    with pytest.raises(InvalidRunState, match="run token"):
        prop.attach_run(token)


def _coordinate(redis_server: RedisServer, prefix: str, llm: ScriptedLLM, oai: openai.OpenAI, budget: Budget,
                used: int, edit: dict[str, Any], calls: int = 6) -> tuple[dict, str]:
    """A coordinator that made `used` calls exports its tree; a worker process attaches with the token edited
    by `edit` and tries `calls` calls. Returns the worker's report and the exported token."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    with otel_budget.run("coordinator", budget=budget):
        for _ in range(used):
            ask(oai)
        token = prop.export_run()
        worker = ctx.Process(target=attached_worker,
                             args=(redis_server.url, prefix, llm.openai_base_url, _edit(token, **edit), calls, out))
        worker.start()
        try:
            report = out.get(timeout=90)
        finally:
            worker.join(30)
            if worker.is_alive():
                worker.kill()
    return report, token


def test_an_edited_token_cannot_outspend_its_tree_in_another_process(
    redis_server: RedisServer, prefix: str, instrumented, llm: ScriptedLLM, oai: openai.OpenAI
) -> None:
    instrumented(RedisLedger(redis_server.url, prefix=prefix))
    llm.default = Turn(text="ok", input_tokens=5, output_tokens=5)
    report, token = _coordinate(redis_server, prefix, llm, oai, Budget(max_steps=4), used=2,
                                edit={"limits": {"steps": 100.0}, "deadline": 9e9})
    # 2 steps were left; the worker's token said 100, the tree's record in Redis said 2
    assert report["sent"] == 2 and report["stop"] == "steps"
    assert len(llm.requests) == 4
    assert prop.tree_usage(token)["steps"] == 2


def test_an_edited_token_cannot_escape_a_fleet_cap(
    redis_server: RedisServer, prefix: str, instrumented, llm: ScriptedLLM, oai: openai.OpenAI
) -> None:
    instrumented(RedisLedger(redis_server.url, prefix=prefix))
    llm.default = Turn(text="ok", input_tokens=5, output_tokens=5)
    fleet = Scope(name="nightly", max_steps=2)
    report, _ = _coordinate(redis_server, prefix, llm, oai, Budget(max_steps=10, scope=fleet), used=0,
                            edit={"scopes": []})
    # the token dropped the fleet scope; the worker still drew from the one the coordinator's tree recorded
    assert report["sent"] == 2 and report["stop"] == "steps"
    assert len(llm.requests) == 2


def test_a_token_for_a_tree_redis_does_not_know_is_refused(
    ledger: RedisLedger, instrumented, llm: ScriptedLLM, oai: openai.OpenAI
) -> None:
    instrumented(ledger)
    llm.default = Turn(text="ok", input_tokens=5, output_tokens=5)
    with otel_budget.run("coordinator", budget=Budget(max_steps=6)):
        token = prop.export_run()
    forged = _edit(token, tree="run:feedfeed:0000")
    with pytest.raises(InvalidRunState, match="not recorded in the shared ledger"):
        prop.attach_run(forged)
    assert len(llm.requests) == 0
    with prop.attach_run(token, name="worker") as run:  # the real one attaches
        for _ in range(3):
            ask(oai)
    assert run.outcome is not None and run.outcome.usage.model_calls == 3 and len(llm.requests) == 3
    with prop.attach_run(_edit(token, limits={"steps": 1.0})) as narrow:  # a token can narrow its worker...
        ask(oai)
        ask(oai)
    assert narrow.outcome is not None and narrow.outcome.usage.model_calls == 1 and len(llm.requests) == 4
    with prop.attach_run(token) as rest:  # ...but not the tree: 2 steps are still left for the others
        for _ in range(4):
            ask(oai)
    assert rest.outcome is not None and rest.outcome.usage.model_calls == 2 and len(llm.requests) == 6


def test_a_signed_token_round_trips_across_processes_and_an_edited_one_is_refused(
    redis_server: RedisServer, prefix: str, instrumented, llm: ScriptedLLM, oai: openai.OpenAI, monkeypatch
) -> None:
    monkeypatch.setenv("OTEL_BUDGET_SECRET", "fleet-secret")  # the worker process inherits it
    instrumented(RedisLedger(redis_server.url, prefix=prefix))
    llm.default = Turn(text="ok", input_tokens=5, output_tokens=5)
    report, token = _coordinate(redis_server, prefix, llm, oai, Budget(max_steps=4), used=1, edit={})
    assert token.count(".") == 2  # otb1.<payload>.<signature>
    assert report["sent"] == 3 and report["stop"] == "steps"
    for edit in ({"limits": {"steps": 100.0}}, {"scopes": []}, {"run": "other"}):
        with pytest.raises(InvalidRunState, match="changed after it was signed"):
            prop.attach_run(_edit(token, **edit))
    with pytest.raises(InvalidRunState, match="not signed"):
        prop.attach_run(token.rsplit(".", 1)[0])


def test_extract_accepts_only_a_signed_token(ledger: RedisLedger, instrumented, monkeypatch) -> None:
    instrumented(ledger)  # no secret
    with otel_budget.run("coordinator", budget=Budget(max_steps=3)):
        headers = prop.inject({})
    with pytest.raises(InvalidRunState, match="only a signed run token"):
        prop.extract(headers)
    instrumented(ledger, secret="k")
    with pytest.raises(InvalidRunState, match="not signed"):
        prop.extract(headers)  # the unsigned token of before
    with otel_budget.run("coordinator", budget=Budget(max_steps=3)):
        signed = prop.inject({})
    token = prop.extract(signed)
    assert token is not None and prop.decode(token)["limits"] == {"steps": 3.0}
    body = signed["baggage"].split("otel_budget.run=")[1]
    forged = _edit(body, limits={"steps": 50.0})
    with pytest.raises(InvalidRunState, match="changed after it was signed"):
        prop.extract({"baggage": f"otel_budget.run={forged}"})
    assert prop.extract({"traceparent": signed["traceparent"]}) is None  # no baggage: nothing to read


def test_the_ledger_never_counts_a_nan_as_room() -> None:
    """What a NaN in a carried-over usage did before it was refused: the in-process ledger took it as room."""
    import threading

    from otel_budget.core import ledger as lg

    for used, limit in ((math.nan, 5.0), (0.0, math.nan), (math.nan, math.inf)):
        acc = lg.Account({"steps": limit})
        acc.used["steps"] = used
        refusal = lg.reserve([acc], {"steps": 1.0}, threading.Lock())
        assert refusal is not None and refusal.dim == "steps"

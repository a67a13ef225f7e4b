"""The shared test vectors (tests/vectors/*.json) through the Python core; js/test/vectors.test.mjs runs the same
files through the TypeScript core. A contract change that lands in one language fails the other until it follows:
the stop decision, the limit, the usage, the detail and the wrap-up text byte for byte, canonical arguments and
their signatures, and Budget validation.

A vector plays one run: `call` steps are model calls (admitted, then settled to the reported usage, then their
tool calls recorded; an admission with no tool call left says `"no_tools": true`), `tool` steps are tool executions (admitted, run, their result noted), `child` steps are a
nested run with its own steps. A refused model call ends the run (as a refused call ends an agent loop); a
refused tool call does not run and the run goes on to its next model call, which the stop refuses. An outcome
names `tool_calls_refused` when the model requested tool calls beyond max_tool_calls.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

import otel_budget
from otel_budget.core import config
from otel_budget.core.pricing import PriceBook
from otel_budget.core.wrapup import template_wrap_up
from otel_budget.fleet.redis_ledger import _encode, definition
from otel_budget.model.budget import Budget, Price
from otel_budget.model.outcome import BudgetExceeded, UnknownPriceError
from otel_budget.model.signatures import arguments_signature, canonical_arguments

VECTORS = Path(__file__).parent / "vectors"
_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _number(value: Any) -> Any:
    """JSON has no NaN or infinity: the vectors spell them as strings."""
    return _SPECIAL.get(value, value) if isinstance(value, str) else value


def _budget(spec: dict[str, Any] | None) -> Budget:
    return Budget(**{k: _number(v) for k, v in (spec or {}).items()})


def _outcome(run: Any) -> dict[str, Any]:
    node, outcome = run.node, run.outcome
    timeless = outcome.model_copy(update={"usage": outcome.usage.model_copy(update={"seconds": 0.0})})
    u = outcome.usage
    out = {
        "stop_reason": outcome.stop_reason.value,
        "limit": outcome.limit,
        "detail": outcome.detail,
        "usage": {"model_calls": u.model_calls, "tool_calls": u.tool_calls, "input_tokens": u.input_tokens,
                  "output_tokens": u.output_tokens, "cost_usd": u.cost_usd, "unpriced_calls": u.unpriced_calls},
        "wrap_up": template_wrap_up(node, timeless),
    }
    if node.tool_calls_refused:  # requests beyond max_tool_calls: refused, never counted as used
        out["tool_calls_refused"] = node.tool_calls_refused
    return out


def _play_steps(run: Any, steps: list[dict[str, Any]], events: list[dict[str, Any]]) -> None:
    node = run.node
    for index, step in enumerate(steps):
        if "call" in step:
            call = step["call"]
            try:
                adm = node.admit(call.get("provider", "openai"), call["model"], call.get("max_output"),
                                 lambda c=call: c["input_chars"])
            except UnknownPriceError as exc:
                # the first sentence is the contract; the hint after it names each language's own API
                events.append({"step": index, "refused": "unknown_price", "message": str(exc).split(" Add its")[0]})
                raise
            except BudgetExceeded as exc:
                events.append({"step": index, "refused": exc.reason.value})
                raise
            event = {"step": index, "max_output_tokens": adm.max_output_tokens if adm.set_max_tokens else None}
            if adm.no_tools:  # no tool call remains: the adapters send this call without tools
                event["no_tools"] = True
            events.append(event)
            usage = call["usage"]
            pricing = config.get().prices.lookup(call.get("provider", "openai"), call["model"])
            cost = None if pricing is None else pricing.cost(
                usage["input_tokens"], usage["output_tokens"], usage.get("cache_read", 0), usage.get("cache_write", 0))
            node.settle(adm, input_tokens=usage["input_tokens"], output_tokens=usage["output_tokens"],
                        cache_read=usage.get("cache_read", 0), cache_write=usage.get("cache_write", 0),
                        reasoning=usage.get("reasoning", 0), cost=cost, input_chars=call["input_chars"])
            node.record_tool_requests([(t["name"], t["arguments"], t.get("id")) for t in call.get("tool_calls", [])])
        elif "tool" in step:
            tool = step["tool"]
            try:
                reserved = node.admit_tool(tool["name"], tool["arguments"], 0.0)
            except BudgetExceeded as exc:
                events.append({"step": index, "refused": exc.reason.value})
                continue
            node.settle_tool(tool["name"], reserved)
            node.note_tool_result(tool["name"], tool.get("id"), tool["result"])
            events.append({"step": index, "ran": tool["name"]})
        elif "child" in step:
            child = step["child"]
            child_events: list[dict[str, Any]] = []
            with otel_budget.run(child["name"], _budget(child.get("budget")) if child.get("budget") else None) as sub:
                _play_steps(sub, child["steps"], child_events)
            events.append({"step": index, "child": {"events": child_events, "outcome": _outcome(sub)}})
        else:
            raise ValueError(f"step {index}: give call, tool or child, not {sorted(step)}")


def play(vector: dict[str, Any]) -> dict[str, Any]:
    """Run one vector through the Python core: the events of each step and the outcome."""
    settings = config.get()
    saved = settings.prices
    settings.prices = PriceBook({k: Price(**v) for k, v in vector.get("prices", {}).items()})
    events: list[dict[str, Any]] = []
    try:
        with otel_budget.run(vector["name"], _budget(vector.get("budget"))) as run:
            try:
                _play_steps(run, vector["steps"], events)
            except UnknownPriceError:
                pass  # the run ends `done` here in Python only because the error is caught: recorded as an event
    finally:
        settings.prices = saved
    return {"events": events, "outcome": _outcome(run)}


def _run_vectors() -> list[Path]:
    return sorted(p for p in VECTORS.glob("run-*.json"))


@pytest.mark.parametrize("path", _run_vectors(), ids=lambda p: p.stem)
def test_run_vector(path: Path) -> None:
    vector = json.loads(path.read_text(encoding="utf-8"))
    got = play(vector)
    assert got == vector["expect"], json.dumps(got, indent=2, ensure_ascii=False)


def test_there_are_run_vectors() -> None:
    assert len(_run_vectors()) >= 8


def test_canonical_arguments_vectors() -> None:
    cases = json.loads((VECTORS / "canonical-arguments.json").read_text(encoding="utf-8"))["cases"]
    assert len(cases) >= 10
    for case in cases:
        assert canonical_arguments(case["arguments"]) == case["canonical"], case
        assert arguments_signature(case["arguments"]) == case["signature"], case


def test_budget_validation_vectors() -> None:
    cases = json.loads((VECTORS / "budget-validation.json").read_text(encoding="utf-8"))["cases"]
    assert len(cases) >= 10
    for case in cases:
        fields = {k: _number(v) for k, v in case["budget"].items()}
        if case["valid"]:
            budget = Budget(**fields)
            for name, value in case.get("read", {}).items():
                assert getattr(budget, name) == _number(value), (case, name)
        else:
            with pytest.raises(ValidationError) as info:
                Budget(**fields)
            assert case["field"] in str(info.value), (case, str(info.value))


def test_number_format_vectors() -> None:
    from otel_budget.core.ledger import _fmt
    from otel_budget.model.budget import plural, usd

    cases = json.loads((VECTORS / "number-formats.json").read_text(encoding="utf-8"))["cases"]
    for case in cases["usd"]:
        assert usd(case["value"], case["cap"]) == case["text"], case
    for case in cases["fmt"]:
        assert _fmt(case["value"]) == case["text"], case
    for case in cases["fixed4"]:
        assert f"${case['value']:.4f}" == case["text"], case
    for case in cases["seconds"]:
        assert f"{case['value']:.1f}" == case["text"], case
    for case in cases["plural"]:
        assert plural(case["count"], case["noun"]) == case["text"], case


def test_scope_definition_vectors() -> None:
    """The stored scope definitions and amounts, byte for byte (js/test/vectors.test.mjs plays the same file)."""
    doc = json.loads((VECTORS / "scope-definitions.json").read_text(encoding="utf-8"))
    for case in doc["definitions"]:
        spec = {k: _number(v) for k, v in case["scope"].items()}
        scope = otel_budget.Scope(**spec)
        assert definition(scope.limits(), scope.window_seconds) == case["definition"], case
    for case in doc["amounts"]:
        assert _encode(case["amounts"]) == case["encoded"], case
    assert len(doc["definitions"]) >= 8 and len(doc["amounts"]) >= 5


def _with_secret(secret: str | None) -> Any:
    from contextlib import contextmanager

    @contextmanager
    def scope() -> Any:
        settings = config.get()
        saved, settings.secret = settings.secret, None if secret is None else secret.encode()
        try:
            yield
        finally:
            settings.secret = saved

    return scope()


def _refused(case: dict[str, Any], text: str) -> None:
    if "error" in case:
        assert case["error"] in text, (case["name"], text)
    else:
        assert case["field"] in text, (case["name"], text)


def test_paused_run_vectors() -> None:
    """Paused runs read back with their signature: canonical content and HMAC byte for byte (js plays the same file)."""
    from otel_budget.core import trust
    from otel_budget.model.paused import PausedRun
    from otel_budget.model.trust import InvalidRunState, canonical, sign

    doc = json.loads((VECTORS / "paused-runs.json").read_text(encoding="utf-8"))
    assert len([c for c in doc["cases"] if c["valid"]]) >= 4 and len(doc["cases"]) >= 12
    with _with_secret(doc["secret"]):
        for case in doc["cases"]:
            try:
                paused = trust.check(PausedRun.model_validate_json(case["json"]))
            except (ValidationError, InvalidRunState) as exc:
                assert not case["valid"], (case["name"], str(exc))
                _refused(case, str(exc))
                continue
            assert case["valid"], case["name"]
            assert canonical(paused.signed_content()).decode() == case["canonical"], case["name"]
            assert sign(paused.signed_content(), doc["secret"].encode()) == case["signature"] == paused.signature


def test_run_token_vectors() -> None:
    """Run tokens: the same payload is the same token in both languages; bad ones are refused naming the field."""
    from otel_budget.fleet import tokens
    from otel_budget.model.trust import InvalidRunState

    doc = json.loads((VECTORS / "tokens.json").read_text(encoding="utf-8"))
    for case in doc["encode"]:
        with _with_secret(doc["secret"] if case["signed"] else None):
            assert tokens.encode(tokens._checked(case["payload"])) == case["token"], case
    assert len(doc["decode"]) >= 12
    with _with_secret(doc["secret"]):
        for case in doc["decode"]:
            try:
                payload = tokens.decode(case["token"], signed=case.get("signed_only", False))
            except InvalidRunState as exc:
                assert not case["valid"], (case["name"], str(exc))
                _refused(case, str(exc))
                continue
            assert case["valid"], case["name"]
            assert json.loads(json.dumps(payload)) == case["payload"], case["name"]

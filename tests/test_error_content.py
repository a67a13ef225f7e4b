"""Exception text is content: a 401 body that echoes the API key, a 400 body that echoes the prompt. With capture
off, spans, the outcome and the wrap-up carry the error's type and HTTP status only; with capture on, the message
too, with anything shaped like a key redacted. Real openai and anthropic SDKs against ScriptedLLM."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

import otel_budget
from otel_budget.core import config
from otel_budget.model._text import error_detail, redact_keys
from otel_budget.testing import Turn

OPENAI_KEY = "sk-proj-Zq8WvT3xLmN4pR7sK2bY9cD1eF6gH0jA"
ANTHROPIC_KEY = "sk-ant-api03-Q1w2E3r4T5y6U7i8O9p0AsDfGhJkL"
PROMPT = "The merger with Northwind closes on 14 March; draft the memo"


def _everything(otel) -> str:
    """Every name, attribute, event and status of every finished span, as one text."""
    parts = []
    for span in otel.exporter.get_finished_spans():
        parts += [span.name, json.dumps(dict(span.attributes or {}), default=str), span.status.description or ""]
        parts += [json.dumps(dict(e.attributes or {}), default=str) for e in span.events]
    return "\n".join(parts)


@pytest.fixture
def no_capture(otel, monkeypatch):
    monkeypatch.setattr(config.get(), "capture_content", False)
    return otel


@pytest.fixture
def capture(otel, monkeypatch):
    monkeypatch.setattr(config.get(), "capture_content", True)
    return otel


def test_openai_errors_are_recorded_by_type_and_status_without_their_text(no_capture, llm, oai):
    outcomes = []
    llm.script(Turn(status=401, error_message=f"Incorrect API key provided: {OPENAI_KEY}"),
               Turn(status=400, error_message=f"Invalid prompt: '{PROMPT}' was flagged"))
    for _ in range(2):
        with pytest.raises(openai.APIStatusError) as raised, otel_budget.run("errs") as run:
            oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": PROMPT}])
        assert OPENAI_KEY in str(raised.value) or PROMPT in str(raised.value)  # the SDK's error does echo them
        outcomes.append(run.outcome)
    assert len(llm.requests) == 2
    first, second = outcomes
    assert first.stop_reason == "error" and first.detail == "the run raised openai.AuthenticationError (HTTP 401)"
    assert second.detail == "the run raised openai.BadRequestError (HTTP 400)"
    for done in outcomes:
        assert OPENAI_KEY not in done.wrap_up and PROMPT not in done.wrap_up and "The run raised openai." in done.wrap_up
    text = _everything(no_capture)
    assert OPENAI_KEY not in text and PROMPT not in text and "Incorrect API key" not in text
    chats = no_capture.chat_spans()
    assert [s.status.description for s in chats] == ["openai.AuthenticationError (HTTP 401)",
                                                     "openai.BadRequestError (HTTP 400)"]
    runs = no_capture.spans("invoke_agent errs")
    assert [s.status.description for s in runs] == [first.detail, second.detail]


def test_anthropic_errors_are_recorded_by_type_and_status_without_their_text(no_capture, llm, anth):
    llm.script(Turn(status=401, error_message=f"invalid x-api-key: {ANTHROPIC_KEY}"),
               Turn(status=400, error_message=f"prompt rejected: {PROMPT}"))
    outcomes = []
    for _ in range(2):
        with pytest.raises(anthropic.APIStatusError), otel_budget.run("anth-errs") as run:
            anth.messages.create(model="claude-sonnet-4-5", max_tokens=50,
                                 messages=[{"role": "user", "content": PROMPT}])
        outcomes.append(run.outcome)
    assert [o.detail for o in outcomes] == ["the run raised anthropic.AuthenticationError (HTTP 401)",
                                            "the run raised anthropic.BadRequestError (HTTP 400)"]
    text = _everything(no_capture) + "".join(o.wrap_up for o in outcomes)
    assert ANTHROPIC_KEY not in text and PROMPT not in text and "api03" not in text
    assert len(llm.requests) == 2


def test_with_capture_the_message_is_kept_but_keys_are_redacted(capture, llm, oai, anth):
    llm.script(Turn(status=401, error_message=f"Incorrect API key provided: {OPENAI_KEY}. Bearer {OPENAI_KEY}"),
               Turn(status=400, error_message=f"Invalid prompt: '{PROMPT}' was flagged"),
               Turn(status=401, error_message=f"invalid x-api-key: {ANTHROPIC_KEY}"))
    outcomes = []
    for _ in range(2):
        with pytest.raises(openai.APIStatusError), otel_budget.run("cap-errs") as run:
            oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": PROMPT}])
        outcomes.append(run.outcome)
    with pytest.raises(anthropic.AuthenticationError), otel_budget.run("cap-errs") as run:
        anth.messages.create(model="claude-sonnet-4-5", max_tokens=50, messages=[{"role": "user", "content": "hi"}])
    outcomes.append(run.outcome)
    first, second, third = outcomes
    assert first.detail.startswith("the run raised openai.AuthenticationError (HTTP 401): ") and "Incorrect API key" in first.detail
    assert PROMPT in second.detail  # capture on: the message may carry content
    assert "[redacted]" in third.detail
    text = _everything(capture) + "".join(o.wrap_up + o.detail for o in outcomes)
    assert OPENAI_KEY not in text and ANTHROPIC_KEY not in text
    assert "Q1w2E3r4T5y6" not in text and "Zq8WvT3x" not in text


def test_a_tool_error_is_recorded_by_type_on_the_tool_span(no_capture):
    @otel_budget.tool
    def fetch(url: str) -> str:
        raise PermissionError(f"cannot fetch {url} with token {OPENAI_KEY}")

    with pytest.raises(PermissionError), otel_budget.run("tool-errs") as run:
        fetch("https://intranet.example/memo-northwind")
    (span,) = no_capture.spans("execute_tool fetch")
    assert span.status.description == "PermissionError"
    assert run.outcome.detail == "the run raised PermissionError"
    assert "northwind" not in _everything(no_capture) and OPENAI_KEY not in _everything(no_capture)


@pytest.mark.parametrize("text", [
    f"key {OPENAI_KEY} here", f"{ANTHROPIC_KEY}", f"Authorization: Bearer {OPENAI_KEY[3:]}",
    "api_key=abcdef123456&x=1", '{"x-api-key": "0123456789abcdef"}', "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUv",
    "ghp_" + "a1B2" * 9, "AKIAIOSFODNN7EXAMPLE", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlMTIz",
    "password: hunter2hunter2",
])
def test_anything_shaped_like_a_key_is_redacted(text):
    out = redact_keys(text)
    assert "[redacted]" in out
    for secret in (OPENAI_KEY, ANTHROPIC_KEY, OPENAI_KEY[3:], "abcdef123456", "0123456789abcdef", "AIzaSy",
                   "a1B2a1B2", "AKIAIOSFODNN7", "eyJhbGci", "hunter2"):
        assert secret not in out


@pytest.mark.parametrize("text", [
    "the run used 12,345 tokens in 3.2 s", "max_output_tokens exceeded", "a task-oriented agent",
    "Basic information about the model", "the password field is required",
])
def test_ordinary_text_is_not_redacted(text):
    assert redact_keys(text) == text


def test_an_exception_whose_str_fails_is_still_described():
    class Odd(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

        def __repr__(self) -> str:
            raise RuntimeError("no")

    assert error_detail(Odd(), capture=False).endswith("Odd")
    assert "unprintable" in error_detail(Odd(), capture=True)

"""The request size behind the input estimate is the length of the body's JSON, as `json.dumps` writes it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from otel_budget.instrumentation.providers._request import body_chars

BODIES = [
    {"model": "gpt-4o", "messages": [{"role": "user", "content": "Summarize the invoices."}]},
    {"text": "Zürich, 東京, emoji \U0001f600", "n": 2, "temperature": 0.7, "stop": None, "stream": True},
    {"floats": [1e300, -0.0, 2.5, float("nan"), float("inf")], "ints": [0, -1, 10**30], "flags": [True, False]},
    {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}], "deep": [[[[]]]]},
    {"an object": ValueError("not JSON"), "a set": {1}, 1: "an int key", None: "a None key"},
]


@pytest.mark.parametrize("body", BODIES)
def test_the_size_is_the_length_of_the_json_dumps_writes(body):
    assert body_chars(SimpleNamespace(json_data=body)) == len(json.dumps(body, default=str))


def test_a_body_that_refers_to_itself_is_measured_by_its_repr():
    body: dict = {"model": "gpt-4o"}
    body["self"] = body
    assert body_chars(SimpleNamespace(json_data=body)) == len(repr(body))


def test_no_body_is_size_zero():
    assert body_chars(SimpleNamespace(json_data=None)) == 0

"""The request size behind the input estimate is the length of the body's JSON, as `json.dumps` writes it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from otel_budget.instrumentation.providers._wire import body_chars

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


def test_the_server_of_a_span_is_what_the_client_class_says_its_base_url_is():
    """The wrapper reads a client's own `_base_url` only for a class whose `base_url` property returns just that;
    a class whose property says otherwise is read through its property, call after call."""
    from otel_budget.instrumentation.providers import _params
    from otel_budget.instrumentation.providers._request import _base_url

    class Plain:
        def __init__(self, url: str) -> None:
            self._base_url = url

        @property
        def base_url(self) -> str:
            return self._base_url

    class Routed(Plain):
        @property
        def base_url(self) -> str:
            return "https://gateway.example:8443/v1/"

    for _ in range(3):
        assert _params.server(_base_url(Plain("http://a.example:1/"))) == ("a.example", 1)
        assert _params.server(_base_url(Plain("http://b.example/"))) == ("b.example", 80)
        assert _params.server(_base_url(Routed("http://a.example:1/"))) == ("gateway.example", 8443)


def test_a_client_whose_base_url_property_returns_its_configured_url_is_read_without_the_property():
    """Newer openai SDKs keep the URL in `_configured_base_url` and their property runs an import statement on every
    read: it is read once, then the instance's own attribute is (and a new URL set on the client is seen)."""
    from otel_budget.instrumentation.providers._request import _base_url

    reads = []

    class Configured:
        def __init__(self, url: str) -> None:
            self._configured_base_url = url

        @property
        def base_url(self) -> str:
            reads.append(1)
            return self._configured_base_url

    client = Configured("http://a.example:1/")
    assert [_base_url(client) for _ in range(5)] == ["http://a.example:1/"] * 5
    client._configured_base_url = "http://b.example:2/"
    assert _base_url(client) == "http://b.example:2/"
    assert len(reads) == 1

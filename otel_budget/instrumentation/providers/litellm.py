"""LiteLLM: `completion` and `acompletion` (streams included), whichever way they were imported.

LiteLLM's public `completion`/`acompletion` look up a `PublicDispatch` object at call time and call its
`run`/`arun` (both the Python and the native Rust paths start there). Patching `PublicDispatch.run`/`arun`
for the chat-completions route therefore also covers `from litellm import completion` done before
`instrument()`. The LiteLLM layer is the outer one: while it holds a call, the openai SDK patch underneath
passes through, so a call is counted once.

LiteLLM fetches its price table from the network at import; set `LITELLM_LOCAL_MODEL_COST_MAP=True` to run
offline (otel-budget prices calls from its own table anyway).

`max_seconds` bounds LiteLLM's own retries (`num_retries`, run by tenacity) as it bounds the openai SDK's: a
retry is made only if it can start before the deadline, with the time left then as its `timeout`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from ...core import calls
from ...core.calls import Guard
from ...model.call import ModelCall, TokenUsage
from ...telemetry import semconv as sc
from .._spec import AdapterSpec, points
from . import _params, _stream_usage
from ._request import admit_async
from ._retries import TENACITY
from ._stream import AsyncStream, SyncStream
from .openai import ChatStream, _get, chat_content, chat_usage, read_chat

log = logging.getLogger(__name__)

#: LiteLLM provider names -> `gen_ai.provider.name` values where the conventions name them differently.
_PROVIDERS = {
    "openai": sc.PROVIDER_OPENAI,
    "text-completion-openai": sc.PROVIDER_OPENAI,
    "anthropic": sc.PROVIDER_ANTHROPIC,
    "gemini": sc.PROVIDER_GEMINI,
    "vertex_ai": sc.PROVIDER_VERTEX_AI,
}
_CHAT_ROUTE = "chat_completions"
#: Connection settings a wrap-up call reuses.
_CONNECTION = ("api_base", "base_url", "api_key", "api_version", "custom_llm_provider", "extra_headers")


def _split_model(model: str, kwargs: Mapping[str, Any]) -> tuple[str, str]:
    """(provider, model) as LiteLLM resolves them: `openai/gpt-4o` -> ("openai", "gpt-4o")."""
    try:
        import litellm

        name, provider, _, _ = litellm.get_llm_provider(
            model=model, custom_llm_provider=kwargs.get("custom_llm_provider"), api_base=kwargs.get("api_base")
        )
    except Exception:  # noqa: BLE001 - unknown to LiteLLM: keep what the caller wrote
        provider, _, name = model.rpartition("/")
    return _PROVIDERS.get(provider, provider or "litellm"), name or model


def usage_of(usage: Any) -> TokenUsage | None:
    """LiteLLM's OpenAI-shaped usage; `prompt_tokens` includes cached tokens for every provider."""
    base = chat_usage(usage)
    if base is None:
        return None
    details = _get(usage, "prompt_tokens_details")
    write = _get(details, "cache_creation_tokens", 0) or _get(usage, "cache_creation_input_tokens", 0) or 0
    return TokenUsage(_get(usage, "prompt_tokens"), _get(usage, "completion_tokens"), base.cache_read, write,
                      base.reasoning)


def read(result: Any, call: ModelCall) -> None:
    """A LiteLLM `ModelResponse` into the call record."""
    read_chat(result, call, usage_of)


def _request(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[str, Any]:
    model = kwargs.get("model", args[0] if args else "")
    messages = kwargs.get("messages", args[1] if len(args) > 1 else None)
    return str(model or ""), messages


def _chars(messages: Any, kwargs: Mapping[str, Any]) -> int:
    try:
        return len(json.dumps(messages, default=str)) + len(json.dumps(kwargs.get("tools") or [], default=str))
    except Exception:  # noqa: BLE001
        return len(repr(messages))


def _describe(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> ModelCall:
    model, _ = _request(args, kwargs)
    provider, name = _split_model(model, kwargs)
    limit = kwargs.get("max_completion_tokens") or kwargs.get("max_tokens")
    call = ModelCall(provider, sc.OP_CHAT, name, limit if isinstance(limit, int) else None,
                     bool(kwargs.get("stream")), choices=kwargs.get("n") or 1)
    call.params = _params.read(kwargs, _params.OPENAI_KEYS, choices=kwargs.get("n"),
                               output_format=kwargs.get("response_format"))
    base_url = kwargs.get("api_base") or kwargs.get("base_url")
    call.server = _params.server(base_url)
    if call.stream:  # a server that rejects stream_options is remembered by it (the provider's own: by name)
        call.base_url = str(base_url) if base_url else f"litellm:{provider}"
    return call


def _prepare(kwargs: Mapping[str, Any], call: ModelCall, guard: Guard) -> dict[str, Any]:
    """The call's keyword arguments with what the enforcer asked for: output limit, timeout, stream usage."""
    out = dict(kwargs)
    if guard.max_output_tokens is not None:
        key = "max_completion_tokens" if out.get("max_completion_tokens") is not None else "max_tokens"
        out[key] = guard.max_output_tokens
    if guard.timeout is not None:
        current = out.get("timeout")
        if not isinstance(current, (int, float)) or current > guard.timeout:
            out["timeout"] = guard.timeout
    stream_options = _stream_usage.ask(out, call, guard)
    if stream_options is not None:
        out["stream_options"] = stream_options
    return out


def _without_usage(prepared: dict[str, Any], guard: Guard) -> bool:
    """The call's arguments back as the caller passed them (without the `stream_options` we added), for a server
    that rejected them; its timeout is what the run has left now. False when the caller set them itself."""
    plain = _stream_usage.without_usage(prepared)
    if plain is None:
        return False
    prepared.pop("stream_options", None)
    if guard.timeout is not None:
        prepared["timeout"] = guard.timeout
    return True


def _summarizer(model: str, kwargs: Mapping[str, Any], is_async: bool) -> Any:
    connection = {k: kwargs[k] for k in _CONNECTION if kwargs.get(k) is not None}

    def summarize(prompt: str, max_tokens: int) -> Any:
        import litellm

        request = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens}
        if is_async:
            return _await_text(litellm.acompletion(**request, **connection))
        reply = litellm.completion(**request, **connection)
        return reply.choices[0].message.content

    return summarize


async def _await_text(made: Any) -> str:
    reply = await made
    return str(reply.choices[0].message.content or "")


def _start(args: tuple[Any, ...], kwargs: Mapping[str, Any], is_async: bool) -> tuple[Guard, dict[str, Any]] | None:
    """Admit the call (BudgetExceeded propagates); None to send it unmetered."""
    try:
        call = _describe(args, kwargs)
        model, messages = _request(args, kwargs)
        call.results = ({"messages": messages}, "messages")
    except Exception:  # noqa: BLE001 - our bug: the original call goes through unchanged
        log.warning("otel-budget: could not read a LiteLLM request; sending it unmetered", exc_info=True)
        return None
    guard = calls.begin(
        call,
        lambda: _chars(messages, kwargs),
        summarizer=lambda: _summarizer(model, kwargs, is_async),
        capture_input=lambda: chat_content(messages),
    )
    if guard is None:
        return None
    try:
        return guard, _prepare(kwargs, call, guard)
    except Exception:  # noqa: BLE001
        log.warning("otel-budget: could not adjust a LiteLLM request", exc_info=True)
        return guard, dict(kwargs)


def _after(guard: Guard, result: Any, is_async: bool) -> Any:
    call = guard.call
    if call.stream or type(result).__name__ == "CustomStreamWrapper":
        return (AsyncStream if is_async else SyncStream)(result, guard, ChatStream(call, call.injected_usage))
    try:
        read(result, call)
    except Exception:  # noqa: BLE001
        log.debug("otel-budget: could not read a LiteLLM response", exc_info=True)
    guard.finish()
    return result


def _is_chat(instance: Any) -> bool:
    return getattr(instance.route, "value", None) == _CHAT_ROUTE


def _sync_run(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    flag = calls.in_call()
    if flag.get() or not _is_chat(instance) or len(args) < 2:
        return wrapped(*args, **kwargs)
    call_args, call_kwargs = args[0], args[1]
    started = _start(call_args, call_kwargs, False)
    if started is None:
        return wrapped(*args, **kwargs)
    guard, prepared = started
    send = wrapped
    if guard.call.injected_usage:  # a server may reject the stream_options we added: sent once more without them
        send = _stream_usage.resending(wrapped, guard, lambda: _without_usage(prepared, guard))
    result = guard.send(send, call_args, prepared, *args[2:], **kwargs)
    return _after(guard, result, False)


async def _async_run(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    flag = calls.in_call()
    if flag.get() or not _is_chat(instance) or len(args) < 2:
        return await wrapped(*args, **kwargs)
    call_args, call_kwargs = args[0], args[1]
    started = await admit_async(lambda: _start(call_args, call_kwargs, True))
    if started is None:
        return await wrapped(*args, **kwargs)
    guard, prepared = started
    send = wrapped
    if guard.call.injected_usage:
        send = _stream_usage.aresending(wrapped, guard, lambda: _without_usage(prepared, guard))
    result = await guard.asend(send, call_args, prepared, *args[2:], **kwargs)
    return _after(guard, result, True)


#: `PublicDispatch` (LiteLLM imports it with `litellm`; one before its Rust dispatch lacks it), and tenacity:
#: `num_retries` is LiteLLM's own retry loop (the openai SDK's under it is bounded too).
SPEC = AdapterSpec(
    requires=("litellm >= 1.60, < 2",),
    patches=(*points("litellm.rust_bridge.dispatch", {"PublicDispatch.run": _sync_run,
                                                      "PublicDispatch.arun": _async_run}),
             *TENACITY),
)

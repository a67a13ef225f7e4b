"""The request body of a Stainless-generated SDK (openai, anthropic): its size for the admission (`RequestSize`),
and, for the openai SDK, its bytes, serialized once, as the SDK itself sends them.

The admission needs the request's size before the call is sent, and the SDK serializes the same body again when it
builds the HTTP request. These SDKs send a body that is already bytes as it is (`_build_request`, read once per
client class to tell: `isinstance(json_data, bytes)`), so the wrapper serializes the body once, exactly as the SDK's
`openapi_dumps` would, measures those bytes and hands them to the SDK: the size is the request's own (one token per
byte is the bound), and the SDK does not serialize again.

Byte for byte the SDK's own: the same C encoder with the arguments `openapi_dumps` gives `json.dumps` (its encoder
class's `default`, `ensure_ascii=False`, compact separators, `allow_nan=False`), checked against `openapi_dumps` on
a probe body once per SDK. Only for the openai SDK (the anthropic SDK prepares the body inside `request`, and its
own spans read it), for a client class whose `_build_request` and `_prepare_options` are the SDK's own (Azure's
reads the model from the body; Bedrock's and Vertex's move it to the URL), on no provider runtime, and whose
`request` is sent straight to the SDK's (another wrapper inside ours may read the body); any body the encoder
refuses (NaN, a circular body, an odd key) is left to the SDK, which raises its own error.
"""

from __future__ import annotations

import inspect
import json
import logging
import operator
import sys
from collections.abc import Callable
from typing import Any

from ...core.calls import Measured

log = logging.getLogger(__name__)

Encoder = Callable[[Any], bytes]

#: A body with what the SDK's serialization must keep as it is: non-ASCII text, a line separator, numbers, nesting.
_PROBE = {"model": "m", "messages": [{"role": "user", "content": "Zürich \u2028 東京 \U0001f600 \"q\" \\ \n"}],
          "n": 2, "t": 0.7, "big": 10**20, "f": 1e300, "x": None, "ok": True, "tools": [], "o": {}}
#: Client class -> its SDK's encoder, or None when the body must be left to the SDK (checked once per class).
_BY_CLASS: dict[type, Encoder | None] = {}
#: SDK package -> its encoder or None (one check per SDK).
_BY_SDK: dict[str, Encoder | None] = {}


#: SDKs whose `request` sends the body it is given to `_build_request` untouched. The anthropic SDK prepares the body
#: inside `request` (`_copy_and_prepare`: its data walked and transformed) and its own spans read it there: its
#: bodies are left to it.
_SDKS = ("openai",)
#: `_prepare_options` hooks (run inside `request`, before `_build_request`) known to leave the body alone: the base
#: client's, and the openai client's, which rewrites it only through a provider runtime (checked per client).
_PLAIN_PREPARE = frozenset({
    ("_base_client", "SyncAPIClient._prepare_options"), ("_base_client", "AsyncAPIClient._prepare_options"),
    ("_client", "OpenAI._prepare_options"), ("_client", "AsyncOpenAI._prepare_options"),
})


def encoder(client: Any) -> Encoder | None:
    """The encoder that writes a body as `client`'s SDK sends it, or None (see the module's doc)."""
    cls = type(client)
    try:
        write = _BY_CLASS[cls]
    except KeyError:
        write = _for_class(cls)
        if len(_BY_CLASS) < 64:  # a handful of client classes; never grows without bound
            _BY_CLASS[cls] = write
    if write is None or getattr(client, "__dict__", {}).get("_provider_runtime") is not None:
        return None  # (an openai client on a provider runtime, which may rewrite the body as a dict)
    return write


def _for_class(cls: type) -> Encoder | None:
    build = getattr(cls, "_build_request", None)
    code = getattr(build, "__code__", None)
    if code is None or getattr(build, "__qualname__", "") != "BaseClient._build_request":
        return None  # a client that builds its requests itself (Azure reads the model from the body)
    package, _, _ = build.__module__.partition(".")
    prepare = getattr(cls, "_prepare_options", None)
    hook = (getattr(prepare, "__module__", "").removeprefix(package + "."), getattr(prepare, "__qualname__", ""))
    if package not in _SDKS or hook not in _PLAIN_PREPARE:
        return None  # a client whose own hooks read or rewrite the body (Bedrock, Vertex)
    if "openapi_dumps" not in code.co_names or "isinstance(json_data, bytes)" not in _source(build):
        return None  # an SDK that does not send a bytes body as it is (or whose code cannot be read to tell)
    if package not in _BY_SDK:
        _BY_SDK[package] = _for_sdk(package)
    return _BY_SDK[package]


def _source(func: Any) -> str:
    try:
        return inspect.getsource(func)
    except (OSError, TypeError):  # no source installed
        return ""


def _for_sdk(package: str) -> Encoder | None:
    try:
        from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]

        module = sys.modules.get(f"{package}._utils._json")
        dumps, encoder_class = module.openapi_dumps, module._CustomEncoder  # type: ignore[union-attr]
        if c_make_encoder is None:
            return None
        encode = c_make_encoder(None, encoder_class().default, encode_basestring, None, ":", ",", False, False, False)

        def write(data: Any) -> bytes:
            return "".join(encode(data, 0)).encode()

        if write(_PROBE) != dumps(_PROBE):
            log.debug("otel-budget: %s serializes request bodies its own way; its bodies are left to it", package)
            return None
        return write
    except Exception:  # noqa: BLE001 - anything unexpected: the SDK serializes its bodies itself, as before
        log.debug("otel-budget: could not match %s's request serialization", package, exc_info=True)
        return None


def sends_straight(wrapped: Any) -> bool:
    """Whether `wrapped` (what our request wrapper calls) is the SDK's own `request`, not another wrapper."""
    func = getattr(wrapped, "__func__", None)
    return getattr(func, "__qualname__", "") in ("SyncAPIClient.request", "AsyncAPIClient.request")


def plain(options: Any) -> bool:
    """Whether the SDK would serialize the request's body as it is: nothing merged into it (`extra_body`), no files
    or raw content, no content type of the caller's own (multipart)."""
    if options.extra_json is not None or getattr(options, "files", None) is not None \
            or getattr(options, "content", None) is not None:
        return False
    headers = options.headers
    return not headers or not any(k.lower() == "content-type" for k in headers)


def _one_shot_encoder() -> Callable[[Any], str]:
    """`json.dumps(data, default=str)` without building an encoder per call: the C encoder the standard library
    builds inside `dumps`, built once (no circular check: a body that refers to itself fails, as JSON)."""
    try:
        from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]

        if c_make_encoder is None:
            raise ImportError("no C JSON encoder")
        encode = c_make_encoder(None, str, encode_basestring_ascii, None, ": ", ", ", False, False, True)
    except Exception:  # noqa: BLE001 - the pure-Python json module: dumps as it is
        return lambda data: json.dumps(data, default=str)
    return lambda data: "".join(encode(data, 0))


_to_json = _one_shot_encoder()


def body_chars(options: Any) -> int:
    """The size of the request body, the basis of the input-token estimate."""
    data = options.json_data
    if not data:
        return 0
    try:
        return len(_to_json(data))
    except Exception:  # noqa: BLE001
        return len(repr(data))


class RequestSize(Measured):
    """The request size for the input estimate, measured at most once: the bytes of the body as the SDK sends it
    (`write`: see the module's doc), else the Content-Length of the request the SDK built when the call has been
    sent (no copy of the body), else the JSON body's length.

    `hand_off` gives the SDK the body already serialized (the measured bytes, when the body is still the one
    measured), `restore` puts the body back as it was."""

    __slots__ = ("options", "write", "wire", "handed")

    def __init__(self, options: Any, write: Encoder | None = None) -> None:
        self.known = None
        self.options = options
        self.write = write if write is not None and plain(options) else None
        self.wire: tuple[Any, bytes] | None = None  # (the body measured, its bytes)
        self.handed: Any = None  # the body whose bytes the SDK was given

    def measure(self) -> int:
        if self.write is not None and type(body := self.options.json_data) is dict:
            try:
                data = self.write(body)
            except Exception:  # noqa: BLE001 - a body the SDK's serialization refuses: the SDK raises its own error
                self.write = None
            else:
                self.wire = (body, data)
                return len(data)
        return body_chars(self.options)

    def hand_off(self, options: Any) -> None:
        """Give the SDK the body serialized as it would serialize it (nothing when it cannot be)."""
        write = self.write
        if write is None or type(body := options.json_data) is not dict:
            return
        wire = self.wire
        try:
            if wire is None:  # not measured: serialized now
                data = write(body)
                self.known = len(data)
            elif wire[0] is body:
                data = wire[1]
            elif (added := _appended(wire[0], body)) is not None:  # the body measured, with fields added (prepare)
                data = wire[1][:-1] + b"," + write(added)[1:]
            else:
                data = write(body)
        except Exception:  # noqa: BLE001 - left to the SDK, which raises its own error
            return
        _set_body(options, data)
        self.handed = body

    def restore(self, options: Any) -> None:
        """The body as it was before `hand_off`."""
        body = self.handed
        if body is not None:
            self.handed = None
            _set_body(options, body)

    def sent(self, result: Any) -> None:
        """Take the size from the request behind an SDK result (stream or raw response), when not measured yet."""
        if self.known is not None:
            return
        response = getattr(result, "http_response", None) or getattr(result, "response", None)
        if response is None:
            return
        try:
            length = response.request.headers.get("content-length")
            if length is not None:
                self.known = int(length)
        except Exception:  # noqa: BLE001 - measured from the body instead, if ever needed
            pass


def _appended(measured: dict[str, Any], body: dict[str, Any]) -> dict[str, Any] | None:
    """The fields `body` adds after every field of `measured` (the same names and values, in the same order), as
    `{**measured, **added}` makes them; None when it differs otherwise. Their JSON then is the measured bytes with
    the added fields' JSON written in before the closing brace."""
    n = len(measured)
    if len(body) <= n or not n:
        return None
    names = list(body)
    if names[:n] != list(measured) or not all(map(operator.is_, map(body.__getitem__, measured), measured.values())):
        return None
    added = {}  # (a loop: a comprehension would make `body` a cell on every call)
    for name in names[n:]:
        added[name] = body[name]
    return added


def _set_body(options: Any, body: Any) -> None:
    """`options.json_data = body` without the model's `__setattr__` (a field set at construction stays set)."""
    try:
        options.__dict__["json_data"] = body
    except AttributeError:  # no instance dict
        options.json_data = body

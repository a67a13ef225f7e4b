"""What a paused run is trusted with when it comes back: its signature, and with a shared ledger its record.

- With a secret (`instrument(secret=...)` or OTEL_BUDGET_SECRET) a pause is signed, and `resume` refuses a
  paused run whose signature is missing or does not match. Without one it is accepted, with one warning per
  process (shared with run tokens).
- With a store that keeps records (`RedisLedger`), the pause also writes its quota used, its limits and its
  approval policy under its `run_id`; `resume` reads them back and the paused run can only narrow them: more
  used, lower limits, an added gate. A paused run the store does not know is refused.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any

from ..model.budget import LIMITS, Budget, Usage
from ..model.paused import PausedRun
from ..model.policy import ApprovalPolicy
from ..model.trust import InvalidRunState, canonical, sign, signed_by
from ..telemetry import semconv as sc
from . import config

log = logging.getLogger(__name__)

#: Record kind of a paused run in the store: key `{<prefix>:paused:<run_id>}:paused`.
PAUSED_RECORD = "paused"
_warned = False
_warn_lock = threading.Lock()


def secret() -> bytes | None:
    return config.get().secret


def warn_unsigned(what: str) -> None:
    """Say once per process that state from outside is accepted without a signature."""
    global _warned
    with _warn_lock:
        if _warned:
            return
        _warned = True
    log.warning(
        "otel-budget: %s accepted without a signature: no secret is configured, so one edited outside this "
        "process would be accepted too. Give every process the same instrument(secret=...) or %s "
        "(see docs/security.md). This is said once per process.", what, sc.ENV_BUDGET_SECRET,
    )


def seal(paused: PausedRun) -> PausedRun:
    """Give a new pause its id, its record in the store (when it keeps records) and its signature."""
    paused.run_id = os.urandom(16).hex()
    _store_record(paused)
    key = secret()
    if key is not None:
        paused.signature = sign(paused.signed_content(), key)
    return paused


def _record_store() -> Any:
    store = config.get().ledger
    return store if store is not None and hasattr(store, "get_record") else None


def _store_record(paused: PausedRun) -> None:
    store = _record_store()
    if store is None:
        return
    text = canonical({"budget": paused.budget, "policy": paused.policy.model_dump(mode="json") if paused.policy
                      else None, "usage": paused.usage.model_dump(mode="json")}).decode()
    try:
        store.put_record(f"{PAUSED_RECORD}:{paused.run_id}", PAUSED_RECORD, text)
    except Exception as exc:  # noqa: BLE001  # the pause itself still happens; its resume will be refused
        log.warning("otel-budget: the paused run %r could not be recorded in the shared ledger (%s); resuming it "
                    "will be refused while the ledger fails closed", paused.run_name, exc)


def check(paused: PausedRun) -> PausedRun:
    """The paused run as `resume` may trust it: validated again, its signature checked, narrowed to its record."""
    try:
        paused = PausedRun.model_validate(paused.model_dump(mode="json"))  # an object may have been edited too
    except ValueError as exc:
        raise InvalidRunState(f"resume(): the paused run is not valid: {exc}") from None
    key = secret()
    if key is None:
        warn_unsigned("a paused run was")
    elif paused.signature is None:
        raise InvalidRunState(
            f"resume(): the paused run {paused.run_name!r} is not signed, and a secret is configured: it was "
            "paused without the secret, or its signature was removed. Pause it again with the same secret.")
    elif not signed_by(paused.signed_content(), paused.signature, key):
        raise InvalidRunState(
            f"resume(): the paused run {paused.run_name!r} was changed after it was signed (or signed with another "
            "secret): refused. Resume the paused run as it was saved, with the secret it was paused with.")
    return _narrowed(paused)


def _narrowed(paused: PausedRun) -> PausedRun:
    store = _record_store()
    if store is None:
        return paused
    scope = f"{PAUSED_RECORD}:{paused.run_id}"
    try:
        text = store.get_record(scope, PAUSED_RECORD) if paused.run_id else None
    except Exception as exc:  # noqa: BLE001
        if getattr(store, "fail", "closed") == "open":
            log.warning("otel-budget: the shared ledger is unreachable (%s); paused run %r resumed as given "
                        "(fail='open')", exc, paused.run_name)
            return paused
        raise InvalidRunState(f"resume(): the shared ledger cannot be read to check the paused run "
                              f"{paused.run_name!r} (fail='closed'): {exc}") from None
    if text is None:
        raise InvalidRunState(
            f"resume(): the paused run {paused.run_name!r} (run_id {paused.run_id!r}) is not recorded in the shared "
            "ledger: it was edited, paused without this ledger, or its record expired (RedisLedger(paused_ttl=...)).")
    try:
        record = json.loads(text)
        usage = Usage.model_validate(record["usage"])
        limits = dict(record["budget"])
        Budget(**limits)
        policy = ApprovalPolicy.model_validate(record["policy"]) if record["policy"] is not None else None
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidRunState(f"resume(): the shared ledger's record of the paused run is damaged: {exc}") from None
    given = paused.usage.model_dump()
    used = {name: max(value, given[name]) for name, value in usage.model_dump().items()}
    for name, value in paused.budget.items():  # the paused run can only lower a limit or add one
        if name in LIMITS and value is not None and (limits.get(name) is None or value < limits[name]):
            limits[name] = value
    return paused.model_copy(update={"usage": Usage(**used), "budget": limits, "policy": policy or paused.policy})

"""The ledger's reservation, settlement and headroom follow the per-dimension rule, on odd numbers too.

The ledger's loops are written for speed (one condition per dimension); this checks them against the rule written
out one dimension at a time: a positive amount on a limited dimension fits when used + reserved + amount <= limit
(with a 1e-12 slack), a NaN never fits, a zero or negative amount and an unlimited dimension never refuse; the
reservation is made on every account or on none; a settlement takes the reservation back (never below zero),
adds what was used, and says whether a use it added reached one of an account's marks. 20,000 random cases, with
zeros, negatives, NaN, infinities and accounts over their limits.
"""

from __future__ import annotations

import math
import random

from otel_budget.core import ledger as lg

_VALUES = [0.0, -1.0, 1.0, 2.5, 10.0, 1e-13, 99.999999999999, 100.0, 1e9, math.nan, math.inf]


def _value(rng: random.Random) -> float:
    return rng.choice(_VALUES) if rng.random() < 0.3 else rng.uniform(0, 120)


def _account(rng: random.Random, name: str, finite: bool = False) -> lg.Account:
    """An account with some dimensions limited, and counters (NaN and infinite ones too, unless `finite`)."""
    limits = {dim: _value(rng) for dim in lg.DIMS if rng.random() < 0.6}
    acc = lg.Account(limits, name=name)
    for dim in lg.DIMS:
        for counters, share in ((acc.used, 0.7), (acc.reserved, 0.5)):
            value = abs(_value(rng)) if rng.random() < share else 0.0
            counters[dim] = value if math.isfinite(value) or not finite else 1.0
    return acc


def _amounts(rng: random.Random) -> dict[str, float]:
    return {dim: _value(rng) for dim in lg.DIMS if rng.random() < 0.7}


def _expected_refusal(accounts: list[lg.Account], amounts: dict[str, float]) -> tuple[str, str] | None:
    for acc in accounts:
        for dim, amount in amounts.items():
            limit = acc.limits.get(dim)
            if amount <= 0 or limit is None:
                continue
            if not acc.used[dim] + acc.reserved[dim] + amount <= limit + 1e-12:
                return acc.name, dim
    return None


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _snapshot(accounts: list[lg.Account]) -> list[tuple[dict[str, float], dict[str, float]]]:
    return [(dict(acc.used), dict(acc.reserved)) for acc in accounts]


def _assert_counters(accounts: list[lg.Account], expected: list[tuple[dict[str, float], dict[str, float]]]) -> None:
    for acc, (used, reserved) in zip(accounts, expected, strict=True):
        for dim in lg.DIMS:
            assert _same(acc.used[dim], used[dim]), (acc.name, dim, acc.used[dim], used[dim])
            assert _same(acc.reserved[dim], reserved[dim]), (acc.name, dim, acc.reserved[dim], reserved[dim])


def test_reserve_refuses_exactly_where_the_per_dimension_rule_does() -> None:
    rng = random.Random(20261205)
    refused = fitted = 0
    for case in range(20_000):
        accounts = [_account(rng, f"run{case}.{i}") for i in range(rng.choice([1, 1, 2, 3]))]
        amounts = _amounts(rng)
        before = _snapshot(accounts)
        expected = _expected_refusal(accounts, amounts)
        refusal = lg.reserve_locked(accounts, amounts)
        if expected is None:
            fitted += 1
            assert refusal is None, (case, refusal)
            for _used, reserved in before:
                for dim, amount in amounts.items():
                    reserved[dim] += amount
            _assert_counters(accounts, before)
        else:
            refused += 1
            assert refusal is not None and (refusal.scope, refusal.dim) == expected, (case, refusal, expected)
            _assert_counters(accounts, before)  # refused: nothing reserved anywhere
    assert refused > 1_000 and fitted > 1_000  # both sides of the rule were exercised


def test_settle_takes_back_the_reservation_never_below_zero_and_adds_what_was_used() -> None:
    rng = random.Random(5)
    for _ in range(20_000):
        accounts = [_account(rng, "a"), _account(rng, "b")][: rng.choice([1, 2])]
        for acc in accounts:  # some watch levels of use (a run's near thresholds): inf where none
            if rng.random() < 0.5:
                acc.marks = {dim: _value(rng) if rng.random() < 0.6 else math.inf for dim in lg.DIMS}
        reserved_amounts, actual = _amounts(rng), _amounts(rng)
        expected = _snapshot(accounts)
        reached = False
        for acc, (used, reserved) in zip(accounts, expected, strict=True):
            for dim, amount in reserved_amounts.items():
                left = reserved[dim] - amount
                reserved[dim] = left if left > 0.0 else 0.0
            for dim, amount in actual.items():
                used[dim] += amount
                reached = reached or (acc.marks is not None and used[dim] >= acc.marks[dim])
        assert lg.settle_locked(accounts, reserved_amounts, actual) is reached
        _assert_counters(accounts, expected)


def test_headroom_is_the_smallest_room_of_the_accounts() -> None:
    rng = random.Random(7)
    for _ in range(20_000):
        # Counters are finite: every amount is checked before it is counted.
        accounts = [_account(rng, str(i), finite=True) for i in range(rng.choice([0, 1, 2, 3]))]
        for dim in lg.DIMS:
            rooms = [acc.limits[dim] - acc.used[dim] - acc.reserved[dim] for acc in accounts if dim in acc.limits]
            if any(math.isnan(x) for x in rooms):
                continue  # a NaN limit: which NaN or number wins is left open (NaN never fits anyway)
            assert lg.headroom(accounts, dim) == min(rooms, default=math.inf), (dim, rooms)

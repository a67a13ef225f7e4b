"""Lua scripts of `RedisLedger`: each one is a single atomic decision on one scope.

Keys of a scope (all share the hash tag `{prefix:scope}`, so they live in one Redis Cluster slot):

- KEYS[1] `...:used`  hash: dim -> used in the current window; `_w` window index, `_len` window length (ms)
- KEYS[2] `...:held`  hash: dim -> sum of the live reservations
- KEYS[3] `...:res`   hash: reservation id -> its amounts ("dim value dim value ...")
- KEYS[4] `...:exp`   zset: reservation id -> deadline (ms since the epoch, Redis clock)
- KEYS[5] `...:done`  zset: settle id -> when to forget it (a retried settle is a no-op until then); a released
  reservation's id stays here too, as a tombstone, so a reserve that reaches Redis after its release holds nothing
- KEYS[6] `...:def`   hash: every distinct definition of the scope ("dim v ... [_window ms]") -> when first seen,
  and `_cap`: the definition in force, the tightest of them all (lowest value per dimension, longest window,
  no window when one definition has none)

Amounts travel as decimal strings (Python repr) and are stored with 17 significant digits, so a double survives
the round trip exactly; each hash is read with one HMGET and written with one HSET.
The Redis clock (TIME) decides expiry and windows, so clocks of the clients do not matter.

The scripts live in `lua/*.lua` (shipped with the wheel and copied into the npm package, so the Python and the
TypeScript ledgers run the same text): each script is `common.lua` followed by its own file.
"""

from __future__ import annotations

from importlib import resources


def _load(name: str) -> str:
    lua = resources.files("otel_budget.fleet").joinpath("lua")
    return lua.joinpath("common.lua").read_text("utf-8") + "\n" + lua.joinpath(f"{name}.lua").read_text("utf-8")


#: ARGV: id, ttl_ms, window_ms (unused: the window is part of the definition), amounts "dim v ...", the caller's
#: definition "dim v ... [_window ms]" (dims sorted), idle_ms.
#: Returns {"1"} when held, {"0", dim, limit, used_or_reserved, requested} when refused, {"2"} when the id was
#: already released (a reserve that arrived after its release). When the definition in force is not the
#: caller's, it is appended to the reply.
RESERVE = _load("reserve")

#: ARGV: reservation id ("" for a plain charge), settle id, window_ms, actual "dim v ...", remember_ms, idle_ms.
#: Returns "1" when applied, "0" when this settle id was already applied (a retry).
SETTLE = _load("settle")

#: ARGV: dims... Returns {used_1, held_1, used_2, held_2, ...} in the order of the dims, then the definition in
#: force ("" when none is stored) and every stored definition.
READ = _load("read")

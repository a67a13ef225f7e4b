/**
 * Counters and reservations (core/ledger.py). A call first reserves its worst case on every limited dimension
 * of every account it draws from (its run and all the run's ancestors); the reservation fits everywhere or
 * nowhere, and is settled to what was really used after the call. JavaScript runs one task at a time, so
 * the reserve-or-refuse decision needs no lock.
 *
 * `Ledger` is the seam for shared (fleet) budgets: `MemoryLedger` here, a Redis ledger running the same Lua
 * scripts as Python in a later version.
 */
import { pyFixed, pyGeneral, pyInt } from "../model/format.js";

/** Every dimension a ledger counts. `seconds` is not counted: it is the wall clock. */
export const DIMS = ["steps", "tool_calls", "input_tokens", "output_tokens", "total_tokens", "usd"] as const;
const EPS = 1e-12;

export type Amounts = Record<string, number>;

/** One number format for every message: 31,298 / 2.5 / 0.0041 (as Python's ledger._fmt). */
export function fmt(value: number): string {
  if (value === Math.trunc(value)) return pyInt(value);
  return Math.abs(value) >= 1000 ? pyFixed(value, 1, true) : pyGeneral(value, 6);
}

/** Why a reservation did not fit: the dimension, its limit, what was used and reserved, what was asked. */
export class Refusal {
  constructor(
    readonly dim: string,
    readonly limit: number,
    readonly used: number,
    readonly requested: number,
    public scope = "",
    readonly message = "",
    readonly account: Account | null = null,
  ) {}

  describe(): string {
    if (this.message) return this.message;
    return `${this.dim}: ${fmt(this.used)} used or reserved of ${fmt(this.limit)}, `
      + `the next call needs up to ${fmt(this.requested)}`;
  }
}

function zeros(): Amounts {
  return Object.fromEntries(DIMS.map((d) => [d, 0]));
}

/** Counters of one run (or one shared scope) with its limits. */
export class Account {
  readonly used: Amounts = zeros();
  readonly reserved: Amounts = zeros();
  constructor(public limits: Amounts, readonly name = "") {}

  /** What remains on `dim` after use and reservations (Infinity when unlimited). */
  headroom(dim: string): number {
    const limit = this.limits[dim];
    if (limit === undefined) return Infinity;
    return limit - this.used[dim] - this.reserved[dim];
  }

  /** used / limit per limited dimension (reservations not included). */
  utilization(): Amounts {
    const out: Amounts = {};
    for (const [dim, limit] of Object.entries(this.limits)) if (limit > 0) out[dim] = this.used[dim] / limit;
    return out;
  }
}

/** Reserve `amounts` on every account at once, or on none; returns the first refusal. */
export function reserve(accounts: readonly Account[], amounts: Amounts): Refusal | null {
  for (const acc of accounts) {
    for (const [dim, amount] of Object.entries(amounts)) {
      if (amount <= 0) continue;
      const limit = acc.limits[dim];
      if (limit === undefined) continue;
      const taken = acc.used[dim] + acc.reserved[dim];
      if (taken + amount > limit + EPS) return new Refusal(dim, limit, taken, amount, acc.name, "", acc);
    }
  }
  for (const acc of accounts) for (const [dim, amount] of Object.entries(amounts)) acc.reserved[dim] += amount;
  return null;
}

/** Replace a reservation by what was really used (a release when `actual` is empty). */
export function settle(accounts: readonly Account[], reserved: Amounts, actual: Amounts): void {
  for (const acc of accounts) {
    for (const [dim, amount] of Object.entries(reserved)) acc.reserved[dim] = Math.max(0, acc.reserved[dim] - amount);
    for (const [dim, amount] of Object.entries(actual)) acc.used[dim] += amount;
  }
}

/**
 * Count up to `want` whole units of `dim` as used on every account at once, as many as all have room for;
 * returns how many were counted (the rest do not fit and are not counted).
 */
export function take(accounts: readonly Account[], dim: string, want: number): number {
  const room = headroom(accounts, dim);
  const taken = room >= want ? want : Math.max(0, Math.trunc(room));
  if (taken > 0) for (const acc of accounts) acc.used[dim] += taken;
  return taken;
}

/** The smallest headroom on `dim` over `accounts`. */
export function headroom(accounts: readonly Account[], dim: string): number {
  let min = Infinity;
  for (const acc of accounts) min = Math.min(min, acc.headroom(dim));
  return min;
}

// --- shared budgets (the fleet seam) ---------------------------------------------------------------------

/** A reservation held in a store: settle or release it exactly once. */
export interface Reservation {
  scope: string;
  id: string;
  amounts: Amounts;
  /** False when a store let the call through without its shared cap (fail="open" while unreachable). */
  enforced: boolean;
}

/**
 * Where shared (fleet) budgets live; each method is one atomic decision. `limits` travel with every reservation
 * so a store needs no configuration per scope. Methods may be async: a Redis store answers over the network.
 */
export interface Ledger {
  reserve(scope: string, amounts: Amounts, limits: Amounts, window?: number | null):
    Promise<Reservation | Refusal> | Reservation | Refusal;
  settle(reservation: Reservation, actual: Amounts): Promise<void> | void;
  release(reservation: Reservation): Promise<void> | void;
  read(scope: string): Promise<Amounts> | Amounts;
  /** (A shared store) keep `text` as the authoritative record of a run tree ("tree") or a paused run ("paused"). */
  putRecord?(scope: string, kind: string, text: string): Promise<void>;
  /** (A shared store) the record kept by `putRecord`, or null; `refresh` restarts its expiry. */
  getRecord?(scope: string, kind: string, refresh?: boolean): Promise<string | null>;
  /** (A shared store) "closed" refuses while unreachable, "open" lets through. */
  readonly fail?: "closed" | "open";
}

/** The in-process store: shared scopes for every run of this process (the tightest definition applies). */
export class MemoryLedger implements Ledger {
  private readonly scopes = new Map<string, { account: Account; start: number }>();
  private ids = 0;

  private account(scope: string, limits: Amounts, window: number | null): Account {
    const now = Date.now() / 1000;
    const entry = this.scopes.get(scope);
    if (entry === undefined || (window != null && Number.isFinite(window) && now - entry.start >= window)) {
      const account = new Account({ ...limits }, scope);
      const start = window != null && Number.isFinite(window) ? now - (now % window) : now;
      this.scopes.set(scope, { account, start });
      return account;
    }
    for (const [dim, value] of Object.entries(limits)) {
      entry.account.limits[dim] = Math.min(value, entry.account.limits[dim] ?? Infinity);
    }
    return entry.account;
  }

  reserve(scope: string, amounts: Amounts, limits: Amounts, window: number | null = null): Reservation | Refusal {
    const acc = this.account(scope, limits, window);
    const refusal = reserve([acc], amounts);
    if (refusal !== null) return refusal;
    this.ids += 1;
    return { scope, id: String(this.ids), amounts: { ...amounts }, enforced: true };
  }

  settle(reservation: Reservation, actual: Amounts): void {
    const entry = this.scopes.get(reservation.scope);
    if (entry !== undefined) settle([entry.account], reservation.amounts, actual);
  }

  release(reservation: Reservation): void {
    this.settle(reservation, {});
  }

  read(scope: string): Amounts {
    const entry = this.scopes.get(scope);
    if (entry === undefined) return zeros();
    const out: Amounts = {};
    for (const dim of DIMS) out[dim] = entry.account.used[dim] + entry.account.reserved[dim];
    return out;
  }
}

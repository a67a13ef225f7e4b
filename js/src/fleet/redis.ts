/**
 * `RedisLedger`: shared (fleet) budgets in Redis, one atomic Lua round trip per decision (fleet/redis_ledger.py).
 *
 * It runs the very Lua scripts of the Python `RedisLedger` (shipped in `dist/lua/`, copied from
 * `otel_budget/fleet/lua/`), with the same key names and the same stored formats, so Python and Node processes
 * draw from one scope on one Redis. A scope definition is written as Python writes it (`usd 0.05 steps 10.0`):
 * the numbers are Python float reprs, or the two languages would see each other as a conflicting definition.
 *
 * ioredis is an optional peer dependency: install it, or pass a ready client (`new RedisLedger({ client })`).
 */
import { createHash, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { DIMS, type Amounts, type Ledger, MemoryLedger, Refusal, type Reservation } from "../core/ledger.js";
import { pyFloatRepr } from "../model/format.js";

const LOCAL = "local:";
/** Scopes whose name starts with this are ad-hoc run trees; their keys expire when idle (as in Python). */
export const TREE_SCOPE_PREFIX = "run:";

/** The shared ledger could not be reached (thrown by `read`/`detail`; reserve and settle follow `fail`). */
export class LedgerUnavailable extends Error {
  constructor(message: string) {
    super(message);
    this.name = "LedgerUnavailable";
  }
}

/** The parts of an ioredis client the ledger uses (an `ioredis` `Redis` or `Cluster`). */
export interface RedisClient {
  status?: string;
  connect?(): Promise<unknown>;
  evalsha(sha: string, numKeys: number, ...args: (string | number)[]): Promise<unknown>;
  eval(script: string, numKeys: number, ...args: (string | number)[]): Promise<unknown>;
  del(...keys: string[]): Promise<unknown>;
  set(key: string, value: string, px: "PX", ms: number): Promise<unknown>;
  get(key: string): Promise<string | null>;
  pexpire(key: string, ms: number): Promise<unknown>;
  quit?(): Promise<unknown>;
  disconnect?(): void;
}

export interface RedisLedgerOptions {
  /** redis:// or rediss:// URL (default redis://127.0.0.1:6379/0); ignored when `client` is given. */
  url?: string;
  /** A ready ioredis client (`new Redis(...)` or `new Cluster(...)`). */
  client?: RedisClient;
  /** Key prefix, as Python's `prefix` (default "otel_budget"). */
  prefix?: string;
  /** "closed" refuses calls while Redis is unreachable; "open" lets them through, not enforced. */
  fail?: "closed" | "open";
  /** Seconds a reservation is held at most (longer than your slowest model call; default 300). */
  reservationTtl?: number;
  /** Seconds to wait for Redis per command and to connect (default 0.25). */
  timeout?: number;
  /** After a failure, seconds during which calls go straight to `fail` (default 1). */
  retryInterval?: number;
  /** Seconds a settle id is remembered, so a retried settle is a no-op (default 600; at least reservationTtl). */
  settleMemory?: number;
  /** Idle seconds after which the keys of an ad-hoc run-tree scope (`run:...`) expire (default 86400). */
  treeTtl?: number;
  /** Seconds the record of a paused run is kept: a paused run is resumable that long (default 30 days). */
  pausedTtl?: number;
}

function script(name: string): { text: string } {
  const dir = new URL("../lua/", import.meta.url);
  const text = `${readFileSync(new URL("common.lua", dir), "utf8")}\n${readFileSync(new URL(`${name}.lua`, dir), "utf8")}`;
  return { text };
}

/** Amounts as the scripts take them: "dim value ..." with Python float reprs (NaN dropped). */
export function encodeAmounts(amounts: Amounts): string {
  return Object.entries(amounts).filter(([, v]) => !Number.isNaN(v)).map(([d, v]) => `${d} ${pyFloatRepr(v)}`)
    .join(" ");
}

function windowMs(window: number | null | undefined): number {
  return window && Number.isFinite(window) ? Math.trunc(window * 1000) : 0;
}

/** A scope's definition as the store keeps it (Python's `definition`): "dim value ..." sorted, then "_window ms". */
export function scopeDefinition(limits: Amounts, window: number | null = null): string {
  const sorted: Amounts = {};
  for (const dim of Object.keys(limits).sort()) sorted[dim] = limits[dim];
  const text = encodeAmounts(sorted);
  const ms = windowMs(window);
  return ms ? `${text} _window ${ms}`.trim() : text;
}

/** A stored definition as numbers: {dim: value}, and `window_seconds` when windowed. */
export function parseDefinition(text: string): Amounts {
  const parts = text.split(/\s+/).filter(Boolean);
  const out: Amounts = {};
  for (let i = 0; i + 1 < parts.length; i += 2) out[parts[i]] = Number(parts[i + 1]);
  if ("_window" in out) {
    out.window_seconds = out._window / 1000;
    delete out._window;
  }
  return out;
}

/** The URL without its password, for messages. */
export function redact(url: string): string {
  try {
    const u = new URL(url);
    if (!u.password) return url;
    u.password = "***";
    return u.toString();
  } catch {
    return "<redis url>";
  }
}

export interface ScopeDetail {
  used: Amounts;
  reserved: Amounts;
  limits: Amounts;
  definitions: Amounts[];
  conflict: boolean;
}

/** A `Ledger` on Redis, shared with the Python `RedisLedger` (same scripts, keys and formats). */
export class RedisLedger implements Ledger {
  readonly url: string;
  readonly prefix: string;
  readonly fail: "closed" | "open";
  private client: RedisClient | null;
  private connecting: Promise<RedisClient> | null = null;
  private readonly options: RedisLedgerOptions;
  private readonly ttlMs: number;
  private readonly rememberMs: number;
  private readonly treeMs: number;
  private readonly pausedMs: number;
  private readonly retryMs: number;
  private readonly scripts = { reserve: script("reserve"), settle: script("settle"), read: script("read") };
  private readonly node = randomBytes(6).toString("hex");
  private ids = 0;
  private readonly local = new MemoryLedger();
  private downUntil = 0;
  private lastError: unknown = null;
  private readonly backlog: [string, string, string, string][] = [];
  private readonly conflicts = new Set<string>();
  private warned = false;

  constructor(options: RedisLedgerOptions | string = {}) {
    const opts = typeof options === "string" ? { url: options } : options;
    const fail = opts.fail ?? "closed";
    if (fail !== "closed" && fail !== "open") {
      throw new TypeError(`fail must be "closed" or "open", not ${JSON.stringify(fail)}`);
    }
    for (const key of ["reservationTtl", "timeout", "settleMemory"] as const) {
      const v = opts[key];
      if (v !== undefined && !(typeof v === "number" && v > 0)) {
        throw new TypeError(`RedisLedger: ${key} must be a positive number of seconds, not ${String(v)}`);
      }
    }
    this.options = opts;
    this.url = opts.url ?? "redis://127.0.0.1:6379/0";
    this.prefix = opts.prefix ?? "otel_budget";
    this.fail = fail;
    const ttl = opts.reservationTtl ?? 300;
    this.ttlMs = Math.trunc(ttl * 1000);
    this.rememberMs = Math.trunc(Math.max(opts.settleMemory ?? 600, ttl) * 1000);
    this.treeMs = Math.trunc((opts.treeTtl ?? 86400) * 1000);
    this.pausedMs = Math.trunc((opts.pausedTtl ?? 30 * 86400) * 1000);
    this.retryMs = (opts.retryInterval ?? 1) * 1000;
    this.client = opts.client ?? null;
  }

  /** The six keys of a scope; they share the hash tag `{prefix:scope}` (one Cluster slot). */
  keys(scope: string): string[] {
    const base = `{${this.prefix}:${scope}}`;
    return ["used", "held", "res", "exp", "done", "def"].map((k) => `${base}:${k}`);
  }

  /** The key of a record kept beside a scope's counters (same hash tag): `{prefix:scope}:kind`. */
  recordKey(scope: string, kind: string): string {
    return `{${this.prefix}:${scope}}:${kind}`;
  }

  /**
   * Keep `text` (canonical JSON) as the authoritative record of a run tree ("tree") or a paused run ("paused"),
   * as Python's `put_record`; it expires after `treeTtl` or `pausedTtl`. Throws LedgerUnavailable.
   */
  async putRecord(scope: string, kind: string, text: string): Promise<void> {
    try {
      const client = await this.connection();
      await client.set(this.recordKey(scope, kind), text, "PX", Math.max(1, kind === "paused" ? this.pausedMs
        : this.treeMs));
    } catch (exc) {
      throw new LedgerUnavailable(this.unreachable(exc));
    }
  }

  /** The record kept by `putRecord`, or null; `refresh` restarts its expiry (a tree in use). */
  async getRecord(scope: string, kind: string, refresh = false): Promise<string | null> {
    const key = this.recordKey(scope, kind);
    try {
      const client = await this.connection();
      const value = await client.get(key);
      if (refresh && value !== null) await client.pexpire(key, Math.max(1, kind === "paused" ? this.pausedMs : this.treeMs));
      return value === null ? null : String(value);
    } catch (exc) {
      throw new LedgerUnavailable(this.unreachable(exc));
    }
  }

  private async connection(): Promise<RedisClient> {
    if (this.client !== null) {
      if (this.client.status === "wait" && this.client.connect) await this.client.connect();
      return this.client;
    }
    this.connecting ??= (async () => {
      let Redis: new (url: string, opts: object) => RedisClient;
      try {
        const mod = await import("ioredis") as unknown as { default: typeof Redis };
        Redis = mod.default;
      } catch {
        throw new Error("otel-budget: RedisLedger needs the ioredis package: npm install ioredis "
          + "(or pass a ready client: new RedisLedger({ client }))");
      }
      const ms = (this.options.timeout ?? 0.25) * 1000;
      const client = new Redis(this.url, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0,
        connectTimeout: ms, commandTimeout: ms, retryStrategy: () => this.retryMs });
      (client as unknown as { on(e: string, f: () => void): void }).on("error", () => {}); // reported per call
      this.client = client;
      return client;
    })();
    const client = await this.connecting;
    if (client.status === "wait" && client.connect) await client.connect();
    return client;
  }

  private async evalScript(name: keyof RedisLedger["scripts"], keys: string[], args: (string | number)[]):
    Promise<unknown> {
    const client = await this.connection();
    const s = this.scripts[name];
    try {
      return await client.evalsha(sha1(s.text), keys.length, ...keys, ...args);
    } catch (exc) {
      if (!String((exc as Error)?.message ?? exc).includes("NOSCRIPT")) throw exc;
      return await client.eval(s.text, keys.length, ...keys, ...args);
    }
  }

  /** One script call, after the settles kept while Redis was away; a failure opens the breaker. */
  private async run(name: keyof RedisLedger["scripts"], keys: string[], args: (string | number)[]): Promise<unknown> {
    if (Date.now() < this.downUntil) {
      throw new LedgerUnavailable(`${String(this.lastError)} (not retried for ${this.retryMs / 1000} s)`);
    }
    try {
      if (this.backlog.length) await this.flushSome(100);
      const out = await this.evalScript(name, keys, args);
      this.warned = false;
      return out;
    } catch (exc) {
      if (!isReplyError(exc)) {
        this.downUntil = Date.now() + this.retryMs;
        this.lastError = exc instanceof Error ? exc.message : exc;
      }
      throw exc;
    }
  }

  private unreachable(exc: unknown): string {
    const text = exc instanceof Error ? exc.message : String(exc);
    return `the shared ledger at ${redact(this.url)} is unreachable (fail='${this.fail}'): ${text}`;
  }

  private warn(exc: unknown): void {
    if (this.warned) return;
    this.warned = true;
    process.emitWarning(`otel-budget: ${this.unreachable(exc)}`, { code: "OTEL_BUDGET_LEDGER_UNREACHABLE" });
  }

  private newId(): string {
    this.ids += 1;
    return `${this.node}:${this.ids}`;
  }

  private idleMs(scope: string): number {
    return scope.startsWith(TREE_SCOPE_PREFIX) ? this.treeMs : 0;
  }

  /** Hold `amounts` in `scope` if they fit its cap (the tightest of every stored definition), or say why not. */
  async reserve(scope: string, amounts: Amounts, limits: Amounts, window: number | null = null):
    Promise<Reservation | Refusal> {
    const rid = this.newId();
    const mine = scopeDefinition(limits, window);
    const args = [rid, this.ttlMs, windowMs(window), encodeAmounts(amounts), mine, this.idleMs(scope)];
    let result: string[];
    try {
      result = (await this.run("reserve", this.keys(scope), args) as unknown[]).map(String);
    } catch (exc) {
      this.warn(exc);
      if (!isReplyError(exc) && !(exc instanceof LedgerUnavailable)) this.backlog.push([scope, rid, rid, ""]);
      if (this.fail === "closed") return new Refusal("ledger", 0, 0, 0, scope, this.unreachable(exc));
      const held = this.local.reserve(scope, amounts, limits, window);
      if (held instanceof Refusal) return held;
      return { scope, id: LOCAL + held.id, amounts: { ...amounts }, enforced: false };
    }
    if (result.length === 2 || result.length === 6) this.conflict(scope, mine, result[result.length - 1]);
    if (result[0] === "1") return { scope, id: rid, amounts: { ...amounts }, enforced: true };
    if (result[0] === "2") return new Refusal("ledger", 0, 0, 0, scope, `reservation ${rid} was already released`);
    return new Refusal(result[1], Number(result[2]), Number(result[3]), Number(result[4]), scope);
  }

  private conflict(scope: string, mine: string, cap: string): void {
    const key = `${scope}\u0000${mine}`;
    if (this.conflicts.has(key)) return;
    this.conflicts.add(key);
    process.emitWarning(`otel-budget: the shared scope '${scope}' is defined differently elsewhere; the tightest `
      + `definition applies: ${describe(cap)} (this process: ${describe(mine)}). Give every deployment the same `
      + `Scope, or call RedisLedger.forgetDefinitions('${scope}') to drop the stored ones.`,
    { code: "OTEL_BUDGET_SCOPE_CONFLICT" });
  }

  /** Replace the reservation by `actual` exactly once (a retried settle is a no-op). */
  async settle(reservation: Reservation, actual: Amounts): Promise<void> {
    let rid = reservation.id;
    if (rid.startsWith(LOCAL)) {
      this.local.settle({ ...reservation, id: rid.slice(LOCAL.length) }, actual);
      rid = "";
      if (!Object.values(actual).some((v) => v)) return;
    }
    const sid = rid || this.newId();
    const item: [string, string, string, string] = [reservation.scope, rid, sid, encodeAmounts(actual)];
    try {
      await this.run("settle", this.keys(item[0]), [item[1], item[2], 0, item[3], this.rememberMs,
        this.idleMs(item[0])]);
    } catch (exc) {
      this.warn(exc);
      this.backlog.push(item);
    }
  }

  /** Give the reservation back unused. */
  async release(reservation: Reservation): Promise<void> {
    await this.settle(reservation, {});
  }

  /** Used plus reserved per dimension; throws LedgerUnavailable. */
  async read(scope: string): Promise<Amounts> {
    const d = await this.detail(scope);
    return Object.fromEntries(DIMS.map((dim) => [dim, d.used[dim] + d.reserved[dim]]));
  }

  /** A scope in the current window, as Python's `detail()`. */
  async detail(scope: string): Promise<ScopeDetail> {
    let raw: string[];
    try {
      raw = (await this.run("read", this.keys(scope), [...DIMS]) as unknown[]).map(String);
    } catch (exc) {
      throw new LedgerUnavailable(this.unreachable(exc));
    }
    const n = 2 * DIMS.length;
    const defs = raw.slice(n + 1).sort((a, b) => a.length - b.length || (a < b ? -1 : a > b ? 1 : 0));
    return {
      used: Object.fromEntries(DIMS.map((d, i) => [d, Number(raw[2 * i])])),
      reserved: Object.fromEntries(DIMS.map((d, i) => [d, Number(raw[2 * i + 1])])),
      limits: raw.length > n ? parseDefinition(raw[n]) : {},
      definitions: defs.map(parseDefinition),
      conflict: defs.length > 1,
    };
  }

  /** Drop the stored definitions of `scope` (e.g. to raise its cap). */
  async forgetDefinitions(scope: string): Promise<void> {
    try {
      await (await this.connection()).del(this.keys(scope)[5]);
    } catch (exc) {
      throw new LedgerUnavailable(this.unreachable(exc));
    }
    for (const key of [...this.conflicts]) if (key.startsWith(`${scope}\u0000`)) this.conflicts.delete(key);
  }

  /** Settles waiting for Redis to answer again. */
  get pending(): number {
    return this.backlog.length;
  }

  private async flushSome(batch: number): Promise<void> {
    for (let i = 0; i < batch && this.backlog.length; i += 1) {
      const [scope, rid, sid, actual] = this.backlog[0];
      try {
        await this.evalScript("settle", this.keys(scope), [rid, sid, 0, actual, this.rememberMs, this.idleMs(scope)]);
      } catch (exc) {
        if (isReplyError(exc)) return;
        throw exc;
      }
      this.backlog.shift();
    }
  }

  /** Try now to push the settles kept while Redis was away; returns how many still wait. */
  async flush(): Promise<number> {
    this.downUntil = 0;
    try {
      await this.flushSome(this.backlog.length);
    } catch {
      // still unreachable
    }
    return this.backlog.length;
  }

  /** Close the connection. */
  async close(): Promise<void> {
    const client = this.client;
    if (client === null) return;
    try {
      if (client.quit) await client.quit();
      else client.disconnect?.();
    } catch {
      client.disconnect?.();
    }
  }
}

const shas = new Map<string, string>();
function sha1(text: string): string {
  let sha = shas.get(text);
  if (sha === undefined) {
    sha = createHash("sha1").update(text).digest("hex");
    shas.set(text, sha);
  }
  return sha;
}

function isReplyError(exc: unknown): boolean {
  return (exc as { name?: string })?.name === "ReplyError";
}

function describe(text: string): string {
  return Object.entries(parseDefinition(text)).map(([k, v]) => `${k}=${v}`).join(", ") || "no limits";
}


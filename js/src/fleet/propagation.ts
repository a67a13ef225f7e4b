/**
 * Run trees across processes (fleet/propagation.py): a coordinator hands a worker, in either language, a token
 * that lets it draw from the coordinator's tree.
 *
 *     const token = await exportRun();                  // inside run(): send it with the task
 *     await attachRun(token, { name: "worker" }, async (run) => ...);   // in the worker, same ledger and secret
 *
 * The first `exportRun()` of a run moves what the run (and its ancestors) still have left into an ad-hoc scope of
 * the shared store, `run:<trace id>:<random>`; from then on the coordinator's calls and every attached worker's
 * calls reserve there too. With a `RedisLedger` the first export records the tree's quota, deadline and fleet
 * scopes in Redis (key `{<prefix>:run:...}:tree`): a worker takes its tree cap and fleet scopes from that record,
 * whatever its token says; a token can only narrow them.
 */
import { randomBytes } from "node:crypto";
import { ROOT_CONTEXT, TraceFlags, context, trace } from "@opentelemetry/api";
import { getSettings } from "../core/config.js";
import { DIMS, headroom } from "../core/ledger.js";
import type { RunNode, SharedScope } from "../core/node.js";
import { type Run, type RunResult, currentNode, nodeOf, runTree } from "../core/run.js";
import { recordStore } from "../core/trust.js";
import { Budget, type BudgetOptions, LIMITS } from "../model/budget.js";
import { pyRound } from "../model/format.js";
import { Num } from "../model/signatures.js";
import * as sc from "../telemetry/semconv.js";
import { InvalidRunState, amount, canonical } from "../model/trust.js";
import { type TokenPayload, decodeToken, encodeToken, limitsOf, scopeOf } from "./tokens.js";

/** Record kind of a run tree in the store: `{<prefix>:run:<trace id>:<random>}:tree`. */
export const TREE_RECORD = "tree";
const INT_DIMS = new Set(["steps", "tool_calls", "input_tokens", "output_tokens", "total_tokens"]);
const trees = new WeakMap<RunNode, SharedScope>();

function scope(name: string, limits: Record<string, number>, window: number | null = null): SharedScope {
  const copy = { ...limits };
  return { name, limits: () => ({ ...copy }), windowSeconds: window };
}

function treeScope(node: RunNode): [SharedScope, boolean] {
  const known = trees.get(node);
  if (known !== undefined) return [known, false];
  const left: Record<string, number> = {};
  for (const dim of DIMS) {
    const room = headroom(node.accounts, dim);
    if (room !== Infinity) left[dim] = Math.max(0, INT_DIMS.has(dim) ? Math.floor(room) : room);
  }
  const ident = node.traceId ?? randomBytes(16).toString("hex");
  const tree = scope(`run:${ident}:${randomBytes(4).toString("hex")}`, left);
  trees.set(node, tree);
  node.addScopes([tree]);
  return [tree, true];
}

/**
 * A token that lets another process (Node or Python) attach to the current run's tree (`run` given: that run's
 * tree). The first export moves the run's remaining budget into a shared-store scope that the run uses too from
 * then on; later exports return tokens for the same scope. Signed when a secret is configured.
 */
export async function exportRun(run?: Run): Promise<string> {
  const node = run !== undefined ? nodeOf(run) : currentNode();
  if (node === undefined) {
    throw new Error("exportRun() needs a run: call it inside run(name, { budget }, async (run) => ...)");
  }
  const [tree, created] = treeScope(node);
  const payload: TokenPayload = {
    v: 1, run: node.name, tree: tree.name, limits: tree.limits(),
    scopes: node.scopes.filter((s) => s !== tree).map((s) => ({ name: s.name, limits: s.limits(),
      window: s.windowSeconds })),
  };
  if (node.traceId !== null && node.spanId !== null) payload.tp = `00-${node.traceId}-${node.spanId}-01`;
  const left = node.timeLeft();
  if (left !== Infinity) payload.deadline = pyRound(Date.now() / 1000 + left, 3);
  if (created) await recordTree(payload);
  return encodeToken(payload);
}

const floats = (limits: Record<string, number>) =>
  Object.fromEntries(Object.entries(limits).map(([dim, v]) => [dim, Num.float(v)]));

/** With a shared store that keeps records, the tree's quota, deadline and fleet scopes: the worker's authority. */
async function recordTree(payload: TokenPayload): Promise<void> {
  const store = recordStore();
  if (store === null) return;
  const record: Record<string, unknown> = { limits: floats(payload.limits), run: payload.run,
    scopes: payload.scopes.map((s) => ({ name: s.name, limits: floats(s.limits),
      window: s.window === null ? null : Num.float(s.window) })) };
  if (payload.deadline !== undefined) record.deadline = Num.float(payload.deadline);
  try {
    await store.putRecord(payload.tree, TREE_RECORD, canonical(record).toString("utf8"));
  } catch (exc) {
    process.emitWarning(`otel-budget: the run tree ${payload.tree} could not be recorded in the shared ledger `
      + `(${(exc as Error).message}); workers attaching to it are refused while the ledger fails closed`,
    { code: "OTEL_BUDGET_LEDGER" });
  }
}

type Authoritative = TokenPayload & { cap?: Record<string, number> };

/** With a shared store, the token's quota narrowed by the tree's record, and the record's fleet scopes. */
async function authoritative(payload: TokenPayload): Promise<Authoritative> {
  const store = recordStore();
  if (store === null) return payload;
  const tree = payload.tree;
  let text: string | null;
  try {
    text = await store.getRecord(tree, TREE_RECORD, true);
  } catch (exc) {
    if (store.fail === "open") {
      process.emitWarning(`otel-budget: ${(exc as Error).message}; the run token is used as given (fail "open")`,
        { code: "OTEL_BUDGET_LEDGER" });
      return payload;
    }
    throw new InvalidRunState(`attachRun(): the tree ${tree} cannot be checked: ${(exc as Error).message}`);
  }
  if (text === null) {
    throw new InvalidRunState(`attachRun(): the run tree ${tree} is not recorded in the shared ledger: the token was `
      + "edited, exported without this ledger (instrument({ ledger: new RedisLedger(...) }) in the coordinator), or "
      + "the tree expired (RedisLedger treeTtl)", "tree");
  }
  const what = "the shared ledger's record of the run tree";
  let record: Record<string, unknown>;
  try {
    record = JSON.parse(text);
  } catch {
    throw new InvalidRunState(`${what} ${tree} is damaged`);
  }
  if (record === null || typeof record !== "object" || !Array.isArray(record.scopes ?? [])) {
    throw new InvalidRunState(`${what} ${tree} is damaged`);
  }
  const cap = limitsOf(record.limits ?? {}, "limits", what);
  const limits = { ...cap };
  for (const [dim, value] of Object.entries(payload.limits)) limits[dim] = Math.min(value, limits[dim] ?? Infinity);
  const scopes = ((record.scopes ?? []) as unknown[]).map((s, i) => scopeOf(s, `scopes[${i}]`, what));
  const out: Authoritative = { ...payload, limits, cap, scopes };
  if (record.deadline !== undefined && record.deadline !== null) {
    out.deadline = Math.min(amount(record.deadline, "deadline", what), payload.deadline ?? Infinity);
  }
  return out;
}

const DIM_FIELD: Record<string, keyof BudgetOptions> = Object.fromEntries(
  Object.values(LIMITS).map(([dim, , , field]) => [dim, field]));

/** The worker's own budget: the remaining limits, narrowed by `budget` when given. */
function workerBudget(payload: Authoritative, budget: Budget | undefined): Budget {
  const update: Record<string, number> = {};
  for (const [dim, value] of Object.entries(payload.limits)) {
    const field = DIM_FIELD[dim];
    if (field === undefined || value <= 0) continue; // a limit left at 0 refuses in the tree scope
    const mine = budget?.[field as keyof Budget] as number | null | undefined;
    update[field] = mine == null ? value : Math.min(mine, value);
  }
  const total = update.maxTotalTokens ?? budget?.maxTotalTokens ?? null;
  if (total !== null) { // what is left of a part can be more than what is left of the total: the total bounds it
    for (const part of ["maxInputTokens", "maxOutputTokens"]) if (update[part] > total) update[part] = total;
  }
  if (payload.deadline !== undefined) {
    const left = Math.max(0.001, payload.deadline - Date.now() / 1000);
    update.maxSeconds = budget?.maxSeconds == null ? left : Math.min(budget.maxSeconds, left);
  }
  return budget !== undefined ? budget.with(update) : new Budget(update);
}

export interface AttachOptions {
  /** The worker's run name (default "worker"). */
  name?: string;
  /** The worker's own limits: they can only narrow what the tree has left. */
  budget?: Budget | BudgetOptions;
}

/**
 * Run `fn` as a run of the tree the token came from (a `exportRun` in Node or Python's `export_run`): its calls
 * reserve in the tree's store scope and in the fleet scopes the exporting run used, plus its own budget; its span
 * is a child of the exporting run's span (same trace). Throws InvalidRunState for a token that cannot be trusted.
 */
export async function attachRun<T>(token: string, options: AttachOptions, fn: (run: Run) => Promise<T> | T):
  Promise<RunResult<T>> {
  const opts = options ?? {};
  if (typeof fn !== "function") throw new TypeError("attachRun(token, { name, budget }, fn): fn must be a function");
  const payload = await authoritative(decodeToken(token));
  const given = opts.budget === undefined ? undefined : opts.budget instanceof Budget ? opts.budget
    : new Budget(opts.budget);
  return runTree(opts.name ?? "worker", workerBudget(payload, given), fn, {
    prepare: (node) => {
      node.addScopes([scope(payload.tree, payload.cap ?? payload.limits),
        ...payload.scopes.map((s) => scope(s.name, s.limits, s.window))]);
      const parts = payload.tp?.split("-") ?? [];
      if (node.parent !== null || parts.length < 4) return undefined;
      const ctx = { traceId: parts[1], spanId: parts[2], traceFlags: TraceFlags.SAMPLED, isRemote: true };
      return trace.isSpanContextValid(ctx) ? trace.setSpanContext(ROOT_CONTEXT, ctx) : undefined;
    },
  });
}

/** Used plus reserved per dimension in the tree's store scope (every process's calls together). */
export async function treeUsage(token: string): Promise<Record<string, number>> {
  return getSettings().ledger.read(decodeToken(token).tree);
}

/** The W3C baggage entry that carries the token in `injectRun` / `extractRun` (as Python's). */
export const BAGGAGE_KEY = sc.BAGGAGE_RUN;

/**
 * Put the current trace context (`traceparent`) and the run token (W3C `baggage`, entry `otel_budget.run`) into
 * `headers` (a plain object), for an HTTP request to a worker in either language; returns `headers`.
 */
export async function injectRun(headers: Record<string, string> = {}, run?: Run): Promise<Record<string, string>> {
  const token = await exportRun(run);
  const active = trace.getSpanContext(context.active());
  if (active !== undefined && trace.isSpanContextValid(active)) {
    headers.traceparent = `00-${active.traceId}-${active.spanId}-${active.traceFlags & 1 ? "01" : "00"}`;
  } else {
    const payload = decodeToken(token);
    if (payload.tp !== undefined) headers.traceparent = payload.tp;
  }
  const entry = `${BAGGAGE_KEY}=${encodeURIComponent(token)}`;
  headers.baggage = headers.baggage ? `${headers.baggage},${entry}` : entry;
  return headers;
}

/**
 * The run token carried by `headers` (from `injectRun` or Python's `propagation.inject`), or null. Only a signed
 * token is accepted here (a request's headers come from anyone): without a secret, or with a token that is
 * unsigned or edited, this throws InvalidRunState. Nothing reads baggage unless the code calls this. An incoming
 * `traceparent` header wins over the one in the token (it may name a more precise parent).
 */
export function extractRun(headers: Record<string, string | string[] | undefined>): string | null {
  const lowered: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) if (v !== undefined) lowered[k.toLowerCase()] = String(v);
  let token: string | null = null;
  for (const item of (lowered.baggage ?? "").split(",")) {
    const eq = item.indexOf("=");
    if (eq < 0 || item.slice(0, eq).trim() !== BAGGAGE_KEY) continue;
    try {
      token = decodeURIComponent(item.slice(eq + 1).split(";")[0].trim());
    } catch {
      throw new InvalidRunState("the otel_budget.run baggage entry is not percent-encoded text");
    }
  }
  if (token === null) return null;
  const payload = decodeToken(token, { signed: true });
  if (lowered.traceparent) {
    payload.tp = lowered.traceparent;
    if (lowered.tracestate) payload.ts = lowered.tracestate;
    else delete payload.ts;
  }
  return encodeToken(payload);
}

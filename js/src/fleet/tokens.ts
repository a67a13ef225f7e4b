/**
 * Run tokens on the wire (fleet/tokens.py): `otb1.<payload>` or, signed, `otb1.<payload>.<signature>`.
 *
 * `<payload>` is the unpadded URL-safe base64 of the JSON payload (keys sorted, no spaces, numbers as Python
 * writes them); `<signature>` the unpadded URL-safe base64 of HMAC-SHA256 over those JSON bytes (as sent, not
 * re-serialized), with the secret of `instrument({ secret })` or OTEL_BUDGET_SECRET. A token made by Python is
 * the same string as one made here for the same payload. Every field read back is checked: a damaged token, a
 * nonsense number, an edited signed token or an unsigned one where a secret is configured throw InvalidRunState.
 *
 * Payload fields: `v` (1), `run` (name), `tree` (the tree's store scope, `run:...`), `limits` ({dim: left}),
 * `scopes` ([{name, limits, window}]), optionally `deadline` (Unix time), `tp` / `ts` (W3C trace context).
 */
import { DIMS } from "../core/ledger.js";
import { secret, warnUnsigned } from "../core/trust.js";
import { Num } from "../model/signatures.js";
import { InvalidRunState, amount, b64, canonical, count, show, sign, signedBy } from "../model/trust.js";

/** Every token starts with this (format version 1). */
export const TOKEN_PREFIX = "otb1.";
export const TREE_PREFIX = "run:";
const INT_DIMS = new Set(["steps", "tool_calls", "input_tokens", "output_tokens", "total_tokens"]);
const WHAT = "a damaged otel-budget run token";

export interface TokenScope {
  name: string;
  limits: Record<string, number>;
  window: number | null;
}

/** A run token's content, checked. */
export interface TokenPayload {
  v: 1;
  run: string;
  tree: string;
  limits: Record<string, number>;
  scopes: TokenScope[];
  deadline?: number;
  tp?: string;
  ts?: string;
}

const floats = (limits: Record<string, number>) =>
  Object.fromEntries(Object.entries(limits).map(([dim, v]) => [dim, Num.float(v)]));

/** The payload as Python types it: limits, windows and the deadline are floats. */
function typed(payload: TokenPayload): Record<string, unknown> {
  const out: Record<string, unknown> = {
    v: 1, run: payload.run, tree: payload.tree, limits: floats(payload.limits),
    scopes: payload.scopes.map((s) => ({ name: s.name, limits: floats(s.limits),
      window: s.window === null ? null : Num.float(s.window) })),
  };
  if (payload.deadline !== undefined) out.deadline = Num.float(payload.deadline);
  if (payload.tp !== undefined) out.tp = payload.tp;
  if (payload.ts !== undefined) out.ts = payload.ts;
  return out;
}

/** The token of `payload`, signed when a secret is configured. */
export function encodeToken(payload: TokenPayload): string {
  const raw = canonical(typed(payload));
  const token = TOKEN_PREFIX + b64(raw);
  const key = secret();
  return key === null ? token : `${token}.${sign(raw, key)}`;
}

/**
 * The checked payload of `token`. `signed`: refuse a token without a valid signature (even without a secret
 * configured, which then refuses every token).
 */
export function decodeToken(token: unknown, options: { signed?: boolean } = {}): TokenPayload {
  if (typeof token !== "string" || !token.startsWith(TOKEN_PREFIX)) {
    throw new InvalidRunState("not an otel-budget run token (it should start with 'otb1.')");
  }
  const rest = token.slice(TOKEN_PREFIX.length);
  const dot = rest.indexOf(".");
  const body = dot < 0 ? rest : rest.slice(0, dot);
  const signature = dot < 0 ? "" : rest.slice(dot + 1);
  let raw: Buffer;
  let payload: unknown;
  try {
    if (!/^[A-Za-z0-9_-]*$/.test(body)) throw new SyntaxError("not URL-safe base64");
    raw = Buffer.from(body, "base64url");
    payload = JSON.parse(raw.toString("utf8"));
  } catch (exc) {
    throw new InvalidRunState(`${WHAT}: its payload is not base64 JSON (${(exc as Error).name})`);
  }
  if (payload === null || typeof payload !== "object" || Array.isArray(payload)) {
    throw new InvalidRunState(`${WHAT}: its payload is ${Array.isArray(payload) ? "list" : typeof payload}, not an `
      + "object");
  }
  verify(raw, signature, options.signed ?? false);
  return checkedPayload(payload as Record<string, unknown>);
}

function verify(raw: Buffer, signature: string, signed: boolean): void {
  const key = secret();
  if (key === null) {
    if (signed) {
      throw new InvalidRunState("only a signed run token is accepted here, and no secret is configured to check one: "
        + "give instrument({ secret }) or OTEL_BUDGET_SECRET, the coordinator's secret", "signature");
    }
    warnUnsigned("a run token was");
    return;
  }
  if (!signature) {
    throw new InvalidRunState("the run token is not signed, and a secret is configured: it was exported without the "
      + "secret, or its signature was removed. Give the coordinator the same secret.", "signature");
  }
  if (!signedBy(raw, signature, key)) {
    throw new InvalidRunState("the run token was changed after it was signed (or signed with another secret): "
      + "refused. Pass the token as the coordinator exported it.", "signature");
  }
}

/** The payload with every field checked (types, finite numbers >= 0), or InvalidRunState naming the field. */
export function checkedPayload(payload: Record<string, unknown>): TokenPayload {
  if (payload.v !== 1) throw new InvalidRunState(`${WHAT}: v=${show(payload.v)}, this version reads v=1`, "v");
  const tree = payload.tree;
  if (typeof tree !== "string" || !tree.startsWith(TREE_PREFIX) || tree.length > 200) {
    throw new InvalidRunState(`${WHAT}: tree=${show(tree)} is not a run tree scope ('run:...')`, "tree");
  }
  const run = text(payload, "run");
  const limits = limitsOf(payload.limits ?? {}, "limits");
  const scopes = payload.scopes ?? [];
  if (!Array.isArray(scopes)) throw new InvalidRunState(`${WHAT}: scopes=${show(scopes)} is not a list`, "scopes");
  const out: TokenPayload = { v: 1, tree, run, limits, scopes: scopes.map((s, i) => scopeOf(s, `scopes[${i}]`)) };
  if (payload.deadline !== undefined && payload.deadline !== null) {
    out.deadline = amount(payload.deadline, "deadline", WHAT);
  }
  for (const key of ["tp", "ts"] as const) {
    if (payload[key] !== undefined && payload[key] !== null) out[key] = text(payload, key);
  }
  return out;
}

/** {dim: remaining} with known dims, whole counts and finite amounts >= 0. */
export function limitsOf(value: unknown, field: string, what = WHAT): Record<string, number> {
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new InvalidRunState(`${what}: ${field}=${show(value)} is not an object of dimension -> number`, field);
  }
  const out: Record<string, number> = {};
  for (const [dim, v] of Object.entries(value)) {
    if (!(DIMS as readonly string[]).includes(dim)) {
      throw new InvalidRunState(`${what}: ${field}.${dim} is not a dimension (one of ${DIMS.join(", ")})`,
        `${field}.${dim}`);
    }
    out[dim] = INT_DIMS.has(dim) ? count(v, `${field}.${dim}`, what) : amount(v, `${field}.${dim}`, what);
  }
  return out;
}

/** A fleet scope as a token or a tree record carries it: {name, limits, window}. */
export function scopeOf(value: unknown, field: string, what = WHAT): TokenScope {
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new InvalidRunState(`${what}: ${field}=${show(value)} is not a scope`, field);
  }
  const s = value as Record<string, unknown>;
  if (typeof s.name !== "string" || !s.name) {
    throw new InvalidRunState(`${what}: ${field}.name=${show(s.name)} is not a scope name`, `${field}.name`);
  }
  const window = s.window;
  if (window !== undefined && window !== null && amount(window, `${field}.window`, what) <= 0) {
    throw new InvalidRunState(`${what}: ${field}.window=${show(window)} is not a positive number of seconds`,
      `${field}.window`);
  }
  return { name: s.name, limits: limitsOf(s.limits ?? {}, `${field}.limits`, what),
    window: window === undefined || window === null ? null : Number(window) };
}

function text(payload: Record<string, unknown>, key: string): string {
  const value = payload[key] === undefined ? "" : payload[key];
  if (typeof value !== "string") throw new InvalidRunState(`${WHAT}: ${key}=${show(value)} is not a string`, key);
  return value;
}

/**
 * State that comes back from outside the process (a `PausedRun`, a run token): its checks and its signature
 * (model/trust.py). A signature is HMAC-SHA256 over the canonical JSON of the state (keys sorted, no spaces,
 * UTF-8, numbers as Python writes them), written as unpadded URL-safe base64: the bytes and the signature are the
 * same in both languages.
 */
import { createHmac, timingSafeEqual } from "node:crypto";
import { Num, canonicalJson } from "./signatures.js";

/**
 * A paused run or a run token that cannot be trusted: damaged, with a nonsense number, edited after it was
 * signed, unsigned where a signature is required, or unknown to the shared ledger. The message names what;
 * `field` names the field when one is at fault.
 */
export class InvalidRunState extends Error {
  readonly field: string | null;
  constructor(message: string, field: string | null = null) {
    super(message);
    this.name = "InvalidRunState";
    this.field = field;
  }
}

/** The bytes a signature covers: JSON with sorted keys and no spaces, UTF-8. */
export function canonical(payload: unknown): Buffer {
  return Buffer.from(canonicalJson(payload), "utf8");
}

/** HMAC-SHA256 of `payload` (bytes, or a value's canonical JSON), as unpadded URL-safe base64. */
export function sign(payload: unknown, secret: Buffer): string {
  const data = Buffer.isBuffer(payload) ? payload : canonical(payload);
  return b64(createHmac("sha256", secret).update(data).digest());
}

/** Whether `signature` is this secret's signature of `payload` (constant-time comparison). */
export function signedBy(payload: unknown, signature: string, secret: Buffer): boolean {
  const want = Buffer.from(sign(payload, secret));
  const got = Buffer.from(String(signature));
  return want.length === got.length && timingSafeEqual(want, got);
}

/** Unpadded URL-safe base64, as Python's `urlsafe_b64encode(...).rstrip("=")`. */
export function b64(data: Buffer): string {
  return data.toString("base64").replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** A value as Python's repr shows it in messages (close enough: numbers, strings, null as None). */
export function show(value: unknown): string {
  if (value instanceof Num) return value.canonical();
  if (value === null || value === undefined) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (typeof value === "string") return `'${value}'`;
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : String(value);
  try {
    return canonicalJson(value);
  } catch {
    return Object.prototype.toString.call(value);
  }
}

function numeric(value: unknown): number | null {
  if (value instanceof Num) return value.value;
  return typeof value === "number" ? value : null;
}

/** A whole number >= 0 read from outside, or InvalidRunState naming the field. */
export function count(value: unknown, field: string, what: string): number {
  const n = numeric(value);
  if (n === null || !Number.isFinite(n) || !Number.isInteger(n) || n < 0) {
    throw new InvalidRunState(`${what}: ${field}=${show(value)} is not a whole number >= 0`, field);
  }
  return n;
}

/** A finite number >= 0 read from outside, or InvalidRunState naming the field. */
export function amount(value: unknown, field: string, what: string): number {
  const n = numeric(value);
  if (n === null || !Number.isFinite(n) || n < 0) {
    throw new InvalidRunState(`${what}: ${field}=${show(value)} is not a finite number >= 0`, field);
  }
  return n;
}

/** A tree of parsed JSON with every `Num` replaced by its number (what user code sees). */
export function untag(value: unknown): unknown {
  if (value instanceof Num) return value.value;
  if (Array.isArray(value)) return value.map(untag);
  if (value !== null && typeof value === "object") {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = untag(v);
    return out;
  }
  return value;
}

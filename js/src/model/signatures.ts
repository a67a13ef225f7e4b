/**
 * Short signatures of tool arguments and results (model/signatures.py): equal text, equal signature, and the
 * same canonical text as Python's `json.dumps(value, sort_keys=True, separators=(",", ":"))` (ASCII-escaped,
 * keys in code-point order, `1.0` kept apart from `1` when the arguments come as JSON text).
 */
import { createHash } from "node:crypto";
import { pyFloatRepr } from "./format.js";

const DIGITS = 16;

/** A JSON number as its text said it: an int (Python int) or a float (Python float). */
export class Num {
  constructor(readonly text: string) {}
  /** A number Python holds as a float (a float field): written `2.0`, `1e-05`, as Python's repr. */
  static float(value: number): Num {
    return new Num(pyFloatRepr(value));
  }
  get value(): number {
    return Number(this.text);
  }
  get isInt(): boolean {
    return /^-?\d+$/.test(this.text);
  }
  canonical(): string {
    if (this.isInt) return BigInt(this.text).toString();
    return pyFloatRepr(Number(this.text));
  }
}

/** The signature of a canonical text: the first 16 hex digits of its SHA-256. */
export function signature(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex").slice(0, DIGITS);
}

/** The signature of tool arguments (a JSON string or a value), after canonicalization. */
export function argumentsSignature(args: unknown): string {
  return signature(canonicalArguments(args));
}

/** The signature of a tool result: its text (trimmed) when it is a string, else its canonical JSON. */
export function resultSignature(result: unknown): string {
  if (typeof result === "string") return signature(pyStrip(result));
  if (result instanceof Uint8Array) return createHash("sha256").update(result).digest("hex").slice(0, DIGITS);
  return argumentsSignature(result);
}

/** The signature of a result as the stall rule keys it: JSON text and the value it encodes sign the same. */
export function resultKey(result: unknown): string {
  if (typeof result === "string") return signature(canonicalArguments(result));
  return resultSignature(result);
}

/** Tool arguments as one canonical string (JSON with sorted keys); never throws. */
export function canonicalArguments(args: unknown): string {
  let value: unknown = args;
  if (typeof args === "string") {
    if (!pyStrip(args)) return "{}";
    try {
      value = parseJson(args);
    } catch {
      return pyStrip(args);
    }
  }
  try {
    return dump(value, new Set());
  } catch {
    return `sha256:${createHash("sha256").update(String(Object.prototype.toString.call(value))).digest("hex")}`;
  }
}

/** Python's str.strip() whitespace. */
function pyStrip(text: string): string {
  return text.replace(/^[\s\u001c-\u001f\u0085]+|[\s\u001c-\u001f\u0085]+$/g, "");
}

function compareCodePoints(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; ) {
    const ca = a.codePointAt(i) as number;
    const cb = b.codePointAt(i) as number;
    if (ca !== cb) return ca < cb ? -1 : 1;
    i += ca > 0xffff ? 2 : 1;
  }
  return a.length === b.length ? 0 : a.length < b.length ? -1 : 1;
}

const ESCAPES: Record<string, string> = { '"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t",
  "\b": "\\b", "\f": "\\f" };

/** A string as Python's json.dumps writes it (ensure_ascii=True; with `ascii` false, non-ASCII as it is). */
function quote(text: string, ascii = true): string {
  let out = '"';
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    const code = text.charCodeAt(i);
    const esc = ESCAPES[ch];
    if (esc !== undefined) out += esc;
    else if (code < 0x20 || (ascii && code > 0x7e)) out += `\\u${code.toString(16).padStart(4, "0")}`;
    else out += ch;
  }
  return `${out}"`;
}

/**
 * Python's `json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`: the canonical JSON of
 * state that leaves the process (model/trust.py). A `Num` keeps a number's Python type; a plain whole number is
 * an int, any other number a float. Throws on a circular value.
 */
export function canonicalJson(value: unknown): string {
  return dump(value, new Set(), false);
}

function dump(value: unknown, seen: Set<object>, ascii = true): string {
  if (value === null || value === undefined) return "null";
  if (value === true) return "true";
  if (value === false) return "false";
  if (value instanceof Num) return value.canonical();
  if (typeof value === "number") {
    return Number.isInteger(value) && !Object.is(value, -0) ? BigInt(value).toString() : pyFloatRepr(value);
  }
  if (typeof value === "bigint") return value.toString();
  if (typeof value === "string") return quote(value, ascii);
  if (typeof value !== "object") return quote(String(value), ascii);
  if (seen.has(value)) throw new Error("circular");
  seen.add(value);
  try {
    if (Array.isArray(value)) return `[${value.map((v) => dump(v, seen, ascii)).join(",")}]`;
    if (value instanceof Map) value = Object.fromEntries(value);
    else if (value instanceof Date || !isPlain(value)) {
      const json = (value as { toJSON?: () => unknown }).toJSON;
      return typeof json === "function" ? dump(json.call(value), seen, ascii) : quote(String(value), ascii);
    }
    const obj = value as Record<string, unknown>;
    const keys = Object.keys(obj).filter((k) => obj[k] !== undefined).sort(compareCodePoints);
    return `{${keys.map((k) => `${quote(k, ascii)}:${dump(obj[k], seen, ascii)}`).join(",")}}`;
  } finally {
    seen.delete(value as object);
  }
}

function isPlain(value: object): boolean {
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** JSON.parse that keeps each number's text (so `1.0` stays a float, as in Python), duplicates: the last wins. */
export function parseJson(text: string): unknown {
  let i = 0;
  const ws = () => {
    while (i < text.length && " \t\n\r".includes(text[i])) i++;
  };
  const fail = (): never => {
    throw new SyntaxError(`not JSON at ${i}`);
  };
  const value = (depth: number): unknown => {
    if (depth > 900) fail();
    ws();
    const ch = text[i];
    if (ch === "{") {
      i++;
      const obj: Record<string, unknown> = Object.create(null);
      ws();
      if (text[i] === "}") {
        i++;
        return obj;
      }
      for (;;) {
        ws();
        if (text[i] !== '"') fail();
        const key = str();
        ws();
        if (text[i++] !== ":") fail();
        obj[key] = value(depth + 1);
        ws();
        if (text[i] === ",") {
          i++;
          continue;
        }
        if (text[i++] === "}") return obj;
        fail();
      }
    }
    if (ch === "[") {
      i++;
      const arr: unknown[] = [];
      ws();
      if (text[i] === "]") {
        i++;
        return arr;
      }
      for (;;) {
        arr.push(value(depth + 1));
        ws();
        if (text[i] === ",") {
          i++;
          continue;
        }
        if (text[i++] === "]") return arr;
        fail();
      }
    }
    if (ch === '"') return str();
    for (const [word, val] of [["true", true], ["false", false], ["null", null], ["NaN", NaN],
      ["Infinity", Infinity], ["-Infinity", -Infinity]] as const) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return typeof val === "number" ? new Num(String(val)) : val;
      }
    }
    const m = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/.exec(text.slice(i, i + 400));
    if (!m) fail();
    i += (m as RegExpExecArray)[0].length;
    return new Num((m as RegExpExecArray)[0]);
  };
  const str = (): string => {
    const start = i;
    i++;
    for (;;) {
      if (i >= text.length) fail();
      const c = text[i];
      if (c === "\\") i += 2;
      else if (c === '"') break;
      else if (c.charCodeAt(0) < 0x20) fail();
      else i++;
    }
    i++;
    return JSON.parse(text.slice(start, i)) as string;
  };
  const out = value(0);
  ws();
  if (i !== text.length) fail();
  return out;
}

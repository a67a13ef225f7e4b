/** Whether a run still makes progress: results that stop changing (stalls) and actions that cycle (progress.py). */
import { canonicalArguments, resultSignature, signature } from "../model/signatures.js";

/** The cycle lengths watched for (a cycle of one action is a plain repeat, checked by the run). */
export const CYCLE_LENGTHS = [2, 3] as const;
/** Actions kept per history: enough for the longest cycle at a generous limit, and never more. */
const HISTORY = 3 * 64;
/** Call ids remembered as counted, and call ids whose tool name is remembered (the newest). */
const SEEN = 1024;
/** Tools whose progress is kept (the most recently used): a stall is a row of one tool's results, so it is recent. */
const TOOLS = 128;
/** Per tool: distinct results counted (for the wrap-up; past this it says "at least"). */
const DISTINCT = 256;
/**
 * A result whose canonical text is at most this long carries no observation ("ok", `{"status":"ok"}`, `[]`,
 * "no match"): it never counts toward a stall (DESIGN, Enforcement rules: Stalls). Characters are code points,
 * as Python counts them.
 */
export const ACK_CHARS = 64;

/** A bounded history of (tool, action key). */
export class History {
  readonly items: [string, string][] = [];
  push(item: [string, string]): void {
    this.items.push(item);
    if (this.items.length > HISTORY) this.items.shift();
  }
  tail(n: number): [string, string][] {
    return this.items.slice(-n);
  }
}

/** Whether `text` has at most `limit` code points (Python's len of a str). */
function withinCodePoints(text: string, limit: number): boolean {
  if (text.length <= limit) return true;
  if (text.length > 2 * limit) return false;
  let n = 0;
  for (let i = 0; i < text.length; i += (text.codePointAt(i) as number) > 0xffff ? 2 : 1) {
    if (++n > limit) return false;
  }
  return true;
}

/** [the signature of a result, whether it is an acknowledgment: canonical text of at most ACK_CHARS]. */
export function readResult(result: unknown): [string, boolean] {
  if (result instanceof Uint8Array) return [resultSignature(result), result.length <= ACK_CHARS];
  const text = canonicalArguments(result);
  return [signature(text), withinCodePoints(text, ACK_CHARS)];
}

/** What one tool returned lately: its row of unchanged results and its distinct results. */
class ToolProgress {
  /** The signature of its last counted result. */
  last: string | null = null;
  /** Times in a row it returned `last`. */
  streak = 0;
  /** The result signatures it gave (the first DISTINCT), for the wrap-up. */
  readonly distinct = new Set<string>();
  /** It gave more distinct results than `distinct` holds. */
  more = false;

  saw(sig: string): void {
    if (this.distinct.has(sig)) return;
    if (this.distinct.size < DISTINCT) this.distinct.add(sig);
    else this.more = true;
  }
}

/** Put `key` in an insertion-ordered map holding the newest SEEN keys. */
function remember<V>(recent: Map<string, V>, key: string, value: V): void {
  recent.delete(key);
  recent.set(key, value);
  if (recent.size > SEEN) recent.delete(recent.keys().next().value as string);
}

/**
 * What the run's tools returned and did, to tell a stall (same result) or a cycle (same actions). Every
 * structure is bounded (DESIGN: memory per run is bounded): the newest SEEN call ids, the TOOLS tools used most
 * recently, and per tool DISTINCT distinct results.
 */
export class ProgressWatch {
  /** call id -> tool name, from the model's tool requests (the newest SEEN). */
  readonly names = new Map<string, string>();
  /** call ids whose result was counted (the newest SEEN). */
  readonly seen = new Map<string, null>();
  /** tool -> its progress, the most recently used last. */
  readonly tools = new Map<string, ToolProgress>();
  readonly requests = new History();
  readonly executions = new History();

  /** The progress of `name`, made the most recently used (the least recently used beyond TOOLS is dropped). */
  private tool(name: string): ToolProgress {
    let state = this.tools.get(name);
    if (state !== undefined) {
      this.tools.delete(name);
    } else {
      state = new ToolProgress();
      if (this.tools.size >= TOOLS) this.tools.delete(this.tools.keys().next().value as string);
    }
    this.tools.set(name, state);
    return state;
  }

  requested(name: string, callId: string | null): void {
    if (callId) remember(this.names, callId, name);
  }

  /**
   * Count one result; [tool, times in a row unchanged], or null when it is not counted (seen already, an
   * acknowledgment, or of no known tool).
   */
  result(name: string | null, callId: string | null, result: unknown): [string, number] | null {
    if (callId) {
      if (this.seen.has(callId)) return null;
      remember(this.seen, callId, null);
      name = name || this.names.get(callId) || null;
    }
    if (!name) return null;
    let sig: string;
    let ack: boolean;
    try {
      [sig, ack] = readResult(result);
    } catch {
      return null; // a result we cannot read is no evidence either way
    }
    const state = this.tool(name);
    state.saw(sig);
    if (ack) {
      // no observation: it cannot show a lack of progress, and it ends a row of unchanged results
      state.last = null;
      state.streak = 0;
      return null;
    }
    state.streak = state.last === sig ? state.streak + 1 : 1;
    state.last = sig;
    return [name, state.streak];
  }

  /** [how many distinct results `name` gave, whether that is exact]: past DISTINCT it is a lower bound. */
  distinctCount(name: string): [number, boolean] {
    const state = this.tools.get(name);
    return state === undefined ? [0, true] : [state.distinct.size, !state.more];
  }
}

/** The cycle of 2 or 3 distinct-in-turn actions the history ends with, repeated `limit` times in a row. */
export function findCycle(history: [string, string][], limits: Record<string, number>): [string[], number] | null {
  const n = history.length;
  for (const length of CYCLE_LENGTHS) {
    const tail = n >= length ? history.slice(-length) : [];
    if (tail.length === 0 || new Set(tail.map(([, key]) => key)).size < 2) continue;
    const cap = Math.max(...tail.map(([t]) => limits[t] ?? limits[""]));
    const need = length * cap;
    if (n < need) continue;
    const window = history.slice(-need);
    let all = true;
    for (let i = 0; i < need; i++) {
      if (window[i][1] !== window[i % length][1]) {
        all = false;
        break;
      }
    }
    if (all) return [window.slice(0, length).map(([t]) => t), cap];
  }
  return null;
}

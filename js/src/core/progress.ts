/** Whether a run still makes progress: results that stop changing (stalls) and actions that cycle (progress.py). */
import { resultKey } from "../model/signatures.js";

/** The cycle lengths watched for (a cycle of one action is a plain repeat, checked by the run). */
export const CYCLE_LENGTHS = [2, 3] as const;
const HISTORY = 3 * 64;
const SEEN = 4096;

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

/** What the run's tools returned and did, to tell a stall (same result) or a cycle (same actions). */
export class ProgressWatch {
  readonly names = new Map<string, string>();
  readonly seen = new Set<string>();
  readonly streaks = new Map<string, [string, number]>();
  readonly distinct = new Map<string, Set<string>>();
  readonly requests = new History();
  readonly executions = new History();

  requested(name: string, callId: string | null): void {
    if (callId) this.names.set(callId, name);
  }

  /** Count one result; [tool, times in a row unchanged], or null when it is not counted. */
  result(name: string | null, callId: string | null, result: unknown): [string, number] | null {
    if (callId) {
      if (this.seen.has(callId)) return null;
      this.seen.add(callId);
      if (this.seen.size > SEEN) this.seen.delete(this.seen.values().next().value as string);
      name = name || this.names.get(callId) || null;
    }
    if (!name) return null;
    let sig: string;
    try {
      sig = resultKey(result);
    } catch {
      return null;
    }
    const last = this.streaks.get(name);
    const streak = last !== undefined && last[0] === sig ? last[1] + 1 : 1;
    this.streaks.set(name, [sig, streak]);
    let kinds = this.distinct.get(name);
    if (kinds === undefined) this.distinct.set(name, (kinds = new Set()));
    if (kinds.size < 1000) kinds.add(sig);
    return [name, streak];
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

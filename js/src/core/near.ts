/**
 * The near-cap signal (core/settlement.py `_check_near`): after a settle, each run of the chain whose utilization
 * reached its Budget.near for the first time is counted once in otel_budget.runs.near_cap.
 */
import { runNearCap } from "../telemetry/metrics.js";
import type { RunNode } from "./node.js";

const crossed = new WeakSet<RunNode>();

export function checkNear(node: RunNode): void {
  for (const n of node.chain) {
    if (crossed.has(n) || Object.keys(n.account.limits).length === 0) continue;
    if (n.utilizationMax() >= n.budget.near) {
      crossed.add(n);
      runNearCap(n.name);
    }
  }
}

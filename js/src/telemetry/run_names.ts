/**
 * Run names as metric labels (Python's telemetry/run_names.py): a bounded set of them, and the utilization
 * gauge's points. Past `MAX_RUN_NAMES` distinct names, a new name is recorded as `_other` in metrics (spans keep
 * the real name), with one warning. The gauge reports zero for a name whose runs all ended only for
 * `ZERO_SECONDS`, not forever.
 */
import * as sc from "./semconv.js";

/** Distinct run names that get their own series; 250 keeps the gauge (7 points a name) under the SDK's 2,000. */
export const MAX_RUN_NAMES = 250;
/** How long the gauge reports 0 for a name after its last run ended (Prometheus' staleness window). */
export const ZERO_SECONDS = 300;

/** What the gauge reads of an active run. */
export interface NamedRun {
  readonly name: string;
  utilization(): Record<string, number>;
}

export interface GaugePoint {
  value: number;
  attributes: Record<string, string>;
}

export class RunNames {
  private readonly known = new Set<string>();
  private readonly active = new Set<NamedRun>();
  private ended = new Map<string, number>();
  private warned = false;

  constructor(readonly limit = MAX_RUN_NAMES, readonly clock: () => number = () => performance.now() / 1000) {}

  /** The metric label of a run name: the name while the set has room for it, else `_other`. */
  label(name: string | null | undefined): string {
    if (name === null || name === undefined) return "";
    if (this.known.has(name)) return name;
    if (this.known.size < this.limit) {
      this.known.add(name);
      return name;
    }
    if (!this.warned) {
      this.warned = true;
      process.emitWarning(`otel-budget: more than ${this.limit} distinct run names (the newest: `
        + `${JSON.stringify(name.slice(0, 80))}); runs with a new name are counted as run_name=`
        + `${JSON.stringify(sc.RUN_NAME_OTHER)} in metrics from now on (their spans keep the name). Give a run a name `
        + "per kind of task, never per request: put ids in span attributes.", { code: "OTEL_BUDGET_RUN_NAMES" });
    }
    return sc.RUN_NAME_OTHER;
  }

  started(run: NamedRun): void {
    this.label(run.name);
    this.active.add(run);
  }

  /** A run ended: its label (the gauge reports 0 for it a while, unless another run of it is active). */
  endedRun(run: NamedRun): string {
    const label = this.label(run.name);
    this.active.delete(run);
    this.ended.set(label, this.clock());
    return label;
  }

  /** The highest utilization per (name, dimension) among active runs; 0 for a name that ended recently. */
  observe(): GaugePoint[] {
    const now = this.clock();
    this.ended = new Map([...this.ended].filter(([, at]) => now - at < ZERO_SECONDS));
    const best = new Map<string, [string, string, number]>();
    for (const run of this.active) {
      try {
        const label = this.label(run.name);
        for (const [dim, value] of Object.entries(run.utilization())) {
          const key = `${label}\u0000${dim}`;
          if (value > (best.get(key)?.[2] ?? -1)) best.set(key, [label, dim, value]);
        }
      } catch {
        // telemetry never breaks the agent
      }
    }
    const point = (name: string, dim: string, value: number): GaugePoint =>
      ({ value, attributes: { [sc.LABEL_RUN_NAME]: name, [sc.LABEL_DIMENSION]: dim } });
    const out = [...best.values()].map(([name, dim, value]) => point(name, dim, value));
    const activeNames = new Set([...best.values()].map(([name]) => name));
    for (const name of this.ended.keys()) {
      if (!activeNames.has(name)) out.push(...sc.SPAN_DIMS.map((dim) => point(name, dim, 0)));
    }
    return out;
  }
}

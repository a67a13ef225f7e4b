/**
 * The metric instruments of Python's telemetry/recorder.py, with the same names, units, descriptions and
 * attributes: token usage and operation duration (the released GenAI names, or the newest ones under
 * OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental), cost, finished runs, runs awaiting approval, runs near
 * their cap, calls let through while a shared ledger was unreachable, and the utilization gauge. Recording never
 * breaks the agent.
 */
import { type Attributes, type Counter, type Histogram, type Meter, type MeterProvider, type UpDownCounter, metrics,
} from "@opentelemetry/api";
import { StopReason } from "../model/budget.js";
import { type NamedRun, RunNames } from "./run_names.js";
import * as sc from "./semconv.js";

export const VERSION = "0.1.0";

/** What a settled model call gives the meter. */
export interface CallMetric {
  operation: string;
  provider: string;
  model: string;
  responseModel?: string;
  errorType?: string;
  runName: string | null;
  seconds: number;
  usage?: { input: number; output: number; cacheRead: number; cacheWrite: number; reasoning: number };
  costUsd: number | null;
}

type Usage = NonNullable<CallMetric["usage"]>;

/** Whether OTEL_SEMCONV_STABILITY_OPT_IN asks for the newest GenAI metric names. */
export function latestGenAiMetrics(): boolean {
  const value = process.env[sc.ENV_SEMCONV_OPT_IN] ?? "";
  return value.split(",").some((v) => v.trim() === sc.OPT_IN_GEN_AI_LATEST);
}

class Instruments {
  readonly latest = latestGenAiMetrics();
  readonly duration: Histogram;
  readonly tokenUsage: Histogram | null = null;
  readonly opInput: Histogram | null = null;
  readonly opOutput: Histogram | null = null;
  readonly usageCounters: [Counter, keyof Usage][] = [];
  readonly cost: Counter;
  readonly runs: Counter;
  readonly awaiting: UpDownCounter;
  readonly nearCap: Counter;
  readonly failOpen: Counter;

  constructor(meter: Meter, names: RunNames) {
    const tokens = { unit: "{token}", advice: { explicitBucketBoundaries: [...sc.TOKEN_BUCKETS] } };
    if (this.latest) {
      this.opInput = meter.createHistogram(sc.METRIC_OPERATION_INPUT_TOKENS,
        { ...tokens, description: "Input tokens per inference operation." });
      this.opOutput = meter.createHistogram(sc.METRIC_OPERATION_OUTPUT_TOKENS,
        { ...tokens, description: "Output tokens per inference operation." });
      const counters: [string, keyof Usage, string][] = [
        [sc.METRIC_USAGE_INPUT_TOKENS, "input", "Input tokens used."],
        [sc.METRIC_USAGE_OUTPUT_TOKENS, "output", "Output tokens used, reasoning included."],
        [sc.METRIC_USAGE_CACHE_READ_TOKENS, "cacheRead", "Input tokens read from a provider cache."],
        [sc.METRIC_USAGE_CACHE_WRITE_TOKENS, "cacheWrite", "Input tokens written to a provider cache."],
        [sc.METRIC_USAGE_REASONING_TOKENS, "reasoning", "Output tokens used for reasoning."],
      ];
      this.usageCounters = counters.map(([name, field, description]) =>
        [meter.createCounter(name, { unit: "{token}", description }), field]);
    } else {
      this.tokenUsage = meter.createHistogram(sc.METRIC_TOKEN_USAGE,
        { ...tokens, description: "Number of input and output tokens used." });
    }
    this.duration = meter.createHistogram(this.latest ? sc.METRIC_INFERENCE_DURATION : sc.METRIC_OPERATION_DURATION,
      { unit: "s", description: "GenAI operation duration.",
        advice: { explicitBucketBoundaries: [...sc.DURATION_BUCKETS] } });
    this.cost = meter.createCounter(sc.METRIC_COST, { description: "Money spent on model calls, in USD." });
    this.runs = meter.createCounter(sc.METRIC_RUNS, { description: "Finished runs by stop reason." });
    // +1 when a run pauses for a decision, -1 when a paused run is resumed (in this process or another: summed
    // by run_name across processes it is the number of runs waiting now)
    this.awaiting = meter.createUpDownCounter(sc.METRIC_RUNS_AWAITING_APPROVAL,
      { description: "Runs paused for a person's decision, not yet resumed." });
    this.nearCap = meter.createCounter(sc.METRIC_RUNS_NEAR_CAP, { description: "Runs that crossed Budget.near." });
    this.failOpen = meter.createCounter(sc.METRIC_LEDGER_FAIL_OPEN,
      { description: "Calls let through while the shared ledger was unreachable." });
    meter.createObservableGauge(sc.METRIC_RUN_UTILIZATION,
      { description: "Highest utilization (used / limit) among the active runs of a name, per dimension." })
      .addCallback((result) => {
        for (const point of names.observe()) result.observe(point.value, point.attributes);
      });
  }
}

let meterSource: MeterProvider | null = null;
let cache: { provider: MeterProvider; instruments: Instruments } | null = null;
/** The bounded run-name labels, shared by every provider's instruments. */
export const runNames = new RunNames();

/** The meter provider to use (`instrument({ meterProvider })`); null: @opentelemetry/api's global one. */
export function setMeterProvider(provider: MeterProvider | null): void {
  meterSource = provider;
  cache = null;
}

function instruments(): Instruments {
  // the global provider is looked up on use: one registered after instrument() still gets the points (the API
  // has no proxy meter, so instruments made from the no-op provider would stay no-ops)
  const provider = meterSource ?? metrics.getMeterProvider();
  if (cache === null || cache.provider !== provider) {
    cache = { provider, instruments: new Instruments(provider.getMeter(sc.TRACER_NAME, VERSION), runNames) };
  }
  return cache.instruments;
}

function safe(fn: () => void): void {
  try {
    fn();
  } catch {
    // telemetry never breaks the agent
  }
}

/** A settled model call: its duration, tokens and cost (a refused call was never sent and records nothing). */
export function recordCall(call: CallMetric): void {
  safe(() => {
    const m = instruments();
    const base: Attributes = { [sc.GEN_AI_OPERATION_NAME]: call.operation, [sc.GEN_AI_PROVIDER_NAME]: call.provider,
      [sc.GEN_AI_REQUEST_MODEL]: call.model };
    if (call.responseModel) base[sc.GEN_AI_RESPONSE_MODEL] = call.responseModel;
    if (call.errorType) base[sc.ERROR_TYPE] = call.errorType;
    m.duration.record(call.seconds, base);
    const u = call.usage;
    if (u !== undefined) {
      if (m.tokenUsage !== null) {
        m.tokenUsage.record(u.input, { ...base, [sc.GEN_AI_TOKEN_TYPE]: "input" });
        m.tokenUsage.record(u.output, { ...base, [sc.GEN_AI_TOKEN_TYPE]: "output" });
      } else {
        m.opInput?.record(u.input, base);
        m.opOutput?.record(u.output, base);
        const byModality = { ...base, [sc.GEN_AI_TOKEN_MODALITY]: sc.MODALITY_UNKNOWN };
        for (const [counter, field] of m.usageCounters) if (u[field]) counter.add(u[field], byModality);
      }
    }
    if (call.costUsd) {
      m.cost.add(call.costUsd, { [sc.GEN_AI_REQUEST_MODEL]: call.model, [sc.GEN_AI_PROVIDER_NAME]: call.provider,
        [sc.LABEL_RUN_NAME]: runNames.label(call.runName) });
    }
  });
}

/** A run started: the utilization gauge follows it until it ends. */
export function runStarted(run: NamedRun): void {
  safe(() => runNames.started(run));
}

/** A run ended with `stopReason`: counted in otel_budget.runs, or as waiting when it paused for approval. */
export function runEnded(run: NamedRun, stopReason: string | null): void {
  safe(() => {
    const label = runNames.endedRun(run);
    if (stopReason === null) return;
    const m = instruments();
    if (stopReason === StopReason.AWAITING_APPROVAL) m.awaiting.add(1, { [sc.LABEL_RUN_NAME]: label });
    else m.runs.add(1, { [sc.LABEL_RUN_NAME]: label, [sc.LABEL_STOP_REASON]: stopReason });
  });
}

/** A paused run of `name` goes on after a decision: it no longer waits (it is counted when it ends). */
export function runResumed(name: string): void {
  safe(() => instruments().awaiting.add(-1, { [sc.LABEL_RUN_NAME]: runNames.label(name) }));
}

/** A run's utilization crossed its Budget.near (once a run). */
export function runNearCap(name: string): void {
  safe(() => instruments().nearCap.add(1, { [sc.LABEL_RUN_NAME]: runNames.label(name) }));
}

/** A shared ledger let a call through without its cap (fail "open" while unreachable). */
export function ledgerFailOpen(rootName: string, scope: string): void {
  safe(() => instruments().failOpen.add(1, { [sc.LABEL_RUN_NAME]: rootName, [sc.LABEL_SCOPE]: scope }));
}

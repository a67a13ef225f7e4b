// The meter: the metric points a real OpenTelemetry SDK (@opentelemetry/sdk-metrics) exports after runs driven
// through the real AI SDK against ScriptedLLM, and the same instruments as Python's recorder (names, units,
// descriptions and attribute keys), compared with what the Python package records for the same scenario.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { createOpenAI } from "@ai-sdk/openai";
import { MeterProvider, MetricReader } from "@opentelemetry/sdk-metrics";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { generateText } from "ai";
import { RedisLedger, Scope, budgeted, instrument, resume, run } from "otel-budget";
import { semconv as sc } from "otel-budget/internal";
import { freePort, repoRoot, startScriptedLLM } from "./helpers.mjs";

const PYTHON = process.env.OTEL_BUDGET_PYTHON || join(repoRoot(), ".venv", "bin", "python");
/** Server address and port: Python reads them from the client; the AI SDK's model interface does not expose them. */
const PYTHON_ONLY = new Set([sc.SERVER_ADDRESS, sc.SERVER_PORT]);

class Reader extends MetricReader {
  async onForceFlush() {}
  async onShutdown() {}
}

let llm;
let openai;
before(async () => {
  llm = await startScriptedLLM();
  openai = createOpenAI({ baseURL: llm.openai_base_url, apiKey: "test-key" });
});
after(async () => llm.stop());


/** {name: {unit, description, points}} of what the reader collects now. */
async function collect(reader) {
  const { resourceMetrics } = await reader.collect();
  const out = {};
  for (const scope of resourceMetrics.scopeMetrics) {
    for (const metric of scope.metrics) {
      out[metric.descriptor.name] = { unit: metric.descriptor.unit, description: metric.descriptor.description,
        scope: scope.scope.name, points: metric.dataPoints };
    }
  }
  return out;
}

/** The scenario of metrics_worker.py: a priced call under a fail-open shared scope, then a run stopped at its cap. */
async function scenario() {
  await llm.reset();
  await llm.setDefault({ text: "ok", input_tokens: 100, output_tokens: 10 });
  const reader = new Reader();
  const exporter = new InMemorySpanExporter();
  const redisUrl = `redis://127.0.0.1:${await freePort()}/0`;
  const ledger = new RedisLedger({ url: redisUrl, fail: "open" });
  instrument({ tracerProvider: new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }),
    meterProvider: new MeterProvider({ readers: [reader] }), ledger,
    prices: { "gpt-4o": { inputPerMtok: 1000, outputPerMtok: 1000 } } });
  const model = budgeted(openai.chat("gpt-4o"));
  const scope = new Scope({ name: "meter-scope", maxUsd: 5 });
  const first = await run("meter", { budget: { maxUsd: 1, near: 0.001, scope } }, () =>
    generateText({ model, prompt: "hi", maxRetries: 0 }));
  const second = await run("meter-stop", { budget: { maxSteps: 1 } }, async () => {
    await generateText({ model, prompt: "hi", maxRetries: 0 });
    return generateText({ model, prompt: "hi", maxRetries: 0 });
  });
  await ledger.close();
  return { metrics: await collect(reader), spans: exporter.getFinishedSpans(), first, second, redisUrl };
}

test("a run's calls, cost, stop, near cap and fail-open are exported as metric points", async () => {
  const { metrics, spans, first, second } = await scenario();
  assert.equal(first.outcome.stopReason, "done");
  assert.notEqual(second.outcome.stopReason, "done");
  assert.equal((await llm.requests()).length, 2); // the stopped run's second call was never sent

  const tokens = metrics[sc.METRIC_TOKEN_USAGE];
  assert.equal(tokens.unit, "{token}");
  assert.equal(tokens.scope, sc.TRACER_NAME);
  const byType = (type) => tokens.points.filter((p) => p.attributes[sc.GEN_AI_TOKEN_TYPE] === type)
    .reduce((sum, p) => sum + p.value.sum, 0);
  assert.equal(byType("input"), 200);
  assert.equal(byType("output"), 20);
  assert.deepEqual(tokens.points[0].value.buckets.boundaries, [...sc.TOKEN_BUCKETS]);
  assert.equal(tokens.points[0].attributes[sc.GEN_AI_REQUEST_MODEL], "gpt-4o");
  assert.equal(tokens.points[0].attributes[sc.GEN_AI_PROVIDER_NAME], sc.PROVIDER_OPENAI);

  const duration = metrics[sc.METRIC_OPERATION_DURATION];
  assert.equal(duration.unit, "s");
  assert.equal(duration.points.reduce((n, p) => n + p.value.count, 0), 2); // sent calls only
  assert.deepEqual(duration.points[0].value.buckets.boundaries, [...sc.DURATION_BUCKETS]);

  const cost = metrics[sc.METRIC_COST].points;
  const costOf = (name) => cost.find((p) => p.attributes[sc.LABEL_RUN_NAME] === name)?.value;
  assert.ok(Math.abs(costOf("meter") - 0.11) < 1e-12, String(costOf("meter"))); // 110 tokens at $1000/Mtok
  assert.ok(Math.abs(costOf("meter-stop") - 0.11) < 1e-12);

  const runs = metrics[sc.METRIC_RUNS].points.map((p) => [p.attributes[sc.LABEL_RUN_NAME],
    p.attributes[sc.LABEL_STOP_REASON], p.value]).sort();
  assert.deepEqual(runs, [["meter", "done", 1], ["meter-stop", second.outcome.stopReason, 1]]);

  // near 0.001 of $1 is crossed by the first call; max_steps 1 is used up (utilization 1 >= the default 0.8)
  assert.deepEqual(metrics[sc.METRIC_RUNS_NEAR_CAP].points.map((p) => [p.attributes[sc.LABEL_RUN_NAME], p.value])
    .sort(), [["meter", 1], ["meter-stop", 1]]);

  const failOpen = metrics[sc.METRIC_LEDGER_FAIL_OPEN].points;
  assert.deepEqual(failOpen.map((p) => [p.attributes, p.value]),
    [[{ [sc.LABEL_RUN_NAME]: "meter", [sc.LABEL_SCOPE]: "meter-scope" }, 1]]);
  const call = spans.find((s) => s.name === "chat gpt-4o" && s.attributes[sc.LEDGER_ENFORCED] !== undefined);
  assert.equal(call.attributes[sc.LEDGER_ENFORCED], false);
  assert.equal(spans.find((s) => s.name === "invoke_agent meter").attributes[sc.LEDGER_UNENFORCED_CALLS], 1);
  assert.equal(spans.find((s) => s.name === "invoke_agent meter-stop").attributes[sc.LEDGER_UNENFORCED_CALLS],
    undefined);

  // both runs ended: the gauge reports 0 for each of their dimensions for a while
  const gauge = metrics[sc.METRIC_RUN_UTILIZATION].points;
  assert.equal(gauge.length, 2 * sc.SPAN_DIMS.length);
  assert.ok(gauge.every((p) => p.value === 0));
});

test("the instruments have Python's names, units, descriptions and attribute keys", async () => {
  const { metrics, redisUrl } = await scenario();
  await llm.reset();
  await llm.setDefault({ text: "ok", input_tokens: 100, output_tokens: 10 });
  const child = spawnSync(PYTHON, [join(repoRoot(), "js", "test", "metrics_worker.py"), llm.openai_base_url,
    redisUrl], { encoding: "utf8", cwd: repoRoot() });
  assert.equal(child.status, 0, child.stderr);
  const python = JSON.parse(child.stdout);
  const shape = (m) => ({ unit: m.unit, description: m.description,
    attributes: m.points.map((p) => Object.keys(p.attributes).sort()).sort() });
  const ours = Object.fromEntries(Object.entries(metrics).map(([name, m]) => [name, shape(m)]));
  for (const m of Object.values(python)) {
    m.attributes = m.attributes.map((keys) => keys.filter((k) => !PYTHON_ONLY.has(k)));
  }
  assert.deepEqual(Object.keys(ours).sort(), Object.keys(python).sort());
  for (const name of Object.keys(python)) assert.deepEqual(ours[name], python[name], name);
});

test("a paused run counts as awaiting approval until it is resumed, then in runs when it ends", async () => {
  await llm.reset();
  await llm.setDefault({ text: "ok", input_tokens: 100, output_tokens: 10 });
  const reader = new Reader();
  instrument({ tracerProvider: new BasicTracerProvider(), meterProvider: new MeterProvider({ readers: [reader] }) });
  const model = budgeted(openai.chat("gpt-4o"));
  const twice = async () => {
    await generateText({ model, prompt: "hi", maxRetries: 0 });
    return generateText({ model, prompt: "hi", maxRetries: 0 });
  };
  const paused = await run("waiting", { budget: { maxSteps: 1, onLimit: "pause" } }, twice);
  assert.equal(paused.outcome.stopReason, "awaiting_approval");
  const awaiting = async () => (await collect(reader))[sc.METRIC_RUNS_AWAITING_APPROVAL]?.points
    .map((p) => [p.attributes[sc.LABEL_RUN_NAME], p.value]);
  assert.deepEqual(await awaiting(), [["waiting", 1]]);
  const resumed = await resume(paused.outcome.paused, { approved: true, budget: { maxSteps: 3 } },
    () => generateText({ model, prompt: "hi", maxRetries: 0 }));
  assert.equal(resumed.outcome.stopReason, "done");
  assert.deepEqual(await awaiting(), [["waiting", 0]]);
  const runs = (await collect(reader))[sc.METRIC_RUNS].points.map((p) => [p.attributes[sc.LABEL_RUN_NAME],
    p.attributes[sc.LABEL_STOP_REASON], p.value]);
  assert.deepEqual(runs, [["waiting", "done", 1]]);
  assert.equal((await llm.requests()).length, 2);
});

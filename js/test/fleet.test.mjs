// One Redis ledger for a mixed fleet: the TypeScript RedisLedger against a real redis-server (started here on a
// free loopback port), alone and together with a Python process running the Python RedisLedger on the same scope.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText } from "ai";
import { RedisLedger, Refusal, Scope, budgeted, instrument, run } from "otel-budget";
import { freePort, repoRoot, startRedis, startScriptedLLM } from "./helpers.mjs";

const PYTHON = process.env.OTEL_BUDGET_PYTHON || join(repoRoot(), ".venv", "bin", "python");
const PRICE = { inputPerMtok: 0, outputPerMtok: 1200 }; // 10 output tokens: $0.012 a call, reserved and used
let redis;
let llm;
let openai;

before(async () => {
  redis = await startRedis();
  llm = await startScriptedLLM();
  openai = createOpenAI({ baseURL: llm.openai_base_url, apiKey: "test-key" });
});

after(async () => {
  await llm?.stop();
  redis?.stop();
});

/** Start the Python worker; resolves once it is instrumented, with `go()` and its outcome. */
async function pythonWorker(args) {
  const script = fileURLToPath(new URL("./fleet_worker.py", import.meta.url));
  const child = spawn(PYTHON, [script, ...args.map(String)], { cwd: repoRoot(), stdio: ["pipe", "pipe", "inherit"] });
  const lines = createInterface({ input: child.stdout });
  const queue = [];
  const waiting = [];
  lines.on("line", (line) => (waiting.length ? waiting.shift()(line) : queue.push(line)));
  const next = () => (queue.length ? Promise.resolve(queue.shift()) : new Promise((r) => waiting.push(r)));
  assert.equal(await next(), "ready");
  return { go: () => child.stdin.write("go\n"), outcome: async () => JSON.parse(await next()) };
}

test("a Python and a Node process draw from one Scope and stop on cost at the right call in total", async () => {
  await llm.reset();
  await llm.setDefault({ text: "paid", input_tokens: 50, output_tokens: 10, delay: 0.02 });
  const ledger = new RedisLedger({ url: redis.url, timeout: 5 }); // a loaded machine: this test is not about timeouts
  instrument({ ledger, prices: { "fleet-js": PRICE } });
  const scope = new Scope({ name: "mixed-fleet", maxUsd: 0.05, maxSteps: 50 });
  const py = await pythonWorker([redis.url, llm.openai_base_url, "fleet-py", scope.name, 0.05, 50, 10]);
  py.go();
  const model = budgeted(openai.chat("fleet-js"));
  const { outcome } = await run("node-worker", { budget: { scope } }, async () => {
    for (let i = 0; i < 10; i += 1) {
      await generateText({ model, prompt: "next invoice", maxOutputTokens: 10, maxRetries: 0 });
    }
  });
  const pyOutcome = await py.outcome();
  const requests = await llm.requests();
  // $0.012 a call under $0.05: the 5th call in total would make $0.06, so exactly 4 reach the provider
  assert.equal(requests.length, 4, JSON.stringify(requests.map((r) => r.model)));
  assert.equal(outcome.stopReason, "cost");
  assert.equal(outcome.limit, "max_usd");
  assert.match(outcome.detail, /shared budget 'mixed-fleet'/);
  assert.equal(pyOutcome.stop_reason, "cost");
  assert.equal(pyOutcome.limit, "max_usd");
  const byModel = (m) => requests.filter((r) => r.model === m).length;
  assert.equal(outcome.usage.modelCalls, byModel("fleet-js"));
  assert.equal(pyOutcome.model_calls, byModel("fleet-py"));
  const detail = await ledger.detail(scope.name);
  assert.equal(detail.used.steps, 4);
  assert.equal(Math.round(detail.used.usd * 1e9), 48_000_000);
  assert.equal(detail.reserved.usd, 0);
  assert.equal(detail.conflict, false, JSON.stringify(detail.definitions));
  await ledger.close();
});

function pythonReserve(url, scope, spec) {
  const code = `import sys, json, otel_budget
spec = json.loads(sys.argv[2])
s = otel_budget.Scope(**spec)
ledger = otel_budget.RedisLedger(sys.argv[1], socket_timeout=5.0)
r = ledger.reserve(s.name, {"steps": 1.0}, s.limits(), window=s.window_seconds)
ledger.release(r)
print(json.dumps(ledger.detail(s.name)["definitions"]))`;
  const out = spawnSync(PYTHON, ["-c", code, url, JSON.stringify({ name: scope, ...spec })], { cwd: repoRoot(),
    encoding: "utf8" });
  assert.equal(out.status, 0, out.stderr);
  return JSON.parse(out.stdout);
}

test("Node and Python registering the same Scope see no conflict; a different one is a conflict", async () => {
  const warnings = [];
  const onWarning = (w) => warnings.push(w);
  process.on("warning", onWarning);
  const ledger = new RedisLedger({ url: redis.url, timeout: 5 });
  try {
    assert.equal(pythonReserve(redis.url, "same-def", { max_usd: 1, max_steps: 10, window_seconds: 86400 }).length, 1);
    const same = new Scope({ name: "same-def", maxUsd: 1, maxSteps: 10, windowSeconds: 86400 });
    const held = await ledger.reserve(same.name, { steps: 1 }, same.limits(), same.windowSeconds);
    assert.ok(!(held instanceof Refusal));
    await ledger.release(held);
    let detail = await ledger.detail(same.name);
    assert.equal(detail.conflict, false, JSON.stringify(detail.definitions));
    assert.deepEqual(detail.limits, { steps: 10, usd: 1, window_seconds: 86400 });
    await new Promise((r) => setImmediate(r));
    assert.equal(warnings.filter((w) => w.code === "OTEL_BUDGET_SCOPE_CONFLICT").length, 0);

    const looser = new Scope({ name: "same-def", maxUsd: 2, maxSteps: 10, windowSeconds: 86400 });
    await ledger.release(await ledger.reserve(looser.name, { steps: 1 }, looser.limits(), looser.windowSeconds));
    detail = await ledger.detail(same.name);
    assert.equal(detail.conflict, true);
    assert.equal(detail.limits.usd, 1); // the tightest applies
    await new Promise((r) => setImmediate(r));
    assert.equal(warnings.filter((w) => w.code === "OTEL_BUDGET_SCOPE_CONFLICT").length, 1);
    assert.equal(pythonReserve(redis.url, "same-def", { max_usd: 1, max_steps: 10, window_seconds: 86400 }).length, 2);
  } finally {
    process.off("warning", onWarning);
    await ledger.close();
  }
});

test("settles are idempotent and thousands of reservations add up exactly", async () => {
  const ledger = new RedisLedger({ url: redis.url, timeout: 10 }); // a shared, loaded machine: no timeouts here
  const limits = { steps: 5000, usd: 100 };
  const first = await ledger.reserve("hammer", { steps: 1, usd: 0.25 }, limits);
  await ledger.settle(first, { steps: 1, usd: 0.125 });
  await ledger.settle(first, { steps: 1, usd: 0.125 }); // a retry: a no-op
  const results = [];
  for (let batch = 0; batch < 30; batch += 1) { // 3000 reservations, 100 in flight at a time
    const held = [];
    for (let i = 0; i < 100; i += 1) held.push(ledger.reserve("hammer", { steps: 1, usd: 0.01 }, limits));
    results.push(...await Promise.all(held));
  }
  const refused = results.filter((r) => r instanceof Refusal);
  assert.equal(refused.length, 0);
  await Promise.all(results.map((r, i) => ledger.settle(r, i % 2 ? { steps: 1 } : { steps: 1, usd: 0.01 })));
  await Promise.all(results.slice(0, 100).map((r) => ledger.settle(r, { steps: 1, usd: 5 }))); // retries
  const detail = await ledger.detail("hammer");
  assert.equal(detail.used.steps, 3001);
  assert.equal(Math.round(detail.used.usd * 1e6), 15_125_000);
  assert.equal(detail.reserved.steps, 0);
  const over = await ledger.reserve("hammer", { steps: 2000 }, limits);
  assert.ok(over instanceof Refusal && over.dim === "steps" && over.limit === 5000, String(over?.describe?.()));
  await ledger.close();
});

test("an unreachable Redis: fail closed stops the run before sending, fail open lets it through unenforced", async () => {
  await llm.reset();
  await llm.setDefault({ text: "ok", input_tokens: 5, output_tokens: 10 });
  const port = await freePort();
  const url = `redis://:hunter2@127.0.0.1:${port}/0`;
  const scope = new Scope({ name: "down", maxUsd: 1 });
  const model = budgeted(openai.chat("fleet-js"));
  const closed = new RedisLedger({ url, fail: "closed" });
  instrument({ ledger: closed, prices: { "fleet-js": PRICE } });
  const { outcome } = await run("closed", { budget: { scope } }, () =>
    generateText({ model, prompt: "pay", maxOutputTokens: 10, maxRetries: 0 }));
  assert.equal(outcome.stopReason, "error");
  assert.match(outcome.detail, /shared ledger at redis:\/\/:\*\*\*@127\.0\.0\.1/);
  assert.doesNotMatch(outcome.detail, /hunter2/);
  assert.equal((await llm.requests()).length, 0);

  const open = new RedisLedger({ url, fail: "open" });
  instrument({ ledger: open, prices: { "fleet-js": PRICE } });
  const opened = await run("open", { budget: { scope } }, () =>
    generateText({ model, prompt: "pay", maxOutputTokens: 10, maxRetries: 0 }));
  assert.equal(opened.outcome.stopReason, "done");
  assert.equal((await llm.requests()).length, 1);
  assert.ok(open.pending >= 1); // the settle waits for Redis
  await closed.close();
  await open.close();
});

test("a bad Scope is refused with an error naming the field", async () => {
  const { Budget, BudgetValidationError } = await import("otel-budget");
  assert.throws(() => new Scope({ name: "" }), (e) => e instanceof BudgetValidationError && e.field === "name");
  assert.throws(() => new Budget({ scope: { name: "fleet", maxUsd: -1 } }),
    (e) => e.field === "maxUsd" && /^Scope maxUsd=-1 must be greater than 0/.test(e.message));
  assert.throws(() => new Scope({ name: "fleet", maxSeconds: 5 }), (e) => e.field === "maxSeconds");
  assert.throws(() => new RedisLedger({ fail: "sometimes" }), /fail must be "closed" or "open"/);
  const budget = new Budget({ scope: { name: "fleet", maxUsd: 5, windowSeconds: Infinity } });
  assert.deepEqual(budget.scope.limits(), { usd: 5 });
  assert.equal(budget.scope.windowSeconds, null);
});

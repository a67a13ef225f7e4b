// A run tree across a Python and a Node process: a coordinator in one language exports a signed run token, a
// worker in the other attaches and draws from the same tree quota in a real redis-server (started here); a
// tampered token is refused. Also the fleet-wide maxToolCalls check before a tool runs.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { after, before, beforeEach, test } from "node:test";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, tool } from "ai";
import { z } from "zod";
import { InvalidRunState, PausedRun, RedisLedger, Scope, attachRun, budgeted, budgetedTools, decodeRunToken, exportRun,
  extractRun, injectRun, instrument, resume, run, treeUsage } from "otel-budget";
import { sign } from "otel-budget/internal";
import { repoRoot, startRedis, startScriptedLLM } from "./helpers.mjs";

const PYTHON = process.env.OTEL_BUDGET_PYTHON || join(repoRoot(), ".venv", "bin", "python");
const SECRET = "tree-secret";
const PRICES = { "tree-js": { inputPerMtok: 0, outputPerMtok: 1200 } }; // 10 output tokens: $0.012 a call
let redis;
let llm;
let openai;
let ledger;
const children = new Set();

before(async () => {
  redis = await startRedis();
  llm = await startScriptedLLM();
  openai = createOpenAI({ baseURL: llm.openai_base_url, apiKey: "test-key" });
});

after(async () => {
  for (const child of children) child.kill();
  await ledger?.close();
  await llm?.stop();
  redis?.stop();
});

beforeEach(async () => {
  await llm.reset();
  await llm.setDefault({ text: "paid", input_tokens: 50, output_tokens: 10 });
  await ledger?.close();
  ledger = new RedisLedger({ url: redis.url, timeout: 5 }); // a loaded machine: this test is not about timeouts
  instrument({ ledger, secret: SECRET, prices: PRICES });
});

/** The Python side (tokens_worker.py): its lines one by one, stdin to answer. */
function python(args) {
  const script = fileURLToPath(new URL("./tokens_worker.py", import.meta.url));
  const child = spawn(PYTHON, [script, ...args.map(String)], { cwd: repoRoot(), stdio: ["pipe", "pipe", "inherit"] });
  children.add(child);
  child.once("exit", () => children.delete(child));
  const lines = createInterface({ input: child.stdout });
  const queue = [];
  const waiting = [];
  lines.on("line", (line) => (waiting.length ? waiting.shift()(line) : queue.push(line)));
  return {
    next: () => (queue.length ? Promise.resolve(queue.shift()) : new Promise((r) => waiting.push(r))),
    go: () => child.stdin.write("go\n"),
    send: (line) => child.stdin.write(`${line}\n`),
  };
}

const callJs = () => generateText({ model: budgeted(openai.chat("tree-js")), prompt: "next", maxOutputTokens: 10,
  maxRetries: 0 });
const byModel = async (m) => (await llm.requests()).filter((r) => r.model === m).length;

test("a Python coordinator's signed token: a Node worker draws from the same tree quota", async () => {
  const py = python(["coordinate", redis.url, llm.openai_base_url, "tree-py", SECRET, 0.05]);
  const token = await py.next();
  assert.match(token, /^otb1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/);
  const payload = decodeRunToken(token);
  assert.equal(payload.run, "py-coordinator");
  assert.equal(Math.round(payload.limits.usd * 1000), 38); // $0.05 less the coordinator's first call
  let outcome;
  try {
    ({ outcome } = await attachRun(token, { name: "node-worker" }, async () => {
      for (let i = 0; i < 10; i += 1) await callJs();
    }));
  } finally {
    py.go(); // the coordinator goes on whatever happened here
  }
  const pyOutcome = JSON.parse(await py.next());
  // $0.012 a call in a $0.05 tree: 4 calls in all, whoever makes them
  assert.equal(await byModel("tree-py"), 1);
  assert.equal(await byModel("tree-js"), 3);
  assert.equal(outcome.stopReason, "cost");
  assert.equal(outcome.usage.modelCalls, 3);
  assert.equal(pyOutcome.stop_reason, "cost");
  assert.equal(pyOutcome.model_calls, 1);
  const used = await treeUsage(token);
  assert.equal(used.steps, 3); // the worker's calls, and none of the refused ones, are in the tree scope
  assert.equal(Math.round(used.usd * 1000), 36);
  // the tree scope defined from both languages is one definition (Python's float reprs)
  const detail = await ledger.detail(payload.tree);
  assert.equal(detail.conflict, false, JSON.stringify(detail.definitions));
  assert.equal(Math.round(detail.limits.usd * 1000), 38);
});

test("a Node coordinator's signed token: a Python worker draws from the same tree quota", async () => {
  const { outcome } = await run("node-coordinator", { budget: { maxUsd: 0.05 } }, async () => {
    await callJs();
    const token = await exportRun();
    const py = python(["attach", redis.url, llm.openai_base_url, "tree-py", SECRET, token]);
    const worker = JSON.parse(await py.next());
    assert.equal(worker.stop_reason, "cost", JSON.stringify(worker));
    assert.equal(worker.model_calls, 3);
    for (let i = 0; i < 3; i += 1) await callJs();
  });
  assert.equal(await byModel("tree-js"), 1);
  assert.equal(await byModel("tree-py"), 3);
  assert.equal(outcome.stopReason, "cost");
  assert.equal(outcome.usage.modelCalls, 1);
});

test("a tampered token is refused in both languages, naming what", async () => {
  let token;
  await run("node-coordinator", { budget: { maxUsd: 0.05 } }, async () => {
    token = await exportRun();
  });
  const [prefix, body, signature] = token.split(".");
  const doc = JSON.parse(Buffer.from(body, "base64url").toString("utf8"));
  doc.limits.usd = 500;
  const forged = `${prefix}.${Buffer.from(JSON.stringify(doc)).toString("base64url")}.${signature}`;
  const py = JSON.parse(await python(["attach", redis.url, llm.openai_base_url, "tree-py", SECRET, forged]).next());
  assert.match(py.error, /changed after it was signed/);
  await assert.rejects(attachRun(forged, {}, () => callJs()),
    (exc) => exc instanceof InvalidRunState && /changed after it was signed/.test(exc.message));
  const wrong = JSON.parse(await python(["attach", redis.url, llm.openai_base_url, "tree-py", "another-secret",
    token]).next());
  assert.match(wrong.error, /changed after it was signed/);
  assert.equal((await llm.requests()).length, 0);
});

test("the tree's record in Redis is the authority: a token for a tree it does not know is refused", async () => {
  let token;
  await run("node-coordinator", { budget: { maxUsd: 0.05 } }, async () => {
    token = await exportRun();
  });
  const elsewhere = new RedisLedger({ url: redis.url, timeout: 5, prefix: "elsewhere" });
  instrument({ ledger: elsewhere, secret: SECRET, prices: PRICES });
  try {
    await assert.rejects(attachRun(token, {}, () => callJs()), /is not recorded in the shared ledger/);
  } finally {
    await elsewhere.close();
  }
  assert.equal((await llm.requests()).length, 0);
});

test("a fleet-wide maxToolCalls is checked before a tool runs", async () => {
  const scope = new Scope({ name: "fleet-tools", maxToolCalls: 2 });
  const ran = [];
  const tools = budgetedTools({
    lookup: tool({ description: "Look up.", inputSchema: z.object({ q: z.string() }),
      execute: async ({ q }) => ran.push(q) && `found ${q}` }),
  });
  const runs = [];
  for (const name of ["first", "second"]) {
    runs.push(await run(name, { budget: { scope } }, async () => [
      await tools.lookup.execute({ q: `${name}-a` }, { toolCallId: `${name}-1`, messages: [] }),
      await tools.lookup.execute({ q: `${name}-b` }, { toolCallId: `${name}-2`, messages: [] }),
    ]));
  }
  // two runs of this process, as two processes would: the fleet allows 2 tool calls in all
  assert.deepEqual(ran, ["first-a", "first-b"]);
  assert.match(runs[1].result[0], /^Not run \(otel-budget, tool_calls\): the tool lookup was not sent: it would exceed max_tool_calls of the shared budget 'fleet-tools'/);
  assert.equal(runs[1].outcome.stopReason, "tool_calls");
  assert.equal((await ledger.detail("fleet-tools")).used.tool_calls, 2);
});

test("a run paused in Python resumes in Node with its quota from Redis, and the reverse", async () => {
  const text = await python(["pause", redis.url, llm.openai_base_url, "tree-py", SECRET, 0.05]).next();
  const paused = PausedRun.parse(text);
  assert.equal(paused.pending.kind, "limit");
  assert.equal(paused.usage.modelCalls, 4);
  assert.deepEqual(paused.state, { language: "python", "ünïcode": 1.5 });
  // the record in Redis is the authority: a paused run whose usage was edited and signed again (by someone who has
  // the secret) still cannot give quota back
  const doc = JSON.parse(paused.json());
  Object.assign(doc.usage, { model_calls: 0, cost_usd: 0 });
  doc.signature = sign(PausedRun.parse(JSON.stringify(doc)).signedContent(), Buffer.from(SECRET));
  const edited = await resume(JSON.stringify(doc), { approved: true, budget: { maxUsd: 0.05 } }, () => callJs());
  assert.equal(edited.outcome.usage.modelCalls, 4);
  assert.equal(await byModel("tree-js"), 0);
  const resumed = await resume(text, { approved: true, budget: { maxUsd: 0.08 } }, async (r) => {
    r.checkpoint({ language: "typescript", "ünïcode": 1.5 });
    for (let i = 0; i < 10; i += 1) await callJs();
  });
  assert.equal(await byModel("tree-js"), 2); // $0.048 used of $0.08: two more calls
  assert.equal(resumed.outcome.stopReason, "awaiting_approval");
  assert.equal(resumed.outcome.usage.modelCalls, 6);
  const back = python(["resume", redis.url, llm.openai_base_url, "tree-py", SECRET, 0.1]);
  back.send(resumed.outcome.paused.json());
  const py = JSON.parse(await back.next());
  assert.equal(py.error, undefined, py.error);
  assert.equal(py.model_calls, 8); // $0.072 used of $0.10: two more calls, in Python
  assert.equal(py.stop_reason, "awaiting_approval");
  assert.equal(await byModel("tree-py"), 6);
});

test("a TypeScript pause edited after it was signed is refused by Python", async () => {
  const { outcome } = await run("node-pauser", { budget: { maxSteps: 1, onLimit: "pause" } }, async () => {
    await callJs();
    await callJs();
  });
  const doc = JSON.parse(outcome.paused.json());
  doc.usage.model_calls = 0;
  const py = python(["resume", redis.url, llm.openai_base_url, "tree-py", SECRET, 0.1]);
  py.send(JSON.stringify(doc));
  assert.match(JSON.parse(await py.next()).error, /changed after it was signed/);
});

function pythonCode(code, ...args) {
  const out = spawnSync(PYTHON, ["-c", `import json, sys, otel_budget
from otel_budget import propagation
otel_budget.instrument(ledger=otel_budget.RedisLedger(sys.argv[1], socket_timeout=5.0), secret=sys.argv[2])
${code}`, redis.url, SECRET, ...args], { cwd: repoRoot(), encoding: "utf8" });
  assert.equal(out.status, 0, out.stderr);
  return JSON.parse(out.stdout);
}

test("HTTP headers: a run token in W3C baggage crosses both ways, read only signed", async () => {
  let headers;
  let tree;
  await run("node-coordinator", { budget: { maxUsd: 0.05 } }, async () => {
    headers = await injectRun({ "x-task": "invoices" });
    tree = decodeRunToken(extractRun(headers)).tree;
  });
  assert.match(headers.baggage, /^otel_budget\.run=otb1\./);
  const py = pythonCode(`token = propagation.extract(json.loads(sys.argv[3]))
print(json.dumps(propagation.decode(token)))`, JSON.stringify(headers));
  assert.equal(py.tree, tree);
  assert.equal(py.run, "node-coordinator");
  const fromPython = pythonCode(`with otel_budget.run("py-coordinator", budget=otel_budget.Budget(max_usd=1.0)):
    print(json.dumps(dict(propagation.inject({}))))`);
  const token = extractRun(fromPython);
  assert.equal(decodeRunToken(token).run, "py-coordinator");
  assert.equal(extractRun({ "x-task": "none" }), null);
  instrument({ ledger, prices: PRICES }); // no secret: baggage from a request is never trusted unsigned
  assert.throws(() => extractRun(fromPython), /only a signed run token is accepted here/);
});

test("a worker's budget is what the tree has left, even when a part's room is larger than the total's", async () => {
  let token;
  await run("coordinator", { budget: { maxInputTokens: 5000, maxTotalTokens: 6000 } }, async () => {
    await llm.setDefault({ text: "long", input_tokens: 100, output_tokens: 2000 });
    await generateText({ model: budgeted(openai.chat("tree-js")), prompt: "write", maxRetries: 0 });
    token = await exportRun();
  });
  const { result, outcome } = await attachRun(token, { budget: { maxSteps: 3 } }, (r) =>
    [r.budget.maxInputTokens, r.budget.maxTotalTokens, r.budget.maxSteps]);
  assert.deepEqual(result, [3900, 3900, 3]);
  assert.equal(outcome.stopReason, "done");
});

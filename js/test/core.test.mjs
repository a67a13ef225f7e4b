// The TypeScript core on its own: state stays bounded over thousands of calls, and bad input is named.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Budget, run } from "otel-budget";
import { admit, admitTool, currentNode, noteToolResult, recordToolRequests, settleCall, settleTool } from "otel-budget/internal";

test("5,000 calls with distinct tools and results: done, with bounded state", async () => {
  let node;
  const { outcome } = await run("long", { budget: { maxSteps: 10_000, maxUsd: 100 } }, async () => {
    node = currentNode();
    for (let i = 0; i < 5000; i++) {
      const adm = admit(node, "openai", "gpt-4o-mini", null, () => 400);
      settleCall(adm, { inputTokens: 100, outputTokens: 10 }, 0.0001, 400);
      recordToolRequests(node, [["step", JSON.stringify({ i }), `c${i}`]]);
      const reserved = admitTool(node, "step", { i });
      settleTool(node, "step", reserved);
      noteToolResult(node, "step", `c${i}`, `result ${i}`);
    }
  });
  assert.equal(outcome.stopReason, "done");
  assert.equal(outcome.usage.modelCalls, 5000);
  assert.equal(outcome.usage.toolCalls, 5000);
  assert.ok(node.progress.requests.items.length <= 192);
  assert.ok(node.progress.executions.items.length <= 192);
  assert.ok(node.progress.seen.size <= 1024);
  assert.ok(node.progress.names.size <= 1024);
  assert.deepEqual(node.progress.distinctCount("step"), [256, false]);
  assert.equal(node.account.reserved.usd, 0); // every reservation settled
  assert.ok(Math.abs(outcome.usage.costUsd - 0.5) < 1e-9, String(outcome.usage.costUsd));
});

test("5,000 calls of 5,000 different tools answered \"ok\": done, with the progress watch bounded", async () => {
  let node;
  const { outcome } = await run("many-tools", { budget: { maxSteps: 10_000 } }, async () => {
    node = currentNode();
    for (let i = 0; i < 5000; i++) {
      settleCall(admit(node, "openai", "gpt-4o-mini", null, () => 400), { inputTokens: 10, outputTokens: 1 }, 0, 400);
      recordToolRequests(node, [[`tool_${i}`, "{}", `c${i}`]]);
      settleTool(node, `tool_${i}`, admitTool(node, `tool_${i}`, {}));
      noteToolResult(node, `tool_${i}`, `c${i}`, "ok");
    }
  });
  assert.equal(outcome.stopReason, "done");
  assert.ok(node.progress.tools.size <= 128, String(node.progress.tools.size));
  assert.ok(node.progress.names.size <= 1024 && node.progress.seen.size <= 1024);
});

test("a stall after more distinct results than are kept says \"at least\" (as Python's wrap-up)", async () => {
  const { outcome } = await run("long-portal", { budget: { maxSteps: 1000 } }, async () => {
    const node = currentNode();
    for (let i = 0; i < 303; i++) {
      settleCall(admit(node, "openai", "gpt-4o-mini", null, () => 400), { inputTokens: 10, outputTokens: 1 }, 0, 400);
      recordToolRequests(node, [["next_page", JSON.stringify({ page: i }), `p${i}`]]);
      settleTool(node, "next_page", admitTool(node, "next_page", { page: i }));
      const page = i < 300 ? i : 300;
      noteToolResult(node, "next_page", `p${i}`, `Invoices, page ${page}: INV-2026-0412 OPEN, INV-2026-0419 OPEN, INV-2026-0433 OPEN, and more`);
    }
    admit(node, "openai", "gpt-4o-mini", null, () => 400);
  });
  assert.equal(outcome.stopReason, "stalled");
  assert.ok(outcome.wrapUp.endsWith("Missing: what next_page should have returned next (it gave at least 256 distinct "
    + "results in 303 calls); the rest of the task."), outcome.wrapUp);
});

test("a bad Budget names the field and what to give", () => {
  assert.throws(() => new Budget({ maxUsd: NaN }), /maxUsd=NaN .*finite positive number/);
  assert.throws(() => new Budget({ maxSteps: true }), /maxSteps=true: a bool is not a limit/);
  assert.throws(() => new Budget({ maxSteps: "10" }), /maxSteps="10" is not a number/);
  assert.throws(() => new Budget({ max_steps: 10 }), /Budget has no field max_steps/);
  assert.throws(() => new Budget({ onLimit: "halt" }), /onLimit="halt": give "stop" \(the default\) or "pause"/);
  assert.throws(() => new Budget({ approve: 42 }), /Budget approve takes tool names/);
  assert.throws(() => new Budget({ wrapUp: "llm" }), /wrapUp="llm": give "template" \(the default, no call\) or "model"/);
  assert.equal(new Budget({ wrapUp: "model" }).wrapUp, "model");
  assert.throws(() => new Budget({ polls: { wait: 0 } }), /polls\["wait"\]=0/);
  assert.equal(new Budget({ maxUsd: Infinity }).maxUsd, null);
});

test("run() names what it needs on bad input", async () => {
  await assert.rejects(run("", {}, async () => 1), /give the run a non-empty name/);
  await assert.rejects(run("x", {}, "not a function"), /fn must be a function/);
});

test("an error in the run's function is rethrown with the outcome attached", async () => {
  const boom = new Error("portal down for jane@example.com");
  await assert.rejects(run("failing", {}, async () => {
    throw boom;
  }), (err) => {
    assert.equal(err, boom);
    assert.equal(err.outcome.stopReason, "error");
    assert.equal(err.outcome.detail, "Error"); // the type, never the message: it may carry what a user wrote
    assert.ok(!err.outcome.wrapUp.includes("jane@example.com"), err.outcome.wrapUp);
    assert.ok(err.outcome.wrapUp.startsWith("Stopped by an error before the run finished."));
    return true;
  });
});

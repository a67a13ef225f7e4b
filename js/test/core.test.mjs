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
  assert.ok(node.progress.seen.size <= 4096);
  assert.ok(node.progress.distinct.get("step").size <= 1000);
  assert.equal(node.account.reserved.usd, 0); // every reservation settled
  assert.ok(Math.abs(outcome.usage.costUsd - 0.5) < 1e-9, String(outcome.usage.costUsd));
});

test("a bad Budget names the field and what to give", () => {
  assert.throws(() => new Budget({ maxUsd: NaN }), /maxUsd=NaN .*finite positive number/);
  assert.throws(() => new Budget({ maxSteps: true }), /maxSteps=true: a bool is not a limit/);
  assert.throws(() => new Budget({ maxSteps: "10" }), /maxSteps="10" is not a number/);
  assert.throws(() => new Budget({ max_steps: 10 }), /Budget has no field max_steps/);
  assert.throws(() => new Budget({ onLimit: "pause" }), /onLimit: pausing at a limit is not in the TypeScript package yet/);
  assert.throws(() => new Budget({ polls: { wait: 0 } }), /polls\["wait"\]=0/);
  assert.equal(new Budget({ maxUsd: Infinity }).maxUsd, null);
});

test("run() names what it needs on bad input", async () => {
  await assert.rejects(run("", {}, async () => 1), /give the run a non-empty name/);
  await assert.rejects(run("x", {}, "not a function"), /fn must be a function/);
});

test("an error in the run's function is rethrown with the outcome attached", async () => {
  const boom = new Error("portal down");
  await assert.rejects(run("failing", {}, async () => {
    throw boom;
  }), (err) => {
    assert.equal(err, boom);
    assert.equal(err.outcome.stopReason, "error");
    assert.equal(err.outcome.detail, "Error: portal down");
    assert.ok(err.outcome.wrapUp.startsWith("Stopped by an error before the run finished."));
    return true;
  });
});

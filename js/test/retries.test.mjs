// maxSeconds bounds the SDK's retry waits: they happen outside the model middleware, and only the call's
// abortSignal cuts them. With `abortSignal: run.signal`, a run whose deadline passes while the SDK waits to retry a
// 429/500 ends `time` at the deadline and the retry is never sent (counted at ScriptedLLM). Without it, the run
// waits out the SDK's backoff (the retry is still refused before sending).
import assert from "node:assert/strict";
import { after, before, beforeEach, test } from "node:test";
import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import { ToolLoopAgent, generateText, streamText } from "ai";
import { budgeted, run } from "otel-budget";
import { startScriptedLLM } from "./helpers.mjs";

let llm;
let providers;

before(async () => {
  llm = await startScriptedLLM();
  const openai = createOpenAI({ baseURL: llm.openai_base_url, apiKey: "test-key" });
  const anthropic = createAnthropic({ baseURL: `${llm.anthropic_base_url}/v1`, apiKey: "test-key" });
  providers = {
    "openai chat": () => openai.chat("gpt-4o"),
    "anthropic messages": () => anthropic("claude-sonnet-4-5"),
  };
});
after(async () => llm.stop());
beforeEach(async () => llm.reset());

// a retry wait far longer than the run's time: the SDK honours Retry-After below 60 s
const WAIT = 30;

for (const name of ["openai chat", "anthropic messages"]) {
  test(`${name}: a 429 whose Retry-After passes the deadline ends the run \`time\` at the deadline, with no retry sent`,
    { timeout: 20_000 }, async () => {
      await llm.script({ status: 429, retry_after: WAIT, error_message: "slow down" },
        { text: "sent after the deadline", input_tokens: 10, output_tokens: 2 });
      const { result, outcome } = await run("retry-wait", { budget: { maxSeconds: 1 } }, (r) => generateText({
        model: budgeted(providers[name]()), maxRetries: 2, prompt: "hi", abortSignal: r.signal }));
      assert.equal(outcome.stopReason, "time");
      assert.equal(outcome.limit, "max_seconds");
      assert.equal(outcome.detail, "the call failed (HTTP 429) and the run's time ran out while the SDK waited to "
        + "retry it; the retry was not sent (max_seconds).");
      assert.equal(result, undefined); // the SDK threw its abort: the run ended gracefully, with no result
      assert.ok(outcome.wrapUp.startsWith("Stopped at a limit: max_seconds"), outcome.wrapUp);
      assert.ok(outcome.usage.seconds < WAIT / 2, `waited ${outcome.usage.seconds} s`); // not the SDK's 30 s wait
      assert.equal((await llm.requests()).length, 1);
    });
}

test("a 500 retried by the SDK (2 s backoff) past the deadline: the run ends `time`, one request sent", { timeout: 20_000 },
  async () => {
    await llm.script({ status: 500, error_message: "overloaded" }, { text: "late", input_tokens: 10, output_tokens: 2 });
    const { outcome } = await run("retry-500", { budget: { maxSeconds: 0.5 } }, (r) => generateText({
      model: budgeted(providers["openai chat"]()), maxRetries: 3, prompt: "hi", abortSignal: r.signal }));
    assert.equal(outcome.stopReason, "time");
    assert.match(outcome.detail, /^the call failed \(HTTP 500\) and the run's time ran out while the SDK waited/);
    assert.equal((await llm.requests()).length, 1);
  });

for (const mode of ["streamText", "ToolLoopAgent"]) {
  test(`${mode}: the retry wait is cut at the deadline the same way`, { timeout: 20_000 }, async () => {
    await llm.script({ status: 429, retry_after: WAIT }, { text: "sent after the deadline" });
    const model = budgeted(providers["openai chat"]());
    const { result, outcome } = await run("retry-wait", { budget: { maxSeconds: 1 } }, async (r) => {
      if (mode === "ToolLoopAgent") {
        return new ToolLoopAgent({ model, maxRetries: 2 }).generate({ prompt: "hi", abortSignal: r.signal });
      }
      const stream = streamText({ model, maxRetries: 2, prompt: "hi", abortSignal: r.signal, onError: () => {} });
      return { text: await stream.text };
    });
    assert.equal(outcome.stopReason, "time");
    assert.match(outcome.detail, /^the call failed \(HTTP 429\) and the run's time ran out while the SDK waited/);
    assert.equal(result, undefined);
    assert.ok(outcome.usage.seconds < WAIT / 2, `waited ${outcome.usage.seconds} s`);
    assert.equal((await llm.requests()).length, 1);
  });
}

test("a parent's deadline cuts a child run's retry wait: both outcomes record `time`", { timeout: 20_000 },
  async () => {
    await llm.script({ status: 429, retry_after: WAIT }, { text: "sent after the deadline" });
    const { result, outcome } = await run("parent", { budget: { maxSeconds: 1 } }, () =>
      run("child", {}, (r) => generateText({ model: budgeted(providers["openai chat"]()), maxRetries: 2,
        prompt: "hi", abortSignal: r.signal })));
    assert.equal(result.outcome.stopReason, "time");
    assert.equal(outcome.stopReason, "time");
    assert.match(outcome.detail, /^in run 'child': the call failed \(HTTP 429\)/);
    assert.equal((await llm.requests()).length, 1);
  });

test("a retry that fits in the run's time is sent and answers: run.signal changes nothing", async () => {
  await llm.script({ status: 429, retry_after: 0 }, { text: "second try", input_tokens: 10, output_tokens: 2 });
  const { result, outcome } = await run("retry-fits", { budget: { maxSeconds: 30 } }, (r) => generateText({
    model: budgeted(providers["openai chat"]()), maxRetries: 2, prompt: "hi", abortSignal: r.signal }));
  assert.equal(outcome.stopReason, "done");
  assert.equal(result.text, "second try");
  assert.equal((await llm.requests()).length, 2);
  assert.equal(result.usage.inputTokens, 10);
});

test("run.signal: never aborted without a time limit, aborted at the deadline, the tightest of the chain", async () => {
  await run("no-limit", {}, (r) => assert.equal(r.signal.aborted, false));
  await run("parent", { budget: { maxSeconds: 0.05 } }, async () => {
    await run("child", { budget: { maxSeconds: 600 } }, async (r) => {
      const signal = r.signal;
      assert.equal(signal.aborted, false);
      await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
      assert.equal(signal.reason.name, "TimeoutError");
    });
  });
});

test("an abort of the caller's own signal is not a time stop: the run ends `cancelled`", async () => {
  await llm.script({ text: "slow", delay: 20 });
  const mine = new AbortController();
  let error;
  try {
    await run("mine", { budget: { maxSeconds: 60 } }, (r) => {
      setTimeout(() => mine.abort(), 50).unref();
      return generateText({ model: budgeted(providers["openai chat"]()), maxRetries: 0, prompt: "hi",
        abortSignal: AbortSignal.any([r.signal, mine.signal]) });
    });
  } catch (exc) {
    error = exc;
  }
  assert.ok(error !== undefined, "the caller's abort reaches the caller");
  assert.equal(error.outcome.stopReason, "cancelled");
});

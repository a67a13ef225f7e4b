// A stream the caller leaves (breaks out of its iterator, or aborts) never reports its usage: the call is settled
// when it is left, once, with the best estimate (input from the admission or the request's size, output from the
// text seen), never zero, on whichever ai major is installed.
import assert from "node:assert/strict";
import { test } from "node:test";
import { streamText } from "ai";
import { budgeted, run } from "otel-budget";
import { scriptedAI } from "./scripted-ai.mjs";

const { llm, openai, exporter } = await scriptedAI();

// 12 deltas, 0.2 s apart; the usage (500 in, 30 out) would come only with the last chunk
const SLOW = { text: "one two three four five six seven eight nine ten eleven twelve", chunks: 12, chunk_delay: 0.2,
  input_tokens: 500, output_tokens: 30 };
const chats = () => exporter.getFinishedSpans().filter((s) => s.name.startsWith("chat "));

function assertEstimated(outcome) {
  const u = outcome.usage;
  assert.equal(u.modelCalls, 1);
  assert.ok(u.inputTokens > 0 && u.inputTokens < SLOW.input_tokens, `input ${u.inputTokens}: estimated, not 0`);
  assert.ok(u.outputTokens >= 1 && u.outputTokens < SLOW.output_tokens, `output ${u.outputTokens}: from the text seen`);
  const spans = chats();
  assert.equal(spans.length, 1); // ended when left, once
  assert.equal(spans[0].attributes["gen_ai.usage.input_tokens"], u.inputTokens);
  assert.equal(spans[0].attributes["gen_ai.usage.output_tokens"], u.outputTokens);
  assert.equal(spans[0].attributes["otel_budget.usage.estimated"], true); // marked: not what the provider reported
}

test("breaking out of a stream's iterator settles the call with the best estimate (no limits: no admission estimate)",
  async () => {
    await llm.script(SLOW);
    const { result, outcome } = await run("left-break", {}, async () => {
      const stream = streamText({ model: budgeted(openai.chat("gpt-4o")), maxRetries: 0, prompt: "Count." });
      let seen = "";
      for await (const delta of stream.textStream) {
        seen += delta;
        if (seen.length > 8) break;
      }
      return seen;
    });
    assert.ok(result.length > 8 && result.length < SLOW.text.length, result);
    assert.equal(outcome.stopReason, "done");
    assertEstimated(outcome);
  });

test("aborting a stream settles the call with the best estimate, and a money cap is charged for it", async () => {
  await llm.script(SLOW);
  const controller = new AbortController();
  const { outcome } = await run("left-abort", { budget: { maxUsd: 1 } }, async () => {
    const stream = streamText({ model: budgeted(openai.chat("gpt-4o")), maxRetries: 0, prompt: "Count.",
      abortSignal: controller.signal, onError: () => {} });
    let seen = "";
    for await (const delta of stream.textStream) {
      seen += delta;
      if (seen.length > 8) controller.abort();
    }
    return seen;
  });
  assertEstimated(outcome);
  assert.ok(outcome.usage.costUsd > 0, String(outcome.usage.costUsd));
});

test("a stream the run outlives is settled with the best estimate when the run ends", async () => {
  await llm.script(SLOW);
  let stream;
  const { outcome } = await run("left-unread", {}, async () => {
    stream = streamText({ model: budgeted(openai.chat("gpt-4o")), maxRetries: 0, prompt: "Count.", onError: () => {} });
    const reader = stream.textStream[Symbol.asyncIterator]();
    await reader.next(); // the first delta has arrived: the call is open; the rest is never read inside the run
    return "left";
  });
  assert.equal(outcome.usage.modelCalls, 1);
  assert.ok(outcome.usage.inputTokens > 0, String(outcome.usage.inputTokens));
  assert.ok(outcome.usage.outputTokens >= 1 && outcome.usage.outputTokens < SLOW.output_tokens);
  assert.equal(chats().length, 1);
  await stream.consumeStream?.(); // the rest arrives after the run: not counted again, no second span
  assert.equal(chats().length, 1);
});

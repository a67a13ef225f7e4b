// `wrapUp: "model"` against the real AI SDK and ScriptedLLM: a slice held back when the run starts pays for one
// short tool-less call through the same budgeted model when a limit stops the run; its text follows the template
// as `Summary: ...`. The run span records the template (a model's words are content). Too small a slice: the
// template, and no extra request.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ToolLoopAgent, generateText, stepCountIs, streamText } from "ai";
import { budgeted, run } from "otel-budget";
import { portalTools, scriptedAI } from "./scripted-ai.mjs";

const PRICE = { inputPerMtok: 2.5, outputPerMtok: 10 };
const SUMMARY = "I opened page 2 of the portal three times; the open invoices were not paid.";
const { llm, openai, exporter } = await scriptedAI({ prices: { "gpt-4o": PRICE } });

const requests = async () => (await llm.requests()).filter((r) => r.api.startsWith("openai"));
const toolTurn = (name, args, extra = {}) => ({ tool_calls: [{ name, arguments: args }], input_tokens: 400,
  output_tokens: 20, ...extra });
const wrapUpTurn = { text: SUMMARY, input_tokens: 250, output_tokens: 30 };
const runSpan = (name) => exporter.getFinishedSpans().find((s) => s.name === `invoke_agent ${name}`);

const portal = portalTools;

/** The wrap-up request: the last one, with no tools and a short output limit, asking for the report. */
function assertWrapUpRequest(body) {
  assert.ok(!("tools" in body) && !("tool_choice" in body), JSON.stringify(Object.keys(body)));
  assert.equal(body.max_tokens ?? body.max_completion_tokens, 300);
  assert.equal(body.messages.length, 1);
  assert.ok(JSON.stringify(body.messages[0]).includes("stopped by its budget"), JSON.stringify(body.messages[0]));
}

test("generateText stuck on a portal ends `repeat` with the model-written wrap-up, one extra tool-less request", async () => {
  await llm.script(...Array.from({ length: 3 }, () => toolTurn("open_portal", { page: 2 })), wrapUpTurn,
    { text: "never" });
  const visits = [];
  const { result, outcome } = await run("stuck-model-wrap", { budget: { maxSteps: 20, wrapUp: "model" } }, () =>
    generateText({ model: budgeted(openai.chat("gpt-4o")), tools: portal(visits), stopWhen: stepCountIs(20),
      maxRetries: 0, prompt: "Pay the open invoices." }));
  const sent = await requests();
  assert.equal(outcome.stopReason, "repeat");
  assert.equal(sent.length, 4); // three agent turns and the wrap-up call
  assertWrapUpRequest(sent[3].body);
  assert.deepEqual(visits, [2, 2]);
  assert.equal(result.text, outcome.wrapUp);
  assert.ok(result.text.startsWith("Stopped at a limit: max_repeats (the same tool call 3 times in a row). "
    + "The task is NOT complete"), result.text);
  assert.ok(result.text.endsWith(`Summary: ${SUMMARY}`), result.text);
  assert.ok(result.text.includes("4 model calls, 1,450 input and 90 output tokens"), result.text); // counted
  assert.equal(outcome.usage.modelCalls, 4);
  const span = runSpan("stuck-model-wrap");
  const recorded = span.attributes["otel_budget.wrap_up"];
  assert.ok(recorded.startsWith("Stopped at a limit: max_repeats") && !recorded.includes("Summary"), recorded);
  assert.equal(exporter.getFinishedSpans().filter((s) => s.name.startsWith("chat ")).length, 4);
});

test("a ToolLoopAgent under maxSteps 4 takes 3 turns, the 4th step writes the wrap-up, never a 5th", async () => {
  await llm.script(...[1, 2, 3].map((n) => toolTurn("open_portal", { page: n })), wrapUpTurn,
    toolTurn("open_portal", { page: 4 }));
  const visits = [];
  const agent = new ToolLoopAgent({ model: budgeted(openai.chat("gpt-4o")), instructions: "Pay the invoices.",
    tools: portal(visits), stopWhen: stepCountIs(20), maxRetries: 0 });
  const { result, outcome } = await run("agent-model-wrap", { budget: { maxSteps: 4, wrapUp: "model" } }, () =>
    agent.generate({ prompt: "Pay them." }));
  const sent = await requests();
  assert.equal(outcome.stopReason, "steps");
  assert.equal(sent.length, 4); // the slice held back one step: three agent turns, then the wrap-up
  assert.ok(sent.slice(0, 3).every((r) => Array.isArray(r.body.tools)));
  assertWrapUpRequest(sent[3].body);
  assert.equal(outcome.usage.modelCalls, 4); // within maxSteps
  assert.equal(result.text, outcome.wrapUp);
  assert.ok(result.text.startsWith("Stopped at a limit: max_steps (4 of 4 model calls used)."), result.text);
  assert.ok(result.text.endsWith(`Summary: ${SUMMARY}`), result.text);
});

test("streamText gets the model-written wrap-up as its text too", async () => {
  await llm.script(...Array.from({ length: 3 }, () => toolTurn("open_portal", { page: 2 })), wrapUpTurn);
  const { result, outcome } = await run("stream-model-wrap", { budget: { wrapUp: "model" } }, async () => {
    const stream = streamText({ model: budgeted(openai.chat("gpt-4o")), tools: portal([]), stopWhen: stepCountIs(20),
      maxRetries: 0, prompt: "Pay the open invoices." });
    return stream.text;
  });
  assert.equal(outcome.stopReason, "repeat");
  assert.equal((await requests()).length, 4);
  assert.ok(result.endsWith(`Summary: ${SUMMARY}`), result);
  assert.equal(result, outcome.wrapUp);
});

test("a slice too small for the wrap-up call: the template, and no extra request", async () => {
  // maxUsd 0.02 holds back $0.001; the wrap-up call's worst case (300 output tokens alone: $0.003) does not fit
  await llm.script(...[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].map((n) => toolTurn("open_portal", { page: n },
    { input_tokens: 1500, output_tokens: 20 })), wrapUpTurn);
  const { result, outcome } = await run("small-slice", { budget: { maxUsd: 0.02, wrapUp: "model" } }, () =>
    generateText({ model: budgeted(openai.chat("gpt-4o")), tools: portal([]), stopWhen: stepCountIs(20),
      maxRetries: 0, maxOutputTokens: 50, prompt: "Pay the open invoices." }));
  const sent = await requests();
  assert.equal(outcome.stopReason, "cost");
  assert.ok(sent.every((r) => Array.isArray(r.body.tools)), "no wrap-up request was sent");
  assert.equal(outcome.usage.modelCalls, sent.length);
  assert.ok(outcome.usage.costUsd <= 0.02, String(outcome.usage.costUsd));
  assert.equal(result.text, outcome.wrapUp);
  assert.ok(result.text.startsWith("Stopped at a limit: max_usd") && !result.text.includes("Summary:"), result.text);
  process.stdout.write(`# small slice: ${sent.length} requests, $${outcome.usage.costUsd} of $0.02\n`);
});

test("maxSteps 1 is all held back: the wrap-up call takes the step; a run that ends `done` makes no such call", async () => {
  await llm.script({ text: "All paid.", input_tokens: 100, output_tokens: 5 });
  const { result, outcome } = await run("done-model-wrap", { budget: { maxSteps: 1, wrapUp: "model" } }, () =>
    generateText({ model: budgeted(openai.chat("gpt-4o")), maxRetries: 0, prompt: "Pay." }));
  // maxSteps 1 is all held back: the only call is refused, and the wrap-up call takes the step
  assert.equal(outcome.stopReason, "steps");
  assert.equal((await requests()).length, 1);
  assert.ok(result.text.endsWith("Summary: All paid."), result.text);
  const { outcome: two } = await run("done-model-wrap-2", { budget: { maxSteps: 3, wrapUp: "model" } }, async (r) => {
    await llm.script({ text: "All paid.", input_tokens: 100, output_tokens: 5 });
    await generateText({ model: budgeted(openai.chat("gpt-4o")), maxRetries: 0, prompt: "Pay." });
    return r.usage();
  });
  assert.equal(two.stopReason, "done");
  assert.equal((await requests()).length, 2);
  assert.equal(two.wrapUp.startsWith("Completed: 1 model call"), true, two.wrapUp);
});

test("a run that ends `incomplete` (confirmDone) writes its wrap-up with one call at the end", async () => {
  await llm.script({ text: "I think it is paid.", input_tokens: 100, output_tokens: 5 }, wrapUpTurn);
  const { result, outcome } = await run("incomplete-model-wrap", { budget: { confirmDone: true, wrapUp: "model" } },
    () => generateText({ model: budgeted(openai.chat("gpt-4o")), tools: portal([]), maxRetries: 0, prompt: "Pay." }));
  const sent = await requests();
  assert.equal(outcome.stopReason, "incomplete");
  assert.equal(result.text, "I think it is paid."); // the model's own answer; the wrap-up is the outcome's
  assert.equal(sent.length, 2);
  assertWrapUpRequest(sent[1].body);
  assert.ok(outcome.wrapUp.startsWith("Stopped: the model stopped, but the work is not confirmed done"), outcome.wrapUp);
  assert.ok(outcome.wrapUp.endsWith(`Summary: ${SUMMARY}`), outcome.wrapUp);
  assert.equal(outcome.usage.modelCalls, 2);
  const recorded = runSpan("incomplete-model-wrap").attributes["otel_budget.wrap_up"];
  assert.ok(!recorded.includes("Summary"), recorded);
});

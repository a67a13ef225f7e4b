// Pauses, approvals and resume through the real AI SDK (`ai` and `@ai-sdk/openai`) against the Python ScriptedLLM:
// `onLimit: "pause"` stops before the call that would pass the limit, `resume` goes on with the quota used, an
// approval gate pauses before a risky tool. What reached the server is counted at the server.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ToolLoopAgent, generateText, stepCountIs, tool } from "ai";
import { z } from "zod";
import { Budget, InvalidRunState, PausedRun, budgeted, budgetedTools, resume, run } from "otel-budget";
import { portalTools, scriptedAI } from "./scripted-ai.mjs";

const PRICES = { "paid-model": { inputPerMtok: 0, outputPerMtok: 1200 } }; // 10 output tokens: $0.012 a call
const { llm, openai } = await scriptedAI({ prices: PRICES, secret: "pause-test-secret" });

const sent = async () => (await llm.requests()).filter((r) => r.api.startsWith("openai")).length;
const pageTurn = (page) => ({ tool_calls: [{ name: "open_portal", arguments: { page } }], input_tokens: 50,
  output_tokens: 10 });

const portal = (visits) => portalTools(visits, (page, seen) => `page ${page}: ${seen.length} invoices read`);

/** A generateText tool loop over the portal with a paid model (10 output tokens a call). */
const portalLoop = (visits) => generateText({
  model: budgeted(openai.chat("paid-model")), tools: portal(visits), stopWhen: stepCountIs(30), maxRetries: 0,
  maxOutputTokens: 10, prompt: "Read every page of the portal.",
});

async function pausedAtUsd() {
  await llm.script(...[1, 2, 3, 4, 5, 6, 7, 8, 9].map(pageTurn));
  const visits = [];
  const out = await run("reader", { budget: { maxUsd: 0.05, onLimit: "pause" } }, async (r) => {
    r.checkpoint({ pagesRead: visits });
    return portalLoop(visits);
  });
  return { ...out, visits };
}

test("onLimit pause: the run stops before the call that would pass maxUsd, with a limit pending", async () => {
  const { result, outcome, visits } = await pausedAtUsd();
  // $0.012 a call under $0.05: the 5th call would make $0.06, so it is not sent (0 extra requests)
  assert.equal(await sent(), 4);
  assert.equal(outcome.stopReason, "awaiting_approval");
  assert.equal(outcome.limit, "max_usd");
  assert.equal(outcome.completed, false);
  assert.deepEqual(visits, [1, 2, 3, 4]);
  const paused = outcome.paused;
  assert.ok(paused instanceof PausedRun);
  assert.equal(paused.pending.kind, "limit");
  assert.equal(paused.pending.limit, "max_usd");
  assert.equal(paused.pending.cap, 0.05);
  assert.equal(Math.round(paused.pending.used * 1000), 48);
  assert.equal(paused.usage.modelCalls, 4);
  assert.deepEqual(paused.state, { pagesRead: [1, 2, 3, 4] });
  assert.deepEqual(paused.budget, { max_usd: 0.05, on_limit: "pause" });
  assert.match(paused.signature, /^[A-Za-z0-9_-]{43}$/);
  assert.ok(result.text.startsWith("Paused: the run reached max_usd ($0.05 of $0.05 USD used) and waits for a "
    + "person's decision"), result.text);
  assert.equal(result.text, outcome.wrapUp);
});

test("resume approved with a larger maxUsd goes on counting the quota already used", async () => {
  const { outcome } = await pausedAtUsd();
  const text = outcome.paused.json(); // stored, then read back in a new process (or this one)
  await llm.reset();
  await llm.script(...[5, 6, 7, 8, 9].map(pageTurn));
  const visits = [];
  const resumed = await resume(text, { approved: true, budget: new Budget({ maxUsd: 0.08 }) }, async (r) => {
    assert.deepEqual(r.state, { pagesRead: [1, 2, 3, 4] });
    assert.equal(r.rejection, null);
    return portalLoop(visits);
  });
  // $0.048 used of $0.08: two more calls ($0.072) fit, the third would make $0.084
  assert.equal(await sent(), 2);
  assert.equal(resumed.outcome.usage.modelCalls, 6);
  assert.equal(Math.round(resumed.outcome.usage.costUsd * 1000), 72);
  // a new budget that does not set onLimit keeps "pause"
  assert.equal(resumed.outcome.stopReason, "awaiting_approval", resumed.outcome.detail);
  assert.equal(resumed.outcome.paused.pending.cap, 0.08);
  assert.ok(resumed.outcome.usage.seconds >= outcome.usage.seconds);
});

test("resume approved without a larger budget sends nothing: a quota grows only by an explicit decision", async () => {
  const { outcome } = await pausedAtUsd();
  await llm.reset();
  await llm.script(pageTurn(5));
  const again = await resume(outcome.paused, { approved: true }, () => portalLoop([]));
  assert.equal(await sent(), 0);
  assert.equal(again.outcome.stopReason, "awaiting_approval");
  assert.equal(again.outcome.usage.modelCalls, 4);
});

test("resume declined ends with the limit's own stop reason and sends nothing", async () => {
  const { outcome } = await pausedAtUsd();
  await llm.reset();
  await llm.script(pageTurn(5));
  const declined = await resume(outcome.paused.json(), { approved: false, budget: { maxUsd: 1 } },
    () => portalLoop([]));
  assert.equal(await sent(), 0);
  assert.equal(declined.outcome.stopReason, "cost");
  assert.equal(declined.outcome.limit, "max_usd");
  assert.match(declined.outcome.detail, /declined to raise max_usd/);
  assert.equal(declined.outcome.paused ?? null, null);
});

test("a paused run edited after it was signed is refused with an error naming what", async () => {
  const { outcome } = await pausedAtUsd();
  const doc = JSON.parse(outcome.paused.json());
  doc.usage.cost_usd = 0.0; // give the money back
  await assert.rejects(resume(JSON.stringify(doc), { approved: true }, () => {}),
    (exc) => exc instanceof InvalidRunState && /changed after it was signed/.test(exc.message));
  doc.usage.cost_usd = -1;
  await assert.rejects(resume(JSON.stringify(doc), { approved: true }, () => {}),
    (exc) => exc instanceof InvalidRunState && exc.field === "usage.cost_usd" && /usage\.cost_usd=-1/.test(exc.message));
  delete doc.signature;
  doc.usage.cost_usd = 0.048;
  await assert.rejects(resume(JSON.stringify(doc), { approved: true }, () => {}), /is not signed/);
  assert.equal(await sent(), 4);
});

test("a ToolLoopAgent pauses at maxSteps and resumes under a larger one", async () => {
  await llm.script(...[1, 2, 3, 4, 5, 6].map(pageTurn), { text: "All pages read.", input_tokens: 50, output_tokens: 4 });
  const visits = [];
  const agent = new ToolLoopAgent({ model: budgeted(openai.chat("paid-model")), tools: portal(visits),
    stopWhen: stepCountIs(30), maxRetries: 0 });
  const first = await run("agent", { budget: { maxSteps: 3, onLimit: "pause" } },
    () => agent.generate({ prompt: "Read every page." }));
  assert.equal(first.outcome.stopReason, "awaiting_approval");
  assert.equal(first.outcome.paused.pending.limit, "max_steps");
  assert.equal(await sent(), 3);
  const second = await resume(first.outcome.paused, { approved: true, budget: { maxSteps: 10 } },
    () => agent.generate({ prompt: "Go on reading." }));
  assert.equal(second.outcome.stopReason, "done", second.outcome.detail);
  assert.equal(second.result.text, "All pages read.");
  assert.equal(second.outcome.usage.modelCalls, 7);
  assert.equal(await sent(), 7);
});

function mailer(sentMail) {
  return budgetedTools({
    send_email: tool({
      description: "Send an email.",
      inputSchema: z.object({ to: z.string(), body: z.string() }),
      execute: async ({ to }) => {
        sentMail.push(to);
        return "sent";
      },
    }),
  });
}

const emailTurn = { tool_calls: [{ name: "send_email", arguments: { to: "cfo@example.com", body: "Q3 report" } }],
  input_tokens: 50, output_tokens: 10 };

test("approve: the run pauses before a gated tool runs; an approval lets exactly that call run once", async () => {
  await llm.script(emailTurn, { text: "never" });
  const mail = [];
  const options = { model: budgeted(openai.chat("paid-model")), tools: mailer(mail), stopWhen: stepCountIs(10),
    maxRetries: 0, prompt: "Mail the Q3 report to the CFO." };
  const first = await run("mailer", { budget: { maxSteps: 10, approve: ["send_email"] } }, () => generateText(options));
  assert.equal(first.outcome.stopReason, "awaiting_approval");
  assert.equal(first.outcome.limit, null);
  assert.deepEqual(mail, []); // not run
  assert.equal(await sent(), 1); // the call after the request was not sent
  const pending = first.outcome.paused.pending;
  assert.equal(pending.kind, "tool");
  assert.equal(pending.tool, "send_email");
  assert.equal(pending.target, "cfo@example.com");
  assert.deepEqual(first.outcome.paused.policy.tools, ["send_email"]);
  assert.ok(first.result.text.startsWith("Paused: the run is waiting for a person's approval"), first.result.text);

  await llm.reset();
  await llm.script(emailTurn, emailTurn, { text: "Mailed." });
  const second = await resume(first.outcome.paused.json(), { approved: true }, () => generateText(options));
  assert.deepEqual(mail, ["cfo@example.com"]); // once: the second identical request pauses again
  assert.equal(second.outcome.stopReason, "awaiting_approval");
  assert.equal(second.outcome.usage.toolCalls, 3);
});

test("approve: a rejection ends the run `denied` and the tool never runs", async () => {
  await llm.script(emailTurn, { text: "never" });
  const mail = [];
  const options = { model: budgeted(openai.chat("paid-model")), tools: mailer(mail), stopWhen: stepCountIs(10),
    maxRetries: 0, prompt: "Mail the Q3 report to the CFO." };
  const first = await run("mailer", { budget: { approve: ["send_email"] } }, () => generateText(options));
  await llm.reset();
  await llm.script(emailTurn, { text: "never" });
  const denied = await resume(first.outcome.paused, { approved: false }, (r) => {
    assert.match(r.rejection, /^A person denied send_email\(/);
    return generateText(options);
  });
  assert.equal(denied.outcome.stopReason, "denied");
  assert.deepEqual(mail, []);
  assert.equal(await sent(), 0);
});

test("confirmDone: a generateText loop that ends is `incomplete` until the code confirms it with run.complete()",
  async () => {
    for (const confirm of [false, true]) {
      await llm.reset();
      await llm.script(pageTurn(1), { text: "All pages read.", input_tokens: 50, output_tokens: 4 });
      const { result, outcome } = await run("confirmed", { budget: { confirmDone: true } }, async (r) => {
        const out = await portalLoop([]);
        if (confirm && out.text === "All pages read.") r.complete({ pages: 1 });
        return out;
      });
      assert.equal(result.text, "All pages read.");
      assert.equal(outcome.stopReason, confirm ? "done" : "incomplete");
      if (!confirm) assert.ok(outcome.wrapUp.startsWith("Stopped: the model stopped, but the work is not confirmed"));
      assert.equal(await sent(), 2);
    }
  });

test("a tool that ran before the pause is answered from the record on resume, not run again", async () => {
  const { outcome } = await pausedAtUsd();
  assert.deepEqual(outcome.paused.completed.map((r) => [r.tool, r.arguments, r.replayable]),
    [1, 2, 3, 4].map((page) => ["open_portal", { page }, true]));
  await llm.reset();
  await llm.script(pageTurn(4), pageTurn(5), { text: "Done reading.", input_tokens: 50, output_tokens: 4 });
  const visits = [];
  const resumed = await resume(outcome.paused.json(), { approved: true, budget: { maxUsd: 1 } },
    () => portalLoop(visits));
  assert.deepEqual(visits, [5]); // page 4 was read before the pause: its result is replayed once
  assert.equal(resumed.outcome.stopReason, "done", resumed.outcome.detail);
  const requests = (await llm.requests()).filter((r) => r.api.startsWith("openai"));
  assert.equal(requests.length, 3);
  assert.match(JSON.stringify(requests[1].body.messages), /page 4: 4 invoices read/);
});

// The shared test vectors (tests/vectors at the repository root) through the TypeScript core; tests/test_vectors.py
// runs the same files through the Python core. See that file for what a vector plays.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Budget, BudgetExceeded, InvalidRunState, PausedRun, UnknownPriceError, argumentsSignature, canonicalArguments,
  instrument, run } from "otel-budget";
import {
  PriceBook, admit, admitTool, currentNode, getSettings, noteToolResult, recordToolRequests, settleCall, settleTool,
  templateWrapUp, fmt, plural, pyFixed, usd, checkPaused, checkedPayload, decodeToken, encodeToken, sign,
} from "otel-budget/internal";
import { vector, vectors } from "./helpers.mjs";

const SPECIAL = { NaN: NaN, Infinity: Infinity, "-Infinity": -Infinity };
const camel = (name) => name.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
const number = (v) => (typeof v === "string" && v in SPECIAL ? SPECIAL[v] : v);

function budgetOptions(spec) {
  return Object.fromEntries(Object.entries(spec ?? {}).map(([k, v]) => [camel(k), number(v)]));
}

function outcomeOf(node, outcome) {
  const u = outcome.usage;
  const out = {
    stop_reason: outcome.stopReason,
    limit: outcome.limit,
    detail: outcome.detail,
    usage: { model_calls: u.modelCalls, tool_calls: u.toolCalls, input_tokens: u.inputTokens,
      output_tokens: u.outputTokens, cost_usd: u.costUsd, unpriced_calls: u.unpricedCalls },
    wrap_up: templateWrapUp(node, { ...outcome, usage: { ...u, seconds: 0 } }),
  };
  // requests beyond max_tool_calls: refused, never counted as used
  if (node.toolCallsRefused) out.tool_calls_refused = node.toolCallsRefused;
  return out;
}

async function playSteps(node, steps, events) {
  for (const [index, step] of steps.entries()) {
    if (step.call) {
      const call = step.call;
      const provider = call.provider ?? "openai";
      let adm;
      try {
        adm = admit(node, provider, call.model, call.max_output ?? null, () => call.input_chars);
      } catch (exc) {
        if (exc instanceof UnknownPriceError) {
          events.push({ step: index, refused: "unknown_price", message: exc.message.split(" Add its")[0] });
        } else if (exc instanceof BudgetExceeded) {
          events.push({ step: index, refused: exc.reason });
        }
        throw exc;
      }
      const event = { step: index, max_output_tokens: adm.setMaxTokens ? adm.maxOutputTokens : null };
      if (adm.noTools) event.no_tools = true; // no tool call remains: the adapters send this call without tools
      events.push(event);
      const u = call.usage;
      const pricing = getSettings().prices.lookup(provider, call.model);
      const cost = pricing === null ? null : pricing.cost(u.input_tokens, u.output_tokens, u.cache_read ?? 0,
        u.cache_write ?? 0);
      settleCall(adm, { inputTokens: u.input_tokens, outputTokens: u.output_tokens, cacheRead: u.cache_read ?? 0,
        cacheWrite: u.cache_write ?? 0, reasoning: u.reasoning ?? 0 }, cost, call.input_chars);
      recordToolRequests(node, (call.tool_calls ?? []).map((t) => [t.name, t.arguments, t.id ?? null]));
    } else if (step.tool) {
      const t = step.tool;
      let reserved;
      try {
        reserved = admitTool(node, t.name, t.arguments);
      } catch (exc) {
        if (!(exc instanceof BudgetExceeded)) throw exc;
        events.push({ step: index, refused: exc.reason });
        continue;
      }
      settleTool(node, t.name, reserved);
      noteToolResult(node, t.name, t.id ?? null, t.result);
      events.push({ step: index, ran: t.name });
    } else if (step.child) {
      const child = step.child;
      const childEvents = [];
      let sub;
      const { outcome } = await run(child.name, child.budget ? { budget: budgetOptions(child.budget) } : {},
        async () => {
          sub = currentNode();
          await playSteps(sub, child.steps, childEvents);
        });
      events.push({ step: index, child: { events: childEvents, outcome: outcomeOf(sub, outcome) } });
    } else {
      throw new Error(`step ${index}: give call, tool or child`);
    }
  }
}

async function play(v) {
  const settings = getSettings();
  const saved = settings.prices;
  const prices = Object.fromEntries(Object.entries(v.prices ?? {}).map(([m, p]) => [m,
    { inputPerMtok: p.input_per_mtok, outputPerMtok: p.output_per_mtok }]));
  settings.prices = new PriceBook(prices);
  const events = [];
  let node;
  try {
    const { outcome } = await run(v.name, { budget: budgetOptions(v.budget) }, async () => {
      node = currentNode();
      try {
        await playSteps(node, v.steps, events);
      } catch (exc) {
        if (!(exc instanceof UnknownPriceError)) throw exc;
      }
    });
    return { events, outcome: outcomeOf(node, outcome) };
  } finally {
    settings.prices = saved;
  }
}

const runVectors = vectors("run-");

test("there are run vectors", () => {
  assert.ok(runVectors.length >= 8, `only ${runVectors.length} run vectors in tests/vectors`);
});

for (const v of runVectors) {
  test(`vector ${v.name}: ${v.about}`, async () => {
    assert.deepStrictEqual(await play(v), v.expect);
  });
}

test("canonical arguments and signatures match Python's", () => {
  const { cases } = vector("canonical-arguments.json");
  assert.ok(cases.length >= 10);
  for (const c of cases) {
    assert.equal(canonicalArguments(c.arguments), c.canonical, JSON.stringify(c.arguments));
    assert.equal(argumentsSignature(c.arguments), c.signature, JSON.stringify(c.arguments));
  }
});

test("Budget validation matches Python's, and an error names the field", () => {
  const { cases } = vector("budget-validation.json");
  assert.ok(cases.length >= 10);
  for (const c of cases) {
    const options = budgetOptions(c.budget);
    if (c.valid) {
      const budget = new Budget(options);
      for (const [field, value] of Object.entries(c.read ?? {})) {
        assert.deepStrictEqual(budget[camel(field)], number(value), `${JSON.stringify(c.budget)} ${field}`);
      }
    } else {
      assert.throws(() => new Budget(options), (err) => {
        assert.match(err.message, new RegExp(camel(c.field)), `${JSON.stringify(c.budget)}: ${err.message}`);
        assert.equal(err.field, camel(c.field));
        return true;
      });
    }
  }
});

test("numbers are formatted as Python formats them (wrap-ups and refusal details)", () => {
  const { cases } = vector("number-formats.json");
  for (const c of cases.usd) assert.equal(usd(c.value, c.cap), c.text, JSON.stringify(c));
  for (const c of cases.fmt) assert.equal(fmt(c.value), c.text, JSON.stringify(c));
  for (const c of cases.fixed4) assert.equal(`$${pyFixed(c.value, 4)}`, c.text, JSON.stringify(c));
  for (const c of cases.seconds) assert.equal(pyFixed(c.value, 1), c.text, JSON.stringify(c));
  for (const c of cases.plural) assert.equal(plural(c.count, c.noun), c.text, JSON.stringify(c));
});

test("scope definitions and amounts are written as Python writes them, byte for byte", async () => {
  const { Scope } = await import("otel-budget");
  const { encodeAmounts, scopeDefinition } = await import("otel-budget/internal");
  const doc = vector("scope-definitions.json");
  for (const c of doc.definitions) {
    const scope = new Scope(budgetOptions(c.scope));
    assert.equal(scopeDefinition(scope.limits(), scope.windowSeconds), c.definition, JSON.stringify(c));
  }
  for (const c of doc.amounts) assert.equal(encodeAmounts(c.amounts), c.encoded, JSON.stringify(c));
  assert.ok(doc.definitions.length >= 8 && doc.amounts.length >= 5);
});

// --- paused runs and run tokens: what crosses a process, byte for byte -----------------------------------------

function refusedAs(c, exc) {
  assert.ok(exc instanceof InvalidRunState, `${c.name}: ${exc}`);
  if (c.error) assert.ok(exc.message.includes(c.error), `${c.name}: ${exc.message}`);
  else assert.ok(exc.message.includes(c.field), `${c.name}: ${exc.message}`);
}

test("paused-runs.json: a Python pause reads back with the same canonical content and signature", async () => {
  const doc = vector("paused-runs.json");
  assert.ok(doc.cases.filter((c) => c.valid).length >= 4 && doc.cases.length >= 12);
  instrument({ secret: doc.secret });
  try {
    for (const c of doc.cases) {
      let paused;
      try {
        paused = await checkPaused(PausedRun.parse(c.json));
      } catch (exc) {
        assert.ok(!c.valid, `${c.name}: ${exc.message}`);
        refusedAs(c, exc);
        continue;
      }
      assert.ok(c.valid, c.name);
      assert.equal(paused.signedContent().toString("utf8"), c.canonical, c.name);
      assert.equal(sign(paused.signedContent(), Buffer.from(doc.secret)), c.signature, c.name);
      assert.equal(paused.signature, c.signature, c.name);
      // what TypeScript writes back reads the same (a round trip through json())
      assert.equal(PausedRun.parse(paused.json()).signedContent().toString("utf8"), c.canonical, c.name);
    }
  } finally {
    instrument();
  }
});

test("tokens.json: the same payload is the same token; bad tokens are refused naming the field", () => {
  const doc = vector("tokens.json");
  try {
    for (const c of doc.encode) {
      instrument(c.signed ? { secret: doc.secret } : {});
      assert.equal(encodeToken(checkedPayload(c.payload)), c.token, JSON.stringify(c.payload));
    }
    assert.ok(doc.decode.length >= 12);
    instrument({ secret: doc.secret });
    for (const c of doc.decode) {
      let payload;
      try {
        payload = decodeToken(c.token, { signed: c.signed_only ?? false });
      } catch (exc) {
        assert.ok(!c.valid, `${c.name}: ${exc.message}`);
        refusedAs(c, exc);
        continue;
      }
      assert.ok(c.valid, c.name);
      assert.deepEqual(JSON.parse(JSON.stringify(payload)), c.payload, c.name);
    }
  } finally {
    instrument();
  }
});

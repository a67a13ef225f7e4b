/**
 * `otel-budget/internal`: the core's pieces for the shared test vectors and for adapters of other frameworks.
 * Not a stable API: names here may change in any release.
 */
export { admit, release, settleCall, type Admission, type CallUsage } from "./core/admission.js";
export { getSettings } from "./core/config.js";
export { Account, MemoryLedger, Refusal, fmt, headroom, reserve, settle } from "./core/ledger.js";
export { RunNode } from "./core/node.js";
export { ModelPricing, PriceBook } from "./core/pricing.js";
export { currentNode } from "./core/run.js";
export { admitTool, noteToolResult, recordToolRequests, settleTool } from "./core/watch.js";
export { templateWrapUp } from "./core/wrapup.js";
export { encodeAmounts, parseDefinition, scopeDefinition } from "./fleet/redis.js";
export { pyFixed, pyFloatRepr, pyGeneral, pyInt, pyRound } from "./model/format.js";
export { LIMITS, snakeCase, usd, plural } from "./model/budget.js";
export * as semconv from "./telemetry/semconv.js";
export { Num, canonicalJson, parseJson } from "./model/signatures.js";
export { canonical, sign, signedBy } from "./model/trust.js";
export { check as checkPaused, resetUnsignedWarning, seal } from "./core/trust.js";
export { checkedPayload, decodeToken, encodeToken } from "./fleet/tokens.js";

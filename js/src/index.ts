/**
 * otel-budget for the Vercel AI SDK: a meter and a brake for agents, built on OpenTelemetry. The same Budget
 * fields, stop reasons, wrap-up text and span names as the Python package.
 */
export { Budget, BudgetValidationError, Scope, StopReason, type BudgetOptions, type LimitName, type ScopeOptions,
  type Usage } from "./model/budget.js";
export { checkCost, type Price } from "./model/price.js";
export { BudgetExceeded, UnknownPriceError, type RunOutcome } from "./model/outcome.js";
export { argumentsSignature, canonicalArguments, resultSignature, signature } from "./model/signatures.js";
export { instrument, type InstrumentOptions } from "./core/config.js";
export { MemoryLedger, Refusal, type Ledger, type Reservation } from "./core/ledger.js";
export { run, type Run, type RunOptions, type RunResult } from "./core/run.js";
export { LedgerUnavailable, RedisLedger, type RedisClient, type RedisLedgerOptions, type ScopeDetail,
} from "./fleet/redis.js";
export { budgeted, budgetMiddleware } from "./ai/middleware.js";
export { budgetedTools } from "./ai/tools.js";
export { budgetApproval, type ApprovalConfiguration, type ApprovalStatus } from "./ai/approval.js";
export { ApprovalPolicy, type ApprovalPolicyOptions, type ApprovalPredicate } from "./model/policy.js";
export { PausedRun, type PendingCall, type ToolRecord } from "./model/paused.js";
export { InvalidRunState } from "./model/trust.js";
export { resume, type ResumeOptions, type ResumedRun } from "./core/resume.js";
export { BAGGAGE_KEY, attachRun, exportRun, extractRun, injectRun, treeUsage, type AttachOptions,
} from "./fleet/propagation.js";
export { TOKEN_PREFIX, decodeToken as decodeRunToken, type TokenPayload, type TokenScope } from "./fleet/tokens.js";

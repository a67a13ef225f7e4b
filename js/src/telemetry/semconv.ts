/**
 * The span, attribute and event names this package emits: the same strings as Python's
 * otel_budget/telemetry/semconv.py (test/semconv.test.mjs fails when one differs). Nothing else spells them.
 */
export const GEN_AI_OPERATION_NAME = "gen_ai.operation.name";
export const GEN_AI_PROVIDER_NAME = "gen_ai.provider.name";
export const GEN_AI_AGENT_NAME = "gen_ai.agent.name";
export const GEN_AI_REQUEST_MODEL = "gen_ai.request.model";
export const GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens";
export const GEN_AI_RESPONSE_MODEL = "gen_ai.response.model";
export const GEN_AI_RESPONSE_ID = "gen_ai.response.id";
export const GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons";
export const GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens";
export const GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens";
export const GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens";
export const GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS = "gen_ai.usage.cache_write.input_tokens";
export const GEN_AI_USAGE_REASONING_OUTPUT_TOKENS = "gen_ai.usage.reasoning.output_tokens";
export const GEN_AI_TOOL_NAME = "gen_ai.tool.name";
export const GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id";
export const GEN_AI_TOOL_TYPE = "gen_ai.tool.type";
export const ERROR_TYPE = "error.type";

export const OP_CHAT = "chat";
export const OP_INVOKE_AGENT = "invoke_agent";
export const OP_EXECUTE_TOOL = "execute_tool";
export const TOOL_TYPE_FUNCTION = "function";

export const OI_SPAN_KIND = "openinference.span.kind";
export const OI_KIND_LLM = "LLM";
export const OI_KIND_AGENT = "AGENT";
export const OI_KIND_TOOL = "TOOL";
export const OI_LLM_MODEL_NAME = "llm.model_name";
export const OI_LLM_PROVIDER = "llm.provider";
export const OI_TOKEN_PROMPT = "llm.token_count.prompt";
export const OI_TOKEN_COMPLETION = "llm.token_count.completion";
export const OI_TOKEN_TOTAL = "llm.token_count.total";
export const OI_TOOL_NAME = "tool.name";
export const OI_COST_TOTAL = "llm.cost.total";

export const STOP_REASON = "stop.reason";
export const STOP_LIMIT = "otel_budget.stop.limit";
export const STOP_DETAIL = "otel_budget.stop.detail";
export const LIMIT_PREFIX = "otel_budget.limit.";
export const USED_PREFIX = "otel_budget.used.";
export const UTILIZATION = "otel_budget.utilization";
export const UNPRICED_CALLS = "otel_budget.unpriced_calls";
/** Run span: tool calls requested beyond max_tool_calls (refused, not run, not counted). */
export const TOOL_CALLS_REFUSED = "otel_budget.tool_calls.refused";
export const COST_USD = "otel_budget.cost.usd";
export const COST_SOURCE = "otel_budget.cost.source";
export const TURN = "otel_budget.turn";
export const RUN_DEPTH = "otel_budget.run.depth";
export const WRAP_UP = "otel_budget.wrap_up";
export const ACTIONS = "otel_budget.actions";
export const TOOL_ARGUMENTS_SIGNATURE = "otel_budget.tool.arguments.signature";
export const TOOL_RESULT_SIGNATURE = "otel_budget.tool.result.signature";
export const EVENT_STOP = "otel_budget.stop";

export const COST_PRICED = "priced";
export const COST_UNPRICED = "unpriced";

export const PROVIDER_OPENAI = "openai";
export const PROVIDER_ANTHROPIC = "anthropic";

/** Dimensions recorded as otel_budget.limit.<dim> / otel_budget.used.<dim>. */
export const SPAN_DIMS = ["steps", "tool_calls", "seconds", "input_tokens", "output_tokens", "total_tokens", "usd"];
export const TRACER_NAME = "otel_budget";

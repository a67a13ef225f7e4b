"""Every span attribute, span name, event and metric name otel-budget emits. Nothing else spells them."""

from __future__ import annotations

# --- GenAI semantic conventions ------------------------------------------------------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
#: Cache writes: the released v1.41 name by default (Phoenix and the Vercel AI SDK's integration read it); the
#: newest conventions' name under OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental.
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS = "gen_ai.usage.cache_write.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS = "gen_ai.usage.reasoning.output_tokens"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P = "gen_ai.request.top_p"
GEN_AI_REQUEST_TOP_K = "gen_ai.request.top_k"
GEN_AI_REQUEST_SEED = "gen_ai.request.seed"
GEN_AI_REQUEST_STOP_SEQUENCES = "gen_ai.request.stop_sequences"
GEN_AI_REQUEST_FREQUENCY_PENALTY = "gen_ai.request.frequency_penalty"
GEN_AI_REQUEST_PRESENCE_PENALTY = "gen_ai.request.presence_penalty"
GEN_AI_REQUEST_CHOICE_COUNT = "gen_ai.request.choice.count"
GEN_AI_OUTPUT_TYPE = "gen_ai.output.type"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
GEN_AI_TOOL_DESCRIPTION = "gen_ai.tool.description"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
GEN_AI_TOKEN_TYPE = "gen_ai.token.type"
ERROR_TYPE = "error.type"

OP_CHAT = "chat"
OP_INVOKE_AGENT = "invoke_agent"
OP_EXECUTE_TOOL = "execute_tool"
OP_GENERATE_CONTENT = "generate_content"
OP_TEXT_COMPLETION = "text_completion"
#: The operations of a model call span (what Phoenix, too, reads as an LLM span).
MODEL_OPERATIONS = frozenset({OP_CHAT, OP_GENERATE_CONTENT, OP_TEXT_COMPLETION})

OUTPUT_TEXT = "text"
OUTPUT_JSON = "json"
TOOL_TYPE_FUNCTION = "function"
#: The event carrying a call's content when OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT asks for events.
EVENT_INFERENCE_DETAILS = "gen_ai.client.inference.operation.details"

PROVIDER_OPENAI = "openai"
PROVIDER_ANTHROPIC = "anthropic"
PROVIDER_GEMINI = "gcp.gemini"
PROVIDER_VERTEX_AI = "gcp.vertex_ai"

# --- OpenInference (opt-in twins: instrument(openinference=True) or OTEL_BUDGET_OPENINFERENCE=true) ------
ENV_OPENINFERENCE = "OTEL_BUDGET_OPENINFERENCE"
OI_SPAN_KIND = "openinference.span.kind"
OI_KIND_LLM = "LLM"
OI_KIND_AGENT = "AGENT"
OI_KIND_TOOL = "TOOL"
OI_KIND_GUARDRAIL = "GUARDRAIL"  # another instrumentor's span of a call the budget refused (never sent)
OI_LLM_MODEL_NAME = "llm.model_name"
OI_LLM_PROVIDER = "llm.provider"
OI_TOKEN_PROMPT = "llm.token_count.prompt"
OI_TOKEN_COMPLETION = "llm.token_count.completion"
OI_TOKEN_TOTAL = "llm.token_count.total"
OI_TOKEN_CACHE_READ = "llm.token_count.prompt_details.cache_read"
OI_TOKEN_CACHE_WRITE = "llm.token_count.prompt_details.cache_write"
OI_COST_PROMPT = "llm.cost.prompt"
OI_COST_COMPLETION = "llm.cost.completion"
OI_COST_TOTAL = "llm.cost.total"
OI_TOOL_NAME = "tool.name"
OI_INPUT_VALUE = "input.value"
OI_OUTPUT_VALUE = "output.value"
OI_TOKEN_REASONING = "llm.token_count.completion_details.reasoning"
OI_INVOCATION_PARAMETERS = "llm.invocation_parameters"
OI_TOOL_DESCRIPTION = "tool.description"
OI_SESSION_ID = "session.id"
#: Flattened message lists: llm.input_messages.{i}.message.role, ... (OpenInference's chat view).
OI_INPUT_MESSAGES = "llm.input_messages"
OI_OUTPUT_MESSAGES = "llm.output_messages"
OI_MESSAGE_ROLE = "message.role"
OI_MESSAGE_CONTENT = "message.content"
OI_MESSAGE_TOOL_CALL_ID = "message.tool_call_id"
OI_MESSAGE_TOOL_CALLS = "message.tool_calls"
OI_TOOL_CALL_ID = "tool_call.id"
OI_TOOL_CALL_FUNCTION_NAME = "tool_call.function.name"
OI_TOOL_CALL_FUNCTION_ARGUMENTS = "tool_call.function.arguments"
#: OpenInference's llm.provider where it differs from gen_ai.provider.name.
OI_PROVIDERS = {PROVIDER_GEMINI: "google", PROVIDER_VERTEX_AI: "google"}

# --- otel-budget ---------------------------------------------------------------------------------------
STOP_REASON = "stop.reason"
STOP_LIMIT = "otel_budget.stop.limit"
STOP_DETAIL = "otel_budget.stop.detail"
LIMIT_PREFIX = "otel_budget.limit."
USED_PREFIX = "otel_budget.used."
UTILIZATION = "otel_budget.utilization"
UNPRICED_CALLS = "otel_budget.unpriced_calls"
TOOL_CALLS_REFUSED = "otel_budget.tool_calls.refused"  # run span: tool calls requested beyond max_tool_calls (not run)
COST_USD = "otel_budget.cost.usd"
COST_SOURCE = "otel_budget.cost.source"
TURN = "otel_budget.turn"
USAGE_ESTIMATED = "otel_budget.usage.estimated"  # model call span: true when its usage was estimated, not reported
RUN_DEPTH = "otel_budget.run.depth"
COMPLETION_EVIDENCE = "otel_budget.completion.evidence"  # on the run span: what run.complete(evidence) gave
WRAP_UP = "otel_budget.wrap_up"  # on the run span: the template always; a model-written one with content only
# Signatures (hashes, never content) that let runs be compared action by action (otel-budget diff, evals):
ACTIONS = "otel_budget.actions"  # model call span: the tool calls it requested, as "name:arguments-signature"
TOOL_ARGUMENTS_SIGNATURE = "otel_budget.tool.arguments.signature"  # tool span: hash of the canonical arguments
TOOL_RESULT_SIGNATURE = "otel_budget.tool.result.signature"  # tool span: hash of the canonical result text
EVENT_STOP = "otel_budget.stop"
BAGGAGE_RUN = "otel_budget.run"  # W3C baggage entry carrying a run across processes (propagation.py)
LEDGER_ENFORCED = "otel_budget.ledger.enforced"  # false: a shared store let the call through (fail="open")
LEDGER_UNENFORCED_CALLS = "otel_budget.ledger.unenforced_calls"  # on the run span, when any

# approval pauses (approval.py): on the resumed run span; its parent is the paused run span (same trace)
APPROVAL_TOOL = "otel_budget.approval.tool"
APPROVAL_DECISION = "otel_budget.approval.decision"  # approved | denied
APPROVAL_BY = "otel_budget.approval.by"
APPROVAL_WAIT_SECONDS = "otel_budget.approval.wait_seconds"
RESUMED_FROM = "otel_budget.resumed_from"  # span id of the paused run span

COST_REPORTED = "reported"
COST_PRICED = "priced"
COST_UNPRICED = "unpriced"

#: Dimensions recorded as otel_budget.limit.<dim> / otel_budget.used.<dim> and as the `dimension` label.
SPAN_DIMS = ("steps", "tool_calls", "seconds", "input_tokens", "output_tokens", "total_tokens", "usd")

# --- metrics (instrument names; Prometheus shows them with dots as underscores) -------------------------
METRIC_TOKEN_USAGE = "gen_ai.client.token.usage"  # gen_ai_client_token_usage
METRIC_OPERATION_DURATION = "gen_ai.client.operation.duration"  # gen_ai_client_operation_duration_seconds
# The newest (unreleased) GenAI metric names, emitted instead of the two above under
# OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental (client-inference.md of semantic-conventions-genai).
METRIC_INFERENCE_DURATION = "gen_ai.client.inference.duration"  # histogram, s
METRIC_OPERATION_INPUT_TOKENS = "gen_ai.client.inference.operation.input_tokens"  # histogram per call, {token}
METRIC_OPERATION_OUTPUT_TOKENS = "gen_ai.client.inference.operation.output_tokens"  # histogram per call, {token}
METRIC_USAGE_INPUT_TOKENS = "gen_ai.client.inference.usage.input_tokens"  # counter, {token}, by modality
METRIC_USAGE_OUTPUT_TOKENS = "gen_ai.client.inference.usage.output_tokens"  # counter
METRIC_USAGE_CACHE_READ_TOKENS = "gen_ai.client.inference.usage.cache_read.input_tokens"  # counter (subset of input)
METRIC_USAGE_CACHE_WRITE_TOKENS = "gen_ai.client.inference.usage.cache_write.input_tokens"  # counter
METRIC_USAGE_REASONING_TOKENS = "gen_ai.client.inference.usage.reasoning.output_tokens"  # counter (subset of output)
GEN_AI_TOKEN_MODALITY = "gen_ai.token.modality"
MODALITY_UNKNOWN = "unknown"  # providers do not break usage down by modality for us
ENV_SEMCONV_OPT_IN = "OTEL_SEMCONV_STABILITY_OPT_IN"
OPT_IN_GEN_AI_LATEST = "gen_ai_latest_experimental"
METRIC_COST = "otel_budget.cost.usd"  # otel_budget_cost_usd_total
METRIC_RUNS = "otel_budget.runs"  # otel_budget_runs_total (finished runs: a paused run is counted when it ends)
METRIC_RUNS_AWAITING_APPROVAL = "otel_budget.runs.awaiting_approval"  # otel_budget_runs_awaiting_approval (up/down)
METRIC_RUN_UTILIZATION = "otel_budget.run.utilization"  # otel_budget_run_utilization
METRIC_RUNS_NEAR_CAP = "otel_budget.runs.near_cap"  # otel_budget_runs_near_cap_total
METRIC_LEDGER_FAIL_OPEN = "otel_budget.ledger.fail_open"  # otel_budget_ledger_fail_open_total

LABEL_RUN_NAME = "run_name"
RUN_NAME_OTHER = "_other"  # the run_name of runs past the bound on distinct names (telemetry/run_names.py)
LABEL_STOP_REASON = "stop_reason"
LABEL_DIMENSION = "dimension"
LABEL_SCOPE = "scope"  # the shared (fleet) scope, on otel_budget_ledger_fail_open_total

TOKEN_BUCKETS = tuple(float(4**i) for i in range(14))  # 1, 4, 16, ... 67108864
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)

#: Environment variable of the GenAI conventions that opts into content capture.
ENV_CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
#: Environment variable holding the default budget as a JSON object of Budget fields.
ENV_BUDGET_DEFAULT = "OTEL_BUDGET_DEFAULT"
#: Environment variable holding the secret that signs paused runs and run tokens (`instrument(secret=...)`).
ENV_BUDGET_SECRET = "OTEL_BUDGET_SECRET"
TRACER_NAME = "otel_budget"

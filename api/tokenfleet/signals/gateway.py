"""The gateway's Prometheus metric names: the autoscaler and dashboards read these."""

from __future__ import annotations

REQUESTS = (
    "tokenfleet_gateway_requests_total"  # tenant, model, class, outcome, reason, ns, revision
)
TTFT = "tokenfleet_gateway_time_to_first_token_seconds"  # model, class, pool
# model, class, pool
INTER_TOKEN = "tokenfleet_gateway_inter_token_latency_seconds"  # noqa: S105 - a name, not a secret
E2E = "tokenfleet_gateway_request_duration_seconds"  # model, class
QUEUE_DEPTH = "tokenfleet_gateway_queue_depth"  # pool, class
QUEUE_OLDEST_AGE = "tokenfleet_gateway_queue_oldest_age_seconds"  # pool, class
QUEUE_WAIT = "tokenfleet_gateway_queue_wait_seconds"  # pool, class (histogram)
POOL_ARRIVALS = "tokenfleet_gateway_pool_arrivals_total"  # pool, class: offered load
# pool, class, reason: refused by the pool's admission (queue full, too old, deadline unmeetable,
# overloaded) — demand the pool's capacity turned away, which the autoscaler counts as backlog
POOL_REFUSALS = "tokenfleet_gateway_pool_refusals_total"
IN_FLIGHT = "tokenfleet_gateway_in_flight_requests"  # pool, class
PROMPT_TOKENS = "tokenfleet_gateway_prompt_tokens_total"  # tenant, model, outcome
COMPLETION_TOKENS = "tokenfleet_gateway_completion_tokens_total"  # tenant, model, outcome
QUOTA_BACKEND_UP = "tokenfleet_gateway_quota_backend_up"
ENDPOINTS = "tokenfleet_gateway_ready_endpoints"  # model
FLEET_PROCESSES = "tokenfleet_gateway_fleet_processes"  # (gauge) processes sharing the slots
ROUTING_DECISIONS = "tokenfleet_gateway_routing_decisions_total"  # model, reason
PREFIX_BLOCKS = "tokenfleet_gateway_prefix_blocks_total"  # model (blocks in routed prompts)
PREFIX_HIT_BLOCKS = "tokenfleet_gateway_prefix_hit_blocks_total"  # model (held by the endpoint)
RETRIES = "tokenfleet_gateway_retries_total"  # model, reason
RETRY_BUDGET_EXHAUSTED = "tokenfleet_gateway_retry_budget_exhausted_total"  # model
EJECTIONS = "tokenfleet_gateway_endpoint_ejections_total"  # pool, event (ejected, readmitted)
EJECTED_ENDPOINTS = "tokenfleet_gateway_ejected_endpoints"  # (gauge)
FALLBACKS = "tokenfleet_gateway_fallbacks_total"  # model, fallback, reason
# ModelRoutes (docs/routes.md): ``route`` is the public name, ``target`` the served model chosen.
ROUTE_DECISIONS = "tokenfleet_gateway_route_decisions_total"  # namespace, route, rule, target
ROUTE_CLASSIFIER_READY = "tokenfleet_gateway_route_classifier_ready"  # namespace, route (gauge)
# Spill to a route's remotes (docs/routes.md, "Spill"): ``remote`` is spec.remotes[].name.
SPILLS = "tokenfleet_gateway_spills_total"  # namespace, route, remote, trigger, outcome
REMOTE_TOKENS = "tokenfleet_gateway_remote_tokens_total"  # namespace, route, remote, type
REMOTE_SPEND = "tokenfleet_gateway_remote_spend_total"  # namespace, route, remote, currency
REMOTE_IN_FLIGHT = "tokenfleet_gateway_remote_in_flight"  # namespace, route, remote (gauge)
RESPONSE_CACHE_HITS = "tokenfleet_gateway_response_cache_hits_total"  # model
RESPONSE_CACHE_MISSES = "tokenfleet_gateway_response_cache_misses_total"  # model
RESPONSE_CACHE_STORES = "tokenfleet_gateway_response_cache_stores_total"  # model
RESPONSE_CACHE_ERRORS = "tokenfleet_gateway_response_cache_errors_total"  # model, op (get, put)
RESPONSE_CACHE_SKIPS = "tokenfleet_gateway_response_cache_skips_total"  # model, reason
# LoRA adapters (docs/adapters.md). ``adapter`` is the served adapter name, ``namespace`` its
# ModelAdapter's namespace, ``pod`` a worker pod's name.
ADAPTER_REQUESTS = "tokenfleet_gateway_adapter_requests_total"  # namespace, adapter, placement
ADAPTER_LOADS = "tokenfleet_gateway_adapter_loads_total"  # namespace, adapter, outcome
ADAPTER_EVICTIONS = "tokenfleet_gateway_adapter_evictions_total"  # namespace, adapter
ADAPTER_LOADED = "tokenfleet_gateway_adapter_loaded"  # namespace, adapter, pod: 1 while loaded
ADAPTER_LOAD_SECONDS = "tokenfleet_gateway_adapter_load_seconds"  # (histogram) verify + load
# Traces (docs/observability.md, "Traces"): only with tracing on.
TRACES = "tokenfleet_gateway_traces_total"  # kept: sampled, error, slo_miss, dropped
TRACE_SPANS = "tokenfleet_gateway_trace_spans_total"  # result: exported, failed, overflow

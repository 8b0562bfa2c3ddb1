"""The usage ledger's Prometheus metric names: what the gateway exports as it settles each
request, and what the operator reads for Tenant status. The ledger's layout in Redis is
:mod:`tokenfleet.accounting.usage_layout`."""

from __future__ import annotations

#: Prometheus counters, labels tenant, model, pool, outcome.
USAGE_REQUESTS = "tokenfleet_usage_requests_total"
USAGE_PROMPT_TOKENS = "tokenfleet_usage_prompt_tokens_total"
USAGE_CACHED_PROMPT_TOKENS = "tokenfleet_usage_cached_prompt_tokens_total"
USAGE_COMPLETION_TOKENS = "tokenfleet_usage_completion_tokens_total"
#: Gauge, label tenant: Unix time a replica last settled a served request of the tenant.
USAGE_LAST_SERVED = "tokenfleet_usage_last_served_timestamp_seconds"

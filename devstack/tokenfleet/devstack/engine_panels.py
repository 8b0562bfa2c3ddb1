"""The engine-internals signals (issue #37) that must return data where workers are real vLLM.

The recorded series of ``monitoring/rules.yaml`` and the panel targets of the *Engine
internals* dashboard (``monitoring/dashboards.yaml``), written out so a test on the real-engine
platform can query each one, and so the simulator's integration test knows which of them the
simulator cannot feed. A unit test (tests/unit/test_engine_panels.py) keeps these tuples equal
to the YAML sources. Pure data; :func:`filled` is the one helper.
"""

from __future__ import annotations

#: The dashboard these panels live on (``uid``).
DASHBOARD = "tokenfleet-engine"

#: Recorded series of the engine internals, and the gateway's prefix-hit belief they sit beside.
RULES: tuple[str, ...] = (
    "namespace_pool_model_revision:vllm_num_preemptions:rate5m",
    "namespace_pool_model_revision:vllm_prefix_cache_hits:ratio_rate5m",
    "namespace_pool_model_revision:vllm_request_prefill_time_seconds:p95_5m",
    "namespace_pool_model_revision:vllm_request_decode_time_seconds:p95_5m",
    "namespace_pool_model_revision:vllm_iteration_tokens:mean_5m",
    "namespace_pool_model_revision_reason:vllm_num_requests_waiting_by_reason:sum",
    "model:vllm_prefix_cache_hits:ratio_rate5m",
    "model:tokenfleet_gateway_prefix_hit_blocks:ratio_rate5m",
)

_SCOPE = '{namespace=~"$namespace",model=~"$model"}'

#: Every target of the Engine internals dashboard, verbatim: Grafana's ``$namespace`` and
#: ``$model`` are still in them (:func:`filled` replaces them).
PANELS: tuple[str, ...] = (
    f"namespace_pool_model_revision:vllm_num_preemptions:rate5m{_SCOPE}",
    'model:vllm_prefix_cache_hits:ratio_rate5m{model=~"$model"}',
    'model:tokenfleet_gateway_prefix_hit_blocks:ratio_rate5m{model=~"$model"}',
    f"namespace_pool_model_revision:vllm_prefix_cache_hits:ratio_rate5m{_SCOPE}",
    f"namespace_pool_model_revision:vllm_request_prefill_time_seconds:p95_5m{_SCOPE}",
    f"namespace_pool_model_revision:vllm_request_decode_time_seconds:p95_5m{_SCOPE}",
    f"namespace_pool_model_revision:vllm_iteration_tokens:mean_5m{_SCOPE}",
    f"namespace_pool_model:vllm_num_requests_running:sum{_SCOPE}",
    f"namespace_pool_model_revision_reason:vllm_num_requests_waiting_by_reason:sum{_SCOPE}",
)

#: What the real-engine test queries: each must return a non-empty result once a few requests
#: went through the gateway to real vLLM (rates of 0 and ratios count: the series exist).
REAL_ENGINE: tuple[str, ...] = RULES + PANELS

#: Of :data:`REAL_ENGINE`, what llm-d-inference-sim (v0.10.2) cannot feed: it exports no
#: ``num_preemptions``, ``iteration_tokens`` or ``num_requests_waiting_by_reason``, and counts
#: its prefix cache (only with ``--enable-kvcache``) under names without ``_total``. The
#: simulator's panel test skips these; the real-engine test covers them.
SIMULATOR_SILENT: frozenset[str] = frozenset(
    q
    for q in REAL_ENGINE
    if any(
        part in q
        for part in ("num_preemptions", "vllm_prefix_cache_hits", "iteration_tokens", "by_reason")
    )
)


def filled(query: str, *, namespace: str = ".*", model: str = ".*") -> str:
    """``query`` with Grafana's ``$namespace`` and ``$model`` set (regexes: the panels match
    them with ``=~``; the default is Grafana's "All")."""
    return query.replace("$namespace", namespace).replace("$model", model)

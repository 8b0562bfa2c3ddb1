"""vLLM's Prometheus metric names: the current name first, then deprecated aliases still seen.

Readers try the names in order, so a fleet mixing vLLM versions reads the same signal.
"""

from __future__ import annotations

RUNNING = ("vllm:num_requests_running",)
WAITING = ("vllm:num_requests_waiting",)
KV_CACHE_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
#: Prefix-cache lookups and hits, counted in TOKENS (whole KV blocks, 128 tokens on CPU).
PREFIX_CACHE_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
PREFIX_CACHE_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
TIME_TO_FIRST_TOKEN = ("vllm:time_to_first_token_seconds",)
INTER_TOKEN_LATENCY = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
E2E_LATENCY = ("vllm:e2e_request_latency_seconds",)
QUEUE_TIME = ("vllm:request_queue_time_seconds",)
PROMPT_TOKENS = ("vllm:prompt_tokens_total",)
GENERATION_TOKENS = ("vllm:generation_tokens_total",)
#: Requests the scheduler evicted from the running batch to free KV-cache blocks (a counter):
#: each one is recomputed later, so any rate above 0 means the KV cache is too small for the batch.
PREEMPTIONS = ("vllm:num_preemptions_total",)
#: Seconds each finished request spent in prefill (scheduled until its first token) and in
#: decode (first token until the last): histograms, so TTFT and inter-token latency can be split
#: into the engine's two phases.
PREFILL_TIME = ("vllm:request_prefill_time_seconds",)
DECODE_TIME = ("vllm:request_decode_time_seconds",)
#: Tokens scheduled per engine step, prefill and decode together: a HISTOGRAM despite the
#: ``_total`` (its series are ``…_total_bucket``/``_sum``/``_count``). Its mean is the batch
#: composition: a few tokens per step is pure decode, hundreds mean prefills share the step.
ITERATION_TOKENS = ("vllm:iteration_tokens_total",)
#: Requests waiting, by ``reason``: ``capacity`` (no room in the batch or the KV cache) or
#: ``deferred`` (LoRA budget, KV transfer); the reasons sum to ``num_requests_waiting``.
WAITING_BY_REASON = ("vllm:num_requests_waiting_by_reason",)
REQUEST_SUCCESS = ("vllm:request_success_total",)
#: An info gauge: labels running_lora_adapters / waiting_lora_adapters (comma-separated names)
#: and max_lora; its value is the time of the observation, so the newest sample is current.
LORA_REQUESTS_INFO = ("vllm:lora_requests_info",)


def first_present(samples: dict[str, float], names: tuple[str, ...]) -> float | None:
    """The value of the first name in ``names`` that ``samples`` has, else None (never 0)."""
    for name in names:
        if name in samples:
            return samples[name]
    return None

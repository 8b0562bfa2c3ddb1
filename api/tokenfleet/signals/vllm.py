"""vLLM's Prometheus metric names: the current name first, then deprecated aliases still seen.

Readers try the names in order, so a fleet mixing vLLM versions reads the same signal.
"""

from __future__ import annotations

RUNNING = ("vllm:num_requests_running",)
WAITING = ("vllm:num_requests_waiting",)
KV_CACHE_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
PREFIX_CACHE_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
PREFIX_CACHE_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
TIME_TO_FIRST_TOKEN = ("vllm:time_to_first_token_seconds",)
INTER_TOKEN_LATENCY = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
E2E_LATENCY = ("vllm:e2e_request_latency_seconds",)
QUEUE_TIME = ("vllm:request_queue_time_seconds",)
PROMPT_TOKENS = ("vllm:prompt_tokens_total",)
GENERATION_TOKENS = ("vllm:generation_tokens_total",)
PREEMPTIONS = ("vllm:num_preemptions_total",)
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

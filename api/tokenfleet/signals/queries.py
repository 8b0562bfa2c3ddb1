"""PromQL for one pool's scaling signals (pure: strings in, strings out).

Workers are selected by the labels Prometheus attaches from their pods (namespace, pool);
the gateway's own series carry the pool as ``namespace/name``. Each vLLM metric is read by
its current name, falling back to its deprecated alias (``or``), so mixed fleets read alike.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenfleet.signals import gateway, usage, vllm


def _selector(namespace: str, pool: str) -> str:
    return f'{{namespace="{namespace}",pool="{pool}"}}'


def _either(aggregate: str, names: tuple[str, ...], selector: str) -> str:
    return " or ".join(f"{aggregate}({name}{selector})" for name in names)


def running_by_pod(namespace: str, pool: str) -> str:
    """Requests each of the pool's engines is generating now, by pod."""
    return _either("sum by (pod)", vllm.RUNNING, _selector(namespace, pool))


def kv_cache_usage(namespace: str, pool: str) -> str:
    """Mean KV-cache usage (0..1) over the pool's workers."""
    return _either("avg", vllm.KV_CACHE_USAGE, _selector(namespace, pool))


def waiting(namespace: str, pool: str) -> str:
    """Requests waiting inside the engines of the pool."""
    return _either("sum", vllm.WAITING, _selector(namespace, pool))


def unlabelled_engines() -> str:
    """Engine series without a ``pool`` label: workers scraped by some other job than the
    shipped one, whose series no pool's query can select."""
    return " or ".join(f'count({name}{{pool=""}})' for name in vllm.RUNNING)


def running(namespace: str, pool: str) -> str:
    return _either("sum", vllm.RUNNING, _selector(namespace, pool))


def _classes(namespace: str, pool: str, classes: Sequence[str]) -> str:
    # class names are DNS labels (the CRD enforces it), so they need no regex escaping
    matcher = f',class=~"{"|".join(classes)}"' if classes else ""
    return f'{{pool="{namespace}/{pool}"{matcher}}}'


def oldest_queue_age(namespace: str, pool: str, classes: Sequence[str] = ()) -> str:
    """The oldest request queued in any gateway replica for this pool (seconds), over
    ``classes`` (all when empty)."""
    return f"max({gateway.QUEUE_OLDEST_AGE}{_classes(namespace, pool, classes)})"


def refusal_rate(namespace: str, pool: str, classes: Sequence[str] = (), window: str = "1m") -> str:
    """Requests per second the pool's admission refused for want of capacity, over
    ``classes``, summed over the gateway replicas: the demand it shed."""
    selector = _classes(namespace, pool, classes)
    return f"sum(rate({gateway.POOL_REFUSALS}{selector}[{window}]))"


def queue_wait_p95(
    namespace: str, pool: str, classes: Sequence[str] = (), window: str = "1m"
) -> str:
    """The 95th percentile of time spent queued by requests admitted lately, over ``classes``."""
    selector = _classes(namespace, pool, classes)
    return (
        f"histogram_quantile(0.95, sum by (le) "
        f"(rate({gateway.QUEUE_WAIT}_bucket{selector}[{window}])))"
    )


def client_ttft(
    namespace: str, pool: str, percentile: int, classes: Sequence[str] = (), window: str = "1m"
) -> str:
    """A percentile (95, 99) of time to first token as the gateways measured it for the pool's
    requests over ``classes``: queueing, prefill and the first byte, what clients see."""
    selector = _classes(namespace, pool, classes)
    return (
        f"histogram_quantile({percentile / 100}, sum by (le) "
        f"(rate({gateway.TTFT}_bucket{selector}[{window}])))"
    )


def engine_tpot(namespace: str, pool: str, percentile: int, window: str = "1m") -> str:
    """A percentile (95, 99) of time per output token (the engines' inter-token latency) over
    the pool's engines: decode contention."""
    return " or ".join(
        f"histogram_quantile({percentile / 100}, sum by (le) "
        f"(rate({name}_bucket{_selector(namespace, pool)}[{window}])))"
        for name in vllm.INTER_TOKEN_LATENCY
    )


def pool_ttft_p99(namespace: str, pool: str, window: str = "1m") -> str:
    """p99 time to first token (seconds) of the pool's engines over ``window``."""
    return _p99(vllm.TIME_TO_FIRST_TOKEN, _selector(namespace, pool), window)


def prompt_rate(namespace: str, pool: str, window: str = "1m") -> str:
    """Prompt tokens prefilled per second by the pool."""
    return _either_rate(vllm.PROMPT_TOKENS, _selector(namespace, pool), window)


def generation_rate(namespace: str, pool: str, window: str = "1m") -> str:
    """Tokens generated per second by the pool."""
    return _either_rate(vllm.GENERATION_TOKENS, _selector(namespace, pool), window)


def arrival_rate(namespace: str, pool: str, window: str = "1m") -> str:
    """Requests per second offered to the pool by all gateway replicas (admitted or not)."""
    return f'sum(rate({gateway.POOL_ARRIVALS}{{pool="{namespace}/{pool}"}}[{window}]))'


def preemption_rate(namespace: str, pool: str, window: str = "1m") -> str:
    """Requests per second the pool's engines preempted (evicted for want of KV-cache blocks)."""
    return _either_rate(vllm.PREEMPTIONS, _selector(namespace, pool), window)


def completion_rate(namespace: str, pool: str, window: str = "1m") -> str:
    """Requests per second the pool's engines finished."""
    return _either_rate(vllm.REQUEST_SUCCESS, _selector(namespace, pool), window)


def _either_rate(names: tuple[str, ...], selector: str, window: str) -> str:
    return " or ".join(f"sum(rate({name}{selector}[{window}]))" for name in names)


# --- canary analysis: one revision of one model ---------------------------------------------


def _revision(namespace: str, model: str, revision: str) -> str:
    return f'{{namespace="{namespace}",model="{model}",revision="{revision}"}}'


def _p99(names: tuple[str, ...], selector: str, window: str) -> str:
    return " or ".join(
        f"histogram_quantile(0.99, sum by (le) (rate({name}_bucket{selector}[{window}])))"
        for name in names
    )


def revision_ttft_p99(namespace: str, model: str, revision: str, window: str) -> str:
    """p99 time to first token (seconds) of one revision's engines over ``window``."""
    return _p99(vllm.TIME_TO_FIRST_TOKEN, _revision(namespace, model, revision), window)


def revision_inter_token_p99(namespace: str, model: str, revision: str, window: str) -> str:
    """p99 inter-token latency (seconds) of one revision's engines over ``window``."""
    return _p99(vllm.INTER_TOKEN_LATENCY, _revision(namespace, model, revision), window)


def revision_requests(namespace: str, model: str, revision: str, window: str) -> str:
    """Requests one revision's engines finished over ``window`` (the sample size)."""
    selector = _revision(namespace, model, revision)
    return f"sum(increase({vllm.E2E_LATENCY[0]}_count{selector}[{window}]))"


def revision_error_rate(namespace: str, model: str, revision: str, window: str) -> str:
    """Failed share of the gateway's requests routed to one revision (0..1).

    Engines do not count their failures, so this reads the gateway's request counter, whose
    ``namespace`` and ``revision`` labels name the revision that served (or failed) a request.
    A request counts as failed when it broke after its first byte (``failed``) or when every
    attempt on the revision failed (``rejected`` with the revision set: a refusal before any
    revision was chosen carries none). No failure at all is 0, not a missing series; no request
    at all is missing (a canary cannot pass on silence).
    """
    served = f'{{namespace="{namespace}",model="{model}",revision="{revision}"}}'
    failed = (
        f'{{namespace="{namespace}",model="{model}",revision="{revision}",'
        'outcome=~"failed|rejected"}'
    )
    return (
        f"(sum(increase({gateway.REQUESTS}{failed}[{window}])) or vector(0)) / "
        f"sum(increase({gateway.REQUESTS}{served}[{window}]))"
    )


def revision_tokens_per_replica(namespace: str, model: str, revision: str, window: str) -> str:
    """Generated tokens per second per engine of one revision over ``window`` (engines counted
    by their running-requests gauge, which every scraped engine exports)."""
    selector = _revision(namespace, model, revision)
    replicas = _either("count", vllm.RUNNING, selector)
    return f"({_either_rate(vllm.GENERATION_TOKENS, selector, window)}) / ({replicas})"


def substituted(query: str, *, namespace: str, model: str, revision: str, window: str) -> str:
    """A team's custom check query with its placeholders filled in ($revision, $namespace,
    $model, $window). Label values are names the API validates, so they need no escaping."""
    for key, value in (
        ("$revision", revision),
        ("$namespace", namespace),
        ("$model", model),
        ("$window", window),
    ):
        query = query.replace(key, value)
    return query


#: The gateway's usage counters a Tenant's status reads, by UsageStatus field.
TENANT_USAGE = {
    "requests": usage.USAGE_REQUESTS,
    "prompt_tokens": usage.USAGE_PROMPT_TOKENS,
    "completion_tokens": usage.USAGE_COMPLETION_TOKENS,
}


def tenant_usage(metric: str, seconds: int, by: str = "tenant") -> str:
    """Each tenant's growth of a usage counter over the last ``seconds`` (its current budget
    period), every model, pool, outcome and gateway replica summed — or kept apart by the
    labels ``by`` names (``tenant, pool``: what the pools' prices apply to).

    ``increase`` bridges the counter resets of gateway restarts but only counts growth between
    samples: a series born inside the window (a tenant's first request on a replica, or after a
    restart) adds its first sample — what it counted before Prometheus first saw it."""
    window = f"[{max(1, seconds)}s]"
    growth = f"increase({metric}{window})"
    born = f"(min_over_time({metric}{window}) unless {metric} offset {max(1, seconds)}s)"
    return f"sum by ({by}) ({growth} + {born} or {growth})"


def tenant_last_served(seconds: int) -> str:
    """Each tenant's latest served time (Unix s) any gateway replica reported within the last
    ``seconds``: ``max_over_time`` keeps it through a replica's restart, which drops the series
    until that tenant is served again."""
    return f"max by (tenant) (max_over_time({usage.USAGE_LAST_SERVED}[{max(1, seconds)}s]))"


def adapter_loaded_pods() -> str:
    """Each adapter's worker pods any gateway replica has it loaded on now."""
    return f"max by (namespace, adapter, pod) ({gateway.ADAPTER_LOADED})"


def adapter_requests() -> str:
    """Requests each adapter was served, summed over the gateway replicas (since each
    started: a counter's value, not a rate)."""
    return f"sum by (namespace, adapter) ({gateway.ADAPTER_REQUESTS})"


def lora_requests_info() -> str:
    """Every worker's vLLM LoRA info series (labels name the running and waiting adapters; the
    value is when the engine wrote it, so a pod's newest series is its current state)."""
    return " or ".join(
        f"max by (namespace, pod, running_lora_adapters, waiting_lora_adapters) ({name})"
        for name in vllm.LORA_REQUESTS_INFO
    )

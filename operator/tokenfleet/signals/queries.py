"""PromQL for one pool's scaling signals (pure: strings in, strings out).

Workers are selected by the labels Prometheus attaches from their pods (namespace, pool);
the gateway's own series carry the pool as ``namespace/name``. Each vLLM metric is read by
its current name, falling back to its deprecated alias (``or``), so mixed fleets read alike.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenfleet.signals import gateway, vllm


def _selector(namespace: str, pool: str) -> str:
    return f'{{namespace="{namespace}",pool="{pool}"}}'


def _either(aggregate: str, names: tuple[str, ...], selector: str) -> str:
    return " or ".join(f"{aggregate}({name}{selector})" for name in names)


def kv_cache_usage(namespace: str, pool: str) -> str:
    """Mean KV-cache usage (0..1) over the pool's workers."""
    return _either("avg", vllm.KV_CACHE_USAGE, _selector(namespace, pool))


def waiting(namespace: str, pool: str) -> str:
    """Requests waiting inside the engines of the pool."""
    return _either("sum", vllm.WAITING, _selector(namespace, pool))


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


def queue_wait_p95(
    namespace: str, pool: str, classes: Sequence[str] = (), window: str = "1m"
) -> str:
    """The 95th percentile of time spent queued by requests admitted lately, over ``classes``."""
    selector = _classes(namespace, pool, classes)
    return (
        f"histogram_quantile(0.95, sum by (le) "
        f"(rate({gateway.QUEUE_WAIT}_bucket{selector}[{window}])))"
    )


def prompt_rate(namespace: str, pool: str, window: str = "1m") -> str:
    """Prompt tokens prefilled per second by the pool."""
    return _either_rate(vllm.PROMPT_TOKENS, _selector(namespace, pool), window)


def generation_rate(namespace: str, pool: str, window: str = "1m") -> str:
    """Tokens generated per second by the pool."""
    return _either_rate(vllm.GENERATION_TOKENS, _selector(namespace, pool), window)


def _either_rate(names: tuple[str, ...], selector: str, window: str) -> str:
    return " or ".join(f"sum(rate({name}{selector}[{window}]))" for name in names)

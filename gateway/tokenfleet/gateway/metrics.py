"""Prometheus metrics of one gateway process (names from tokenfleet.signals.gateway).

With several worker processes, prometheus_client's multiprocess mode (PROMETHEUS_MULTIPROC_DIR)
aggregates them: gauges of queue age take the max over processes, depths and in-flight the sum.
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

from tokenfleet.signals import gateway as names

if TYPE_CHECKING:
    from tokenfleet.gateway.catalog import Catalog

#: The ``model`` label of every request for a name nothing serves. Clients choose the name, and
#: each label value is a series kept for the life of the process (and a file entry per worker):
#: a flood of distinct names once filled the metrics volume (issue 35). No served name is
#: parenthesised.
UNKNOWN_MODEL = "(unknown)"


def model_label(catalog: Catalog, name: str) -> str:
    """The ``model`` label of a request that asked for ``name``: the name when a model, an
    adapter or a route has it (a set the operators bound), "" when none was asked, else
    :data:`UNKNOWN_MODEL`."""
    return name if not name or catalog.serves(name) else UNKNOWN_MODEL


def memoized(metric: MetricWrapperBase) -> None:
    """Make ``metric.labels(...)`` remember its children: prometheus_client checks and converts
    the values and takes a lock on every call, and the request path makes a dozen such calls
    per request. Only for metrics whose series are never removed (a removed child would stay
    cached and count into nothing)."""
    children: dict[tuple[str, ...], MetricWrapperBase] = {}
    labels = metric.labels

    def cached(*values: str, **named: str) -> MetricWrapperBase:
        if named:  # by name: rare, left to prometheus_client
            return labels(*values, **named)
        child = children.get(values)
        if child is None:
            child = children[values] = labels(*values)
        return child

    setattr(metric, "labels", cached)  # noqa: B010 (an instance attribute over the method)


def observe_all(histogram: Histogram, values: list[float]) -> None:
    """``histogram.observe(v)`` for every value, with one update per bucket rather than a
    locked update per value (a stream's inter-token gaps: one per token). Falls back to
    observing one by one if prometheus_client's histogram internals ever change."""
    bounds = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    total = getattr(histogram, "_sum", None)
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        for value in values:
            histogram.observe(value)
        return
    counts = [0] * len(bounds)
    for value in values:
        counts[bisect.bisect_left(bounds, value)] += 1  # the first bound >= value, as observe
    for i, n in enumerate(counts):
        if n:
            buckets[i].inc(n)
    total.inc(sum(values))


LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
TOKEN_GAP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Metrics:
    registry: CollectorRegistry
    requests: Counter
    ttft: Histogram
    inter_token: Histogram
    e2e: Histogram
    queue_depth: Gauge
    queue_oldest_age: Gauge
    queue_wait: Histogram
    pool_arrivals: Counter
    pool_refusals: Counter
    in_flight: Gauge
    prompt_tokens: Counter
    completion_tokens: Counter
    quota_backend_up: Gauge
    endpoints: Gauge
    fleet_processes: Gauge
    routing: RoutingMetrics
    response_cache: ResponseCacheMetrics
    adapters: AdapterMetrics
    spill: SpillMetrics

    def observe_queue(self, pool: str, cls: str, depth: int, oldest_age: float) -> None:
        """A pool's class queue as the autoscaler reads it."""
        self.queue_depth.labels(pool, cls).set(depth)
        self.queue_oldest_age.labels(pool, cls).set(oldest_age)

    @classmethod
    def create(cls, registry: CollectorRegistry | None = None) -> Metrics:
        r = registry or CollectorRegistry()
        metrics = cls(
            registry=r,
            requests=Counter(
                names.REQUESTS,
                "Requests by tenant, outcome and reason; namespace and revision say which "
                "revision served (empty when none did), so canary analysis can compare error "
                "rates.",
                ["tenant", "model", "class", "outcome", "reason", "namespace", "revision"],
                registry=r,
            ),
            ttft=Histogram(
                names.TTFT,
                "Time to first token, from the request's arrival; pool is the pool that served "
                "it (namespace/name; empty when a remote did), which scales on it.",
                ["model", "class", "pool"],
                buckets=LATENCY_BUCKETS,
                registry=r,
            ),
            inter_token=Histogram(
                names.INTER_TOKEN,
                "Time between streamed chunks, as the engine sent them.",
                ["model", "class", "pool"],
                buckets=TOKEN_GAP_BUCKETS,
                registry=r,
            ),
            e2e=Histogram(
                names.E2E, "Whole request.", ["model", "class"], buckets=LATENCY_BUCKETS, registry=r
            ),
            queue_depth=Gauge(
                names.QUEUE_DEPTH,
                "Requests waiting.",
                ["pool", "class"],
                multiprocess_mode="livesum",
                registry=r,
            ),
            queue_oldest_age=Gauge(
                names.QUEUE_OLDEST_AGE,
                "Age of the oldest waiting request.",
                ["pool", "class"],
                multiprocess_mode="livemax",
                registry=r,
            ),
            queue_wait=Histogram(
                names.QUEUE_WAIT,
                "Time spent queued before starting.",
                ["pool", "class"],
                buckets=LATENCY_BUCKETS,
                registry=r,
            ),
            pool_arrivals=Counter(
                names.POOL_ARRIVALS,
                "Requests offered to a pool's admission (admitted or not): its offered load.",
                ["pool", "class"],
                registry=r,
            ),
            pool_refusals=Counter(
                names.POOL_REFUSALS,
                "Requests a pool's admission refused for want of capacity (queue full or too "
                "old, deadline unmeetable, overloaded): load it shed, which scales the pool.",
                ["pool", "class", "reason"],
                registry=r,
            ),
            in_flight=Gauge(
                names.IN_FLIGHT,
                "Requests running upstream.",
                ["pool", "class"],
                multiprocess_mode="livesum",
                registry=r,
            ),
            prompt_tokens=Counter(
                names.PROMPT_TOKENS,
                "Prompt tokens charged, for chargeback, by how the request ended (served, "
                "failed, cancelled).",
                ["tenant", "model", "outcome"],
                registry=r,
            ),
            completion_tokens=Counter(
                names.COMPLETION_TOKENS,
                "Completion tokens charged (delivered), for chargeback, by how the request ended.",
                ["tenant", "model", "outcome"],
                registry=r,
            ),
            quota_backend_up=Gauge(
                names.QUOTA_BACKEND_UP,
                "1 when the shared quota store answers.",
                multiprocess_mode="livemin",
                registry=r,
            ),
            fleet_processes=Gauge(
                names.FLEET_PROCESSES,
                "Gateway processes this one counts sharing the engines' slots (the fleet "
                "registry's answer, or the configured count without Redis).",
                multiprocess_mode="livemax",
                registry=r,
            ),
            endpoints=Gauge(
                names.ENDPOINTS,
                "Ready endpoints by model.",
                ["model"],
                multiprocess_mode="livemax",
                registry=r,
            ),
            routing=RoutingMetrics.create(r),
            response_cache=ResponseCacheMetrics.create(r),
            adapters=AdapterMetrics.create(r),
            spill=SpillMetrics.create(r),
        )
        for metric in (  # the ones every request touches; none of them ever loses a series
            metrics.requests,
            metrics.ttft,
            metrics.inter_token,
            metrics.e2e,
            metrics.queue_depth,
            metrics.queue_oldest_age,
            metrics.queue_wait,
            metrics.pool_arrivals,
            metrics.pool_refusals,
            metrics.in_flight,
            metrics.prompt_tokens,
            metrics.completion_tokens,
            metrics.routing.routing_decisions,
            metrics.routing.prefix_blocks,
            metrics.routing.prefix_hit_blocks,
        ):
            memoized(metric)
        return metrics


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RoutingMetrics:
    """Routing and resilience: decisions, prefix hits, retries, ejections, fallbacks."""

    routing_decisions: Counter
    prefix_blocks: Counter
    prefix_hit_blocks: Counter
    retries: Counter
    retry_budget_exhausted: Counter
    ejections: Counter
    ejected_endpoints: Gauge
    fallbacks: Counter
    route_decisions: Counter
    route_classifier_ready: Gauge

    @classmethod
    def create(cls, r: CollectorRegistry) -> RoutingMetrics:
        return cls(
            routing_decisions=Counter(
                names.ROUTING_DECISIONS,
                "Endpoint choices by the reason that decided them.",
                ["model", "reason"],
                registry=r,
            ),
            prefix_blocks=Counter(
                names.PREFIX_BLOCKS,
                "Prompt prefix blocks of routed requests (hit ratio = hit blocks / this).",
                ["model"],
                registry=r,
            ),
            prefix_hit_blocks=Counter(
                names.PREFIX_HIT_BLOCKS,
                "Prompt prefix blocks the chosen endpoint was believed to hold.",
                ["model"],
                registry=r,
            ),
            retries=Counter(
                names.RETRIES,
                "Attempts after the first, by what failed.",
                ["model", "reason"],
                registry=r,
            ),
            retry_budget_exhausted=Counter(
                names.RETRY_BUDGET_EXHAUSTED,
                "Failures not retried because the retry budget was spent.",
                ["model"],
                registry=r,
            ),
            ejections=Counter(
                names.EJECTIONS,
                "Outlier ejections and readmissions of endpoints.",
                ["pool", "event"],
                registry=r,
            ),
            ejected_endpoints=Gauge(
                names.EJECTED_ENDPOINTS,
                "Endpoints currently ejected or on probation.",
                multiprocess_mode="livemax",
                registry=r,
            ),
            fallbacks=Counter(
                names.FALLBACKS,
                "Requests served by a fallback model, and why.",
                ["model", "fallback", "reason"],
                registry=r,
            ),
            route_decisions=Counter(
                names.ROUTE_DECISIONS,
                "Requests to a ModelRoute's public name by the rule (or default) that chose "
                "their served model, the target.",
                ["namespace", "route", "rule", "target"],
                registry=r,
            ),
            route_classifier_ready=Gauge(
                names.ROUTE_CLASSIFIER_READY,
                "1 when a ModelRoute's classifier weights are loaded, 0 when its ConfigMap is "
                "missing or invalid (its score rules then never match).",
                ["namespace", "route"],
                multiprocess_mode="livemin",
                registry=r,
            ),
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ResponseCacheMetrics:
    """The response cache, per model that enabled it: hit ratio = hits / (hits + misses)."""

    hits: Counter
    misses: Counter
    stores: Counter
    errors: Counter
    skips: Counter

    @classmethod
    def create(cls, r: CollectorRegistry) -> ResponseCacheMetrics:
        return cls(
            hits=Counter(
                names.RESPONSE_CACHE_HITS,
                "Requests answered from the response cache (no engine work, no tokens charged).",
                ["model"],
                registry=r,
            ),
            misses=Counter(
                names.RESPONSE_CACHE_MISSES,
                "Cacheable requests not found in the response cache (Redis errors included).",
                ["model"],
                registry=r,
            ),
            stores=Counter(
                names.RESPONSE_CACHE_STORES,
                "Complete answers written to the response cache.",
                ["model"],
                registry=r,
            ),
            errors=Counter(
                names.RESPONSE_CACHE_ERRORS,
                "Response-cache lookups (op=get) or writes (op=put) Redis did not answer: each "
                "lookup error was served as a miss.",
                ["model", "op"],
                registry=r,
            ),
            skips=Counter(
                names.RESPONSE_CACHE_SKIPS,
                "Requests to a cache-enabled model not looked up (sampled, tools, ...), or "
                "answers not stored (too_large, incomplete, fallback, degraded), by reason.",
                ["model", "reason"],
                registry=r,
            ),
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SpillMetrics:
    """Spill to a ModelRoute's remotes (docs/routes.md): every try, the tokens and the spend."""

    spills: Counter
    tokens: Counter
    spend: Counter
    in_flight: Gauge

    @classmethod
    def create(cls, r: CollectorRegistry) -> SpillMetrics:
        return cls(
            spills=Counter(
                names.SPILLS,
                "Requests the local targets could not take, by the remote tried, what the local "
                "side said (trigger: Unavailable, Overloaded) and how it went there (served, "
                "failed, or skipped: ejected, budget, no_key, busy, retry_budget).",
                ["namespace", "route", "remote", "trigger", "outcome"],
                registry=r,
            ),
            tokens=Counter(
                names.REMOTE_TOKENS,
                "Tokens of requests served by a remote (type: prompt, completion).",
                ["namespace", "route", "remote", "type"],
                registry=r,
            ),
            spend=Counter(
                names.REMOTE_SPEND,
                "What spilled requests cost at the remote's price, in its route's currency.",
                ["namespace", "route", "remote", "currency"],
                registry=r,
            ),
            in_flight=Gauge(
                names.REMOTE_IN_FLIGHT,
                "Requests this gateway has at a remote now (bounded by its maxConcurrency).",
                ["namespace", "route", "remote"],
                multiprocess_mode="livesum",
                registry=r,
            ),
        )


#: Seconds a load takes: a fetch plus a digest walk plus the engine's load, ~1 s to minutes.
LOAD_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AdapterMetrics:
    """LoRA adapters (docs/adapters.md): where requests went, loads, evictions, and what this
    gateway believes each worker pod holds (the operator's status.loadedOn)."""

    requests: Counter
    loads: Counter
    evictions: Counter
    loaded: Gauge
    load_seconds: Histogram

    @classmethod
    def create(cls, r: CollectorRegistry) -> AdapterMetrics:
        return cls(
            requests=Counter(
                names.ADAPTER_REQUESTS,
                "Adapter requests by placement: hit (a replica had it), loaded (this request "
                "loaded it), waited (joined a load under way), spilled (loaded on one more "
                "replica: the holders were over the bound), no_slot; hit ratio = hit / all.",
                ["namespace", "adapter", "placement"],
                registry=r,
            ),
            loads=Counter(
                names.ADAPTER_LOADS,
                "Adapter loads this gateway asked a worker for, by outcome (loaded, refused by "
                "the worker's verification, failed, timeout).",
                ["namespace", "adapter", "outcome"],
                registry=r,
            ),
            evictions=Counter(
                names.ADAPTER_EVICTIONS,
                "Adapters this gateway unloaded to free a slot.",
                ["namespace", "adapter"],
                registry=r,
            ),
            loaded=Gauge(
                names.ADAPTER_LOADED,
                "1 while this gateway believes the adapter is loaded on the pod (absent else).",
                ["namespace", "adapter", "pod"],
                multiprocess_mode="livemax",
                registry=r,
            ),
            # no labels: thousands of adapters times eleven buckets would dwarf every other
            # series; a slow adapter shows in its loads' timeouts
            load_seconds=Histogram(
                names.ADAPTER_LOAD_SECONDS,
                "Seconds from asking a worker to load an adapter to its answer (verify + load).",
                buckets=LOAD_BUCKETS,
                registry=r,
            ),
        )

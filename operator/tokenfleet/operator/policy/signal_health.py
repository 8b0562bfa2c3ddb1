"""Which configured scaling signals have no data, and why in all likelihood (pure).

A signal that is configured but silent must never look "fresh": the autoscaler would quietly
run on the others (measured 2026-12-06: a gateway Prometheus could not scrape left queue-age
scaling off while the pool reported fresh signals and shed 98 % of a load it never scaled
for). Each signal comes from one scrape job — the gateway's queue series from
``tokenfleet-gateway``, the engines' from ``vllm`` — so a missing series is explained by that
job's targets:

    series present ─────────────────────────────▶ fine
    series absent ─┬─ job has no target at all ─▶ "job J has no target": not scraped at all
                   ├─ job's targets all down ───▶ "0 of N up: <last scrape error>"
                   └─ job up ─┬─ gateway ───────▶ fine: no request for the pool yet
                              └─ engines ─┬─ unlabelled engine series exist
                                          │     ▶ "series lack namespace/pool labels"
                                          └─ none ▶ "no engine exports it"

Engines are judged only while the pool has ready replicas (no worker, no series: expected).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from tokenfleet.operator.policy.scaling import Policy, Signals, Why, objectives, observed
from tokenfleet.signals import gateway, jobs, vllm


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class JobHealth:
    """One scrape job's targets as Prometheus saw them last."""

    up: int = 0
    down: int = 0
    pending: int = 0  # discovered, not scraped yet (Prometheus' health "unknown")
    error: str = ""  # a down target's last scrape error


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Missing:
    """A configured signal without a series, and the likely cause."""

    signal: Why
    series: str
    why: str

    def describe(self) -> str:
        return f"{self.signal.value}: no {self.series} ({self.why})"


def job_problem(job: str, health: JobHealth | None) -> str | None:
    """Why ``job`` yields no series, or None when at least one of its targets is up."""
    if health is not None and health.up + health.down == 0 and health.pending:
        return f"job {job}'s {health.pending} target(s) not scraped yet"
    if health is None or health.up + health.down == 0:
        return (
            f"job {job} has no target: Prometheus does not scrape it "
            "(install the shipped PodMonitors or scrape configs: docs/install.md, Monitoring)"
        )
    if health.up == 0:
        error = f": {health.error}" if health.error else ""
        return f"job {job} has no up target (0 of {health.down} up{error})"
    return None


def _gateway(signal: Why, name: str, pool: str, job: JobHealth | None) -> Missing | None:
    problem = job_problem(jobs.GATEWAY, job)
    if problem is None:
        return None  # scraped: the gateways have not queued a request for this pool yet
    return Missing(signal=signal, series=f'{name}{{pool="{pool}"}}', why=problem)


def _engines(
    signal: Why, name: str, selector: str, job: JobHealth | None, unlabelled: int
) -> Missing:
    problem = job_problem(jobs.WORKERS, job)
    if problem is None and unlabelled:
        problem = (
            f"{unlabelled} engine series carry no namespace/pool labels: scrape the workers "
            f"with the shipped job {jobs.WORKERS} (PodMonitor tokenfleet-workers), whose "
            "relabelings copy them from the pod"
        )
    if problem is None:
        problem = f"job {jobs.WORKERS} is up but none of this pool's engines exports it"
    return Missing(signal=signal, series=f"{name}{selector}", why=problem)


def missing(
    *,
    policy: Policy,
    signals: Signals,
    namespace: str,
    pool: str,
    ready: int,
    targets: Mapping[str, JobHealth],
    unlabelled_engines: int = 0,
) -> tuple[Missing, ...]:
    """The configured signals with no series this interval, each with its likely cause."""
    if not policy.enabled or signals.stale:
        return ()
    found: list[Missing] = []
    key = f"{namespace}/{pool}"
    if signals.oldest_queue_age is None:
        gone = _gateway(Why.QUEUE_AGE, gateway.QUEUE_OLDEST_AGE, key, targets.get(jobs.GATEWAY))
        found += [gone] if gone else []
    if ready > 0:
        selector = f'{{namespace="{namespace}",pool="{pool}"}}'
        engine_signals = [
            (Why.KV_CACHE, signals.kv_cache_usage, vllm.KV_CACHE_USAGE[0]),
            (Why.WAITING, signals.waiting, vllm.WAITING[0]),
        ]
        if policy.target_prompt_tokens > 0:
            engine_signals.append(
                (Why.PROMPT_TOKENS, signals.prompt_tokens_rate, vllm.PROMPT_TOKENS[0])
            )
        if policy.target_generation_tokens > 0:
            engine_signals.append(
                (Why.GENERATION_TOKENS, signals.generation_tokens_rate, vllm.GENERATION_TOKENS[0])
            )
        found += [
            _engines(why, name, selector, targets.get(jobs.WORKERS), unlabelled_engines)
            for why, value, name in engine_signals
            if value is None
        ]
    found += _latencies(
        policy, signals, key=key, ready=ready, targets=targets, unlabelled=unlabelled_engines
    )
    return tuple(found)


def _latencies(
    policy: Policy,
    signals: Signals,
    *,
    key: str,
    ready: int,
    targets: Mapping[str, JobHealth],
    unlabelled: int,
) -> list[Missing]:
    """Latency objectives without a percentile. A histogram over a quiet minute has none, so
    silence is named only when its job explains it: the gateways' not scraped (time to first
    token), or the engines' not scraped or unlabelled while the pool has ready replicas (time
    per output token)."""
    found = []
    for why, name, objective in objectives(policy):
        if observed(signals, name, objective.percentile) is not None:
            continue
        if name == "ttft":
            gone = _gateway(why, f"{gateway.TTFT}_bucket", key, targets.get(jobs.GATEWAY))
            found += [gone] if gone else []
            continue
        job = targets.get(jobs.WORKERS)
        if ready > 0 and (job_problem(jobs.WORKERS, job) is not None or unlabelled):
            namespace, pool = key.split("/", 1)
            selector = f'{{namespace="{namespace}",pool="{pool}"}}'
            found.append(
                _engines(why, f"{vllm.INTER_TOKEN_LATENCY[0]}_bucket", selector, job, unlabelled)
            )
    return found


def summary(found: tuple[Missing, ...]) -> str:
    """The condition's message: each missing signal with its cause, then what still runs."""
    return "; ".join(m.describe() for m in found) + (
        ". Scaling runs on the signals that have data; a missing one never counts as zero"
    )

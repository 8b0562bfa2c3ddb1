"""Reads a pool's scaling signals from Prometheus (a shell: run it in a thread).

prometheus-api-client is synchronous; the reconcile loop calls :meth:`read` through
asyncio.to_thread. A series that does not exist is None (never zero); Prometheus unreachable
marks the signals stale, so the decision holds instead of scaling down on silence.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import math
from collections.abc import Collection, Sequence
from typing import Any

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from requests.exceptions import RequestException
from urllib3.util.retry import Retry

from tokenfleet.operator.policy.analysis import Sample
from tokenfleet.operator.policy.scaling import Signals
from tokenfleet.operator.policy.signal_health import JobHealth
from tokenfleet.signals import jobs, queries

log = logging.getLogger("tokenfleet.operator.signals")
TIMEOUT_SECONDS = 2  # whole seconds: Prometheus rejects "2.0s"
HISTORY_TIMEOUT_SECONDS = 10  # a month of buckets, once per bucket
POINTS_PER_QUERY = 10_000  # under Prometheus' 11,000 points per series of a range query


class PrometheusSignals:
    def __init__(self, url: str) -> None:
        self.url = url
        # No retries: the loop reads again next interval, and retrying a Prometheus that hangs
        # would only delay the stale verdict (three timed-out attempts took 18 s).
        self._prom = PrometheusConnect(url=url, disable_ssl=True, retry=Retry(total=0))
        # the targets API, which the client does not wrap (same TLS choice as the client's)
        self._http = requests.Session()
        self._http.verify = False

    def _value(self, query: str) -> float | None:
        # the server-side timeout bounds evaluation; the client one a Prometheus that hangs
        result = self._prom.custom_query(
            query, params={"timeout": f"{TIMEOUT_SECONDS}s"}, timeout=TIMEOUT_SECONDS + 1
        )
        return float(result[0]["value"][1]) if result else None

    def read(
        self,
        namespace: str,
        pool: str,
        queue_classes: Sequence[str] = (),
        latencies: Collection[tuple[str, int]] = (),
    ) -> Signals:
        """The pool's signals; ``queue_classes`` are the classes whose queueing counts,
        ``latencies`` the (``ttft`` or ``tpot``, percentile) pairs its objectives need."""
        try:
            wait = self._value(queries.queue_wait_p95(namespace, pool, queue_classes))

            def latency(name: str, percentile: int) -> float | None:
                if (name, percentile) not in latencies:
                    return None  # no objective asks for it: one query fewer
                if name == "ttft":
                    return self._number(
                        queries.client_ttft(namespace, pool, percentile, queue_classes)
                    )
                return self._number(queries.engine_tpot(namespace, pool, percentile))

            return Signals(
                ttft_p95=latency("ttft", 95),
                ttft_p99=latency("ttft", 99),
                tpot_p95=latency("tpot", 95),
                tpot_p99=latency("tpot", 99),
                oldest_queue_age=self._value(
                    queries.oldest_queue_age(namespace, pool, queue_classes)
                ),
                kv_cache_usage=self._value(queries.kv_cache_usage(namespace, pool)),
                waiting=self._value(queries.waiting(namespace, pool)),
                # no admissions in the window gives NaN: no evidence, not zero
                queue_wait_p95=None if wait is None or math.isnan(wait) else wait,
                prompt_tokens_rate=self._value(queries.prompt_rate(namespace, pool)),
                generation_tokens_rate=self._value(queries.generation_rate(namespace, pool)),
                arrival_rate=self._value(queries.arrival_rate(namespace, pool)),
                completion_rate=self._value(queries.completion_rate(namespace, pool)),
                refusal_rate=self._value(queries.refusal_rate(namespace, pool, queue_classes)),
                preemption_rate=self._value(queries.preemption_rate(namespace, pool)),
            )
        except (RequestException, PrometheusApiClientException, ValueError, KeyError) as exc:
            log.warning("prometheus at %s unreadable for %s/%s: %s", self.url, namespace, pool, exc)
            return Signals(stale=True)

    def arrival_history(
        self, namespace: str, pool: str, *, step: float, seconds: float, end: float
    ) -> list[tuple[float, float]] | None:
        """The pool's offered requests/s per ``step`` seconds over the ``seconds`` before
        ``end`` (unix seconds, a multiple of ``step``): (time, rate) points, those Prometheus
        has; None when it did not answer."""
        query = queries.arrival_rate(namespace, pool, window=f"{int(step)}s")
        points: list[tuple[float, float]] = []
        # Prometheus answers at most 11,000 points a series per query: a month of minutes is
        # read in parts, oldest first
        first = end - seconds
        while first <= end:
            last = min(end, first + (POINTS_PER_QUERY - 1) * step)
            try:
                result = self._prom.custom_query_range(
                    query,
                    start_time=datetime.datetime.fromtimestamp(first, datetime.UTC),
                    end_time=datetime.datetime.fromtimestamp(last, datetime.UTC),
                    step=f"{int(step)}",
                    params={"timeout": f"{HISTORY_TIMEOUT_SECONDS}s"},
                    timeout=HISTORY_TIMEOUT_SECONDS + 1,
                )
            except (RequestException, PrometheusApiClientException, ValueError, KeyError) as exc:
                log.warning("prometheus at %s: history of %s/%s unreadable: %s", self.url,
                            namespace, pool, exc)  # fmt: skip
                return None
            points += [(float(t), float(v)) for r in result for t, v in r.get("values", [])]
            first = last + step
        return points

    def targets(self) -> dict[str, JobHealth] | None:
        """TokenFleet's scrape jobs → their targets up and down, with a down target's last
        error (Prometheus' /api/v1/targets); None when Prometheus did not answer."""
        try:
            resp = self._http.get(
                f"{self.url.rstrip('/')}/api/v1/targets",
                params={"state": "active"},
                timeout=TIMEOUT_SECONDS + 1,
            )
            resp.raise_for_status()
            active = resp.json()["data"]["activeTargets"]
        except (RequestException, ValueError, KeyError) as exc:
            log.warning("prometheus at %s: targets unreadable: %s", self.url, exc)
            return None
        found: dict[str, JobHealth] = {}
        for target in active:
            job = target.get("labels", {}).get("job") or target.get("scrapePool", "")
            if job not in jobs.ALL:
                continue
            seen = found.get(job, JobHealth())
            health = target.get("health")
            if health == "up":
                found[job] = dataclasses.replace(seen, up=seen.up + 1)
            elif health == "down":
                error = seen.error or str(target.get("lastError", ""))[:200]
                found[job] = dataclasses.replace(seen, down=seen.down + 1, error=error)
            else:  # "unknown": discovered, not scraped yet
                found[job] = dataclasses.replace(seen, pending=seen.pending + 1)
        return found

    def unlabelled_engines(self) -> int:
        """Engine series no pool's query can select (no ``pool`` label); 0 when unreadable."""
        try:
            return round(self._number(queries.unlabelled_engines()) or 0)
        except (RequestException, PrometheusApiClientException, ValueError, KeyError) as exc:
            log.warning("prometheus at %s: unlabelled engines unreadable: %s", self.url, exc)
            return 0

    def _number(self, query: str) -> float | None:
        """A value, with NaN (a quantile over no requests) as None: no data is not zero."""
        value = self._value(query)
        return None if value is None or math.isnan(value) else value

    def canary_sample(
        self, namespace: str, model: str, revision: str, *, window_seconds: int
    ) -> Sample | None:
        """One revision's figures over the last ``window_seconds``; None if unreadable."""
        window = f"{window_seconds}s"
        args = (namespace, model, revision, window)
        try:
            requests = self._number(queries.revision_requests(*args))
            return Sample(
                requests=round(requests or 0),
                ttft_p99=self._number(queries.revision_ttft_p99(*args)),
                inter_token_p99=self._number(queries.revision_inter_token_p99(*args)),
                error_rate=self._number(queries.revision_error_rate(*args)),
            )
        except (RequestException, PrometheusApiClientException, ValueError, KeyError) as exc:
            log.warning(
                "prometheus at %s unreadable for %s/%s@%s: %s",
                self.url,
                namespace,
                model,
                revision,
                exc,
            )
            return None

    def running_by_pod(self, namespace: str, pool: str) -> dict[str, float]:
        """Pod name → running requests; empty when unreadable (no costs are set then)."""
        try:
            result = self._prom.custom_query(
                queries.running_by_pod(namespace, pool),
                params={"timeout": f"{TIMEOUT_SECONDS}s"},
                timeout=TIMEOUT_SECONDS + 1,
            )
            return {
                r["metric"]["pod"]: float(r["value"][1]) for r in result if "pod" in r["metric"]
            }
        except (RequestException, PrometheusApiClientException, ValueError, KeyError) as exc:
            log.warning("prometheus at %s: running by pod unreadable: %s", self.url, exc)
            return {}

    def revision_value(self, query: str) -> float | None:
        """One instant value (a custom check, a throughput); None when absent or unreadable."""
        try:
            return self._number(query)
        except (RequestException, PrometheusApiClientException, ValueError, KeyError) as exc:
            log.warning("prometheus at %s: %s unreadable: %s", self.url, query[:120], exc)
            return None

    def tenant_usage(self, seconds: int) -> dict[str, dict[str, dict[str, int]]] | None:
        """Tenant (namespace/name) → pool (namespace/name) → UsageStatus field → its growth over
        the last ``seconds``; None when unreadable (the status then leaves usage out rather than
        report zero). By pool, because each pool has its own price."""
        found: dict[str, dict[str, dict[str, int]]] = {}
        try:
            for field, metric in queries.TENANT_USAGE.items():
                for r in self._query(queries.tenant_usage(metric, seconds, by="tenant, pool")):
                    labels = r["metric"]
                    pools = found.setdefault(labels.get("tenant", ""), {})
                    pools.setdefault(labels.get("pool", ""), {})[field] = round(
                        float(r["value"][1])
                    )
        except (RequestException, PrometheusApiClientException, ValueError, KeyError) as exc:
            log.warning("prometheus at %s: tenant usage unreadable: %s", self.url, exc)
            return None
        return found

    def tenant_last_served(self, seconds: int) -> dict[str, datetime.datetime] | None:
        """Tenant → when a gateway last served it, within the last ``seconds``; None when
        unreadable."""
        try:
            return {
                r["metric"].get("tenant", ""): datetime.datetime.fromtimestamp(
                    float(r["value"][1]), datetime.UTC
                )
                for r in self._query(queries.tenant_last_served(seconds))
            }
        except (RequestException, PrometheusApiClientException, ValueError, KeyError) as exc:
            log.warning("prometheus at %s: tenants' last use unreadable: %s", self.url, exc)
            return None

    def adapter_placement(self) -> dict[tuple[str, str], tuple[tuple[str, ...], int]] | None:
        """(namespace, adapter) → (pods it is loaded on, requests served), from the gateways'
        series; None when unreadable (status then keeps the last report)."""
        found: dict[tuple[str, str], tuple[tuple[str, ...], int]] = {}
        try:
            for r in self._query(queries.adapter_loaded_pods()):
                key = (r["metric"].get("namespace", ""), r["metric"].get("adapter", ""))
                pods, served = found.get(key, ((), 0))
                if float(r["value"][1]) > 0:
                    found[key] = ((*pods, r["metric"].get("pod", "")), served)
            for r in self._query(queries.adapter_requests()):
                key = (r["metric"].get("namespace", ""), r["metric"].get("adapter", ""))
                found[key] = (found.get(key, ((), 0))[0], round(float(r["value"][1])))
        except (RequestException, PrometheusApiClientException, ValueError, KeyError) as exc:
            log.warning("prometheus at %s: adapter placement unreadable: %s", self.url, exc)
            return None
        return found

    def adapters_in_use(self) -> dict[tuple[str, str], tuple[str, ...]] | None:
        """(namespace, adapter) → pods whose engine is running or queueing requests for it now
        (vLLM's vllm:lora_requests_info); None when unreadable."""
        newest: dict[tuple[str, str], tuple[float, dict[str, str]]] = {}
        try:
            for r in self._query(queries.lora_requests_info()):
                labels = r["metric"]
                where = (labels.get("namespace", ""), labels.get("pod", ""))
                at = float(r["value"][1])
                if where not in newest or at > newest[where][0]:
                    newest[where] = (at, labels)
        except (RequestException, PrometheusApiClientException, ValueError, KeyError) as exc:
            log.warning("prometheus at %s: lora_requests_info unreadable: %s", self.url, exc)
            return None
        found: dict[tuple[str, str], tuple[str, ...]] = {}
        for (namespace, pod), (_, labels) in sorted(newest.items()):
            names = ",".join(
                (labels.get("running_lora_adapters", ""), labels.get("waiting_lora_adapters", ""))
            )
            for adapter in sorted({n for n in names.split(",") if n}):
                found[(namespace, adapter)] = (*found.get((namespace, adapter), ()), pod)
        return found

    def _query(self, promql: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._prom.custom_query(
            promql, params={"timeout": f"{TIMEOUT_SECONDS}s"}, timeout=TIMEOUT_SECONDS + 1
        )
        return result

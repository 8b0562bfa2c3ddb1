"""Reads a pool's scaling signals from Prometheus (a shell: run it in a thread).

prometheus-api-client is synchronous; the reconcile loop calls :meth:`read` through
asyncio.to_thread. A series that does not exist is None (never zero); Prometheus unreachable
marks the signals stale, so the decision holds instead of scaling down on silence.
"""

from __future__ import annotations

import logging

from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from requests.exceptions import RequestException

from tokenfleet.operator.policy.scaling import Signals
from tokenfleet.signals import queries

log = logging.getLogger("tokenfleet.operator.signals")
TIMEOUT_SECONDS = 2  # whole seconds: Prometheus rejects "2.0s"


class PrometheusSignals:
    def __init__(self, url: str) -> None:
        self.url = url
        self._prom = PrometheusConnect(url=url, disable_ssl=True)

    def _value(self, query: str) -> float | None:
        result = self._prom.custom_query(query, params={"timeout": f"{TIMEOUT_SECONDS}s"})
        return float(result[0]["value"][1]) if result else None

    def read(self, namespace: str, pool: str) -> Signals:
        try:
            return Signals(
                oldest_queue_age=self._value(queries.oldest_queue_age(namespace, pool)),
                kv_cache_usage=self._value(queries.kv_cache_usage(namespace, pool)),
                waiting=self._value(queries.waiting(namespace, pool)),
            )
        except (RequestException, PrometheusApiClientException, ValueError, KeyError) as exc:
            log.warning("prometheus at %s unreadable for %s/%s: %s", self.url, namespace, pool, exc)
            return Signals(stale=True)

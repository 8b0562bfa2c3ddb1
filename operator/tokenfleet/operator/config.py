"""Operator settings: what can be tuned, with units and the reason for each default."""

from __future__ import annotations

import dataclasses
import os


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OperatorConfig:
    """Knobs of the reconcile loop."""

    interval_seconds: float = 5.0
    """Longest time between two reconcile passes. Passes are level-based, so this bounds how
    stale status can get; watch events (pool, model, node or pod readiness changes) prompt a
    pass sooner."""

    prometheus_url: str = ""
    """Where the scaling signals are read; empty: no autoscaling, replicas.min and the warm
    floor decide."""

    analysis_window_seconds: float = 60.0
    """Shortest window a canary analysis measures over (the analysis interval, if longer).
    Prometheus' rate() needs several scrapes inside the window: 60 s suits the usual 15 s
    scrape interval; the local stack scrapes every second and tests use a few seconds."""

    metrics_port: int = 0
    """Where the operator serves its own /metrics (fleet state per pool and model, for the
    shipped PodMonitor's ``metrics`` port); 0: not served."""

    metrics_host: str = ""
    """The address /metrics listens on; empty: every address (a pod's own network). A
    host-network pod on the local platform listens on 127.0.0.1, where its Prometheus scrapes
    it: nothing there may dial the machine's own interface address."""

    gateway_namespace: str = "tokenfleet-system"
    """The namespace the gateway runs in, where ModelRoutes' remote key Secrets must be (their
    RemotesReady condition). The chart sets it to the release namespace from the downward API;
    the default is the namespace the install docs, manifests/ and the local platform use."""

    @classmethod
    def from_env(cls) -> OperatorConfig:
        return cls(
            interval_seconds=float(os.environ.get("TOKENFLEET_RECONCILE_SECONDS", "5")),
            prometheus_url=os.environ.get("TOKENFLEET_PROMETHEUS_URL", ""),
            analysis_window_seconds=float(
                os.environ.get("TOKENFLEET_ANALYSIS_WINDOW_SECONDS", "60")
            ),
            metrics_port=int(os.environ.get("TOKENFLEET_METRICS_PORT", "0")),
            metrics_host=os.environ.get("TOKENFLEET_METRICS_HOST", ""),
            gateway_namespace=os.environ.get("TOKENFLEET_GATEWAY_NAMESPACE") or "tokenfleet-system",
        )

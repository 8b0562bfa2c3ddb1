"""Operator settings: what can be tuned, with units and the reason for each default."""

from __future__ import annotations

import dataclasses
import os

#: TokenFleet's worker images (tokenfleet.api.deployment.DEFAULT_IMAGES and the simulator's
#: tag live in this one repository): all carry the verify-first entrypoint.
DEFAULT_ALLOWED_IMAGES = ("ghcr.io/tokenfleet/worker",)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AdapterFetchLimits:
    """What one ModelAdapter verification may cost the operator (it downloads the files into
    its own small scratch volume: an unbounded one would evict the operator)."""

    max_bytes: int = 96 * 1024 * 1024
    """Most bytes one verification may download, files and signature together. The chart's
    scratch volume is 256 Mi: ``at_once`` of these fit, with room for the interpreter's own
    temporary files. Adapters are tens of MB; a larger one is refused (ArtifactUnreachable,
    the limit named)."""

    total_seconds: float = 60.0
    """Longest one verification's downloads may take in all (not per read: a server trickling
    a byte every few seconds would otherwise hold a slot forever)."""

    per_namespace: int = 1
    """Verifications running at once per namespace: one slow server holds back only its own
    namespace's adapters."""

    at_once: int = 2
    """Verifications running at once in all (hashing shares the operator's CPU)."""

    allowed_networks: tuple[str, ...] = ()
    """Private, loopback or link-local networks (CIDR) the operator may still fetch from: every
    such address is refused by default (cloud metadata, the cluster's own services). The local
    platform allows its artifact server's, 10.250.0.1/32."""

    file_roots: tuple[str, ...] = ()
    """Directories a file:// ModelAdapter may lie below (comma-separated); none: file:// is
    refused, as the operator would otherwise hash any directory of its own pod an author names.
    The local platform allows the examples' copy, /tmp/tokenfleet-examples."""

    @classmethod
    def from_env(cls) -> AdapterFetchLimits:
        return cls(
            max_bytes=int(os.environ.get("TOKENFLEET_ADAPTER_FETCH_MAX_BYTES", str(96 << 20))),
            total_seconds=float(os.environ.get("TOKENFLEET_ADAPTER_FETCH_SECONDS", "60")),
            per_namespace=int(os.environ.get("TOKENFLEET_ADAPTER_FETCH_PER_NAMESPACE", "1")),
            at_once=int(os.environ.get("TOKENFLEET_ADAPTER_FETCH_AT_ONCE", "2")),
            allowed_networks=_listed(os.environ.get("TOKENFLEET_ADAPTER_FETCH_ALLOW", "")),
            file_roots=_listed(os.environ.get("TOKENFLEET_ADAPTER_FILE_ROOTS", "")),
        )


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

    engine_key: str = dataclasses.field(default="", repr=False)
    """The installation's engine key, which the gateway holds too. Each pool's Secret gets the
    key derived from it for the pool's namespace (tokenfleet.api.engine_key), which its
    engines serve behind (vLLM's --api-key). The chart sets it from its engine-key Secret;
    empty: the engines take requests without a key (only for a platform that has no other way
    in)."""

    network_policy: bool = True
    """Render a NetworkPolicy per pool admitting only the gateway's pods (and the scrapers'
    namespaces, to /metrics) to its workers. It needs an enforcing CNI to mean anything."""

    scraper_namespaces: tuple[str, ...] = ()
    """Namespaces whose pods may read workers' /metrics (Prometheus), comma-separated."""

    allowed_images: tuple[str, ...] = DEFAULT_ALLOWED_IMAGES
    """Image repositories a ModelDeployment's ``engine.image`` may name (a prefix of the image
    reference up to its tag or digest). Only images carrying TokenFleet's verify-first
    entrypoint belong here: any other would serve without verifying its artifact."""

    fetch: AdapterFetchLimits = dataclasses.field(default_factory=AdapterFetchLimits)
    """Bounds of the operator's own ModelAdapter downloads."""

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
            engine_key=os.environ.get("TOKENFLEET_ENGINE_API_KEY", ""),
            network_policy=os.environ.get("TOKENFLEET_NETWORK_POLICY", "true") == "true",
            scraper_namespaces=_listed(os.environ.get("TOKENFLEET_SCRAPER_NAMESPACES", "")),
            allowed_images=_listed(os.environ.get("TOKENFLEET_ALLOWED_IMAGES", ""))
            or DEFAULT_ALLOWED_IMAGES,
            fetch=AdapterFetchLimits.from_env(),
        )


def _listed(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())

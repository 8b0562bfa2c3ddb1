"""Gateway settings and static mode: a YAML file instead of Kubernetes.

Static mode serves vLLM servers outside Kubernetes (and benchmarks). Its file names models with
their endpoint URLs (and each endpoint's adapter-loader, if it has one), pools with admission
classes, tenants with key hashes, and LoRA adapters with their verdict, in the same shapes as the
custom resources. Example: docs/gateway-static.yaml.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field

from tokenfleet.accounting import cost
from tokenfleet.api.adapter import ModelAdapterSpec
from tokenfleet.api.base import Model as ApiModel
from tokenfleet.api.deployment import AdapterPolicy, LoraLimits, ResponseCache
from tokenfleet.api.pool import Admission, Cost, InferencePoolSpec, Routing
from tokenfleet.api.route import ModelRouteSpec
from tokenfleet.api.tenant import TenantSpec
from tokenfleet.gateway import adapter_catalog, catalog, route_catalog
from tokenfleet.gateway.policy import adapter_access, intake_cost, trace_context
from tokenfleet.gateway.policy.admission import ClassPolicy
from tokenfleet.gateway.policy.routing import Endpoint, Snapshot
from tokenfleet.gateway.policy.routing import Policy as RoutingPolicy


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """How a gateway process runs (from flags and environment)."""

    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    """Processes sharing the port (SO_REUSEPORT); one per core is the usual choice."""
    redis_url: str | None = None
    """Quota state shared by every replica; None keeps it in this process only."""
    cache_redis_url: str | None = None
    """The response cache's own Redis (TOKENFLEET_CACHE_REDIS_URL); None: ``redis_url``'s.
    Apart, a full cache evicts only cache entries: in one Redis under ``volatile-ttl`` the
    short-lived quota buckets went first, and tenants overspent (issue 35, docs/gateway.md)."""
    quota_failure: Literal["open", "closed"] = "open"
    """Redis down: 'open' serves with local limits (quota / replicas); 'closed' refuses."""
    expected_replicas: int = 1
    """Gateway replicas (TOKENFLEET_GATEWAY_REPLICAS, which the chart sets from its replica
    count): with the workers, they share the quotas (each process's leases and fail-open local
    limits are sized by :attr:`processes`) and the engines' slots."""
    fleet_name: str = "gateway"
    """The gateway fleet this process counts itself in (TOKENFLEET_GATEWAY_FLEET, which the chart
    sets to its namespace and release): processes of one fleet share the engines' slots."""
    salt_secret: bytes = b""
    """HMAC key for cache_salt; every replica must share it."""
    max_body_bytes: int = 4 * 1024 * 1024
    body_limits: intake_cost.Limits = dataclasses.field(default_factory=intake_cost.Limits)
    """Values per body and the bodies' memory in flight, per tenant and per process."""
    body_timeout_seconds: float = 30.0
    """A client slower than this to send its body gets 408 (slowloris)."""
    header_timeout_seconds: float = 15.0
    """A connection's request line and headers must arrive within this many seconds of its
    opening (or of its previous answer, on a kept-alive connection), else it is closed: a
    slow-header client (slowloris) holds a socket no longer (aiohttp's default is 75 s). SDK
    clients send a request's headers in one write, and drop idle connections after 5-60 s."""
    write_stall_seconds: float = 30.0
    """A client whose connection accepts nothing for this long has left: its request is
    cancelled and the engine's slot freed, whatever the request's deadline."""
    upstream_connect_seconds: float = 5.0
    drain_seconds: float = 30.0
    """Graceful shutdown: how long in-flight streams may finish."""
    access_log: bool = True
    zone: str = ""
    """This replica's zone (TOKENFLEET_ZONE, from the downward API): same-zone workers first."""
    max_attempts: int = 3
    """Tries per request (first + retries), each on another endpoint, before any byte flowed."""
    retry_budget_ratio: float = 0.1
    """Retries allowed per request over a sliding 10 s window: caps amplification in an outage."""
    retry_budget_min: int = 3
    """Retries allowed per window regardless of traffic, so a quiet gateway can retry a fluke."""
    scrape_seconds: float = 1.0
    """How often each endpoint's /metrics is read for queue and KV load; 0 turns it off."""
    adapter_listing_seconds: float = 3.0
    """How often each worker's adapter-loader is asked what it holds (other gateways load and
    evict there too); 0 turns it off. Between listings an eviction elsewhere costs one engine
    404, which the gateway answers by loading the adapter again and retrying once."""
    cold_start_seconds: float = 30.0
    """No ready replica at all: hold a request this long (within its deadline) before 503."""
    ejection_seconds: float = 5.0
    """First outlier ejection; each further one doubles it (capped at 5 minutes)."""
    prefix_index_entries: int = 200_000
    """Block hashes the prefix-affinity index remembers (~100 B each)."""
    seed: int | None = None
    """Seed of the routing random source (tests, benchmarks); None: a random seed."""
    fair_queuing: bool = True
    """Share each class's slots among its tenants by token work (TOKENFLEET_FAIR_QUEUING=0:
    first come first served, to compare)."""
    remote_keys_dir: Path = Path("/var/run/tokenfleet/remote-keys")
    """Where ModelRoute remotes' keys are mounted: ``<dir>/<secret>/<key>`` (the chart's
    gateway.remoteKeySecrets; TOKENFLEET_REMOTE_KEYS_DIR). The gateway never reads Secrets
    through the API, so a route can only use a key the platform team mounted."""
    engine_key: str = dataclasses.field(default="", repr=False)
    """The installation's engine key (TOKENFLEET_ENGINE_API_KEY, the chart's engine-key Secret).
    Each namespace's engines and adapter sidecars serve behind the key derived from it for
    that namespace (tokenfleet.api.engine_key, which the operator writes into each pool's
    Secret); the gateway sends that one as Authorization on every engine and sidecar request
    (static mode's endpoints, which have no namespace, get this key as it is). "": engines
    that take requests without a key."""
    metrics_port: int = 0
    """Where /metrics is served (TOKENFLEET_METRICS_PORT), apart from the API port: it names
    every tenant and their usage, so the public Service never exposes it. 0: on the API port
    (a host process in tests and the local platform)."""
    tracing: trace_context.Settings = dataclasses.field(default_factory=trace_context.Settings)
    """OpenTelemetry traces: where they go and which are kept (off unless an OTLP endpoint is
    set; docs/observability.md, "Traces")."""

    @property
    def processes(self) -> int:
        """Gateway processes sharing the engines: workers × replicas, each at least 1."""
        return max(1, self.workers) * max(1, self.expected_replicas)

    @classmethod
    def from_env(cls, **overrides: object) -> Settings:
        secret_file = os.environ.get("TOKENFLEET_SALT_SECRET_FILE")
        secret = (
            Path(secret_file).read_bytes().strip()
            if secret_file
            else os.environ.get("TOKENFLEET_SALT_SECRET", "").encode()
        )
        base = cls(
            redis_url=os.environ.get("TOKENFLEET_REDIS_URL") or None,
            cache_redis_url=os.environ.get("TOKENFLEET_CACHE_REDIS_URL") or None,
            quota_failure="closed"
            if os.environ.get("TOKENFLEET_QUOTA_FAILURE") == "closed"
            else "open",
            expected_replicas=int(os.environ.get("TOKENFLEET_GATEWAY_REPLICAS", "1")),
            fleet_name=os.environ.get("TOKENFLEET_GATEWAY_FLEET") or "gateway",
            salt_secret=secret,
            header_timeout_seconds=float(
                os.environ.get("TOKENFLEET_HEADER_TIMEOUT_SECONDS") or 15.0
            ),
            write_stall_seconds=float(os.environ.get("TOKENFLEET_WRITE_STALL_SECONDS") or 30.0),
            zone=os.environ.get("TOKENFLEET_ZONE", ""),
            fair_queuing=os.environ.get("TOKENFLEET_FAIR_QUEUING", "1").strip().lower()
            not in ("0", "false", "no", "off"),
            remote_keys_dir=Path(
                os.environ.get("TOKENFLEET_REMOTE_KEYS_DIR") or "/var/run/tokenfleet/remote-keys"
            ),
            engine_key=os.environ.get("TOKENFLEET_ENGINE_API_KEY", ""),
            metrics_port=int(os.environ.get("TOKENFLEET_METRICS_PORT") or 0),
            tracing=trace_context.Settings.from_env(os.environ),
        )
        return dataclasses.replace(base, **overrides)  # type: ignore[arg-type]


class StaticModel(ApiModel):
    """A model and the OpenAI-compatible servers that serve it."""

    name: str = Field(description="Served model name.")
    aliases: list[str] = Field(default_factory=list, description="Other names.")
    endpoints: list[str] = Field(min_length=1, description="Base URLs, e.g. http://10.0.0.5:8000.")
    pool: str = Field(default="default", description="Pool (admission queues) it runs in.")
    max_concurrency: int = Field(
        default=catalog.DEFAULT_CONCURRENCY,
        ge=1,
        description="Requests one endpoint takes at once.",
    )
    fallback: str | None = Field(default=None, description="Model to use when this one can't.")
    revision: str = Field(default="", description="Revision these endpoints run.")
    weight: int | None = Field(
        default=None, ge=0, le=100, description="Percent of the model's traffic this revision gets."
    )
    zone: str = Field(default="", description="Zone of these endpoints.")
    response_cache: ResponseCache = Field(
        default_factory=ResponseCache, description="As ModelDeployment.spec.responseCache."
    )
    lora: LoraLimits | None = Field(
        default=None, description="As ModelDeployment.spec.engine.lora: the engines' slots."
    )
    adapters: AdapterPolicy | None = Field(
        default=None, description="As ModelDeployment.spec.adapters (spillAbove, loadTimeout)."
    )
    adapter_loaders: dict[str, str] = Field(
        default_factory=dict,
        description="Endpoint URL → its adapter-loader's base URL (e.g. http://10.0.0.5:8002).",
    )


class StaticAdapter(ModelAdapterSpec):
    """A ModelAdapter with its verdict inline; ``base`` names a model of this file."""

    base: str = Field(description="The name of a model of this file that sets lora.")
    name: str = Field(default="", description="Its metadata.name (default: servedName).")
    verified: bool = Field(default=True, description="The operator's verdict: verified.")
    reason: str = Field(default="", description="The verdict's reason (refused when set).")


class StaticRoute(ModelRouteSpec):
    """A ModelRoute's spec; its classifier names one of the file's ``configMaps``."""

    resource: str = Field(default="", description="Its metadata.name (default: name).")


class StaticPool(ApiModel):
    """Admission and routing settings of a pool."""

    name: str = Field(description="Pool name.")
    admission: Admission = Field(default_factory=Admission, description="Classes and queues.")
    routing: Routing = Field(default_factory=Routing, description="Replica choice policy.")
    max_input_tokens: int = Field(default=8192, ge=1, description="Longest prompt accepted.")
    cost: Cost | None = Field(default=None, description="Prices, as InferencePool.spec.cost.")


class StaticTenant(TenantSpec):
    """A tenant with its key hashes inline (instead of a Secret)."""

    name: str = Field(description="Tenant name.")
    api_key_hashes: list[str] = Field(min_length=1, description="sha256:<hex> of each key.")
    api_key_secret_ref: None = Field(default=None, description="Unused in static mode.")  # type: ignore[assignment]


class StaticConfig(ApiModel):
    """The whole static-mode file."""

    models: list[StaticModel] = Field(
        min_length=1,
        description="Models and endpoints; a name may repeat, once per pool and revision.",
    )
    pools: list[StaticPool] = Field(
        default_factory=lambda: [StaticPool(name="default")],
        description="Pools and their admission classes.",
    )
    tenants: list[StaticTenant] = Field(min_length=1, description="Who may call.")
    adapters: list[StaticAdapter] = Field(
        default_factory=list, description="LoRA adapters on the models that set lora."
    )
    routes: list[StaticRoute] = Field(
        default_factory=list, description="ModelRoutes: public names routed to the models."
    )
    config_maps: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description="ConfigMaps by name → their data, as a route's classifier names them "
        "(e.g. the data of examples/09-model-routes/classifier-configmap.yaml).",
    )

    @classmethod
    def load(cls, path: Path) -> StaticConfig:
        return cls.model_validate(yaml.safe_load(path.read_text()))

    def catalog(self) -> catalog.Catalog:
        pools = {
            p.name: catalog.Pool(
                key=p.name,
                classes={c.name: ClassPolicy.of(c) for c in p.admission.classes},
                max_input_tokens=p.max_input_tokens,
                routing=RoutingPolicy.of(p.routing),
                dedicated_to=frozenset(p.routing.classes),
                rate=cost.rate_of(InferencePoolSpec(cost=p.cost)),
            )
            for p in self.pools
        }
        models: dict[str, catalog.Model] = {}
        endpoints = []
        for m in self.models:
            if m.pool not in pools:
                raise ValueError(f"model {m.name}: pool {m.pool!r} is not defined under pools")
            model = _merged(models.get(m.name), m)
            names = frozenset((m.name, *m.aliases))
            models.update(dict.fromkeys(names, model))
            endpoints += [
                Endpoint(
                    url=u.rstrip("/"),
                    pool=m.pool,
                    models=names,
                    max_concurrency=m.max_concurrency,
                    revision=m.revision,
                    zone=m.zone,
                )
                for u in m.endpoints
            ]
        tenants = {}
        for t in self.tenants:
            tenant = catalog.tenant_of(t.name, t)
            for h in t.api_key_hashes:
                tenants[h] = tenant
        served = catalog.with_adapters(
            catalog.Catalog(
                models=models,
                pools=pools,
                tenants_by_key_hash=tenants,
                endpoints=Snapshot(tuple(endpoints)),
            ),
            adapters=[self._adapter(a) for a in self.adapters],
            loaders={
                url.rstrip("/"): adapter_catalog.Loader(
                    url=loader.rstrip("/"), pod=url.rstrip("/").rpartition("/")[2]
                )
                for m in self.models
                for url, loader in m.adapter_loaders.items()
            },
        )
        config_maps = {("", name): data for name, data in self.config_maps.items()}
        routes = [
            route_catalog.entry_of(
                namespace="", resource=r.resource or r.name, spec=r, config_maps=config_maps
            )
            for r in self.routes
        ]
        return catalog.with_routes(served, routes=routes)

    def _adapter(self, a: StaticAdapter) -> adapter_catalog.Adapter:
        base = next((m for m in self.models if m.name == a.base and m.lora), None)
        if base is None or base.lora is None:
            raise ValueError(f"adapter {a.served_name}: base {a.base!r} is no model with lora")
        offer = (
            adapter_access.Offer.OFFERED
            if a.verified
            else adapter_access.Offer.REFUSED
            if a.reason
            else adapter_access.Offer.PENDING
        )
        return adapter_catalog.adapter_of(
            namespace="",
            resource=a.name or a.served_name,
            spec=a,
            base_model=base.name,
            lora=base.lora,
            policy=base.adapters,
            offer=offer,
            reason=a.reason,
        )


def _merged(known: catalog.Model | None, m: StaticModel) -> catalog.Model:
    """One model from its entries (one per pool and revision)."""
    weights = dict(known.revision_weights) if known else {}
    if m.weight is not None:
        weights[m.revision] = m.weight
    pools = known.pools if known else ()
    return catalog.Model(
        name=m.name,
        names=(known.names if known else frozenset()) | {m.name, *m.aliases},
        pools=pools if m.pool in pools else (*pools, m.pool),
        fallback=known.fallback if known and known.fallback else m.fallback,
        max_concurrency=m.max_concurrency,
        revision_weights=weights,
        response_cache=(known.response_cache if known else None)
        or (m.response_cache if m.response_cache.enabled else None),
    )

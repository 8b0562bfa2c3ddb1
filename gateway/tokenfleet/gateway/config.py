"""Gateway settings and static mode: a YAML file instead of Kubernetes.

Static mode serves vLLM servers outside Kubernetes (and benchmarks). Its file names models with
their endpoint URLs, pools with admission classes, and tenants with key hashes, in the same
shapes as the custom resources. Example: docs/gateway-static.yaml.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field

from tokenfleet.api.base import Model as ApiModel
from tokenfleet.api.pool import Admission
from tokenfleet.api.tenant import TenantSpec
from tokenfleet.gateway import catalog
from tokenfleet.gateway.policy.routing import Endpoint, Snapshot


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """How a gateway process runs (from flags and environment)."""

    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    """Processes sharing the port (SO_REUSEPORT); one per core is the usual choice."""
    redis_url: str | None = None
    """Quota state shared by every replica; None keeps it in this process only."""
    quota_failure: Literal["open", "closed"] = "open"
    """Redis down: 'open' serves with local limits (quota / replicas); 'closed' refuses."""
    expected_replicas: int = 1
    """Replicas sharing the quotas, to size fail-open local limits."""
    salt_secret: bytes = b""
    """HMAC key for cache_salt; every replica must share it."""
    max_body_bytes: int = 4 * 1024 * 1024
    body_timeout_seconds: float = 30.0
    """A client slower than this to send its body gets 408 (slowloris)."""
    upstream_connect_seconds: float = 5.0
    drain_seconds: float = 30.0
    """Graceful shutdown: how long in-flight streams may finish."""
    access_log: bool = True

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
            quota_failure="closed"
            if os.environ.get("TOKENFLEET_QUOTA_FAILURE") == "closed"
            else "open",
            expected_replicas=int(os.environ.get("TOKENFLEET_GATEWAY_REPLICAS", "1")),
            salt_secret=secret,
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


class StaticPool(ApiModel):
    """Admission settings of a pool."""

    name: str = Field(description="Pool name.")
    admission: Admission = Field(default_factory=Admission, description="Classes and queues.")
    max_input_tokens: int = Field(default=8192, ge=1, description="Longest prompt accepted.")


class StaticTenant(TenantSpec):
    """A tenant with its key hashes inline (instead of a Secret)."""

    name: str = Field(description="Tenant name.")
    api_key_hashes: list[str] = Field(min_length=1, description="sha256:<hex> of each key.")
    api_key_secret_ref: None = Field(default=None, description="Unused in static mode.")  # type: ignore[assignment]


class StaticConfig(ApiModel):
    """The whole static-mode file."""

    models: list[StaticModel] = Field(min_length=1, description="Models and endpoints.")
    pools: list[StaticPool] = Field(
        default_factory=lambda: [StaticPool(name="default")],
        description="Pools and their admission classes.",
    )
    tenants: list[StaticTenant] = Field(min_length=1, description="Who may call.")

    @classmethod
    def load(cls, path: Path) -> StaticConfig:
        return cls.model_validate(yaml.safe_load(path.read_text()))

    def catalog(self) -> catalog.Catalog:
        pools = {
            p.name: catalog.Pool(
                key=p.name,
                classes={c.name: catalog.class_policy(c) for c in p.admission.classes},
                max_input_tokens=p.max_input_tokens,
            )
            for p in self.pools
        }
        models: dict[str, catalog.Model] = {}
        endpoints = []
        for m in self.models:
            if m.pool not in pools:
                raise ValueError(f"model {m.name}: pool {m.pool!r} is not defined under pools")
            model = catalog.Model(
                name=m.name, pools=(m.pool,), fallback=m.fallback, max_concurrency=m.max_concurrency
            )
            names = frozenset((m.name, *m.aliases))
            models.update(dict.fromkeys(names, model))
            endpoints += [
                Endpoint(
                    url=u.rstrip("/"), pool=m.pool, models=names, max_concurrency=m.max_concurrency
                )
                for u in m.endpoints
            ]
        tenants = {}
        for t in self.tenants:
            tenant = catalog.tenant_of(t.name, t)
            for h in t.api_key_hashes:
                tenants[h] = tenant
        return catalog.Catalog(
            models=models,
            pools=pools,
            tenants_by_key_hash=tenants,
            endpoints=Snapshot(tuple(endpoints)),
        )

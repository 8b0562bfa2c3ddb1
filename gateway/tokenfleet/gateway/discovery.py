"""Catalog sources: Kubernetes watches, or a static file.

The Kubernetes source watches InferencePools, ModelDeployments, ModelAdapters, ModelRoutes,
Tenants, key Secrets (only those labelled tokenfleet.io/api-keys=true), the route classifiers'
ConfigMaps (only those labelled tokenfleet.io/route-classifier=true) and worker Pods — Pods, not
EndpointSlices, because it wants their pool, revision and zone labels, their readiness and
their adapter-loader port. After every change it rebuilds
the catalog and swaps it whole. It is ready once every collection has been listed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import kubernetes
from aiohttp import web

from tokenfleet.api import labels
from tokenfleet.api.base import API_GROUP_VERSION
from tokenfleet.gateway import catalog
from tokenfleet.gateway.config import StaticConfig
from tokenfleet.gateway.state import STATE
from tokenfleet.kubeapi import KubeApi

log = logging.getLogger("tokenfleet.gateway.discovery")

KEY_SECRET_LABEL = labels.API_KEY_SECRET
COLLECTIONS = {
    "pools": (f"/apis/{API_GROUP_VERSION}/inferencepools", ""),
    "models": (f"/apis/{API_GROUP_VERSION}/modeldeployments", ""),
    "adapters": (f"/apis/{API_GROUP_VERSION}/modeladapters", ""),
    "routes": (f"/apis/{API_GROUP_VERSION}/modelroutes", ""),
    # only the ConfigMaps labelled as route classifiers: not every ConfigMap of the cluster
    "configmaps": ("/api/v1/configmaps", f"{labels.ROUTE_CLASSIFIER}=true"),
    "tenants": (f"/apis/{API_GROUP_VERSION}/tenants", ""),
    "secrets": ("/api/v1/secrets", f"{KEY_SECRET_LABEL}=true"),
    "pods": ("/api/v1/pods", f"{labels.ROLE}={labels.ROLE_WORKER}"),
}
#: Coalesce bursts of watch events (a rollout changes many pods at once) into one rebuild.
REBUILD_DELAY_SECONDS = 0.05
#: A rebuild waits at least this many times the last one took, so rebuilding never takes more
#: than a third of the gateway's CPU however often objects change (a rebuild of thousands of
#: ModelAdapters takes tens of ms, and their status changes with traffic).
REBUILD_COST_FACTOR = 2.0


def rebuild_delay(last_build_seconds: float) -> float:
    """Seconds to gather watch events before the next rebuild."""
    return max(REBUILD_DELAY_SECONDS, REBUILD_COST_FACTOR * last_build_seconds)


class KubernetesSource:
    def __init__(self, api: KubeApi, swap: Callable[[catalog.Catalog], None]) -> None:
        """``swap``: installs a rebuilt catalog whole (the app's)."""
        self._api = api
        self._swap = swap
        self._objects: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in COLLECTIONS}
        self._synced: set[str] = set()
        self._dirty = asyncio.Event()

    async def run(self) -> None:
        watches = [asyncio.create_task(self._watch(name)) for name in COLLECTIONS]
        took = 0.0
        try:
            while True:
                await self._dirty.wait()
                await asyncio.sleep(rebuild_delay(took))
                self._dirty.clear()
                if self._synced == set(COLLECTIONS):
                    started = time.perf_counter()
                    self._swap(
                        catalog.from_objects(**{k: v.values() for k, v in self._objects.items()})
                    )
                    took = time.perf_counter() - started
        finally:
            for task in watches:
                task.cancel()

    async def _watch(self, name: str) -> None:
        path, selector = COLLECTIONS[name]
        async for kind, obj in self._api.list_watch(path, selector=selector):
            if kind == "SYNCED":
                self._synced.add(name)
            elif kind == "DELETED":
                self._objects[name].pop(obj["metadata"]["uid"], None)
            else:
                self._objects[name][obj["metadata"]["uid"]] = obj
            self._dirty.set()


def static_source(config: StaticConfig) -> Any:
    """A cleanup context that loads the static catalog once."""

    async def load(app: web.Application) -> AsyncIterator[None]:
        app[STATE].swap(config.catalog())
        yield

    return load


def kubernetes_source(configuration: kubernetes.client.Configuration) -> Any:
    """A cleanup context that runs the Kubernetes watches for the app's lifetime."""

    async def watch(app: web.Application) -> AsyncIterator[None]:
        session = aiohttp.ClientSession()
        api = KubeApi(configuration=configuration, session=session)
        source = KubernetesSource(api, app[STATE].swap)
        task = asyncio.create_task(source.run())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await session.close()

    return watch

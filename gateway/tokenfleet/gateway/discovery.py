"""Catalog sources: Kubernetes watches, or a static file.

The Kubernetes source watches InferencePools, ModelDeployments, ModelAdapters, ModelRoutes,
Tenants, key Secrets (only those labelled tokenfleet.io/api-keys=true), the route classifiers'
ConfigMaps (only those labelled tokenfleet.io/route-classifier=true) and worker Pods — Pods, not
EndpointSlices, because it wants their pool, revision and zone labels, their readiness and
their adapter-loader port. After every change it rebuilds
the catalog and swaps it whole. It is ready once every collection has been listed.

With namespaces to watch (``--namespace``, the chart's ``watchNamespaces``) every collection is
watched in each of them, never cluster-wide, so the gateway's account needs only a Role in each
(the chart renders no ClusterRole then); otherwise one cluster-wide watch per collection.
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


def watched_paths(path: str, namespaces: tuple[str, ...]) -> list[str]:
    """The collection's path cluster-wide (no namespaces), or its path in each namespace:
    ``/api/v1/secrets`` → ``/api/v1/namespaces/<ns>/secrets``."""
    if not namespaces:
        return [path]
    prefix, _, resource = path.rpartition("/")
    return [f"{prefix}/namespaces/{ns}/{resource}" for ns in namespaces]


def rebuild_delay(last_build_seconds: float) -> float:
    """Seconds to gather watch events before the next rebuild."""
    return max(REBUILD_DELAY_SECONDS, REBUILD_COST_FACTOR * last_build_seconds)


class KubernetesSource:
    def __init__(
        self,
        api: KubeApi,
        swap: Callable[[catalog.Catalog], None],
        *,
        namespaces: tuple[str, ...] = (),
    ) -> None:
        """``swap``: installs a rebuilt catalog whole (the app's); ``namespaces``: watch only
        these (empty: the whole cluster)."""
        self._api = api
        self._swap = swap
        self._watched = {
            name: watched_paths(path, namespaces) for name, (path, _) in COLLECTIONS.items()
        }
        self._objects: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in COLLECTIONS}
        self._synced: set[str] = set()
        self._listed: set[tuple[str, str]] = set()  # (collection, path) listed at least once
        self._dirty = asyncio.Event()

    async def run(self) -> None:
        watches = [
            asyncio.create_task(self._watch(name, path))
            for name, paths in self._watched.items()
            for path in paths
        ]
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

    async def _watch(self, name: str, path: str) -> None:
        """One collection in one place (objects are keyed by uid, unique across namespaces);
        the collection is synced once each of its paths has been listed."""
        _, selector = COLLECTIONS[name]
        async for kind, obj in self._api.list_watch(path, selector=selector):
            if kind == "SYNCED":
                self._listed.add((name, path))
                if all((name, p) in self._listed for p in self._watched[name]):
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


def kubernetes_source(
    configuration: kubernetes.client.Configuration, *, namespaces: tuple[str, ...] = ()
) -> Any:
    """A cleanup context that runs the Kubernetes watches for the app's lifetime, in
    ``namespaces`` only when any are given."""

    async def watch(app: web.Application) -> AsyncIterator[None]:
        session = aiohttp.ClientSession()
        api = KubeApi(configuration=configuration, session=session)
        source = KubernetesSource(api, app[STATE].swap, namespaces=namespaces)
        task = asyncio.create_task(source.run())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await session.close()

    return watch

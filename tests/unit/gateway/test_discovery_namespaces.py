"""The gateway's Kubernetes watches with namespaces to watch (``--namespace``, the chart's
``watchNamespaces``): every collection is watched in each namespace and never cluster-wide, so
the Roles the chart then grants are enough; the catalog is built only once every namespace of
every collection has been listed, and holds objects from all of them.

Matrix: no namespaces (one cluster-wide path per collection, as before) × two namespaces (two
namespaced paths per collection, core and tokenfleet.io groups alike); the first catalog before
and after the last namespace's list.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from tokenfleet.gateway import catalog, discovery


class FakeApi:
    """Lists one object per path, then waits; ``hold`` keeps one path from ever listing."""

    def __init__(self, hold: str = "") -> None:
        self.paths: list[tuple[str, str]] = []
        self._hold = hold

    async def list_watch(self, path: str, *, selector: str = "") -> AsyncIterator[tuple[str, Any]]:
        self.paths.append((path, selector))
        if path == self._hold:
            await asyncio.Event().wait()
        yield "ADDED", {"metadata": {"uid": path, "name": path.rsplit("/", 1)[1]}}
        yield "SYNCED", {}
        await asyncio.Event().wait()


async def _run(api: FakeApi, namespaces: tuple[str, ...]) -> list[Mapping[str, Any]]:
    """Run the source for a moment; the objects of each catalog it built."""
    built: list[Mapping[str, Any]] = []
    build = catalog.from_objects

    def record(**objects: Any) -> catalog.Catalog:
        built.append({k: list(v) for k, v in objects.items()})
        return build(pools=(), models=(), tenants=(), secrets=(), pods=())

    source = discovery.KubernetesSource(api, lambda _: None, namespaces=namespaces)  # type: ignore[arg-type]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(discovery.catalog, "from_objects", record)
        task = asyncio.create_task(source.run())
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    return built


def test_without_namespaces_each_collection_is_watched_cluster_wide() -> None:
    api = FakeApi()
    asyncio.run(_run(api, ()))
    assert sorted(p for p, _ in api.paths) == sorted(p for p, _ in discovery.COLLECTIONS.values())


def test_with_namespaces_nothing_is_watched_cluster_wide() -> None:
    api = FakeApi()
    built = asyncio.run(_run(api, ("team-a", "team-b")))
    paths = [p for p, _ in api.paths]
    assert len(paths) == 2 * len(discovery.COLLECTIONS)
    assert all("/namespaces/team-a/" in p or "/namespaces/team-b/" in p for p in paths), paths
    assert "/api/v1/namespaces/team-a/secrets" in paths
    assert "/apis/tokenfleet.io/v1alpha1/namespaces/team-b/tenants" in paths
    # the label selectors stay: only labelled key Secrets and classifier ConfigMaps are read
    selectors = dict(api.paths)
    assert selectors["/api/v1/namespaces/team-b/secrets"] == discovery.COLLECTIONS["secrets"][1]
    assert built, "no catalog was built"
    secrets = {s["metadata"]["name"] for s in built[-1]["secrets"]}
    assert len(built[-1]["secrets"]) == 2 and secrets == {"secrets"}


def test_no_catalog_until_every_namespace_has_listed() -> None:
    """A catalog built before team-b's Secrets were listed would refuse its tenants' keys."""
    api = FakeApi(hold="/api/v1/namespaces/team-b/secrets")
    assert asyncio.run(_run(api, ("team-a", "team-b"))) == []

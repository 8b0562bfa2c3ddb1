"""Indexes: kopf keeps them current from watches, so reconciling never polls the API server."""

from __future__ import annotations

import copy
from typing import Any

import kopf

from tokenfleet.api import labels
from tokenfleet.api.base import API_GROUP, API_VERSION
from tokenfleet.operator.plan import observed

WORKERS = {labels.ROLE: labels.ROLE_WORKER}


def _plain(body: kopf.Body) -> dict[str, Any]:
    return copy.deepcopy(dict(body))


def _pool_of(meta: kopf.Meta) -> str | None:
    pool = meta.labels.get(labels.POOL)
    return str(pool) if pool else None


@kopf.index(API_GROUP, API_VERSION, "inferencepools")
def pools_index(*, namespace: str | None, name: str, body: kopf.Body, **_: Any) -> object:
    return {(namespace, name): _plain(body)}


@kopf.index(API_GROUP, API_VERSION, "modeldeployments")
def models_index(*, namespace: str | None, name: str, body: kopf.Body, **_: Any) -> object:
    return {(namespace, name): _plain(body)}


@kopf.index(API_GROUP, API_VERSION, "tenants")
def tenants_index(*, namespace: str | None, name: str, body: kopf.Body, **_: Any) -> object:
    return {(namespace, name): _plain(body)}


@kopf.index(API_GROUP, API_VERSION, "modeladapters")
def adapters_index(*, namespace: str | None, name: str, body: kopf.Body, **_: Any) -> object:
    return {(namespace, name): _plain(body)}


@kopf.index(API_GROUP, API_VERSION, "modelroutes")
def routes_index(*, namespace: str | None, name: str, body: kopf.Body, **_: Any) -> object:
    return {(namespace, name): _plain(body)}


@kopf.index("pods", labels=WORKERS)
def pods_index(*, namespace: str | None, meta: kopf.Meta, body: kopf.Body, **_: Any) -> object:
    pool = _pool_of(meta)
    return {(namespace, pool): observed.worker_pod(body)} if pool else None


@kopf.index("apps", "v1", "deployments", labels=WORKERS)
def sets_index(*, namespace: str | None, meta: kopf.Meta, body: kopf.Body, **_: Any) -> object:
    pool = _pool_of(meta)
    return {(namespace, pool): observed.worker_set(body)} if pool else None


@kopf.index("nodes")
def nodes_index(*, body: kopf.Body, **_: Any) -> object:
    return {"all": observed.node_record(body)}

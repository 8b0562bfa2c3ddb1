"""The only module of the operator that talks to the API server (besides kopf's own watches).

Server-side apply with one field manager; deletes that treat "already gone" as done; status
merge patches; events. Transient failures (429, 5xx, connection errors) are retried briefly;
anything else surfaces to the reconcile loop, which logs it and tries again next pass.
"""

from __future__ import annotations

import base64
import datetime
import json
import logging
import time
from typing import Any

import kubernetes
import urllib3
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from tokenfleet import kubeapi
from tokenfleet.api import labels
from tokenfleet.api.base import API_GROUP_VERSION, rfc3339
from tokenfleet.operator.plan.reporting import Event

FIELD_MANAGER = "tokenfleet-operator"
#: The manager of the restart annotation on worker pod templates (Kube.restart): not the one that
#: applies the Deployments, whose applies would otherwise remove a field they do not name.
RESTART_FIELD_MANAGER = "tokenfleet-operator-restart"
#: Ask the API server for objects' metadata only (PartialObjectMetadata), not their content.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
_RETRIES = 3

_PATHS = {  # (apiVersion, kind) → URL prefix and plural
    ("apps/v1", "Deployment"): ("/apis/apps/v1", "deployments"),
    ("policy/v1", "PodDisruptionBudget"): ("/apis/policy/v1", "poddisruptionbudgets"),
    ("v1", "Service"): ("/api/v1", "services"),
    ("v1", "Secret"): ("/api/v1", "secrets"),
    ("networking.k8s.io/v1", "NetworkPolicy"): ("/apis/networking.k8s.io/v1", "networkpolicies"),
    ("v1", "Event"): ("/api/v1", "events"),
    ("v1", "ConfigMap"): ("/api/v1", "configmaps"),
    ("v1", "Pod"): ("/api/v1", "pods"),
    (API_GROUP_VERSION, "InferencePool"): (f"/apis/{API_GROUP_VERSION}", "inferencepools"),
    (API_GROUP_VERSION, "ModelDeployment"): (f"/apis/{API_GROUP_VERSION}", "modeldeployments"),
    (API_GROUP_VERSION, "Tenant"): (f"/apis/{API_GROUP_VERSION}", "tenants"),
    (API_GROUP_VERSION, "ModelAdapter"): (f"/apis/{API_GROUP_VERSION}", "modeladapters"),
    (API_GROUP_VERSION, "ModelRoute"): (f"/apis/{API_GROUP_VERSION}", "modelroutes"),
}


def namespace_gone(exc: BaseException) -> bool:
    """The namespace is being deleted or is gone: its objects go too, nothing is left to do."""
    if not isinstance(exc, ApiException):
        return False
    body = exc.body if isinstance(exc.body, bytes) else str(exc.body or "").encode()
    terminating = exc.status == 403 and b"NamespaceTerminating" in body
    missing = exc.status == 404 and b'"kind":"namespaces"' in body
    return terminating or missing


def _path(api_version: str, kind: str, namespace: str, name: str = "") -> str:
    prefix, plural = _PATHS[(api_version, kind)]
    return f"{prefix}/namespaces/{namespace}/{plural}" + (f"/{name}" if name else "")


class Kube:
    """Synchronous calls (run them in a thread from async code)."""

    def __init__(
        self, client: kubernetes.client.ApiClient, *, namespaces: tuple[str, ...] = ()
    ) -> None:
        """``namespaces``: the ones the operator watches (``--namespace``); its lists stay in
        them, so the chart can grant Roles there instead of a ClusterRole. Empty: the cluster."""
        self._client = client
        self._namespaces = namespaces

    @classmethod
    def connect(cls, *, namespaces: tuple[str, ...] = ()) -> Kube:
        """In-cluster credentials when in a pod, else the kubeconfig ($KUBECONFIG)."""
        try:
            kubernetes.config.load_incluster_config()
        except kubernetes.config.ConfigException:
            kubeapi.load_kube_config()  # certificates embedded in it are kept in memory
        client = kubernetes.client.ApiClient()
        if not client.configuration.verify_ssl:  # the kubeconfig asked for it; say so once
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
            logging.getLogger(__name__).warning("TLS verification is off, as the kubeconfig says")
        return cls(client, namespaces=namespaces)

    def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        query: list[tuple[str, str]] | None = None,
    ) -> Any:
        for attempt in range(_RETRIES):
            try:
                return self._once(
                    method, path, body=body, content_type=content_type, query=query or []
                )
            except ApiException as exc:
                if exc.status not in (429, 500, 502, 503, 504) or attempt == _RETRIES - 1:
                    raise
            except HTTPError:
                if attempt == _RETRIES - 1:
                    raise
            time.sleep(0.5 * 2**attempt)
        raise AssertionError("unreachable")

    def _once(
        self, method: str, path: str, *, body: Any, content_type: str, query: list[tuple[str, str]]
    ) -> Any:
        return self._send(method, path, body=body, content_type=content_type, query=query)

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: Any,
        content_type: str,
        query: list[tuple[str, str]],
        accept: str = "application/json",
    ) -> Any:
        verb, url, headers, payload, post = self._client.param_serialize(
            method=method,
            resource_path=path,
            query_params=query,
            header_params={"Content-Type": content_type, "Accept": accept},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self._client.call_api(
            verb, url, header_params=headers, body=payload, post_params=post, _request_timeout=30
        )
        data = response.read()
        if response.status >= 400:
            raise ApiException(status=response.status, reason=response.reason, body=data)
        return json.loads(data) if data else None

    def key_secret_metadata(self) -> list[dict[str, Any]]:
        """The metadata (never the data) of every Secret labelled as holding API key hashes.

        One label-selected list per pass (per watched namespace when the operator watches
        some), asked for as PartialObjectMetadataList, so the key hashes never reach the
        operator. RBAC cannot enforce either limit (a ``list`` grant on secrets would return
        their data to a client that asked for it, and rules cannot name a label), so the limit
        is this call's, stated in the chart's grant.
        """
        paths = (
            [f"/api/v1/namespaces/{ns}/secrets" for ns in self._namespaces]
            if self._namespaces
            else ["/api/v1/secrets"]
        )
        found: list[dict[str, Any]] = []
        for path in paths:
            reply = self._send(  # a read: no retry loop needed, the next pass asks again
                "GET",
                path,
                body=None,
                content_type="application/json",
                query=[("labelSelector", f"{labels.API_KEY_SECRET}=true")],
                accept=METADATA_LIST,
            )
            found += [item.get("metadata") or {} for item in (reply or {}).get("items") or []]
        return found

    def trust_key(self, namespace: str, name: str, key: str) -> bytes | None:
        """One key of the Secret a ModelDeployment names as its artifact's or its adapters'
        trust (a public key); None when the Secret or key is missing.

        Asked for by name (a field-selected list: the chart grants ``list``, not ``get``), so
        this reads exactly the trust Secret a spec names and no other Secret's data.
        """
        reply = self._send(
            "GET",
            f"/api/v1/namespaces/{namespace}/secrets",
            body=None,
            content_type="application/json",
            query=[("fieldSelector", f"metadata.name={name}")],
        )
        items = (reply or {}).get("items") or []
        encoded = ((items[0].get("data") or {}) if items else {}).get(key)
        return base64.b64decode(encoded) if encoded else None

    def secret_keys(self, namespace: str, name: str) -> frozenset[str] | None:
        """The names of one Secret's non-empty keys, never their values; None when the Secret
        does not exist.

        For ModelRoutes' remotes: whether the key the gateway will read from its mount is there.
        Asked for by name (a field-selected list, as :meth:`trust_key`: the chart grants
        ``list``, not ``get``); the values are dropped here, so no key reaches status or logs.
        """
        reply = self._send(
            "GET",
            f"/api/v1/namespaces/{namespace}/secrets",
            body=None,
            content_type="application/json",
            query=[("fieldSelector", f"metadata.name={name}")],
        )
        items = (reply or {}).get("items") or []
        if not items:
            return None
        return frozenset(str(k) for k, v in (items[0].get("data") or {}).items() if v)

    def apply(self, manifest: dict[str, Any]) -> None:
        """Server-side apply: idempotent, and conflicts with other managers are ours to win."""
        meta = manifest["metadata"]
        path = _path(manifest["apiVersion"], manifest["kind"], meta["namespace"], meta["name"])
        self._call(
            "PATCH",
            path,
            body=manifest,
            content_type="application/apply-patch+yaml",
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
        )

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        """Set a Deployment's replicas and nothing else (a merge patch: no other field moves)."""
        self._call(
            "PATCH",
            _path("apps/v1", "Deployment", namespace, name),
            body={"spec": {"replicas": replicas}},
            content_type="application/merge-patch+json",
            query=[("fieldManager", FIELD_MANAGER)],
        )

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        try:
            self._call(
                "DELETE",
                _path(api_version, kind, namespace, name),
                body={"propagationPolicy": "Background"},
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def restart(self, namespace: str, deployment: str, key: str, value: str) -> None:
        """Set one annotation on a Deployment's pod template, as `kubectl rollout restart` does:
        a new value rolls its pods (the same value changes nothing). A merge patch under its own
        field manager, so the operator's server-side applies, which never name the key, keep it.
        """
        self._call(
            "PATCH",
            _path("apps/v1", "Deployment", namespace, deployment),
            body={"spec": {"template": {"metadata": {"annotations": {key: value}}}}},
            content_type="application/merge-patch+json",
            query=[("fieldManager", RESTART_FIELD_MANAGER)],
        )

    def annotate(self, namespace: str, pod: str, key: str, value: str) -> None:
        """Set one annotation on a pod (a merge patch: nothing else moves); gone pods are fine."""
        try:
            self._call(
                "PATCH",
                _path("v1", "Pod", namespace, pod),
                body={"metadata": {"annotations": {key: value}}},
                content_type="application/merge-patch+json",
                query=[("fieldManager", FIELD_MANAGER)],
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def config_map(self, namespace: str, name: str) -> dict[str, str]:
        """A ConfigMap's data (a golden set, say); raises ApiException 404 when missing."""
        found = self._call("GET", _path("v1", "ConfigMap", namespace, name))
        return {str(k): str(v) for k, v in (found.get("data") or {}).items()}

    def config_map_found(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A ConfigMap's whole object (its labels and data); None when it does not exist."""
        try:
            found: dict[str, Any] = self._call("GET", _path("v1", "ConfigMap", namespace, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return found

    def patch_status(self, kind: str, namespace: str, name: str, status: dict[str, Any]) -> None:
        path = _path(API_GROUP_VERSION, kind, namespace, name) + "/status"
        try:
            self._call(
                "PATCH", path, body={"status": status}, content_type="application/merge-patch+json"
            )
        except ApiException as exc:
            if exc.status != 404:  # deleted meanwhile: nothing to report on
                raise

    def post_event(self, involved: dict[str, Any], event: Event, now: datetime.datetime) -> None:
        meta = involved["metadata"]
        stamp = rfc3339(now)
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": involved["apiVersion"],
                "kind": involved["kind"],
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "reason": event.reason,
            "message": event.message[:1000],
            "type": event.type,
            "source": {"component": FIELD_MANAGER},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        self._call("POST", _path("v1", "Event", meta["namespace"]), body=body)

"""A small asyncio Kubernetes REST client: get, patch, list+watch over aiohttp.

Used by the gateway (watching worker pods, tenants and their key Secrets) and the local stack's
node agent. It authenticates with a bearer token: a pod's service-account token in a cluster,
or the token of a kubeconfig (client certificates and exec plugins are not supported).
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml

Obj = dict[str, Any]


class ApiError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status


class KubeApi:
    """Token-authenticated calls to one API server."""

    def __init__(self, *, server: str, token: str, session: aiohttp.ClientSession) -> None:
        self._server = server.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._session = session
        self._ssl = ssl.create_default_context()
        # The local API server's certificate is self-signed; the kubeconfig says to skip checks.
        self._ssl.check_hostname = False
        self._ssl.verify_mode = ssl.CERT_NONE

    @staticmethod
    def kubeconfig_credentials(path: Path) -> tuple[str, str]:
        """(server, token) of a kubeconfig's current context."""
        doc = yaml.safe_load(path.read_text())
        context_name = doc.get("current-context") or doc["contexts"][0]["name"]
        context = next(c["context"] for c in doc["contexts"] if c["name"] == context_name)
        cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in doc["users"] if u["name"] == context["user"])
        if "token" not in user:
            raise ValueError(f"{path}: only token authentication is supported")
        return cluster["server"], user["token"]

    @classmethod
    def from_environment(cls, session: aiohttp.ClientSession) -> KubeApi:
        """In a pod: its service account. Elsewhere: $KUBECONFIG (or ~/.kube/config)."""
        account = Path("/var/run/secrets/kubernetes.io/serviceaccount")
        host, port = (
            os.environ.get("KUBERNETES_SERVICE_HOST"),
            os.environ.get("KUBERNETES_SERVICE_PORT"),
        )
        if host and port and (account / "token").exists():
            api = cls(
                server=f"https://{host}:{port}",
                token=(account / "token").read_text(),
                session=session,
            )
            api._ssl = ssl.create_default_context(cafile=str(account / "ca.crt"))
            return api
        config = Path(os.environ.get("KUBECONFIG", Path.home() / ".kube" / "config"))
        server, token = cls.kubeconfig_credentials(config)
        return cls(server=server, token=token, session=session)

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: Obj | None = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> Obj:
        headers = {**self._headers, "Content-Type": content_type}
        async with self._session.request(
            method,
            self._server + path,
            data=None if body is None else json.dumps(body),
            headers=headers,
            ssl=self._ssl,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as resp:
            text = await resp.text()
            if resp.status >= 400:
                raise ApiError(resp.status, text)
            result: Obj = json.loads(text) if text else {}
            return result

    async def patch_status(self, path: str, status: Obj) -> Obj:
        """Strategic-merge patch of an object's status subresource."""
        return await self.call(
            "PATCH",
            path + "/status",
            body={"status": status},
            content_type="application/strategic-merge-patch+json",
        )

    async def list_watch(self, path: str, *, selector: str = "") -> AsyncIterator[tuple[str, Obj]]:
        """Events (ADDED, MODIFIED, DELETED, and SYNCED after each full list) for a collection.

        Lists first (reporting every item as ADDED and anything gone since as DELETED), then
        watches from that resourceVersion; relists when the watch expires (410) or breaks.
        """
        known: dict[str, Obj] = {}
        query = f"labelSelector={selector}&" if selector else ""
        while True:
            try:
                listed = await self.call("GET", f"{path}?{query}")
                items = {o["metadata"]["uid"]: o for o in listed.get("items", [])}
                for uid, obj in known.items():
                    if uid not in items:
                        yield "DELETED", obj
                for obj in items.values():
                    yield "ADDED", obj
                yield "SYNCED", {}  # the collection has been listed in full
                known = items
                version = listed["metadata"]["resourceVersion"]
                async for kind, obj in self._watch(path, query, version):
                    uid = obj["metadata"]["uid"]
                    if kind == "DELETED":
                        known.pop(uid, None)
                    else:
                        known[uid] = obj
                    yield kind, obj
            except (TimeoutError, aiohttp.ClientError, ApiError):
                await asyncio.sleep(1.0)

    async def _watch(self, path: str, query: str, version: str) -> AsyncIterator[tuple[str, Obj]]:
        url = f"{self._server}{path}?{query}watch=1&allowWatchBookmarks=1&resourceVersion={version}"
        timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
        async with self._session.get(
            url, headers=self._headers, ssl=self._ssl, timeout=timeout
        ) as resp:
            if resp.status >= 400:
                raise ApiError(resp.status, await resp.text())
            buffer = b""
            # Split lines by hand: aiohttp's line iterator caps a line at 64 KiB.
            async for chunk in resp.content.iter_any():
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    event = json.loads(line)
                    kind = event.get("type")
                    if kind == "ERROR":  # typically 410 Gone: relist
                        return
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        yield kind, event["object"]

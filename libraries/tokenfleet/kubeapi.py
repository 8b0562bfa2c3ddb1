"""A small asyncio Kubernetes REST client: get, patch, list+watch over aiohttp.

Used by the gateway (watching worker pods, tenants and their key Secrets), the CLI and the local
stack's node agent. Connection settings come from the official ``kubernetes`` package's loaders,
so everything kubectl accepts works: in a pod its service account (the projected token re-read
as it rotates), else a kubeconfig with a token, token file, client certificate, exec plugin
(EKS, GKE, AKS) or OIDC provider, and a CA bundle. TLS is verified unless the kubeconfig itself
says insecure-skip-tls-verify. The requests stay on aiohttp: the watch loop is the gateway's hot
path, and the package's own client is synchronous.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import kubernetes

Obj = dict[str, Any]
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# The package's loaders carry no annotations: typed here once.
_load_kube_config: Any = kubernetes.config.load_kube_config
_InClusterLoader: Any = kubernetes.config.incluster_config.InClusterConfigLoader
_kube_config_module: Any = kubernetes.config.kube_config
_memory_files: dict[bytes, str] = {}


def _memory_file(content: str | bytes, temp_file_path: str | None = None, **_: Any) -> str:
    """An anonymous in-memory file holding ``content``; its path is ``/proc/self/fd/N``.

    One per distinct content, kept for the process's life (the package's own temp files live as
    long), so a credential refreshed again and again does not leak descriptors.
    """
    data = content.encode() if isinstance(content, str) else content
    if data not in _memory_files:
        fd = os.memfd_create("kubeconfig-data")  # close-on-exec: no child inherits it
        os.write(fd, data)
        _memory_files[data] = f"/proc/self/fd/{fd}"
    return _memory_files[data]


def load_kube_config(
    *,
    config_file: str | None = None,
    context: str | None = None,
    client_configuration: kubernetes.client.Configuration | None = None,
) -> None:
    """The ``kubernetes`` package's kubeconfig loader, with embedded certificates and keys held
    in memory.

    The package writes ``certificate-authority-data``, ``client-certificate-data``,
    ``client-key-data`` and an exec plugin's certificates to files under /tmp. The TokenFleet
    image runs on a read-only root, often without a tmpfs, where that fails ("No usable
    temporary directory"), and a private key has no business on a disk anyway. In-memory files
    have paths every TLS library can open.
    """
    _kube_config_module._create_temp_file_with_content = _memory_file
    _load_kube_config(
        config_file=config_file, context=context, client_configuration=client_configuration
    )


class SettingsError(Exception):
    """No usable connection settings; the message says what is wrong and what to do."""


class MalformedEvent(Exception):
    """A list or watch answer that is not what the API server sends: not JSON, or an object
    without ``metadata.uid``. The watch relists rather than trust what follows."""


def _uid(obj: Any) -> str:
    """An object's ``metadata.uid``, or MalformedEvent."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    uid = meta.get("uid") if isinstance(meta, dict) else None
    if not isinstance(uid, str):
        raise MalformedEvent("an object without metadata.uid")
    return uid


def _items(listed: Obj) -> list[Obj]:
    items = listed.get("items") or []
    if not isinstance(items, list) or not isinstance(listed.get("metadata"), dict):
        raise MalformedEvent("a list answer without items or metadata")
    return items


def _event(line: bytes) -> tuple[str, Obj]:
    """One watch line's type and object (an ERROR's object is its Status); MalformedEvent if
    the line is not a watch event."""
    try:
        event = json.loads(line)
    except ValueError:  # JSONDecodeError and invalid UTF-8 alike
        raise MalformedEvent("a watch line that is not JSON") from None
    kind = event.get("type") if isinstance(event, dict) else None
    obj = event.get("object") if isinstance(event, dict) else None
    if not isinstance(kind, str) or not isinstance(obj, dict):
        raise MalformedEvent("a watch line without type and object")
    if kind in ("ADDED", "MODIFIED", "DELETED"):
        _uid(obj)
    return kind, obj


#: Seconds the API server keeps one watch open (timeoutSeconds); the watch then resumes from
#: the last version seen.
WATCH_SECONDS = 60


@dataclasses.dataclass(slots=True)
class _Cursor:
    """Where a watch resumes: the last resourceVersion seen; None once the server said it is
    too old (relist)."""

    version: str | None
    began: float = 0.0  # when the last watch from it began (time.monotonic)


class ApiError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status


def _ssl_context(config: kubernetes.client.Configuration) -> ssl.SSLContext:
    """Verification as the configuration says (on, unless a kubeconfig turned it off)."""
    context = ssl.create_default_context(cafile=config.ssl_ca_cert or None)
    if not config.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if config.cert_file:
        context.load_cert_chain(config.cert_file, config.key_file or None)
    return context


def in_cluster_configuration(account: Path = SERVICE_ACCOUNT) -> kubernetes.client.Configuration:
    """A pod's service account: KUBERNETES_SERVICE_HOST/PORT, its CA, and its token, which the
    package re-reads once a minute (the kubelet rotates projected tokens long before they
    expire)."""
    config = kubernetes.client.Configuration()
    loader = _InClusterLoader(
        token_filename=str(account / "token"), cert_filename=str(account / "ca.crt")
    )
    loader.load_and_set(config)
    return config


def environment_configuration() -> kubernetes.client.Configuration:
    """In a pod: its service account. Elsewhere: $KUBECONFIG (or ~/.kube/config).

    Loaded before anything starts, so that missing or broken settings are one clear line
    instead of a traceback from inside a server's start-up.
    """
    in_pod = os.environ.get("KUBERNETES_SERVICE_HOST") and (SERVICE_ACCOUNT / "token").exists()
    try:
        if in_pod:
            return in_cluster_configuration()
        config = kubernetes.client.Configuration()
        load_kube_config(client_configuration=config)
    except (kubernetes.config.ConfigException, OSError, ValueError) as exc:
        where = "the pod's service account" if in_pod else "$KUBECONFIG (or ~/.kube/config)"
        raise SettingsError(
            f"no usable Kubernetes connection settings in {where}: {exc}. Run in a pod with a "
            "service account, or set KUBECONFIG to a kubeconfig that kubectl can use."
        ) from None
    return config


class KubeApi:
    """Calls to one API server with the credentials of a ``kubernetes`` Configuration."""

    def __init__(
        self, *, configuration: kubernetes.client.Configuration, session: aiohttp.ClientSession
    ) -> None:
        self._config = configuration
        self._server = str(configuration.host).rstrip("/")
        self._session = session
        self._tls_files: tuple[str, str] | None = None
        self._ssl = self._context()
        self._auth: dict[str, str] | None = None
        self._refresh_at = 0.0

    def _context(self) -> ssl.SSLContext:
        self._tls_files = (self._config.cert_file or "", self._config.key_file or "")
        return _ssl_context(self._config)

    def _headers(self) -> dict[str, str]:
        """The Authorization header, refreshed at most once a second (the package's hook costs
        about 0.3 ms): an expired exec or OIDC credential is fetched again, a service-account
        token re-read from its file (the package does that once a minute)."""
        now = time.monotonic()
        if self._auth is not None and now < self._refresh_at:
            return self._auth
        config = self._config
        if config.refresh_api_key_hook is not None:
            config.refresh_api_key_hook(config)
            if (config.cert_file or "", config.key_file or "") != self._tls_files:
                self._ssl = self._context()  # an exec plugin handed out a new certificate
        # Read directly: get_api_key_with_prefix would run the hook a second time.
        key = config.api_key.get("BearerToken")
        prefix = config.api_key_prefix.get("BearerToken")
        self._auth = {"Authorization": f"{prefix} {key}" if prefix else key} if key else {}
        self._refresh_at = now + 1.0
        return self._auth

    @classmethod
    def from_kubeconfig(
        cls, path: Path | None, session: aiohttp.ClientSession, *, context: str | None = None
    ) -> KubeApi:
        """A kubeconfig (``None``: $KUBECONFIG, which may list several, or ~/.kube/config)."""
        config = kubernetes.client.Configuration()
        load_kube_config(
            config_file=str(path) if path else None, context=context, client_configuration=config
        )
        return cls(configuration=config, session=session)

    @classmethod
    def in_cluster(
        cls, session: aiohttp.ClientSession, *, account: Path = SERVICE_ACCOUNT
    ) -> KubeApi:
        """A pod's service account (see :func:`in_cluster_configuration`)."""
        return cls(configuration=in_cluster_configuration(account), session=session)

    @classmethod
    def from_environment(cls, session: aiohttp.ClientSession) -> KubeApi:
        """In a pod: its service account. Elsewhere: $KUBECONFIG (or ~/.kube/config)."""
        return cls(configuration=environment_configuration(), session=session)

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: Obj | None = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> Obj:
        headers = {**self._headers(), "Content-Type": content_type}
        async with self._session.request(
            method,
            self._server + path,
            data=None if body is None else json.dumps(body),
            headers=headers,
            ssl=self._ssl,
            server_hostname=self._config.tls_server_name or None,
            proxy=self._config.proxy or None,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as resp:
            text = await resp.text()
            if resp.status == 401:
                self._refresh_at = 0.0  # a credential expired early: fetch it again next call
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
                items = {_uid(o): o for o in _items(listed)}
                for uid, obj in known.items():
                    if uid not in items:
                        yield "DELETED", obj
                for obj in items.values():
                    yield "ADDED", obj
                yield "SYNCED", {}  # the collection has been listed in full
                known = items
                version = listed["metadata"].get("resourceVersion")
                if not isinstance(version, str):
                    raise MalformedEvent("a list answer without a resourceVersion")
                cursor = _Cursor(version)
                while cursor.version is not None:  # the server ends each watch: resume it
                    began = time.monotonic()
                    if began - cursor.began < 1.0:  # one that ended at once: not a hot loop
                        await asyncio.sleep(1.0)
                    cursor.began = time.monotonic()
                    async for kind, obj in self._watch(path, query, cursor):
                        uid = _uid(obj)
                        if kind == "DELETED":
                            known.pop(uid, None)
                        else:
                            known[uid] = obj
                        yield kind, obj
            except (TimeoutError, aiohttp.ClientError, ApiError, MalformedEvent):
                # MalformedEvent: an event may have been lost, so relist (level-based) rather
                # than end the watch for good (issue 35: one bad line stopped a catalog watch)
                await asyncio.sleep(1.0)

    async def _watch(
        self, path: str, query: str, cursor: _Cursor
    ) -> AsyncIterator[tuple[str, Obj]]:
        """One watch from ``cursor``'s version, which each event (bookmarks too) moves on; the
        server ends it after WATCH_SECONDS, so a watch that went silently dead (an API server
        that stopped answering, then came back) is replaced within about a minute rather than
        when the read times out. An ERROR (410 Gone: the version is too old) clears the cursor:
        the caller relists."""
        url = (
            f"{self._server}{path}?{query}watch=1&allowWatchBookmarks=1"
            f"&timeoutSeconds={WATCH_SECONDS}&resourceVersion={cursor.version}"
        )
        timeout = aiohttp.ClientTimeout(total=None, sock_read=WATCH_SECONDS + 15)
        async with self._session.get(
            url,
            headers=self._headers(),
            ssl=self._ssl,
            server_hostname=self._config.tls_server_name or None,
            proxy=self._config.proxy or None,
            timeout=timeout,
        ) as resp:
            if resp.status >= 400:
                raise ApiError(resp.status, await resp.text())
            buffer = b""
            # Split lines by hand: aiohttp's line iterator caps a line at 64 KiB.
            async for chunk in resp.content.iter_any():
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    kind, obj = _event(line)
                    if kind == "ERROR":  # typically 410 Gone: relist
                        cursor.version = None
                        return
                    seen = (obj.get("metadata") or {}).get("resourceVersion")
                    if isinstance(seen, str) and seen:
                        cursor.version = seen
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        yield kind, obj

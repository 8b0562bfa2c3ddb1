"""``tokenfleet tenant create-key NAME``: a new API key for a tenant, shown once, stored hashed.

The key's sha256 goes into the Secret named by the Tenant's spec.apiKeySecretRef (created if
needed, labelled so gateways watch it); the key itself is printed once and stored nowhere.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import sys
from pathlib import Path
from typing import Any

import aiohttp
import kubernetes

from tokenfleet.api import labels
from tokenfleet.api.base import API_GROUP_VERSION
from tokenfleet.gateway import keys
from tokenfleet.gateway.discovery import KEY_SECRET_LABEL
from tokenfleet.kubeapi import ApiError, KubeApi


async def create_key(
    namespace: str, tenant: str, *, replace: bool, kubeconfig: Path | None = None
) -> str:
    """Make a key for ``tenant``, store its hash, return the key (the only copy)."""
    async with aiohttp.ClientSession() as session:
        api = (
            KubeApi.from_environment(session)
            if kubeconfig is None
            else KubeApi.from_kubeconfig(kubeconfig, session)
        )
        obj = await api.call(
            "GET", f"/apis/{API_GROUP_VERSION}/namespaces/{namespace}/tenants/{tenant}"
        )
        secret_name = obj["spec"]["apiKeySecretRef"]["name"]
        key = keys.new_key()
        digest = keys.hash_key(key)
        entry = {f"key-{digest[7:19]}": base64.b64encode(digest.encode()).decode()}
        path = f"/api/v1/namespaces/{namespace}/secrets/{secret_name}"
        try:
            existing = await api.call("GET", path)
        except ApiError as exc:
            if exc.status != 404:
                raise
            existing = None
        data = entry if replace or existing is None else {**(existing.get("data") or {}), **entry}
        metadata: dict[str, Any] = {
            "name": secret_name,
            "namespace": namespace,
            "labels": {KEY_SECRET_LABEL: "true"},
        }
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": metadata,
            "data": data,
        }
        tenant_path = f"/apis/{API_GROUP_VERSION}/namespaces/{namespace}/tenants/{tenant}"
        if existing is None:
            await api.call("POST", f"/api/v1/namespaces/{namespace}/secrets", body=body)
        else:  # optimistic concurrency: a concurrent change makes this fail rather than lose a key
            metadata["resourceVersion"] = existing["metadata"]["resourceVersion"]
            await api.call("PUT", path, body=body)
        # The operator reports the count in the Tenant's status; it may not read Secrets itself.
        count = {"metadata": {"annotations": {labels.API_KEY_COUNT: str(len(data))}}}
        await api.call(
            "PATCH", tenant_path, body=count, content_type="application/merge-patch+json"
        )
        return key


def parse(argv: list[str]) -> argparse.Namespace:
    """``tokenfleet tenant`` arguments; ``-n`` before or after the subcommand (after wins)."""
    # kubectl users put -n anywhere: before the subcommand or after it (after wins)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--namespace", "-n", default=argparse.SUPPRESS)
    parser = argparse.ArgumentParser(
        prog="tokenfleet tenant", description=__doc__, parents=[common]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    create = sub.add_parser(
        "create-key", help="generate a key, print it once, store its hash", parents=[common]
    )
    create.add_argument("name", help="the Tenant")
    create.add_argument("--replace", action="store_true", help="revoke the tenant's other keys")
    args = parser.parse_args(argv)
    args.namespace = getattr(args, "namespace", "default")
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    try:
        key = asyncio.run(create_key(args.namespace, args.name, replace=args.replace))
    except (ApiError, aiohttp.ClientError, kubernetes.config.ConfigException) as exc:
        # Refused by the API server, unreachable, an unverifiable certificate, a bad kubeconfig.
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(key)
    print(
        f"stored the hash for tenant {args.namespace}/{args.name}; this key is not shown again",
        file=sys.stderr,
    )
    return 0

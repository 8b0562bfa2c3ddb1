"""The platform on top of the local cluster: Redis, the gateway, a dev tenant and its key
(the remotes it spills to are tokenfleet.devstack.remotes).

Started by `make up` after the control plane and the operator; the gateway runs with the
least-privilege account of manifests/gateway, exactly as it would in a cluster.
"""

from __future__ import annotations

import secrets
import shutil
import sys
from pathlib import Path

from tokenfleet.api.base import API_GROUP_VERSION
from tokenfleet.devstack import jaeger, remotes
from tokenfleet.devstack.controlplane import Component

DEV_TENANT = "dev"
DEV_NAMESPACE = "default"
DEV_TENANT_YAML = f"""apiVersion: {API_GROUP_VERSION}
kind: Tenant
metadata: {{name: {DEV_TENANT}, namespace: {DEV_NAMESPACE}}}
spec:
  apiKeySecretRef: {{name: {DEV_TENANT}-keys}}
  allowedModels: ["*"]
  priorityClass: interactive
"""


class PlatformError(Exception):
    """A platform component cannot start; the message says what to do."""


def redis_argv(port: int) -> list[str]:
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not Path(binary).exists():
        raise PlatformError(
            "redis-server is missing: apt-get install redis-server (make up does this as root)"
        )
    return [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]


def gateway_argv(port: int, redis_port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tokenfleet.gateway",
        "--port",
        str(port),
        "--redis",
        f"redis://127.0.0.1:{redis_port}/0",
    ]


def salt_file(state_dir: Path) -> Path:
    """A cache_salt secret that survives restarts (so prefix-cache isolation is stable)."""
    path = state_dir / "gateway-salt"
    if not path.exists():
        path.write_text(secrets.token_hex(32))
        path.chmod(0o600)
    return path


def gateway_component(
    *, state_dir: Path, kubeconfig: Path, port: int, redis_port: int, traces_url: str = ""
) -> Component:
    """The gateway as a stack component: its argv, environment and health URL
    (``traces_url``: the OTLP endpoint its spans go to, every request's; "": none)."""
    tracing = (
        {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": traces_url,
            "TOKENFLEET_TRACE_SAMPLE_RATIO": str(jaeger.LOCAL_SAMPLE_RATIO),
        }
        if traces_url
        else {}
    )
    return Component(
        name="tokenfleet-gateway",
        argv=gateway_argv(port, redis_port),
        health_url=f"http://127.0.0.1:{port}/healthz",
        env={
            "KUBECONFIG": str(kubeconfig),
            "TOKENFLEET_SALT_SECRET_FILE": str(salt_file(state_dir)),
            # The remotes' keys, laid out as the chart mounts them (<secret>/<key>).
            "TOKENFLEET_REMOTE_KEYS_DIR": str(remotes.keys_dir(state_dir)),
            **tracing,
        },
    )


async def ensure_dev_key(state_dir: Path, admin_kubeconfig: Path) -> Path:
    """The dev tenant's key in .tokenfleet/dev-api-key (made once; its hash lives in a Secret)."""
    from tokenfleet.gateway.key_secrets import create_key

    path = state_dir / "dev-api-key"
    if not path.exists():
        key = await create_key(DEV_NAMESPACE, DEV_TENANT, replace=True, kubeconfig=admin_kubeconfig)
        path.write_text(key + "\n")
        path.chmod(0o600)
    return path

"""Run the operator as a user would: its own process, with the RBAC of manifests/operator."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from support.cluster import REPO, Cluster

SA, SA_NAMESPACE = "tokenfleet-operator", "tokenfleet-system"


def service_account_kubeconfig(
    cluster: Cluster, path: Path, *, component: str = "operator", account: str = SA
) -> Path:
    """Install manifests/<component>'s RBAC; write a kubeconfig holding its account's token."""
    if component == "operator":
        cluster.kubectl("apply", "-k", str(REPO / "manifests" / "operator"))
    else:  # the RBAC alone: its Deployment's image cannot run on simulated nodes anyway
        cluster.kubectl(
            "apply", "-f", str(REPO / "manifests" / "base" / "namespace" / "namespace.yaml")
        )
        cluster.kubectl("apply", "-f", str(REPO / "manifests" / component / "rbac.yaml"))
    token = cluster.kubectl(
        "create", "token", account, "-n", SA_NAMESPACE, "--duration=4h"
    ).stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    admin["users"] = [{"name": "tokenfleet-admin", "user": {"token": token}}]
    path.write_text(yaml.safe_dump(admin))
    return path


@contextmanager
def running_operator(
    kubeconfig: Path, log: Path, prometheus: str = "", env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "tokenfleet.operator", "--verbose"],
            env={
                **os.environ,
                "KUBECONFIG": str(kubeconfig),
                "TOKENFLEET_RECONCILE_SECONDS": "1",
                "TOKENFLEET_PROMETHEUS_URL": prometheus,
                # The tests' adapters lie in pytest's temporary directories or are served on
                # loopback: the operator's fetch policy refuses both unless allowed (issue #35).
                "TOKENFLEET_ADAPTER_FILE_ROOTS": tempfile.gettempdir(),
                "TOKENFLEET_ADAPTER_FETCH_ALLOW": "127.0.0.0/8",
                **(env or {}),
            },
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()

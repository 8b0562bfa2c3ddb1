"""The Kubernetes client's connection setup (tokenfleet.kubeapi, from the `kubernetes` package's
loaders) against a real API server with a CA of its own (support.apiserver).

Covers: `tokenfleet tenant create-key` with a kubeconfig holding a client certificate and with
one using an exec plugin (a script printing an ExecCredential); it refuses a server whose
certificate does not verify (another CA, or none given) with a clear error, and goes through
only where the kubeconfig says insecure-skip-tls-verify; in-cluster, the service-account token
is re-read from its file when it rotates; certificates and a key embedded in a kubeconfig (as
EKS and GKE write them) work with no writable temporary directory, for the gateway's client and
the operator's alike; both servers refuse a broken kubeconfig with one line before starting.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import kubernetes
import pytest
import yaml

from support.apiserver import AuditedServer, audited_apiserver, make_pki
from support.cluster import REPO, Cluster
from tokenfleet.gateway.keys import hash_key
from tokenfleet.kubeapi import KubeApi
from tokenfleet.operator.k8s import Kube


@pytest.fixture(scope="module")
def server(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuditedServer]:
    with audited_apiserver(cluster, tmp_path_factory.mktemp("tls")) as running:
        yield running


@pytest.fixture
def tenant(cluster: Cluster, ns: str) -> str:
    cluster.apply(
        {
            "apiVersion": "tokenfleet.io/v1alpha1",
            "kind": "Tenant",
            "metadata": {"name": "acme", "namespace": ns},
            "spec": {"apiKeySecretRef": {"name": "acme-keys"}, "allowedModels": ["m"]},
        }
    )
    return "acme"


def create_key(kubeconfig: Path, ns: str, tenant: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokenfleet.cli", "tenant", "create-key", tenant, "-n", ns],
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )


def stored_hashes(cluster: Cluster, ns: str) -> int:
    return len(cluster.get("secret", "acme-keys", "-n", ns)["data"])


def test_create_key_with_a_client_certificate(
    cluster: Cluster, server: AuditedServer, ns: str, tenant: str, tmp_path: Path
) -> None:
    pki = server.pki
    user = {"client-certificate": str(pki.client_cert), "client-key": str(pki.client_key)}
    done = create_key(server.kubeconfig(tmp_path / "cert.kubeconfig", user), ns, tenant)
    assert done.returncode == 0, done.stderr
    stored = cluster.get("secret", "acme-keys", "-n", ns)["data"]
    assert [base64.b64decode(v).decode() for v in stored.values()] == [
        hash_key(done.stdout.strip())
    ]
    # The API server saw the certificate's identity, not a token.
    users = {e["user"]["username"] for e in server.writes(namespace=ns, resource="secrets")}
    assert users == {"tokenfleet-cert-admin"}


def test_create_key_with_an_exec_plugin(
    cluster: Cluster, server: AuditedServer, ns: str, tenant: str, tmp_path: Path
) -> None:
    plugin = tmp_path / "credential.py"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": server.admin_token},
    }
    plugin.write_text(f"import json\nprint(json.dumps({credential!r}))\n")
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin)],
            "interactiveMode": "Never",
        }
    }
    done = create_key(server.kubeconfig(tmp_path / "exec.kubeconfig", user), ns, tenant)
    assert done.returncode == 0, done.stderr
    assert stored_hashes(cluster, ns) == 1
    users = {e["user"]["username"] for e in server.writes(namespace=ns, resource="secrets")}
    assert users == {"tokenfleet-admin"}


def test_refuses_a_server_whose_certificate_does_not_verify(
    cluster: Cluster, server: AuditedServer, ns: str, tenant: str, tmp_path: Path
) -> None:
    other = make_pki(tmp_path / "other", cn="someone-else")
    token = {"token": server.admin_token}
    # Another CA, or none in the kubeconfig (the system's, which never signed it).
    for trust in ("ca", "system"):
        kubeconfig = server.kubeconfig(
            tmp_path / f"{trust}.kubeconfig", token, ca=other.ca, trust=trust
        )
        name = trust
        done = create_key(kubeconfig, ns, tenant)
        assert done.returncode == 1, (name, done.stdout, done.stderr)
        assert "certificate verify failed" in done.stderr, (name, done.stderr)
        assert "Traceback" not in done.stderr
    assert cluster.kubectl("get", "secret", "acme-keys", "-n", ns, check=False).returncode != 0
    # Where the kubeconfig itself says so, verification is off (the local platform's own).
    insecure = server.kubeconfig(tmp_path / "insecure.kubeconfig", token, trust="insecure")
    done = create_key(insecure, ns, tenant)
    assert done.returncode == 0, done.stderr


async def whoami(api: KubeApi) -> str:
    review = await api.call(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    return str(review["status"]["userInfo"]["username"])


def test_in_cluster_the_rotated_token_is_read_again(
    cluster: Cluster,
    server: AuditedServer,
    ns: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for account in ("before", "after"):
        cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": account, "namespace": ns},
            }
        )
    tokens = {
        a: cluster.kubectl("create", "token", a, "-n", ns, "--duration=1h").stdout.strip()
        for a in ("before", "after")
    }
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "ca.crt").write_bytes(server.pki.ca.read_bytes())
    (account / "token").write_text(tokens["before"])
    host, port = server.url.removeprefix("https://").split(":")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)

    async def rotate() -> tuple[str, str, float]:
        async with aiohttp.ClientSession() as session:
            api = KubeApi.in_cluster(session, account=account)
            first = await whoami(api)
            (account / "token").write_text(tokens["after"])  # the kubelet rotates it in place
            start = time.monotonic()
            while time.monotonic() - start < 75:
                now = await whoami(api)
                if now != first:
                    return first, now, time.monotonic() - start
                await asyncio.sleep(1)
            return first, first, time.monotonic() - start

    first, later, took = asyncio.run(rotate())
    assert first == f"system:serviceaccount:{ns}:before"
    assert later == f"system:serviceaccount:{ns}:after", f"still the old token after {took:.0f} s"


def test_embedded_certificates_and_key_need_no_writable_disk(
    server: AuditedServer, ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The TokenFleet image runs on a read-only root without a tmpfs: the ``kubernetes``
    package's loader would write these to temporary files and fail there."""
    pki = server.pki

    def data(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    user = {
        "client-certificate-data": data(pki.client_cert),
        "client-key-data": data(pki.client_key),
    }
    kubeconfig = server.kubeconfig(tmp_path / "embedded.kubeconfig", user, trust="system")
    doc = yaml.safe_load(kubeconfig.read_text())
    doc["clusters"][0]["cluster"]["certificate-authority-data"] = data(pki.ca)
    kubeconfig.write_text(yaml.safe_dump(doc))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "read-only-root-has-none"))

    async def gateway_client() -> tuple[str, str]:
        async with aiohttp.ClientSession() as session:
            api = KubeApi.from_kubeconfig(kubeconfig, session)
            return await whoami(api), str(api._config.ssl_ca_cert)

    user_name, ca_path = asyncio.run(gateway_client())
    assert user_name == "tokenfleet-cert-admin"
    assert ca_path.startswith("/proc/self/fd/"), ca_path  # held in memory, not on a disk

    default = kubernetes.client.Configuration.get_default_copy()
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    # The package reads $KUBECONFIG once, at import: point its default there instead.
    monkeypatch.setattr(
        kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig)
    )
    try:
        namespace = Kube.connect()._call("GET", f"/api/v1/namespaces/{ns}")
    finally:
        kubernetes.client.Configuration.set_default(default)
    assert namespace["metadata"]["name"] == ns


@pytest.mark.parametrize("server", ["gateway", "operator"])
def test_a_broken_kubeconfig_is_one_clear_line_before_anything_starts(
    server: str, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    done = subprocess.run(
        [sys.executable, "-m", f"tokenfleet.{server}"],
        env={**env, "KUBECONFIG": str(broken)},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert "error: no usable Kubernetes connection settings" in done.stderr
    assert "current-context" in done.stderr  # what is wrong, in the loader's words

"""The chart's ``watchNamespaces`` on the real API server (issue #35, finding 8): the gateway
and the operator run with the accounts the chart renders then — Roles in the watched namespace
only, no cluster-wide grant on Secrets or ConfigMaps — and that is enough for their work there,
and nothing outside it reaches them.

Covers: the gateway, started with ``--namespace`` under its namespaced account, lists and
watches every collection (it builds a catalog only once all are listed, so a refused watch would
leave every key unknown) and serves a tenant's key of the watched namespace, and never one of
another namespace; ``kubectl auth can-i`` for both accounts inside and outside the namespace;
the operator's key-Secret list (metadata only) under its namespaced account returns the watched
namespace's key Secret, and the operator process itself (kopf, --namespace) on that account
counts the watched Tenant's key and nothing of another namespace.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import yaml

from support.cluster import REPO, Cluster, namespace, wait_for
from support.gateway import Gateway, free_port, running, start_gateway
from support.helm import helm_runner
from support.objects import manifest
from tokenfleet.signals import operator as operator_names

CHART = REPO / "charts" / "tokenfleet"


@pytest.fixture
def release(cluster: Cluster, tmp_path: Path) -> Iterator[str]:
    """A namespace for the chart's accounts (as a release namespace), unwatched."""
    with namespace(cluster, f"tfw-{uuid.uuid4().hex[:6]}") as created:
        yield created


@pytest.fixture
def other(cluster: Cluster) -> Iterator[str]:
    with namespace(cluster, f"unwatched-{uuid.uuid4().hex[:6]}") as created:
        yield created


def install_rbac(cluster: Cluster, tmp_path: Path, *, release: str, watched: str) -> str:
    """The chart's accounts and grants with ``watchNamespaces: [watched]``; the release name."""
    helm = helm_runner(cluster.env, tmp_path)
    name = f"w{uuid.uuid4().hex[:5]}"
    rendered = helm(
        "template", name, str(CHART), "-n", release,
        "--set", f"watchNamespaces={{{watched}}}",
        "--show-only", "templates/gateway-rbac.yaml",
        "--show-only", "templates/operator-rbac.yaml",
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(rendered) if isinstance(d, dict) and d.get("kind")]
    cluster_wide = [d for d in docs if d["kind"] == "ClusterRole"]
    assert [r["resources"] for d in cluster_wide for r in d["rules"]] == [["nodes"]]
    cluster.kubectl("apply", "-f", "-", stdin=rendered)
    return name


def kubeconfig(cluster: Cluster, path: Path, *, account: str, release: str) -> Path:
    token = cluster.kubectl(
        "create", "token", account, "-n", release, "--duration=1h"
    ).stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    admin["users"] = [{"name": "tokenfleet-admin", "user": {"token": token}}]
    path.write_text(yaml.safe_dump(admin))
    return path


def tenant_with_key(cluster: Cluster, ns: str) -> str:
    cluster.apply(
        manifest(
            "Tenant", "team", ns, {"apiKeySecretRef": {"name": "team-keys"}, "allowedModels": ["m"]}
        ),
    )
    done = subprocess.run(
        [str(Path(sys.executable).parent / "tokenfleet"), "tenant", "create-key", "team", "-n", ns],
        capture_output=True, text=True, env=cluster.env, cwd=REPO, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def _answers(gateway: Gateway, key: str) -> bool:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    try:
        client.models.list()
    except openai.AuthenticationError:
        return False
    return True


def test_the_gateway_serves_its_namespace_on_roles_alone(
    cluster: Cluster, ns: str, other: str, release: str, tmp_path: Path
) -> None:
    name = install_rbac(cluster, tmp_path, release=release, watched=ns)
    account = f"{name}-tokenfleet-gateway"
    config = kubeconfig(cluster, tmp_path / "gw", account=account, release=release)
    key, foreign = tenant_with_key(cluster, ns), tenant_with_key(cluster, other)
    env = {"KUBECONFIG": str(config)}
    with running(start_gateway(tmp_path, None, "--namespace", ns, env=env, ready=False)) as g:
        wait_for("the watched tenant's key", lambda: _answers(g, key), timeout=60)
        assert not _answers(g, foreign)  # another namespace's tenant is unknown here
        log = g.log.read_text()
    assert "403" not in log and "Forbidden" not in log, log[-2000:]
    assert key not in log


@pytest.mark.parametrize(
    ("component", "verb", "resource", "where", "allowed"),
    [
        ("gateway", "watch", "secrets", "watched", "yes"),
        ("gateway", "list", "configmaps", "watched", "yes"),
        ("gateway", "list", "secrets", "other", "no"),
        ("gateway", "list", "secrets", "cluster", "no"),
        ("gateway", "watch", "configmaps", "cluster", "no"),
        ("gateway", "list", "tenants.tokenfleet.io", "cluster", "no"),
        ("operator", "list", "secrets", "watched", "yes"),
        ("operator", "list", "secrets", "release", "yes"),  # remotes' key Secrets, by name
        ("operator", "list", "secrets", "other", "no"),
        ("operator", "list", "secrets", "cluster", "no"),
        ("operator", "get", "configmaps", "cluster", "no"),
        ("operator", "create", "deployments.apps", "other", "no"),
        ("operator", "list", "nodes", "cluster", "yes"),  # cluster-scoped: free GPUs per zone
    ],
)
def test_each_account_reaches_only_the_watched_namespace(
    cluster: Cluster,
    ns: str,
    other: str,
    release: str,
    tmp_path: Path,
    component: str,
    verb: str,
    resource: str,
    where: str,
    allowed: str,
) -> None:
    name = install_rbac(cluster, tmp_path, release=release, watched=ns)
    who = f"system:serviceaccount:{release}:{name}-tokenfleet-{component}"
    scope = {"watched": ["-n", ns], "other": ["-n", other], "release": ["-n", release]}
    answer = cluster.kubectl(
        "auth", "can-i", verb, resource, "--as", who, *scope.get(where, ["-A"]), check=False
    ).stdout.strip()
    assert answer == allowed, (component, verb, resource, where)


def test_the_operators_key_secret_list_stays_in_its_namespace(
    cluster: Cluster, ns: str, other: str, release: str, tmp_path: Path
) -> None:
    import kubernetes

    from tokenfleet.operator import k8s

    name = install_rbac(cluster, tmp_path, release=release, watched=ns)
    config = kubeconfig(
        cluster, tmp_path / "op", account=f"{name}-tokenfleet-operator", release=release
    )
    tenant_with_key(cluster, ns)
    tenant_with_key(cluster, other)
    client = kubernetes.config.new_client_from_config(config_file=str(config))
    found = k8s.Kube(client, namespaces=(ns,)).key_secret_metadata()
    assert [(m["namespace"], m["name"]) for m in found] == [(ns, "team-keys")]
    assert all("data" not in m for m in found)
    with pytest.raises(k8s.ApiException) as refused:  # the chart's Roles allow nothing wider
        k8s.Kube(client).key_secret_metadata()
    assert refused.value.status == 403


def _condition_line(port: int, ns: str) -> str:
    """This operator's own Tenant Ready sample for ``ns`` ("" until it has one)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            page = answer.read().decode()
    except OSError:
        return ""
    return next(
        (
            line
            for line in page.splitlines()
            if line.startswith(operator_names.CONDITION)
            and 'kind="Tenant"' in line
            and f'namespace="{ns}"' in line
            and 'type="Ready"' in line
        ),
        "",
    )


def test_the_operator_runs_on_its_namespaced_account(
    cluster: Cluster, ns: str, other: str, release: str, tmp_path: Path
) -> None:
    """The operator process as the chart runs it with watchNamespaces: --namespace, the
    namespaced account. Its own /metrics (not the session operator's status writes) shows it
    indexed the namespace's Tenant and counted its key from the per-namespace key-Secret list;
    nothing it needs is refused (kopf's namespace scan is, and kopf says it falls back to the
    namespaces it was given: the chart grants no cluster-wide namespace list)."""
    name = install_rbac(cluster, tmp_path, release=release, watched=ns)
    config = kubeconfig(
        cluster, tmp_path / "op", account=f"{name}-tokenfleet-operator", release=release
    )
    tenant_with_key(cluster, ns)
    tenant_with_key(cluster, other)
    port = free_port()
    log = tmp_path / "operator.log"
    env = {
        **os.environ,
        "KUBECONFIG": str(config),
        "TOKENFLEET_RECONCILE_SECONDS": "1",
        "TOKENFLEET_PROMETHEUS_URL": "",
        "TOKENFLEET_METRICS_PORT": str(port),
        "TOKENFLEET_METRICS_HOST": "127.0.0.1",
        "TOKENFLEET_GATEWAY_NAMESPACE": release,
    }
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "tokenfleet.operator", "--verbose", "--namespace", ns],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    try:
        line = wait_for(
            "this operator's Tenant Ready", lambda: _condition_line(port, ns), timeout=60
        )
        assert 'reason="KeysPresent"' in line and line.endswith(" 1.0"), line
        assert _condition_line(port, other) == ""  # the unwatched namespace is not its own
        assert process.poll() is None
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
    text = log.read_text()
    refused = [
        line
        for line in text.splitlines()
        if ("403" in line or "Forbidden" in line or "permissions" in line)
        and "namespaces" not in line  # kopf's own scan, expected and harmless (docstring)
    ]
    assert not refused, "\n".join(refused[:10])
    assert "key Secrets' metadata unreadable" not in text

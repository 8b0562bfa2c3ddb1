"""The Helm chart (charts/tokenfleet) against the real local API server, with the built helm.

Covers: `helm lint` is clean (defaults and the local overlay); `helm template` output is accepted
by the API server (server-side dry-run), and so is `kubectl apply -k manifests/install`, which
holds the same objects as the chart, and `-k manifests/monitoring` what monitoring.enabled=auto
adds where the Prometheus Operator runs; manifests/ is current; install → upgrade → uninstall
leaves no orphans; the generated salt and Redis password survive an upgrade; with auto, an
install finds the Prometheus Operator's API through the API server's discovery (created here by
stand-in CRDs for one test) and creates the PodMonitors, and without it says loudly that it did
not; the rendered Redis refuses a client without its password and accepts the gateway's URL.
Pods do not run here (kwok fakes them); the objects are what is asserted.
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.cluster import BIN_DIR, REPO, Cluster, wait_for
from support.helm import Helm, helm_runner
from tokenfleet.gateway.redis_client import RespClient, RespError

CHART = REPO / "charts" / "tokenfleet"
LOCAL = CHART / "values-local.yaml"
HELM = BIN_DIR / "helm"
#: Namespaced kinds the chart creates (Helm's own release Secrets are checked separately).
NAMESPACED = (
    "deployments,replicasets,pods,services,serviceaccounts,secrets,roles,rolebindings,"
    "poddisruptionbudgets,networkpolicies"
)
CLUSTER_SCOPED = "clusterroles,clusterrolebindings"
#: The Prometheus Operator's kinds the chart renders (what kube-prometheus-stack's CRDs serve).
PROMETHEUS_OPERATOR_KINDS = ("PodMonitor", "PrometheusRule")
MONITORS = {"tokenfleet-workers", "tokenfleet-gateway", "tokenfleet-operator"}


@pytest.fixture
def helm(cluster: Cluster, tmp_path: Path) -> Helm:
    """Run the built helm against the local cluster, with its state kept in tmp_path."""
    return helm_runner(cluster.env, tmp_path)


def objects(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def ids(docs: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]) for d in docs}


def test_helm_lint_is_clean(helm: Any) -> None:
    for extra in ([], ["-f", str(LOCAL)]):
        done = helm("lint", "--strict", str(CHART), *extra)
        assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout, done.stdout
        assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout, done.stdout


def test_the_schema_refuses_a_bad_value(helm: Any) -> None:
    done = helm("template", "x", str(CHART), "--set", "gateway.quotaFailure=maybe", check=False)
    assert done.returncode != 0 and "quotaFailure" in done.stderr, done.stderr
    done = helm(
        "template", "x", str(CHART), "--set", "operator.leaderElection.renewSeconds=5", check=False
    )
    assert done.returncode != 0 and "3 x renewSeconds" in done.stderr, done.stderr


def test_the_monitoring_switch_installs_the_objects_monitoring_renders(helm: Any) -> None:
    """monitoring.enabled: the PodMonitors (with the relabelings the local Prometheus runs), the
    PrometheusRule and the dashboards, in the release namespace with monitoring.labels; the
    operator serves its metrics on the PodMonitor's port."""
    args = ["template", "t", str(CHART), "-n", "mon", "--set", "monitoring.enabled=true"]
    docs = objects(helm(*args, "--set", "monitoring.labels.release=kps").stdout)
    monitors = {d["metadata"]["name"]: d for d in docs if d["kind"] == "PodMonitor"}
    assert set(monitors) == {"tokenfleet-workers", "tokenfleet-gateway", "tokenfleet-operator"}
    workers = monitors["tokenfleet-workers"]["spec"]["podMetricsEndpoints"][0]["relabelings"]
    assert {r["targetLabel"] for r in workers} >= {"namespace", "pool", "model", "revision", "zone"}
    rules = [d for d in docs if d["kind"] == "PrometheusRule"]
    boards = [
        d
        for d in docs
        if d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"]["labels"]
    ]
    assert len(rules) == 1 and len(boards) == 5
    for d in [*monitors.values(), *rules, *boards]:
        assert d["metadata"]["namespace"] == "mon" and d["metadata"]["labels"]["release"] == "kps"
    operator = next(
        d for d in docs if d["kind"] == "Deployment" and "operator" in d["metadata"]["name"]
    )
    container = operator["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "metrics", "containerPort": 9102} in container["ports"]
    assert {"name": "TOKENFLEET_METRICS_PORT", "value": "9102"} in container["env"]
    off = objects(helm("template", "t", str(CHART), "-n", "mon").stdout)
    assert not [d for d in off if d["kind"] in ("PodMonitor", "PrometheusRule")]
    only_monitors = objects(
        helm(
            *args, "--set", "monitoring.rules=false", "--set", "monitoring.dashboards=false"
        ).stdout
    )
    assert {d["kind"] for d in only_monitors} >= {"PodMonitor"}
    assert not [d for d in only_monitors if d["kind"] == "PrometheusRule"]


def pod_labels(docs: list[dict[str, Any]], component: str) -> dict[str, str]:
    deployment = next(
        d
        for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["name"].endswith(f"-{component}")
    )
    labels: dict[str, str] = deployment["spec"]["template"]["metadata"]["labels"]
    return labels


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a NetworkPolicy podSelector (matchLabels only, as the chart writes it) picks a
    pod with these labels."""
    assert set(selector) == {"matchLabels"}, selector
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


@pytest.mark.parametrize(
    ("values", "ports"),
    [
        pytest.param([], [6379, 6380], id="defaults"),
        pytest.param(["-f", str(LOCAL)], [16379], id="local"),
        pytest.param(["--set", "redis.port=7000"], [7000, 6380], id="own-port"),
        pytest.param(["--set", "redis.cache.enabled=false"], [6379], id="no-cache-redis"),
    ],
)
def test_the_redis_network_policy_admits_only_the_gateway_on_the_redis_port(
    helm: Any, values: list[str], ports: list[int]
) -> None:
    """The NetworkPolicy guards the Redis pods (and only them), admits the gateway's pods on
    Redis's port, and nothing else: not the operator, not Redis itself, not any other pod of
    the namespace. Off with redis.networkPolicy=false, absent with an external Redis."""
    docs = objects(helm("template", "t", str(CHART), "-n", "tf", *values).stdout)
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    spec = policy["spec"]
    pods = {c: pod_labels(docs, c) for c in ("redis", "gateway", "operator")}
    assert [c for c, labels in pods.items() if selects(spec["podSelector"], labels)] == ["redis"]
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"}, "no namespaceSelector or ipBlock widens it"
    assert [c for c, labels in pods.items() if selects(peer["podSelector"], labels)] == ["gateway"]
    assert rule["ports"] == [{"protocol": "TCP", "port": port} for port in ports]
    (service,) = [
        d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].endswith("-redis")
    ]
    assert [p["port"] for p in service["spec"]["ports"]] == ports
    external = ["--set", "redis.enabled=false", "--set", "redis.external.url=redis://r:6379"]
    for switch in (["--set", "redis.networkPolicy=false"], external):
        off = objects(helm("template", "t", str(CHART), "-n", "tf", *values, *switch).stdout)
        assert not [d for d in off if d["kind"] == "NetworkPolicy"], switch


def gateway_pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = next(
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-gateway")
    )
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return pod


def test_remote_key_secrets_are_mounted_read_only_and_nothing_by_default(
    cluster: Cluster, helm: Any, ns: str
) -> None:
    """gateway.remoteKeySecrets: each Secret is a read-only directory (so the kubelet rotates
    it) at /var/run/tokenfleet/remote-keys/<name>, optional (a missing one does not hold the
    pods back), with TOKENFLEET_REMOTE_KEYS_DIR pointing there and no RBAC added; the API server
    accepts it. Unset: no such volume, mount or variable."""
    base = ["template", "t", str(CHART), "-n", ns]
    listed = objects(helm(*base, "--set", "gateway.remoteKeySecrets={region-b-key,pk}").stdout)
    pod = gateway_pod(listed)
    container = pod["containers"][0]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for name in ("region-b-key", "pk"):
        mount = mounts[f"/var/run/tokenfleet/remote-keys/{name}"]
        assert mount["readOnly"] is True and "subPath" not in mount
        secret = volumes[mount["name"]]["secret"]
        assert secret == {"secretName": name, "optional": True, "defaultMode": 0o440}
    assert {"name": "TOKENFLEET_REMOTE_KEYS_DIR", "value": "/var/run/tokenfleet/remote-keys"} in (
        container["env"]
    )
    default = objects(helm(*base).stdout)
    plain = gateway_pod(default)
    assert not [v for v in plain["volumes"] if v["name"].startswith("remote-key")]
    assert not [
        m for m in plain["containers"][0]["volumeMounts"] if "remote-keys" in m["mountPath"]
    ]
    assert "TOKENFLEET_REMOTE_KEYS_DIR" not in {e["name"] for e in plain["containers"][0]["env"]}
    roles = [d for d in listed if d["kind"] in ("ClusterRole", "Role")]
    assert roles == [d for d in default if d["kind"] in ("ClusterRole", "Role")]
    deployment = next(
        d for d in listed if d["kind"] == "Deployment" and d["spec"]["template"]["spec"] == pod
    )
    done = cluster.kubectl(
        "apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(deployment), check=False
    )
    assert done.returncode == 0, done.stderr


def test_rendered_manifests_are_current() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "render_manifests.py"),
            "--check",
            "--helm",
            str(HELM),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "values",
    [[], ["-f", str(LOCAL)], ["--set", "watchNamespaces={NS}"]],
    ids=["defaults", "local", "watched-namespaces"],
)
def test_helm_template_is_accepted_by_the_api_server(
    cluster: Cluster, helm: Any, ns: str, values: list[str]
) -> None:
    release = f"tf-{uuid.uuid4().hex[:6]}"
    values = [v.replace("{NS}", f"{{{ns}}}") for v in values]  # the test's own namespace
    rendered = helm("template", release, str(CHART), "-n", ns, "--include-crds", *values).stdout
    docs = objects(rendered)
    kinds = {d["kind"] for d in docs}
    assert {"CustomResourceDefinition", "Deployment", "ClusterRole", "Role", "Secret"} <= kinds
    done = cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--dry-run=server",
        "-f",
        "-",
        stdin=rendered,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("(server dry run)") == len(docs)


def test_the_kustomize_install_holds_the_charts_objects(cluster: Cluster, helm: Any) -> None:
    built = cluster.kubectl("kustomize", str(REPO / "manifests" / "install")).stdout
    chart = helm(
        "template",
        "tokenfleet",
        str(CHART),
        "-n",
        "tokenfleet-system",
        "--include-crds",
        "--set",
        "namespace.create=true",
        "--set",
        "generateSecrets=false",
    ).stdout
    assert ids(objects(built)) == ids(objects(chart))
    by_id = {(d["kind"], d["metadata"]["name"]): d for d in objects(chart)}
    for doc in objects(built):
        assert doc == by_id[(doc["kind"], doc["metadata"]["name"])], doc["metadata"]["name"]
    crds = {d["metadata"]["name"]: d for d in objects(built) if d["kind"].startswith("Custom")}
    for path in (REPO / "crds").glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        assert crds[crd["metadata"]["name"]] == crd
    # A dry run cannot create the namespace its objects go in: that one is applied for real.
    cluster.kubectl("apply", "-k", str(REPO / "manifests" / "base" / "namespace"))
    # Other tests on this shared cluster apply manifests/operator client-side into the same
    # namespace; a GitOps tool taking those objects over forces the field conflicts too.
    done = cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--dry-run=server",
        "-k",
        str(REPO / "manifests" / "install"),
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_kustomize_monitoring_holds_what_auto_adds(cluster: Cluster, helm: Any) -> None:
    """manifests/monitoring is the chart's Prometheus Operator objects, as `auto` renders them
    where monitoring.coreos.com/v1 is served; manifests/install has none of them."""
    built = objects(cluster.kubectl("kustomize", str(REPO / "manifests" / "monitoring")).stdout)
    chart = objects(
        helm(
            "template", "tokenfleet", str(CHART), "-n", "tokenfleet-system",
            "--api-versions", "monitoring.coreos.com/v1",
        ).stdout
    )  # fmt: skip
    monitoring = [
        d
        for d in chart
        if d["kind"] in PROMETHEUS_OPERATOR_KINDS
        or "grafana_dashboard" in d["metadata"].get("labels", {})
    ]
    assert {d["kind"] for d in monitoring} == {*PROMETHEUS_OPERATOR_KINDS, "ConfigMap"}
    assert sorted(built, key=str) == sorted(monitoring, key=str)
    install = objects(cluster.kubectl("kustomize", str(REPO / "manifests" / "install")).stdout)
    assert not ids(install) & ids(monitoring)


def stand_in_crd(kind: str) -> dict[str, Any]:
    """A CRD serving one Prometheus Operator kind under its real group and version, with no
    schema: enough for discovery (what Helm's Capabilities read) and to store objects."""
    plural = f"{kind.lower()}s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def served_kinds(cluster: Cluster) -> set[str]:
    done = cluster.kubectl(
        "api-resources", "--api-group=monitoring.coreos.com", "-o", "name", check=False
    )
    return {line.split(".", 1)[0] for line in done.stdout.split()}


@pytest.fixture
def prometheus_operator_api(cluster: Cluster) -> Iterator[None]:
    """The cluster serves monitoring.coreos.com/v1 for one test; gone again afterwards, so that
    every other test's `auto` still finds no Prometheus Operator."""
    cluster.apply(*(stand_in_crd(kind) for kind in PROMETHEUS_OPERATOR_KINDS))
    wanted = {f"{kind.lower()}s" for kind in PROMETHEUS_OPERATOR_KINDS}
    try:
        wait_for("the stand-in CRDs to be served", lambda: served_kinds(cluster) >= wanted)
        yield
    finally:
        for kind in PROMETHEUS_OPERATOR_KINDS:
            cluster.kubectl(
                "delete", "crd", f"{kind.lower()}s.monitoring.coreos.com", "--wait=true",
                check=False,
            )  # fmt: skip
        wait_for("the stand-in CRDs to go", lambda: not served_kinds(cluster) or None)


def test_auto_installs_the_podmonitors_where_the_prometheus_operator_runs(
    cluster: Cluster, helm: Any, ns: str, prometheus_operator_api: None
) -> None:
    """The documented `helm install`, on a cluster serving monitoring.coreos.com/v1: Helm's
    discovery finds it, the PodMonitors and the PrometheusRule are created with
    monitoring.labels, the NOTES name them, and the uninstall removes them."""
    release = f"tf-{uuid.uuid4().hex[:6]}"
    install = helm(
        "install", release, str(CHART), "-n", ns, "--wait=false",
        "--set", "monitoring.labels.release=kps",
    )  # fmt: skip
    monitors = cluster.get("podmonitors.monitoring.coreos.com", "-n", ns)["items"]
    assert {m["metadata"]["name"] for m in monitors} == MONITORS
    assert {m["metadata"]["labels"]["release"] for m in monitors} == {"kps"}
    (rule,) = cluster.get("prometheusrules.monitoring.coreos.com", "-n", ns)["items"]
    assert rule["metadata"]["name"] == "tokenfleet"
    for name in sorted(MONITORS):
        assert f"PodMonitor {name}" in install.stdout, install.stdout
    assert "this cluster serves monitoring.coreos.com/v1" in install.stdout, install.stdout
    assert "WARNING: no PodMonitors" not in install.stdout, install.stdout
    helm("uninstall", release, "-n", ns, "--wait")
    assert cluster.get("podmonitors.monitoring.coreos.com", "-n", ns)["items"] == []


def secret_value(cluster: Cluster, ns: str, name: str, key: str) -> str:
    data = cluster.get("secret", name, "-n", ns)["data"]
    return base64.b64decode(data[key]).decode()


def labelled(cluster: Cluster, ns: str, release: str) -> set[str]:
    selector = f"app.kubernetes.io/instance={release}"
    found = cluster.kubectl(
        "get", NAMESPACED, "-n", ns, "-l", selector, "-o", "name"
    ).stdout.split()
    found += cluster.kubectl("get", CLUSTER_SCOPED, "-l", selector, "-o", "name").stdout.split()
    return set(found)


def test_install_upgrade_uninstall_leaves_nothing_and_keeps_secrets(
    cluster: Cluster, helm: Any, ns: str
) -> None:
    release = f"tf-{uuid.uuid4().hex[:6]}"
    full = f"{release}-tokenfleet"
    install = helm("install", release, str(CHART), "-n", ns, "--wait=false")
    # No Prometheus Operator here: auto skipped the PodMonitors, and the NOTES say so.
    assert "WARNING: no PodMonitors were created" in install.stdout, install.stdout
    installed = labelled(cluster, ns, release)
    for name in (
        f"deployment.apps/{full}-operator",
        f"deployment.apps/{full}-gateway",
        f"deployment.apps/{full}-redis",
        f"secret/{full}-gateway-salt",
        f"secret/{full}-redis",
        f"networkpolicy.networking.k8s.io/{full}-redis",
        f"poddisruptionbudget.policy/{full}-operator",
        f"role.rbac.authorization.k8s.io/{full}-operator-leader-election",
        f"clusterrole.rbac.authorization.k8s.io/{full}-operator",
        f"clusterrolebinding.rbac.authorization.k8s.io/{full}-gateway",
    ):
        assert name in installed, (name, installed)
    salt = secret_value(cluster, ns, f"{full}-gateway-salt", "salt")
    password = secret_value(cluster, ns, f"{full}-redis", "password")
    assert len(salt) == 48 and len(password) == 32 and password.isalnum()

    helm("upgrade", release, str(CHART), "-n", ns, "--set", "gateway.replicas=3", "--wait=false")
    assert secret_value(cluster, ns, f"{full}-gateway-salt", "salt") == salt
    assert secret_value(cluster, ns, f"{full}-redis", "password") == password
    gateway = cluster.get("deployment", f"{full}-gateway", "-n", ns)
    assert gateway["spec"]["replicas"] == 3
    env = {
        e["name"]: e.get("value")
        for e in gateway["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["TOKENFLEET_GATEWAY_REPLICAS"] == "3"  # only until the fleet registry answers
    assert env["TOKENFLEET_GATEWAY_FLEET"] == f"{ns}/{full}"  # one registry per Deployment

    helm("uninstall", release, "-n", ns, "--wait")
    # Pods and ReplicaSets go by garbage collection, a moment after their Deployments.
    wait_for(
        "every object of the release to be gone",
        lambda: not labelled(cluster, ns, release) or None,
        timeout=60,
    )
    history = cluster.kubectl(
        "get", "secrets", "-n", ns, "-l", f"owner=helm,name={release}", "-o", "name"
    ).stdout
    assert history.strip() == ""
    # The CRDs stay (Helm never deletes them: that would delete every user's resources).
    assert cluster.get("crd", "inferencepools.tokenfleet.io")["metadata"]["name"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@pytest.fixture
def chart_redis(helm: Any) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """The chart's Redis container command run as a real redis-server on a free loopback port."""
    port, password = free_port(), uuid.uuid4().hex
    docs = objects(
        helm(
            "template",
            "tokenfleet",
            str(CHART),
            "-n",
            "tf",
            "--set",
            f"redis.port={port}",
            "--set",
            "redis.extraArgs={--bind,127.0.0.1}",
        ).stdout
    )
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    container = deployments["tokenfleet-redis"]["spec"]["template"]["spec"]["containers"][0]
    argv = [
        a.replace("$(REDIS_PASSWORD)", password) for a in container["command"] + container["args"]
    ]
    process = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd="/tmp",
        env={"PATH": os.environ["PATH"]},
    )
    try:
        wait_for("redis to listen", lambda: listening(port))
        yield port, password, deployments["tokenfleet-gateway"]
    finally:
        process.terminate()
        process.wait(timeout=10)


async def set_and_get(url: str) -> Any:
    client = RespClient(url, timeout=5)
    try:
        await client.call("SET", "quota", 1)
        return await client.call("GET", "quota")
    finally:
        await client.close()


def test_the_charts_redis_refuses_a_client_without_the_password(
    chart_redis: tuple[int, str, dict[str, Any]],
) -> None:
    """The rendered redis-server flags, run for real, and the gateway's own Redis client with
    the URL the chart gives it (expanded as the kubelet expands $(VAR) in env values)."""
    port, password, gateway = chart_redis
    with pytest.raises(RespError, match="NOAUTH"):
        asyncio.run(set_and_get(f"redis://127.0.0.1:{port}/0"))
    with pytest.raises(RespError, match=r"WRONGPASS|invalid"):
        asyncio.run(set_and_get(f"redis://:wrong@127.0.0.1:{port}/0"))
    env = {e["name"]: e for e in gateway["spec"]["template"]["spec"]["containers"][0]["env"]}
    url = env["TOKENFLEET_REDIS_URL"]["value"].replace("$(TOKENFLEET_REDIS_PASSWORD)", password)
    assert url.startswith(f"redis://:{password}@tokenfleet-redis.tf.svc:{port}/")
    url = url.replace("tokenfleet-redis.tf.svc", "127.0.0.1")
    assert asyncio.run(set_and_get(url)) == b"1"

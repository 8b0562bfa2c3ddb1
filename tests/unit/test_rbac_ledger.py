"""Every verb each ServiceAccount holds in the rendered chart (manifests/, which `make manifests`
renders from charts/tokenfleet and a test keeps current), with the reason it is needed (issue
#35 finding 8).

A grant that appears without a line here fails the test, and so does a line whose grant is
gone: a new verb is a decision a reviewer sees, never a side effect of a template edit. Scope is
"cluster" (a ClusterRole bound cluster-wide) or the namespace of a Role's binding; names are the
resourceNames a rule is limited to ("*": any).

Two renders: the default (``watchNamespaces: []``, every namespace: ClusterRoles, because the
gateway watches tenants' key Secrets and classifier ConfigMaps by label in every namespace and
RBAC cannot grant by label), and ``watchNamespaces`` set, rendered here by helm (the one
tools/build.sh builds; the test fails, never skips, without it): then every grant is a Role in
each watched namespace, and the only cluster-wide grant left is the operator's list/watch on
nodes (cluster-scoped) — no Secret or ConfigMap grant is cluster-wide (docs/security.md).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"

Grant = tuple[str, str, str, str, str, str]  # account, scope, group, resource, verb, names

OPERATOR, GATEWAY = "tokenfleet-operator", "tokenfleet-gateway"
OWN = ["inferencepools", "modeldeployments", "modeladapters", "modelroutes", "tenants"]

LEDGER: dict[Grant, str] = {
    **{
        (OPERATOR, "cluster", "tokenfleet.io", r, v, "*"): f"indexes its {r} ({v})"
        for r in OWN
        for v in ("get", "list", "watch")
    },
    **{
        (OPERATOR, "cluster", "tokenfleet.io", f"{r}/status", "patch", "*"): "writes their status"
        for r in OWN
    },
    (OPERATOR, "cluster", "apps", "deployments", "list", "*"): "indexes worker Deployments",
    (OPERATOR, "cluster", "apps", "deployments", "watch", "*"): "their readiness prompts a pass",
    (OPERATOR, "cluster", "apps", "deployments", "create", "*"): "server-side applies workers",
    (OPERATOR, "cluster", "apps", "deployments", "patch", "*"): "applies, scales, restarts workers",
    (OPERATOR, "cluster", "apps", "deployments", "delete", "*"): "removes an unwanted revision",
    (OPERATOR, "cluster", "policy", "poddisruptionbudgets", "create", "*"): "a PDB per pool",
    (OPERATOR, "cluster", "policy", "poddisruptionbudgets", "patch", "*"): "a PDB per pool",
    (OPERATOR, "cluster", "", "services", "create", "*"): "a headless Service per pool",
    (OPERATOR, "cluster", "", "services", "patch", "*"): "a headless Service per pool",
    (
        OPERATOR,
        "cluster",
        "networking.k8s.io",
        "networkpolicies",
        "create",
        "*",
    ): "worker isolation",
    (OPERATOR, "cluster", "networking.k8s.io", "networkpolicies", "patch", "*"): "worker isolation",
    (OPERATOR, "cluster", "", "secrets", "create", "*"): "the engine key Secret per pool",
    (OPERATOR, "cluster", "", "secrets", "patch", "*"): "the engine key Secret per pool",
    (OPERATOR, "cluster", "", "secrets", "list", "*"): "trust Secrets by name, key-Secret metadata",
    (OPERATOR, "cluster", "", "pods", "list", "*"): "counts ready workers",
    (OPERATOR, "cluster", "", "pods", "watch", "*"): "worker readiness prompts a pass",
    (OPERATOR, "cluster", "", "pods", "patch", "*"): "only the pod-deletion-cost annotation",
    (OPERATOR, "cluster", "", "nodes", "list", "*"): "free GPUs per zone",
    (OPERATOR, "cluster", "", "nodes", "watch", "*"): "node loss prompts a pass",
    (OPERATOR, "cluster", "", "configmaps", "get", "*"): "golden sets and route classifiers",
    (OPERATOR, "cluster", "", "events", "create", "*"): "Events on its resources",
    (OPERATOR, "cluster", "events.k8s.io", "events", "create", "*"): "Events on its resources",
    (OPERATOR, "tokenfleet-system", "coordination.k8s.io", "leases", "create", "*"): "leader Lease",
    **{
        (
            OPERATOR,
            "tokenfleet-system",
            "coordination.k8s.io",
            "leases",
            v,
            "tokenfleet-operator",
        ): ("holds and renews its one Lease")
        for v in ("get", "update")
    },
    **{
        (GATEWAY, "cluster", "tokenfleet.io", r, v, "*"): f"routes by {r} ({v})"
        for r in OWN
        for v in ("list", "watch")
    },
    (GATEWAY, "cluster", "", "pods", "list", "*"): "worker addresses and readiness",
    (GATEWAY, "cluster", "", "pods", "watch", "*"): "worker addresses and readiness",
    (GATEWAY, "cluster", "", "secrets", "list", "*"): "tenants' key hashes (label-selected)",
    (GATEWAY, "cluster", "", "secrets", "watch", "*"): "revoked keys stop at once (label-selected)",
    (GATEWAY, "cluster", "", "configmaps", "list", "*"): "route classifiers (label-selected)",
    (GATEWAY, "cluster", "", "configmaps", "watch", "*"): "route classifiers (label-selected)",
}


def documents() -> Iterator[dict[str, Any]]:
    for path in sorted(MANIFESTS.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind"):
                yield doc


def granted(rendered: Iterable[dict[str, Any]] | None = None) -> set[Grant]:
    """Every (account, scope, group, resource, verb, names) the documents bind: manifests/
    unless ``rendered`` is given."""
    docs = list(documents() if rendered is None else rendered)
    roles = {
        (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
        for d in docs
        if d["kind"] in ("Role", "ClusterRole")
    }
    out: set[Grant] = set()
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        ref = binding["roleRef"]
        namespaced = binding["kind"] == "RoleBinding"
        scope = binding["metadata"]["namespace"] if namespaced else "cluster"
        role = roles[(ref["kind"], scope if ref["kind"] == "Role" else "", ref["name"])]
        for subject in binding["subjects"]:
            for rule in role.get("rules", []):
                names = rule.get("resourceNames") or ["*"]
                out |= {
                    (subject["name"], scope, group, resource, verb, name)
                    for group in rule["apiGroups"]
                    for resource in rule["resources"]
                    for verb in rule["verbs"]
                    for name in names
                }
    return out


def test_every_granted_verb_has_a_reason() -> None:
    unexplained = sorted(granted() - set(LEDGER))
    assert not unexplained, f"grants without a reason in LEDGER: {unexplained}"


def test_every_reason_still_has_its_grant() -> None:
    stale = sorted(set(LEDGER) - granted())
    assert not stale, f"LEDGER lines whose grant is gone: {stale}"


@pytest.mark.parametrize("verb", ["*", "escalate", "bind", "impersonate", "deletecollection"])
def test_no_account_holds_a_wildcard_or_escalating_verb(verb: str) -> None:
    assert not [g for g in granted() if g[4] == verb or "*" in (g[2], g[3])]


def test_no_account_reads_secret_data_by_get_or_watch_except_the_gateway_label_watch() -> None:
    reads = {(g[0], g[4]) for g in granted() if g[3] == "secrets" and g[4] in ("get", "watch")}
    assert reads == {(GATEWAY, "watch")}


# --- watchNamespaces: Roles in the watched namespaces, nothing on Secrets cluster-wide -------

WATCHED = ("team-a", "team-b")
RELEASE_NS = "tokenfleet-system"
#: Cluster-scoped, so cluster-wide whatever is watched.
CLUSTER_SCOPED = {"nodes"}


def namespaced_ledger() -> dict[Grant, str]:
    """LEDGER as it reads with ``watchNamespaces`` set: each cluster-wide grant of a
    namespaced resource becomes one per watched namespace, for the same reason; plus the
    operator's list of Secrets in the release namespace (remotes' key Secrets by name) when
    that namespace is not watched."""
    out: dict[Grant, str] = {}
    for (account, scope, group, resource, verb, names), reason in LEDGER.items():
        if scope != "cluster" or resource in CLUSTER_SCOPED:
            out[(account, scope, group, resource, verb, names)] = reason
            continue
        for ns in WATCHED:
            out[(account, ns, group, resource, verb, names)] = reason
    remote = (OPERATOR, RELEASE_NS, "", "secrets", "list", "*")
    out[remote] = "remotes' key Secrets by name (RemotesReady), the release namespace only"
    return out


def render_watching(*namespaces: str, home: Path) -> list[dict[str, Any]]:
    from support.cluster import BIN_DIR

    binary = BIN_DIR / "helm"
    assert binary.exists(), f"{binary} is missing: run tools/build.sh (make test does)"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "KUBECONFIG": str(home / "no-cluster"),  # nothing here may reach a cluster
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    argv = [str(binary), "template", "tokenfleet", str(REPO / "charts" / "tokenfleet")]
    argv += ["-n", RELEASE_NS, "--set", f"watchNamespaces={{{','.join(namespaces)}}}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, env=env)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if isinstance(d, dict) and d.get("kind")]


def test_watched_namespaces_leave_no_cluster_wide_secret_or_configmap_grant(
    tmp_path: Path,
) -> None:
    grants = granted(render_watching(*WATCHED, home=tmp_path))
    cluster_wide = sorted(g for g in grants if g[1] == "cluster")
    assert {g[3] for g in cluster_wide} == CLUSTER_SCOPED, cluster_wide
    assert not [g for g in cluster_wide if g[3] in ("secrets", "configmaps")]
    expected = namespaced_ledger()
    assert sorted(grants - set(expected)) == [], "grants without a reason"
    assert sorted(set(expected) - grants) == [], "reasons whose grant is gone"


def test_watched_namespaces_narrow_both_watches(tmp_path: Path) -> None:
    """The accounts' Roles are only worth something if the processes stay inside them: both
    get one --namespace per watched namespace (tests/unit/gateway/test_discovery_namespaces.py
    and the operator's key-Secret list follow it)."""
    docs = render_watching(*WATCHED, home=tmp_path)
    for name in ("tokenfleet-gateway", "tokenfleet-operator"):
        deployment = next(
            d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == name
        )
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert [a for a in args if a.startswith("--namespace")] == [
            f"--namespace={ns}" for ns in WATCHED
        ], name


def test_the_release_namespace_watched_needs_no_extra_role(tmp_path: Path) -> None:
    grants = granted(render_watching(RELEASE_NS, home=tmp_path))
    assert (OPERATOR, RELEASE_NS, "", "secrets", "list", "*") in grants
    assert not [g for g in grants if g[1] == "cluster" and g[3] not in CLUSTER_SCOPED]

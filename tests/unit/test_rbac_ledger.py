"""Every verb each ServiceAccount holds in the rendered chart (manifests/, which `make manifests`
renders from charts/tokenfleet and a test keeps current), with the reason it is needed (issue
#35 finding 8).

A grant that appears without a line here fails the test, and so does a line whose grant is
gone: a new verb is a decision a reviewer sees, never a side effect of a template edit. Scope is
"cluster" (a ClusterRole bound cluster-wide) or the namespace of a Role's binding; names are the
resourceNames a rule is limited to ("*": any).

Known breadth, and why it stays for now (docs/security.md): the gateway's list/watch on
Secrets and ConfigMaps is cluster-wide because it watches tenants' key Secrets and classifier
ConfigMaps by label in every namespace (RBAC cannot grant by label); the operator's list on
Secrets reads trust Secrets by name and key Secrets' metadata by label; its create/patch on
Secrets writes the engine key each pool's workers serve behind.
"""

from __future__ import annotations

from collections.abc import Iterator
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


def granted() -> set[Grant]:
    docs = list(documents())
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

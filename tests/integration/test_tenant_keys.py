"""Tenant status from real key Secrets: keys written with plain ``kubectl create secret`` (as
GitOps or sealed-secrets would) count once the Secret carries the key label, revoking one is
seen, and the operator's account may list Secrets but not get one."""

from __future__ import annotations

from typing import Any

from support.cluster import Cluster, wait_for
from support.objects import manifest
from support.operator import SA, SA_NAMESPACE
from tokenfleet.api import labels


def _keys(cluster: Cluster, ns: str) -> Any:
    return (cluster.get("tftenant", "team", "-n", ns).get("status") or {}).get("keyCount")


def test_keys_created_with_plain_kubectl_count(cluster: Cluster, ns: str, operator: Any) -> None:
    spec = {"apiKeySecretRef": {"name": "team-keys"}, "allowedModels": ["m"]}
    cluster.apply(manifest("Tenant", "team", ns, spec))
    wait_for("a Tenant without keys reports 0", lambda: _keys(cluster, ns) == 0, timeout=60)
    cluster.kubectl(
        "create",
        "secret",
        "generic",
        "team-keys",
        "-n",
        ns,
        "--from-literal=key-a=sha256:" + "a" * 64,
        "--from-literal=key-b=sha256:" + "b" * 64,
    )
    cluster.kubectl("label", "secret", "team-keys", "-n", ns, f"{labels.API_KEY_SECRET}=true")
    wait_for("both kubectl-made keys count", lambda: _keys(cluster, ns) == 2, timeout=60)
    ready = next(
        c
        for c in cluster.get("tftenant", "team", "-n", ns)["status"]["conditions"]
        if c["type"] == "Ready"
    )
    assert (ready["status"], ready["reason"]) == ("True", "KeysPresent")
    cluster.kubectl(
        "patch",
        "secret",
        "team-keys",
        "-n",
        ns,
        "--type=json",
        '-p=[{"op": "remove", "path": "/data/key-a"}]',
    )
    wait_for("a revoked key stops counting", lambda: _keys(cluster, ns) == 1, timeout=60)


def test_the_operator_may_list_secrets_but_not_read_one(cluster: Cluster, operator: Any) -> None:
    who = ["--as", f"system:serviceaccount:{SA_NAMESPACE}:{SA}", "-A"]
    for verb, allowed in (("list", "yes"), ("get", "no"), ("watch", "no")):
        answer = cluster.kubectl("auth", "can-i", verb, "secrets", *who, check=False)
        assert answer.stdout.strip() == allowed, (verb, answer.stdout, answer.stderr)

"""A refused revision verifies again when its trust Secret is fixed, against the real operator
(its own least-privilege account) and the node agent verifying signed artifacts: a deployment
whose trust Secret holds a key that did not sign the artifact is Blocked with UntrustedSigner
and a message saying to update the Secret; once the Secret holds the signer's key, its workers
are restarted, verify and serve — nobody deletes anything. The same for a canary beside a
serving stable revision: blocked, then verified and given its first step's traffic."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

from support import artifact
from support.cluster import Cluster, wait_for
from support.objects import manifest
from tokenfleet.api import labels
from tokenfleet.signing import keys

NAME, POOL = "reverify", "reverify-pool"


def status(cluster: Cluster, ns: str) -> dict[str, Any]:
    return dict(cluster.get("tfmodel", NAME, "-n", ns).get("status") or {})


def condition(st: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions", []) if c["type"] == kind), {})


def workers(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get("pods", "-n", ns, "-l", f"{labels.POOL}={POOL}")[
        "items"
    ]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def events(cluster: Cluster, ns: str) -> list[str]:
    items = cluster.get("events", "-n", ns)["items"]
    return [e["reason"] for e in items if e["involvedObject"]["name"] == NAME]


def blocked(cluster: Cluster, ns: str) -> dict[str, Any] | None:
    st = status(cluster, ns)
    return st if (st.get("rollout") or {}).get("phase") == "Blocked" else None


def serving(cluster: Cluster, ns: str) -> dict[str, Any] | None:
    st = status(cluster, ns)
    revisions = st.get("revisions") or [{}]
    done = (
        (st.get("rollout") or {}).get("phase") == "Promoted"
        and condition(st, "Verified").get("status") == "True"
        and condition(st, "Available").get("status") == "True"
        and revisions[0].get("readyReplicas") == 3
    )
    return st if done else None


POOL_SPEC = {
    "accelerator": {"product": "NVIDIA-H100-80GB-HBM3"},
    "zones": {"names": ["zone-a", "zone-b", "zone-c"]},
    "warm": {"perZone": 1},
    "replicas": {"min": 3, "max": 3},
}


def model(ns: str, *, secret: str = artifact.SECRET, **spec: Any) -> dict[str, Any]:
    served = {"name": f"{NAME}-{ns[-5:]}"}
    body = {"model": served, "pools": [POOL], "artifact": artifact.spec(secret=secret), **spec}
    return manifest("ModelDeployment", NAME, ns, body)


def foreign_key(tmp_path: Path) -> str:
    """A public key that did not sign the artifact."""
    return keys.generate(tmp_path / "foreign")[1].read_text()


def test_a_blocked_deployment_verifies_and_serves_once_its_trust_secret_is_fixed(
    cluster: Cluster, ns: str, operator: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    foreign = foreign_key(tmp_path)
    wrong = artifact.trust_secret(ns, public_key=foreign)
    for doc in (wrong, manifest("InferencePool", POOL, ns, POOL_SPEC), model(ns)):
        cluster.apply(doc)

    st = wait_for("the deployment blocked", lambda: blocked(cluster, ns), timeout=180)
    verified = condition(st, "Verified")
    assert (verified["status"], verified["reason"]) == ("False", "UntrustedSigner"), verified
    fix = (
        f"signature not by a trusted key: the public key in Secret {ns}/{artifact.SECRET} does "
        "not match the signer; update the Secret (the operator re-verifies on change)"
    )
    assert verified["message"].endswith(fix), verified
    assert st["rollout"]["message"].endswith(fix), st["rollout"]
    assert st["revisions"][0]["trustFingerprint"] == fingerprint(foreign.encode())
    refused = wait_for("3 refused workers", lambda: (w := workers(cluster, ns))[2:] and w, 60)
    old = {p["metadata"]["uid"] for p in refused}
    uid = cluster.get("tfmodel", NAME, "-n", ns)["metadata"]["uid"]

    cluster.apply(artifact.trust_secret(ns))  # the signer's key, under the same name
    good = fingerprint(artifact.PUBLIC_KEY.encode())
    wait_for(
        "the operator to take the fix (within a few passes)",
        lambda: status(cluster, ns)["revisions"][0]["trustFingerprint"] == good or None,
        timeout=30,
    )
    done = wait_for("the fixed deployment serving", lambda: serving(cluster, ns), timeout=180)

    assert cluster.get("tfmodel", NAME, "-n", ns)["metadata"]["uid"] == uid  # never deleted
    assert done["revisions"][0]["verified"] is True
    assert done["revisions"][0]["signer"] == keys.signer_name(artifact.PUBLIC_KEY.encode())

    def replaced() -> list[dict[str, Any]] | None:
        now = workers(cluster, ns)
        fresh = len(now) == 3 and not old & {p["metadata"]["uid"] for p in now}
        return now if fresh else None

    now = wait_for("the refused workers replaced", replaced, timeout=60)
    assert {
        (p["metadata"].get("annotations") or {}).get(labels.TRUST_FINGERPRINT) for p in now
    } == {good}
    assert {"VerificationFailed", "TrustChanged", "Promoted"} <= set(events(cluster, ns))


def test_a_blocked_canary_takes_its_step_once_its_trust_secret_is_fixed(
    cluster: Cluster, ns: str, operator: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    canary_key = "canary-signing-key"
    for doc in (
        artifact.trust_secret(ns),
        artifact.trust_secret(ns, name=canary_key, public_key=foreign_key(tmp_path)),
        manifest("InferencePool", POOL, ns, POOL_SPEC),
        model(ns),
    ):
        cluster.apply(doc)
    first = wait_for("the first revision serving", lambda: serving(cluster, ns), timeout=180)
    stable = first["stableRevision"]

    # A new revision whose trust names the other Secret, which holds a foreign key.
    steps = [{"weight": 34, "holdSeconds": 3}]
    cluster.apply(model(ns, secret=canary_key, rollout={"steps": steps}))
    st = wait_for("the canary blocked", lambda: blocked(cluster, ns), timeout=120)
    assert st["stableRevision"] == stable and st["canaryRevision"] != stable
    verified = condition(st, "Verified")
    assert verified["reason"] == "UntrustedSigner", verified
    assert f"the public key in Secret {ns}/{canary_key} does not match" in verified["message"]
    assert {r["name"]: r["weight"] for r in st["revisions"]} == {
        stable: 100,
        st["canaryRevision"]: 0,
    }

    cluster.apply(artifact.trust_secret(ns, name=canary_key))  # now the signer's key

    def stepping() -> dict[str, Any] | None:
        now = status(cluster, ns)
        live = (now.get("rollout") or {}).get("phase") == "Progressing"
        return now if live and condition(now, "Verified").get("status") == "True" else None

    moving = wait_for("the canary verified and at its first step", stepping, timeout=120)
    weights = {r["name"]: r["weight"] for r in moving["revisions"]}
    assert weights == {stable: 66, st["canaryRevision"]: 34}, moving["revisions"]
    assert "TrustChanged" in events(cluster, ns)


def fingerprint(public_key: bytes) -> str:
    return "sha256:" + hashlib.sha256(public_key).hexdigest()

"""The local stack verifies artifacts like the worker image does: every worker pod that declares
an artifact (no opt-in needed) gets its simulator only when its artifact verifies against the
public key in its trust Secret; a tampered file, a foreign key or a missing directory leaves the
pod NotReady with no engine. The verdict, pass or refusal, is where a kubelet keeps the verify
init container's: its termination message in the pod's status, the record the operator reads
(the tokenfleet.io/verdict annotation repeats it for kubectl users)."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.cluster import Cluster, wait_for
from tokenfleet.api import labels
from tokenfleet.operator.plan import observed
from tokenfleet.signing import keys, verdict, verify
from tokenfleet.signing.verdict import Reason, Verdict


def signed_model(root: Path) -> tuple[Path, str, Path]:
    """A small signed model directory; returns (directory, pinned digest, public key)."""
    private, public = keys.generate(root / "keys")
    model = root / "tiny-model"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["TinyForCausalLM"]}')
    (model / "model.safetensors").write_bytes(b"\x01" * 2048)
    digest = verify.sign(model, private_key=private, signature=model / "model.sig")
    return model, digest, public


def deployment(
    name: str, *, model: Path, digest: str, secret: str, opt_in: bool = True
) -> dict[str, Any]:
    served = f"sim-{uuid.uuid4().hex[:6]}"
    pod_labels = {"app": name, labels.ROLE: labels.ROLE_WORKER}
    image = "ghcr.io/tokenfleet/worker:vllm-v0.11.0"
    env = [
        {"name": "TOKENFLEET_ARTIFACT_URI", "value": model.as_uri()},
        {"name": "TOKENFLEET_ARTIFACT_DIGEST", "value": digest},
        {"name": "TOKENFLEET_TRUST_PUBLIC_KEY", "value": "/etc/tokenfleet/trust/public.pem"},
    ]
    mounts = [{"name": "trust", "mountPath": "/etc/tokenfleet/trust"}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    "annotations": {labels.SIM_VERIFY_ARTIFACT: "true"} if opt_in else {},
                },
                "spec": {
                    # as the operator renders a worker (plan.verify_step)
                    "initContainers": [
                        {
                            "name": "verify",
                            "image": image,
                            "args": ["verify"],
                            "env": env,
                            "volumeMounts": mounts,
                        }
                    ],
                    "containers": [
                        {
                            "name": "vllm",
                            "image": image,
                            "args": ["/models/artifact", "--served-model-name", served],
                            "ports": [{"name": "http", "containerPort": 8000}],
                            "resources": {"limits": {labels.GPU_RESOURCE: "1"}},
                            "env": env,
                            "volumeMounts": mounts,
                        }
                    ],
                    "volumes": [{"name": "trust", "secret": {"secretName": secret}}],
                },
            },
        },
    }


def pod_verdict(cluster: Cluster, ns: str, app: str) -> tuple[dict[str, Any], Verdict] | None:
    for pod in cluster.get("pods", "-n", ns, "-l", f"app={app}")["items"]:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        text = observed.worker_pod(pod).verdict  # as the operator reads it: the status
        parsed = verdict.parse(text) if text else None
        if parsed is not None:
            [verify_step] = pod["status"]["initContainerStatuses"]
            exit_code = verify_step["state"]["terminated"]["exitCode"]
            assert (exit_code == 0) is parsed.verified, verify_step
            assert (pod["metadata"].get("annotations") or {}).get(labels.VERDICT) == text
            return pod, parsed
    return None


def is_ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", [])
    )


def apply(cluster: Cluster, ns: str, *docs: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(docs))


def secret(name: str, public: Path) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "stringData": {"public.pem": public.read_text()},
    }


def test_verified_pod_serves_and_a_tampered_one_never_starts(
    cluster: Cluster, ns: str, tmp_path: Path
) -> None:
    model, digest, public = signed_model(tmp_path)
    apply(
        cluster,
        ns,
        secret("signing", public),
        deployment("tiny", model=model, digest=digest, secret="signing"),
    )

    def verified_and_ready() -> dict[str, Any] | None:
        found = pod_verdict(cluster, ns, "tiny")
        if found is None:
            return None
        pod, seen = found
        assert seen.reason is Reason.VERIFIED, seen
        return pod if is_ready(pod) else None

    pod = wait_for("the verified pod to be Ready", verified_and_ready, timeout=120)
    assert pod["status"]["podIP"]

    (model / "model.safetensors").write_bytes(b"\x02" * 2048)
    cluster.kubectl("delete", "pod", "-n", ns, pod["metadata"]["name"], "--wait=false")

    def refused() -> tuple[dict[str, Any], Verdict] | None:
        found = pod_verdict(cluster, ns, "tiny")
        return found if found and found[1].reason is not Reason.VERIFIED else None

    new_pod, seen = wait_for("the tampered pod's verdict", refused, timeout=120)
    assert seen.reason is Reason.DIGEST_MISMATCH
    assert "model.safetensors" in seen.message
    assert new_pod["metadata"]["uid"] != pod["metadata"]["uid"]
    current = cluster.get("pod", "-n", ns, new_pod["metadata"]["name"])
    assert not is_ready(current)
    if current["status"].get("podIP"):  # no engine behind the refused pod's address
        with socket.socket() as probe:
            probe.settimeout(1)
            assert probe.connect_ex((current["status"]["podIP"], 8000)) != 0
    remove(cluster, ns, "tiny")


@pytest.mark.parametrize("secret_name", ["other-key"])
def test_foreign_key_is_an_untrusted_signer(
    cluster: Cluster, ns: str, tmp_path: Path, secret_name: str
) -> None:
    model, digest, _ = signed_model(tmp_path)
    _, other_public = keys.generate(tmp_path / "other")
    apply(
        cluster,
        ns,
        secret(secret_name, other_public),
        deployment("foreign", model=model, digest=digest, secret=secret_name),
    )
    pod, seen = wait_for("a verdict", lambda: pod_verdict(cluster, ns, "foreign"), timeout=120)
    assert seen.reason is Reason.UNTRUSTED_SIGNER
    assert not is_ready(pod)
    remove(cluster, ns, "foreign")


def test_a_declared_artifact_is_verified_without_opting_in(
    cluster: Cluster, ns: str, tmp_path: Path
) -> None:
    """No annotation, an artifact that does not exist: refused, never Ready, nothing listening."""
    _, digest, public = signed_model(tmp_path)
    apply(
        cluster,
        ns,
        secret("signing", public),
        deployment(
            "absent", model=tmp_path / "nowhere", digest=digest, secret="signing", opt_in=False
        ),
    )
    pod, seen = wait_for("a verdict", lambda: pod_verdict(cluster, ns, "absent"), timeout=120)
    assert seen.reason is Reason.ARTIFACT_UNREACHABLE, seen
    assert "nowhere" in seen.message, seen
    current = cluster.get("pod", "-n", ns, pod["metadata"]["name"])
    assert not is_ready(current)
    ready = next(c for c in current["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "ArtifactUnreachable", ready
    if current["status"].get("podIP"):
        with socket.socket() as probe:
            probe.settimeout(1)
            assert probe.connect_ex((current["status"]["podIP"], 8000)) != 0
    remove(cluster, ns, "absent")


def remove(cluster: Cluster, ns: str, app: str) -> None:
    """Leave no pods for the shared stack to tear down while the next test runs."""
    cluster.kubectl("delete", "deployment", app, "-n", ns)
    wait_for(
        f"{app}'s pods to be gone",
        lambda: not cluster.get("pods", "-n", ns, "-l", f"app={app}")["items"],
        timeout=120,
    )

"""examples/04-signed-artifact as its README tells it, against the real operator and node agent:
the pinned digest is what signing tiny-model/ prints; the ModelDeployment's worker pods verify
(through the trust Secret the operator mounts) and serve; after a file is changed, restarted
pods are refused with DigestMismatch and never get an engine."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from support.cluster import Cluster, wait_for
from tokenfleet.api import labels
from tokenfleet.signing import keys, verdict, verify
from tokenfleet.signing.verdict import Reason, Verdict

MODEL = "tiny-signed"


def example(repo: Path, name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(
        (repo / "examples" / "04-signed-artifact" / name).read_text()
    )
    return doc


def verdicts(cluster: Cluster, ns: str) -> list[tuple[dict[str, Any], Verdict]]:
    pods = cluster.get("pods", "-n", ns, "-l", f"{labels.MODEL}={MODEL}")["items"]
    out = []
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        text = (pod["metadata"].get("annotations") or {}).get(labels.VERDICT, "")
        parsed = verdict.parse(text)
        if parsed is not None:
            out.append((pod, parsed))
    return out


def ready(pod: dict[str, Any]) -> bool:
    conditions = pod["status"].get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def test_signed_example_serves_and_refuses_a_tampered_model(
    cluster: Cluster, ns: str, operator: Any, repo: Path, tmp_path: Path
) -> None:
    model_dir = tmp_path / "tiny-model"
    shutil.copytree(repo / "examples" / "04-signed-artifact" / "tiny-model", model_dir)
    private, public = keys.generate(tmp_path / "keys")
    digest = verify.sign(model_dir, private_key=private, signature=model_dir / "model.sig")
    deployment = example(repo, "modeldeployment.yaml")
    assert deployment["spec"]["artifact"]["digest"] == digest, "re-pin the example's digest"

    # The README copies the model to /tmp/tokenfleet-examples/; a test uses its own directory.
    deployment["spec"]["artifact"]["uri"] = model_dir.as_uri()
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": deployment["spec"]["artifact"]["trust"]["publicKey"]["name"]},
        "stringData": {"public.pem": public.read_text()},
    }
    docs = [secret, example(repo, "inferencepool.yaml"), deployment]
    cluster.kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(docs))

    def three_verified_and_ready() -> list[tuple[dict[str, Any], Verdict]] | None:
        seen = verdicts(cluster, ns)
        assert all(v.reason is Reason.VERIFIED for _, v in seen), seen
        return seen if len(seen) == 3 and all(ready(p) for p, _ in seen) else None

    serving = wait_for("3 verified, Ready pods", three_verified_and_ready, timeout=180)
    assert {v.signer for _, v in serving} == {keys.signer_name(public.read_bytes())}

    (model_dir / "config.json").write_text('{"architectures": ["SomethingElse"]}')
    cluster.kubectl("delete", "pods", "-n", ns, "-l", f"{labels.MODEL}={MODEL}", "--wait=false")
    old = {p["metadata"]["uid"] for p, _ in serving}

    def refused() -> list[tuple[dict[str, Any], Verdict]] | None:
        fresh = [(p, v) for p, v in verdicts(cluster, ns) if p["metadata"]["uid"] not in old]
        return fresh if len(fresh) == 3 else None

    for pod, seen in wait_for("3 refused pods", refused, timeout=180):
        assert seen.reason is Reason.DIGEST_MISMATCH, seen
        assert "config.json" in seen.message
        assert not ready(cluster.get("pod", "-n", ns, pod["metadata"]["name"]))

    # Leave no pods for the shared stack to tear down while the next test runs.
    cluster.kubectl("delete", "tfmodel", MODEL, "-n", ns)
    wait_for("the workers to be gone", lambda: not _pods(cluster, ns), timeout=120)


def _pods(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get("pods", "-n", ns, "-l", f"{labels.MODEL}={MODEL}")[
        "items"
    ]
    return items

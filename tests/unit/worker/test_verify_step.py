"""The verify step (issue #35: ``Verified`` from a verdict the operator reads, never from
readiness): the operator renders the init container ``verify``, the worker image runs it, the
kubelet keeps its termination message, and the operator reads that message back.

Matrix: the rendered pod run through the real entrypoint with a real signed model (pass, a
tampered file) × what the engine container does next (serves the recorded directory; refuses a
missing record, or a record for another digest) × what the operator reads from the resulting
container status. exec is a recorder, so no vLLM is needed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from support.objects import BASE
from tokenfleet.api import labels
from tokenfleet.api.deployment import ModelDeploymentSpec
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.operator.plan import attestation, desired, observed, verify_step
from tokenfleet.signing import keys, verdict, verify
from tokenfleet.worker import entrypoint


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str], dict[str, str]]] = []

    def __call__(self, program: str, argv: list[str], env: dict[str, str]) -> None:
        self.calls.append((program, argv, env))


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, str, Path]:
    """A signed model directory, its digest, and the public key."""
    private, public = keys.generate(tmp_path / "keys")
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["Tiny"]}')
    (model / "weights.bin").write_bytes(b"\x07" * 1024)
    return model, verify.sign(model, private_key=private, signature=model / "model.sig"), public


def _pod(model: Path, digest: str) -> dict[str, Any]:
    spec = {**BASE["ModelDeployment"]}
    spec["artifact"] = {
        "uri": model.as_uri(),
        "digest": digest,
        "trust": {"publicKey": {"name": "signing-key", "key": "public.pem"}},
    }
    manifest = desired.worker_deployment(
        namespace="demo",
        pool_name="chat",
        pool=InferencePoolSpec.model_validate(BASE["InferencePool"]),
        model=ModelDeploymentSpec.model_validate(spec),
        owner=desired.Owner(kind="ModelDeployment", name="m", uid="u"),
        zone="zone-a",
        replicas=1,
    )
    pod: dict[str, Any] = manifest["spec"]["template"]
    return pod


def _env(container: dict[str, Any], tmp_path: Path, public: Path) -> dict[str, str]:
    """The container's environment where the kubelet mounts things: the trust Secret's key,
    the termination log, the pod's /models volume."""
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    env["TOKENFLEET_TRUST_PUBLIC_KEY"] = str(public)
    env["TOKENFLEET_TERMINATION_LOG"] = str(tmp_path / f"{container['name']}.termination-log")
    env[verify_step.RECORD_ENV["name"]] = str(tmp_path / "models" / "verified.json")
    (tmp_path / "models").mkdir(exist_ok=True)
    return env


def _as_the_api_shows_it(pod: dict[str, Any], message: str, exit_code: int) -> dict[str, Any]:
    terminated = {"exitCode": exit_code, "message": message}
    return {
        "metadata": {"name": "w", "labels": pod["metadata"]["labels"]},
        "spec": pod["spec"],
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "initContainerStatuses": [{"name": "verify", "state": {"terminated": terminated}}],
        },
    }


def test_the_verify_step_records_a_pass_the_operator_reads(
    signed: tuple[Path, str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, digest, public = signed
    pod = _pod(model, digest)
    [init] = pod["spec"]["initContainers"]
    engine = pod["spec"]["containers"][0]
    assert (init["name"], init["image"], init["args"]) == ("verify", engine["image"], ["verify"])
    assert init["terminationMessagePolicy"] == "File"  # the verdict, never a log's tail
    assert "nvidia.com/gpu" not in str(init["resources"])  # the engine's GPUs are its own
    init_env = _env(init, tmp_path, public)
    assert entrypoint.main(init["args"], env=init_env) == 0
    message = Path(init_env["TOKENFLEET_TERMINATION_LOG"]).read_text()
    passed = verdict.parse(message)
    assert passed is not None and passed.verified and passed.digest == digest
    assert passed.signer.startswith("key:sha256:")
    # the engine container serves the directory the verify step verified
    exec_ = Recorder()
    engine_env = _env(engine, tmp_path, public)
    assert entrypoint.serve_verified(engine["args"], env=engine_env, exec_=exec_) == 0
    [(_, argv, _)] = exec_.calls
    assert argv[:3] == ["vllm", "serve", str(model)]
    # its log's first line is the verdict it serves under (what kubectl logs -c vllm shows)
    assert capsys.readouterr().out.splitlines()[-1] == message
    # and the operator reads the pass from the status the kubelet writes
    seen = observed.worker_pod(_as_the_api_shows_it(pod, message, 0))
    proof = attestation.attest(
        [seen],
        revision=pod["metadata"]["labels"][labels.REVISION],
        digest=digest,
        allowed_images=None,
    )
    assert proof.complete and proof.signer == passed.signer


def test_a_refusal_is_recorded_and_nothing_is_left_to_serve(
    signed: tuple[Path, str, Path], tmp_path: Path
) -> None:
    model, digest, public = signed
    (model / "weights.bin").write_bytes(b"\x00")
    pod = _pod(model, digest)
    [init] = pod["spec"]["initContainers"]
    env = _env(init, tmp_path, public)
    assert entrypoint.main(init["args"], env=env) == entrypoint.EXIT_UNVERIFIED
    refused = verdict.parse(Path(env["TOKENFLEET_TERMINATION_LOG"]).read_text())
    assert refused is not None and refused.reason is verdict.Reason.DIGEST_MISMATCH
    assert not Path(env[verify_step.RECORD_ENV["name"]]).exists()
    exec_ = Recorder()
    engine = pod["spec"]["containers"][0]
    engine_env = _env(engine, tmp_path, public)
    assert entrypoint.main(engine["args"], env=engine_env) == entrypoint.EXIT_UNVERIFIED
    assert entrypoint.serve_verified(engine["args"], env=engine_env, exec_=exec_) == 3
    assert exec_.calls == []


def test_the_engine_serves_only_a_record_for_its_own_digest(
    signed: tuple[Path, str, Path], tmp_path: Path
) -> None:
    model, digest, public = signed
    pod = _pod(model, digest)
    engine = pod["spec"]["containers"][0]
    env = _env(engine, tmp_path, public)
    record = Path(env[verify_step.RECORD_ENV["name"]])
    exec_ = Recorder()
    for spoiled in (
        verdict.Verdict(reason=verdict.Reason.VERIFIED, digest="sha256:" + "e" * 64),
        verdict.Verdict(reason=verdict.Reason.DIGEST_MISMATCH, digest=digest),
    ):
        record.write_text(json.dumps({"served": str(model), "verdict": spoiled.to_json()}))
        assert entrypoint.serve_verified(engine["args"], env=env, exec_=exec_) == 3
    record.write_text("{}")
    assert entrypoint.serve_verified(engine["args"], env=env, exec_=exec_) == 3
    assert exec_.calls == []


def test_the_verify_step_shares_the_engines_cpu_and_memory_never_its_gpus(
    signed: tuple[Path, str, Path],
) -> None:
    """A namespace's quota may demand requests of every container: the verify step carries the
    engine's CPU and memory (the pod's total is unchanged: init containers run alone)."""
    model, digest, _ = signed
    spec = {**BASE["ModelDeployment"]}
    spec["artifact"] = {"uri": model.as_uri(), "digest": digest, "trust": spec["artifact"]["trust"]}
    spec["engine"] = {"resources": {"cpu": "8", "memory": "64Gi"}}
    manifest = desired.worker_deployment(
        namespace="demo",
        pool_name="chat",
        pool=InferencePoolSpec.model_validate(BASE["InferencePool"]),
        model=ModelDeploymentSpec.model_validate(spec),
        owner=desired.Owner(kind="ModelDeployment", name="m", uid="u"),
        zone="zone-a",
        replicas=1,
    )
    pod = manifest["spec"]["template"]["spec"]
    [init] = pod["initContainers"]
    assert init["resources"] == {
        "requests": {"cpu": "8", "memory": "64Gi"},
        "limits": {"memory": "64Gi"},
    }
    assert labels.GPU_RESOURCE in pod["containers"][0]["resources"]["limits"]

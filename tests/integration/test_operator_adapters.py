"""ModelAdapters on the real control plane with the real operator: a signed adapter is verified
against its base deployment's adapter trust and shows Verified and Ready; a tampered one is
refused with the reason in status, a Warning event and its printer columns; an adapter whose
base is missing, or cannot serve adapters, says so; the base's workers carry the adapter-loader
sidecar with that trust."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support import artifact
from support.cluster import Cluster, wait_for
from support.objects import manifest
from tokenfleet.signing import keys, verify

ADAPTER_KEY_SECRET = "adapter-signing-key"


def signed_adapter(root: Path, name: str, private: Path) -> tuple[Path, str]:
    """A small LoRA adapter directory signed with ``private``; (directory, pinned digest)."""
    adapter = root / name
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"r": 8, "lora_alpha": 16, "peft_type": "LORA"}')
    (adapter / "adapter_model.safetensors").write_bytes(name.encode() * 512)
    return adapter, verify.sign(adapter, private_key=private, signature=adapter / "model.sig")


def base_objects(ns: str, public: Path, *, adapters: bool = True) -> list[dict[str, Any]]:
    lora = {"lora": {"maxLoras": 2, "maxCpuLoras": 4}}
    spec: dict[str, Any] = {
        "model": {"name": "base-chat"},
        "pools": ["lora"],
        "artifact": artifact.spec(),
        "engine": {"maxNumSeqs": 8, **lora},
    }
    if adapters:
        spec["adapters"] = {"trust": {"publicKey": {"name": ADAPTER_KEY_SECRET}}}
    return [
        artifact.trust_secret(ns),
        artifact.trust_secret(ns, name=ADAPTER_KEY_SECRET, public_key=public.read_text()),
        manifest(
            "InferencePool",
            "lora",
            ns,
            {
                "accelerator": {"product": "NVIDIA-H100-80GB-HBM3"},
                "zones": {"names": ["zone-a"]},
                "replicas": {"min": 1, "max": 2},
            },
        ),
        manifest("ModelDeployment", "base-chat", ns, spec),
    ]


def adapter(ns: str, name: str, directory: Path, digest: str, base: str = "base-chat") -> Any:
    return manifest(
        "ModelAdapter",
        name,
        ns,
        {
            "base": base,
            "servedName": name,
            "artifact": {"uri": directory.as_uri(), "digest": digest},
            "tenants": ["acme"],
        },
    )


def condition(cluster: Cluster, ns: str, name: str, kind: str) -> dict[str, Any] | None:
    status = cluster.get("modeladapter", name, "-n", ns).get("status") or {}
    return next((c for c in status.get("conditions", []) if c["type"] == kind), None)


def settled(cluster: Cluster, ns: str, name: str, reason: str) -> dict[str, Any] | None:
    ready = condition(cluster, ns, name, "Ready")
    return ready if ready and ready["reason"] == reason else None


def test_signed_adapter_is_verified_and_a_tampered_one_refused_with_its_reason(
    cluster: Cluster, ns: str, operator: Any, tmp_path: Path
) -> None:
    private, public = keys.generate(tmp_path / "keys")
    good, good_digest = signed_adapter(tmp_path, "acme-support", private)
    bad, bad_digest = signed_adapter(tmp_path, "acme-legal", private)
    (bad / "adapter_model.safetensors").write_bytes(b"swapped after signing")
    foreign_private, _ = keys.generate(tmp_path / "other-keys")
    foreign, foreign_digest = signed_adapter(tmp_path, "acme-foreign", foreign_private)
    cluster.apply(*base_objects(ns, public))
    cluster.apply(
        adapter(ns, "acme-support", good, good_digest),
        adapter(ns, "acme-legal", bad, bad_digest),
        adapter(ns, "acme-foreign", foreign, foreign_digest),
    )

    ready = wait_for(
        "the signed adapter Ready", lambda: settled(cluster, ns, "acme-support", "Verified")
    )
    assert ready["status"] == "True"
    status = cluster.get("modeladapter", "acme-support", "-n", ns)["status"]
    assert status["verified"] is True and status["digest"] == good_digest
    assert status["signer"].startswith("key:sha256:")
    assert condition(cluster, ns, "acme-support", "Verified")["status"] == "True"

    refused = wait_for(
        "the tampered adapter refused", lambda: settled(cluster, ns, "acme-legal", "DigestMismatch")
    )
    assert refused["status"] == "False" and "refused" in refused["message"]
    legal = cluster.get("modeladapter", "acme-legal", "-n", ns)["status"]
    assert legal["verified"] is False and legal["reason"] == "DigestMismatch"
    foreign_ready = wait_for(
        "the foreign-signed adapter refused",
        lambda: (
            (c := condition(cluster, ns, "acme-foreign", "Ready"))
            and c["reason"] not in ("Verifying",)
            and c
        ),
    )
    assert foreign_ready["status"] == "False"
    assert foreign_ready["reason"] in ("UntrustedSigner", "SignatureInvalid")

    warnings = wait_for(
        "a Warning event for the tampered adapter",
        lambda: [
            e
            for e in cluster.get("events", "-n", ns)["items"]
            if e["involvedObject"]["name"] == "acme-legal" and e["type"] == "Warning"
        ],
    )
    assert warnings[0]["reason"] == "DigestMismatch"

    table = cluster.kubectl("get", "tfadapter", "-n", ns).stdout.splitlines()
    assert table[0].split()[:6] == ["NAME", "NAME", "BASE", "VERIFIED", "REASON", "LOADED"]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert rows["acme-support"][2:5] == ["base-chat", "True", "Verified"]
    assert rows["acme-legal"][3:5] == ["False", "DigestMismatch"]

    # the base's workers carry the loader with the adapter trust (not the model's)
    sets = cluster.get("deployments", "-n", ns, "-l", "tokenfleet.io/pool=lora")["items"]
    assert sets
    for deployment in sets:
        pod = deployment["spec"]["template"]["spec"]
        loader = next(c for c in pod["containers"] if c["name"] == "adapter-loader")
        assert loader["ports"] == [{"name": "adapters", "containerPort": 8002, "protocol": "TCP"}]
        volume = next(v for v in pod["volumes"] if v["name"] == "adapter-trust")
        assert volume["secret"]["secretName"] == ADAPTER_KEY_SECRET


def test_an_adapter_without_a_usable_base_says_why(
    cluster: Cluster, ns: str, operator: Any, tmp_path: Path
) -> None:
    private, public = keys.generate(tmp_path / "keys")
    directory, digest = signed_adapter(tmp_path, "orphan", private)
    cluster.apply(*base_objects(ns, public, adapters=False))
    cluster.apply(
        adapter(ns, "orphan", directory, digest, base="missing"),
        adapter(ns, "no-runtime", directory, digest),
    )
    missing = wait_for("BaseNotFound", lambda: settled(cluster, ns, "orphan", "BaseNotFound"))
    assert "missing" in missing["message"]
    wait_for(
        "BaseServesNoAdapters", lambda: settled(cluster, ns, "no-runtime", "BaseServesNoAdapters")
    )
    # the base is given spec.adapters: the adapter becomes servable without being touched
    cluster.apply(*base_objects(ns, public))
    wait_for(
        "the adapter Ready once its base serves adapters",
        lambda: settled(cluster, ns, "no-runtime", "Verified"),
        timeout=90,
    )

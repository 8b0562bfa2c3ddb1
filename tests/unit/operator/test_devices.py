"""A ModelDeployment fitted to its pools' device: the default image follows the pool, and a
mismatch is held and explained.

Matrix: pools (GPU, CPU, none yet, both kinds) × engine.image (unset, the GPU or CPU default,
named for a device, unknown) → the fitted image, the revision (GPU names unchanged), and the
misfit; an image's device read from its name; the pool plan holding a misfit (nothing applied,
scaled or deleted); the ModelDeployment's Compatible condition and its Warning Event, once; a
worker's DeviceMismatch verdict reaching Verified with its fix; CPU nodes offering a CPU pool.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from tokenfleet.api import labels
from tokenfleet.api.deployment import CPU_IMAGE, GPU_IMAGE, ModelDeploymentSpec
from tokenfleet.api.pool import Device, InferencePoolSpec
from tokenfleet.operator.plan import devices, model_status, observed, pools
from tokenfleet.operator.policy import revisions
from tokenfleet.signing.verdict import Reason, Verdict

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
ARTIFACT = {
    "uri": "file:///m",
    "digest": "sha256:" + "a" * 64,
    "trust": {"publicKey": {"name": "k"}},
}
GPU = InferencePoolSpec.model_validate({"zones": {"names": ["zone-a"]}})
CPU = InferencePoolSpec.model_validate(
    {
        "accelerator": {"kind": "CPU", "cpu": "4", "memory": "16Gi"},
        "zones": {"names": ["zone-a"]},
    }
)
POOLS = {"GPU": GPU, "CPU": CPU}


def model(*pool_names: str, **engine: Any) -> ModelDeploymentSpec:
    return ModelDeploymentSpec.model_validate(
        {
            "model": {"name": "m"},
            "pools": list(pool_names) or ["gpu"],
            "artifact": ARTIFACT,
            "engine": engine,
        }
    )


def fit(spec: ModelDeploymentSpec, **kinds: Device) -> devices.Fit:
    return devices.fit(spec, pools={name: POOLS[kind] for name, kind in kinds.items()})


@pytest.mark.parametrize(
    ("kinds", "image", "fitted"),
    [
        pytest.param({"gpu": "GPU"}, None, GPU_IMAGE, id="gpu-pool-default"),
        pytest.param({"cpu": "CPU"}, None, CPU_IMAGE, id="cpu-pool-default"),
        pytest.param({}, None, GPU_IMAGE, id="no-pool-yet-is-gpu"),
        pytest.param({"gpu": "GPU"}, GPU_IMAGE, GPU_IMAGE, id="gpu-default-spelled"),
        pytest.param({"cpu": "CPU"}, "reg.example/llm:1", "reg.example/llm:1", id="unknown-kept"),
        pytest.param(
            {"a": "CPU", "b": "CPU"}, None, CPU_IMAGE, id="two-cpu-pools-share-the-default"
        ),
    ],
)
def test_the_default_image_follows_the_pools_device(
    kinds: dict[str, Device], image: str | None, fitted: str
) -> None:
    spec = model(*kinds, **({"image": image} if image else {}))
    result = fit(spec, **kinds)
    assert result.misfit is None
    assert result.spec.engine.image == fitted
    assert result.summary.startswith(f"runs on {result.device} nodes")


def test_gpu_revision_names_do_not_change_and_cpu_ones_differ() -> None:
    spec = model("gpu")
    on_gpu, on_cpu = fit(spec, gpu="GPU").spec, fit(model("cpu"), cpu="CPU").spec
    assert revisions.revision_of(on_gpu) == revisions.revision_of(spec) == "3599352a9a"
    assert revisions.revision_of(on_cpu) != revisions.revision_of(on_gpu)
    explicit = fit(model("cpu", image=CPU_IMAGE), cpu="CPU").spec
    assert revisions.revision_of(explicit) == revisions.revision_of(on_cpu)


@pytest.mark.parametrize(
    ("image", "device"),
    [
        pytest.param(GPU_IMAGE, "GPU", id="gpu-default"),
        pytest.param(CPU_IMAGE, "CPU", id="cpu-default"),
        pytest.param("ghcr.io/tokenfleet/worker:vllm-v0.34.0", "GPU", id="worker-gpu-tag"),
        pytest.param("ghcr.io/tokenfleet/worker:vllm-cpu-v0.33.0", "CPU", id="worker-cpu-tag"),
        pytest.param("reg.example/team/vllm-cpu:1", "CPU", id="cpu-word-in-repository"),
        pytest.param("reg.example/llm:2-cuda12", "GPU", id="cuda-word-in-tag"),
        pytest.param("reg.example/llm-rocm@sha256:" + "b" * 64, "GPU", id="rocm-with-digest"),
        pytest.param("cpu.registry.example/llm:1", None, id="registry-host-says-nothing"),
        pytest.param("ghcr.io/tokenfleet/worker:sim-0.9.2", None, id="simulator-serves-either"),
        pytest.param("reg.example/llm:1", None, id="unknown"),
        pytest.param("reg.example/cpu-gpu:1", None, id="says-both"),
        pytest.param("localhost:5000/cpu/llm", "CPU", id="local-registry-with-port"),
    ],
)
def test_an_images_device_is_read_from_its_name(image: str, device: Device | None) -> None:
    assert devices.image_device(image) == device


@pytest.mark.parametrize(
    ("kinds", "image", "reason", "needle"),
    [
        pytest.param(
            {"gpu": "GPU"}, CPU_IMAGE, "ImageDeviceMismatch", "built for CPU", id="cpu-image-gpu"
        ),
        pytest.param(
            {"cpu": "CPU"}, GPU_IMAGE, "ImageDeviceMismatch", f"({CPU_IMAGE})", id="gpu-image-cpu"
        ),
        pytest.param(
            {"cpu": "CPU"},
            "reg.example/llm:cuda",
            "ImageDeviceMismatch",
            "remove engine.image",
            id="cuda-image-on-cpu",
        ),
        pytest.param(
            {"cpu": "CPU", "gpu": "GPU"},
            None,
            "MixedPoolDevices",
            "split this ModelDeployment in two",
            id="both-kinds-of-pool",
        ),
    ],
)
def test_a_mismatch_is_a_misfit_with_the_fix(
    kinds: dict[str, Device], image: str | None, reason: str, needle: str
) -> None:
    result = fit(model(*kinds, **({"image": image} if image else {})), **kinds)
    assert result.misfit is not None
    assert result.misfit.reason == reason and reason in devices.REASONS
    assert needle in result.misfit.message


def test_a_pool_holds_a_misfit_without_touching_what_runs() -> None:
    held = model("cpu", image=GPU_IMAGE)
    result = fit(held, cpu="CPU")
    running = observed.WorkerSet(
        name="cpu-zone-a-old", zone="zone-a", revision="old", replicas=2, applied_hash="h"
    )
    plan = pools.plan_pool(
        pools.PoolInputs(
            namespace="ns",
            name="cpu",
            uid="u",
            generation=1,
            spec=CPU,
            status=None,
            model=result.spec,
            rival_models=[],
            pods=[],
            sets=[running],
            nodes=[node("zone-a")],
            now=NOW,
            misfit=result.misfit,
        )
    )
    assert [m["kind"] for m in plan.apply] == ["PodDisruptionBudget", "Service"]
    assert plan.delete == [] and plan.scale == {}
    ready = next(c for c in plan.status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason) == ("False", "ImageDeviceMismatch")
    progressing = next(c for c in plan.status.conditions if c.type == "Progressing")
    assert progressing.reason == "Held"


def node(zone: str, **allocatable: str) -> observed.NodeRecord:
    return observed.NodeRecord(
        name=f"n-{zone}",
        ready=True,
        allocatable=allocatable,
        labels={labels.TOPOLOGY_ZONE: zone},
    )


@pytest.mark.parametrize(
    ("spec", "allocatable", "offered"),
    [
        pytest.param(CPU, {"cpu": "2", "memory": "8Gi"}, True, id="cpu-pool-cpu-node"),
        pytest.param(GPU, {"cpu": "2", "memory": "8Gi"}, False, id="gpu-pool-cpu-node"),
        pytest.param(GPU, {labels.GPU_RESOURCE: "8"}, True, id="gpu-pool-gpu-node"),
    ],
)
def test_nodes_offer_a_cpu_pool_without_gpus(
    spec: InferencePoolSpec, allocatable: dict[str, str], offered: bool
) -> None:
    assert observed.offers(node("zone-a", **allocatable), spec) is offered


def model_inputs(fitted: devices.Fit, **overrides: Any) -> model_status.ModelInputs:
    base: dict[str, Any] = dict(
        namespace="ns",
        name="md",
        generation=1,
        spec=fitted.spec,
        status=None,
        existing_pools=frozenset(fitted.spec.pools),
        pool_owner=dict.fromkeys(fitted.spec.pools, "md"),
        pods=[],
        now=NOW,
        fit=fitted,
    )
    return model_status.ModelInputs(**{**base, **overrides})


def test_the_model_says_whether_it_fits_and_warns_once() -> None:
    good = fit(model("cpu"), cpu="CPU")
    status, events = model_status.plan_model(model_inputs(good))
    compatible = next(c for c in status.conditions if c.type == "Compatible")
    assert (compatible.status, compatible.reason) == ("True", "PoolsFit")
    assert "pool cpu: 4 CPU and 16Gi per replica: KV cache 12 GiB" in compatible.message
    assert all(e.type == "Normal" for e in events)

    bad = fit(model("cpu", image=GPU_IMAGE), cpu="CPU")
    status, events = model_status.plan_model(model_inputs(bad, status=status))
    compatible = next(c for c in status.conditions if c.type == "Compatible")
    assert (compatible.status, compatible.reason) == ("False", "ImageDeviceMismatch")
    warned = [e for e in events if e.reason == "ImageDeviceMismatch"]
    assert len(warned) == 1 and warned[0].type == "Warning"
    assert "remove engine.image" in warned[0].message
    _, again = model_status.plan_model(model_inputs(bad, status=status))
    assert not [e for e in again if e.reason == "ImageDeviceMismatch"]  # told once


def test_a_workers_device_refusal_reaches_verified_with_its_fix() -> None:
    fitted = fit(model("gpu", image="reg.example/llm:1"), gpu="GPU")  # name says nothing
    refused = Verdict(reason=Reason.DEVICE_MISMATCH, message="built for cpu").to_json()
    pod = observed.WorkerPod(
        name="w-1",
        zone="zone-a",
        revision=revisions.revision_of(fitted.spec),
        ready=False,
        terminating=False,
        unschedulable_since=None,
        verdict=refused,
    )
    status, events = model_status.plan_model(model_inputs(fitted, pods=[pod]))
    verified = next(c for c in status.conditions if c.type == "Verified")
    assert (verified.status, verified.reason) == ("False", "DeviceMismatch")
    assert "engine.image reg.example/llm:1 is built for another device" in verified.message
    assert any(e.reason == "VerificationFailed" and e.type == "Warning" for e in events)

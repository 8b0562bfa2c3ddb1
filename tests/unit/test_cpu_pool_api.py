"""The API says a pool runs on CPU nodes, and refuses nonsense with the CRD's own words.

Matrix: accelerator specs (GPU by default; CPU with cores and memory; a CPU pool with a GPU
product, two GPUs, a GPU resource, no memory; a GPU pool with CPU sizing) against the pydantic
mirror, whose message must be the rendered CEL rule's message (the API server's side runs in
tests/integration/test_api_server.py over the shared invalid table); the engine's image is unset
unless given (the pool's device picks it); resource quantities are read exactly.
"""

from __future__ import annotations

import fractions
from typing import Any

import pytest
from pydantic import ValidationError

from tokenfleet.api import crd, quantity
from tokenfleet.api.deployment import CPU_IMAGE, DEFAULT_IMAGES, GPU_IMAGE, Engine
from tokenfleet.api.pool import Accelerator, InferencePoolSpec


def _cel_messages() -> list[str]:
    kind = next(k for k in crd.KINDS if k.kind == "InferencePool")
    schema = crd.render(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    accelerator = schema["properties"]["spec"]["properties"]["accelerator"]
    return [rule["message"] for rule in accelerator["x-kubernetes-validations"]]


CEL = _cel_messages()
CPU = {"kind": "CPU", "cpu": "4", "memory": "16Gi"}


@pytest.mark.parametrize(
    "accelerator",
    [
        pytest.param({}, id="gpu-by-default"),
        pytest.param({"product": "NVIDIA-L4", "count": 2}, id="gpu-with-product"),
        pytest.param(CPU, id="cpu"),
        pytest.param(
            {**CPU, "cpu": "7500m", "memory": "1.5Ti", "nodeSelector": {"pool": "cpu"}},
            id="cpu-fractions-and-selector",
        ),
        pytest.param(
            {**CPU, "tolerations": [{"key": "dedicated", "operator": "Exists"}]},
            id="cpu-tolerating-a-taint",
        ),
    ],
)
def test_valid_accelerators_parse(accelerator: dict[str, Any]) -> None:
    Accelerator.model_validate(accelerator)


@pytest.mark.parametrize(
    ("accelerator", "rule"),
    [
        pytest.param({**CPU, "product": "NVIDIA-H100"}, 0, id="cpu-with-a-gpu-product"),
        pytest.param({**CPU, "count": 2}, 1, id="cpu-with-two-gpus"),
        pytest.param({**CPU, "resourceName": "amd.com/gpu"}, 2, id="cpu-with-a-gpu-resource"),
        pytest.param({"kind": "CPU", "cpu": "4"}, 3, id="cpu-without-memory"),
        pytest.param({"kind": "CPU", "memory": "16Gi"}, 3, id="cpu-without-cores"),
        pytest.param({"kind": "CPU"}, 3, id="cpu-unsized"),
        pytest.param({"memory": "16Gi"}, 4, id="gpu-with-memory"),
        pytest.param({"cpu": "4"}, 4, id="gpu-with-cores"),
    ],
)
def test_nonsense_is_refused_with_the_cel_rules_message(
    accelerator: dict[str, Any], rule: int
) -> None:
    with pytest.raises(ValidationError) as refused:
        InferencePoolSpec.model_validate({"accelerator": accelerator})
    assert CEL[rule] in str(refused.value)


def test_every_cel_rule_of_the_accelerator_has_a_case_above() -> None:
    assert len(CEL) == 5


def test_existing_pools_are_gpu_pools() -> None:
    pool = InferencePoolSpec.model_validate({"accelerator": {"product": "NVIDIA-H100"}})
    assert pool.accelerator.kind == "GPU"
    assert pool.to_wire()["accelerator"]["kind"] == "GPU"


def test_the_engine_image_is_unset_unless_given() -> None:
    assert Engine().image is None
    assert Engine(image="registry.example/worker:1").image == "registry.example/worker:1"
    assert DEFAULT_IMAGES == {"GPU": GPU_IMAGE, "CPU": CPU_IMAGE}
    assert CPU_IMAGE == "ghcr.io/tokenfleet/worker:vllm-cpu-v0.32.0"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("4", fractions.Fraction(4), id="cores"),
        pytest.param("7500m", fractions.Fraction(15, 2), id="millicores"),
        pytest.param("16Gi", fractions.Fraction(16 * 2**30), id="gibibytes"),
        pytest.param("1.5Gi", fractions.Fraction(3 * 2**29), id="fractional-gibibytes"),
        pytest.param("2G", fractions.Fraction(2 * 10**9), id="gigabytes"),
        pytest.param("512Mi", fractions.Fraction(2**29), id="mebibytes"),
        pytest.param("1Ti", fractions.Fraction(2**40), id="tebibytes"),
        pytest.param("100k", fractions.Fraction(100_000), id="kilo"),
    ],
)
def test_quantities_are_read_exactly(text: str, value: fractions.Fraction) -> None:
    assert quantity.value(text) == value


@pytest.mark.parametrize("text", ["", "16 Gi", "16GB", "-1", "1e3", "Gi"])
def test_a_quantity_the_crd_refuses_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a resource quantity"):
        quantity.value(text)


@pytest.mark.parametrize(
    ("count", "text"),
    [
        pytest.param(4 * 2**30, "4 GiB", id="whole"),
        pytest.param(9 * 2**29, "4.5 GiB", id="half"),
        pytest.param(2**29, "512 MiB", id="below-a-gib"),
        pytest.param(0, "0 GiB", id="nothing"),
    ],
)
def test_bytes_are_told_in_binary_units(count: int, text: str) -> None:
    assert quantity.gib(count) == text

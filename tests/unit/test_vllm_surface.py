"""vLLM 0.33.0 accepts every flag TokenFleet renders and exports every metric it reads.

tests/fixtures/vllm-0.33.0.json is extracted from that release's wheel by tools/vllm_surface.py
(source parsed, never imported); a flag or metric name vLLM dropped or renamed fails here, and
regenerating the fixture for another release reruns the whole check.

Matrix: the operator's `vllm serve` arguments for a spec with every typed engine setting
(prefix caching on and off, defaults); the flags the local stack's simulator maps; the current
name of every metric in tokenfleet.signals.vllm; the fixture is a real extraction.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenfleet.api.deployment import ModelDeploymentSpec
from tokenfleet.devstack import simulated
from tokenfleet.operator.plan import desired
from tokenfleet.signals import vllm

REPO = Path(__file__).resolve().parents[2]
#: The release checked: the worker image's pin (test_the_worker_image_pins_the_checked_release).
TARGET = "0.33.0"
SURFACE = json.loads((REPO / "tests" / "fixtures" / f"vllm-{TARGET}.json").read_text())
FLAGS, METRICS = set(SURFACE["flags"]), set(SURFACE["metrics"])


def spec(**engine: object) -> ModelDeploymentSpec:
    return ModelDeploymentSpec.model_validate(
        {
            "model": {"name": "chat", "aliases": ["chat-latest"]},
            "pools": ["p"],
            "artifact": {
                "uri": "file:///m",
                "digest": "sha256:" + "a" * 64,
                "trust": {"publicKey": {"name": "k"}},
            },
            "engine": engine,
        }
    )


def test_fixture_is_for_the_target_release() -> None:
    assert SURFACE["vllm"] == TARGET
    assert SURFACE["generator"] == "tools/vllm_surface.py"


@pytest.mark.parametrize(
    "engine",
    [
        pytest.param(
            {
                "maxModelLen": 8192,
                "maxNumSeqs": 64,
                "tensorParallelSize": 2,
                "gpuMemoryUtilization": 0.85,
                "enablePrefixCaching": True,
                "maxNumBatchedTokens": 2048,
                "enableChunkedPrefill": True,
                "quantization": "fp8",
                "dtype": "bfloat16",
                "kvCacheDtype": "fp8",
                "speculativeConfig": '{"method": "ngram", "num_speculative_tokens": 4}',
                "lora": {"maxLoras": 4, "maxLoraRank": 32, "maxCpuLoras": 16},
            },
            id="every-typed-setting",
        ),
        pytest.param({"enableChunkedPrefill": False}, id="chunked-prefill-off"),
        pytest.param({"enablePrefixCaching": False}, id="prefix-caching-off"),
        pytest.param({}, id="defaults"),
    ],
)
def test_every_rendered_flag_exists_in_the_pinned_vllm(engine: dict[str, object]) -> None:
    rendered = [a for a in desired.serve_args(spec(**engine)) if a.startswith("--")]
    assert rendered, "the operator renders no flags?"
    missing = sorted(set(rendered) - FLAGS)
    assert not missing, f"vLLM {SURFACE['vllm']} has no {missing}"


def test_the_worker_image_pins_the_checked_release() -> None:
    dockerfile = (REPO / "worker-image" / "Dockerfile").read_text()
    assert f"ARG VLLM_VERSION=v{TARGET}\n" in dockerfile


def test_flags_the_simulator_maps_exist_in_the_pinned_vllm() -> None:
    mapped = set(simulated._PASSED_THROUGH) | {"--served-model-name", "--enable-prefix-caching"}
    assert mapped <= FLAGS, sorted(mapped - FLAGS)


@pytest.mark.parametrize(
    "names",
    [v for k, v in vars(vllm).items() if k.isupper() and isinstance(v, tuple)],
    ids=lambda names: names[0],
)
def test_the_current_name_of_every_metric_read_exists(names: tuple[str, ...]) -> None:
    assert names[0] in METRICS, f"vLLM {SURFACE['vllm']} exports no {names[0]}"


def test_the_fixture_is_a_real_extraction() -> None:
    """Guards the generator: a parse that found nothing would make every test above vacuous."""
    assert len(FLAGS) > 300 and len(METRICS) > 50
    assert {"--no-enable-prefix-caching", "--max-num-batched-tokens", "--kv-cache-dtype"} <= FLAGS


@pytest.mark.parametrize(
    ("engine", "expected"),
    [
        pytest.param(
            {"maxNumBatchedTokens": 2048}, ["--max-num-batched-tokens", "2048"], id="mnbt"
        ),
        pytest.param({"enableChunkedPrefill": False}, ["--no-enable-chunked-prefill"], id="chunk"),
        pytest.param({"quantization": "awq"}, ["--quantization", "awq"], id="quantization"),
        pytest.param({"kvCacheDtype": "fp8"}, ["--kv-cache-dtype", "fp8"], id="kv-dtype"),
        pytest.param(
            {"lora": {}}, ["--enable-lora", "--max-loras", "8", "--max-lora-rank", "16"], id="lora"
        ),
    ],
)
def test_typed_settings_render_their_flags_in_order(
    engine: dict[str, object], expected: list[str]
) -> None:
    args = desired.serve_args(spec(**engine))
    start = args.index(expected[0])
    assert args[start : start + len(expected)] == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param("{not json", "not JSON", id="not-json"),
        pytest.param("[1, 2]", "must be a JSON object", id="not-an-object"),
    ],
)
def test_speculative_config_must_be_a_json_object(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        spec(speculativeConfig=value)


@pytest.mark.parametrize(
    ("resources", "requests", "limits"),
    [
        pytest.param(None, {"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "1"}, id="gpus-only"),
        pytest.param(
            {"cpu": "8", "memory": "64Gi"},
            {"nvidia.com/gpu": "1", "cpu": "8", "memory": "64Gi"},
            {"nvidia.com/gpu": "1", "memory": "64Gi"},
            id="cpu-requested-memory-not-overcommitted",
        ),
    ],
)
def test_worker_resources(
    resources: dict[str, str] | None, requests: dict[str, str], limits: dict[str, str]
) -> None:
    model = spec(**({"resources": resources} if resources else {}))
    got = desired.worker_resources(model, {"nvidia.com/gpu": "1"})
    assert got == {"requests": requests, "limits": limits}

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
#: The release checked. The worker image still pins v0.11.0: moving its Dockerfile pin needs the
#: default engine image in tokenfleet.api.deployment (and crds/) to move with it, which
#: tests/unit/test_worker_image.py enforces.
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
            },
            id="every-typed-setting",
        ),
        pytest.param({"enablePrefixCaching": False}, id="prefix-caching-off"),
        pytest.param({}, id="defaults"),
    ],
)
def test_every_rendered_flag_exists_in_the_pinned_vllm(engine: dict[str, object]) -> None:
    rendered = [a for a in desired.serve_args(spec(**engine)) if a.startswith("--")]
    assert rendered, "the operator renders no flags?"
    missing = sorted(set(rendered) - FLAGS)
    assert not missing, f"vLLM {SURFACE['vllm']} has no {missing}"


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

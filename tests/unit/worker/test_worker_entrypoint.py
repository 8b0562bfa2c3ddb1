"""The worker entrypoint: configuration from the environment (every refusal), argument
rendering, and verify → exec with a real signed model (good, tampered, foreign key, unreachable);
exec is a recorder, so no vLLM is needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenfleet.signing import keys, verdict, verify
from tokenfleet.signing.verdict import Reason
from tokenfleet.worker import entrypoint
from tokenfleet.worker.entrypoint import Config

PLACEHOLDER = "/models/artifact"
ARGS = [PLACEHOLDER, "--served-model-name", "tiny", "--port", "8000"]


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str], dict[str, str]]] = []

    def __call__(self, program: str, argv: list[str], env: dict[str, str]) -> None:
        self.calls.append((program, argv, env))


@pytest.fixture
def world(tmp_path: Path) -> dict[str, str]:
    """A signed model and the environment the operator would set for it."""
    private, public = keys.generate(tmp_path / "keys")
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["Tiny"]}')
    (model / "weights.bin").write_bytes(b"\x07" * 1024)
    digest = verify.sign(model, private_key=private, signature=model / "model.sig")
    return {
        "TOKENFLEET_ARTIFACT_URI": model.as_uri(),
        "TOKENFLEET_ARTIFACT_DIGEST": digest,
        "TOKENFLEET_TRUST_PUBLIC_KEY": str(public),
        "TOKENFLEET_MODEL_DIR": PLACEHOLDER,
        "TOKENFLEET_TERMINATION_LOG": str(tmp_path / "termination-log"),
        "PATH": "/usr/bin",
    }


def test_verified_artifact_execs_vllm_serve_on_the_verified_directory(
    world: dict[str, str],
) -> None:
    exec_ = Recorder()
    assert entrypoint.run(ARGS, env=world, exec_=exec_) == 0
    [(program, argv, env)] = exec_.calls
    model = world["TOKENFLEET_ARTIFACT_URI"].removeprefix("file://")
    assert program == "vllm"
    assert argv == ["vllm", "serve", model, "--served-model-name", "tiny", "--port", "8000"]
    assert env["HF_HUB_OFFLINE"] == "1" and env["PATH"] == "/usr/bin"
    assert not Path(world["TOKENFLEET_TERMINATION_LOG"]).exists()


@pytest.mark.parametrize(
    ("spoil", "reason"),
    [
        pytest.param("tamper", Reason.DIGEST_MISMATCH, id="tampered-file"),
        pytest.param("foreign-key", Reason.UNTRUSTED_SIGNER, id="untrusted-key"),
        pytest.param("gone", Reason.ARTIFACT_UNREACHABLE, id="missing-artifact"),
        pytest.param("pin", Reason.DIGEST_MISMATCH, id="other-digest-pinned"),
    ],
)
def test_unverified_artifact_never_starts_the_engine(
    world: dict[str, str], tmp_path: Path, spoil: str, reason: Reason
) -> None:
    model = Path(world["TOKENFLEET_ARTIFACT_URI"].removeprefix("file://"))
    env = dict(world)
    if spoil == "tamper":
        (model / "weights.bin").write_bytes(b"\x00")
    elif spoil == "foreign-key":
        env["TOKENFLEET_TRUST_PUBLIC_KEY"] = str(keys.generate(tmp_path / "other")[1])
    elif spoil == "gone":
        env["TOKENFLEET_ARTIFACT_URI"] = (tmp_path / "nowhere").as_uri()
    else:
        env["TOKENFLEET_ARTIFACT_DIGEST"] = "sha256:" + "f" * 64
    exec_ = Recorder()
    assert entrypoint.run(ARGS, env=env, exec_=exec_) == entrypoint.EXIT_UNVERIFIED
    assert exec_.calls == []
    written = verdict.parse(Path(env["TOKENFLEET_TERMINATION_LOG"]).read_text())
    assert written is not None and written.reason is reason


MISSING = object()


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        pytest.param({"TOKENFLEET_ARTIFACT_URI": MISSING}, "must be set", id="no-uri"),
        pytest.param({"TOKENFLEET_ARTIFACT_DIGEST": MISSING}, "must be set", id="no-digest"),
        pytest.param({"TOKENFLEET_TRUST_PUBLIC_KEY": MISSING}, "exactly one", id="no-trust"),
        pytest.param(
            {"TOKENFLEET_TRUST_IDENTITY": "me@example.com", "TOKENFLEET_TRUST_ISSUER": "https://i"},
            "exactly one",
            id="two-trusts",
        ),
        pytest.param(
            {"TOKENFLEET_TRUST_PUBLIC_KEY": MISSING, "TOKENFLEET_TRUST_IDENTITY": "me@x"},
            "exactly one",
            id="identity-without-issuer",
        ),
    ],
)
def test_bad_configuration_exits_before_verifying(
    world: dict[str, str],
    changes: dict[str, object],
    needle: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = {k: v for k, v in world.items() if changes.get(k) is not MISSING}
    env.update({k: v for k, v in changes.items() if isinstance(v, str)})
    exec_ = Recorder()
    assert entrypoint.run(ARGS, env=env, exec_=exec_) == entrypoint.EXIT_CONFIG
    assert exec_.calls == []
    assert needle in capsys.readouterr().err


def test_args_must_start_with_the_placeholder_or_a_flag(world: dict[str, str]) -> None:
    exec_ = Recorder()
    code = entrypoint.run(["meta-llama/Llama-3-8B", "--port", "8000"], env=world, exec_=exec_)
    assert code == entrypoint.EXIT_CONFIG and exec_.calls == []


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(
            [PLACEHOLDER, "--port", "1"], ["vllm", "serve", "/v", "--port", "1"], id="placeholder"
        ),
        pytest.param(["--port", "1"], ["vllm", "serve", "/v", "--port", "1"], id="flags-only"),
        pytest.param([], ["vllm", "serve", "/v"], id="nothing"),
    ],
)
def test_render(args: list[str], expected: list[str]) -> None:
    assert entrypoint.render(args, placeholder=PLACEHOLDER, served=Path("/v")) == expected


def test_sigstore_identity_parses_from_env() -> None:
    config = Config.from_env(
        {
            "TOKENFLEET_ARTIFACT_URI": "https://models.example/tiny",
            "TOKENFLEET_ARTIFACT_DIGEST": "sha256:" + "0" * 64,
            "TOKENFLEET_TRUST_IDENTITY": "release@example.com",
            "TOKENFLEET_TRUST_ISSUER": "https://accounts.example.com",
        }
    )
    assert config.public_key is None and config.identity == "release@example.com"
    assert config.termination_log == Path("/dev/termination-log")


def test_the_module_runs_as_a_program(world: dict[str, str], tmp_path: Path) -> None:
    """python -m tokenfleet.worker with a tampered model exits 3 (no vLLM here to exec)."""
    import subprocess
    import sys

    model = Path(world["TOKENFLEET_ARTIFACT_URI"].removeprefix("file://"))
    (model / "config.json").write_text("{}")
    done = subprocess.run(
        [sys.executable, "-m", "tokenfleet.worker", *ARGS],
        env=world,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == entrypoint.EXIT_UNVERIFIED, done.stderr
    assert '"reason":"DigestMismatch"' in done.stdout

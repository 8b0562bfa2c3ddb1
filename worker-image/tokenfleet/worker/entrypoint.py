"""Verify → exec ``vllm serve`` with the rendered arguments; refuse to start otherwise.

The operator sets the environment below on the worker container and passes ``vllm serve``'s
arguments as the container's args, the model path first (the ``TOKENFLEET_MODEL_DIR``
placeholder). On success the process *becomes* vLLM (exec: vLLM gets PID 1's signals) serving
the directory that was verified, with the Hugging Face hub switched off so nothing unverified
can be fetched later. On failure the verdict goes to the termination message, where the
operator reads it, and the process exits non-zero: the engine never starts.

``TOKENFLEET_ENGINE`` (set by the image, not the operator) picks what is exec'd: ``vllm`` (the
default, the GPU and CPU images) or ``llm-d-inference-sim`` (the worker-simulator image), which
gets the equivalent flags (tokenfleet.worker.engines).

Split in two on a worker pod (the operator renders both): the init container ``verify``
(:func:`verify_step`, ``python -m tokenfleet.worker verify``) checks the device and verifies,
writes its verdict to its termination message *whether it passed or not* — the one record of a
pass the operator can read, naming the digest and the signer — and leaves the verified
directory's path in the record file ``TOKENFLEET_VERIFIED_RECORD`` on the pod's ``/models``
volume; the engine container then (:func:`serve_verified`) starts only on a record that names
the digest it was given. Kubernetes starts it only after ``verify`` exited 0. Without
``TOKENFLEET_VERIFIED_RECORD`` the entrypoint does both in one process (:func:`run`).

``TOKENFLEET_DEVICE`` (set by the image: ``cpu`` in the CPU image; absent means ``gpu``) must
match ``TOKENFLEET_POOL_DEVICE`` (set by the operator on a CPU pool's workers; absent means
``gpu``): otherwise the worker refuses before it fetches anything, with a ``DeviceMismatch``
verdict in the termination message, reported exactly as a refused artifact is.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tokenfleet.signing.verdict import Reason, Verdict, parse
from tokenfleet.worker import engines

#: Exit codes a pod's status shows: bad configuration (operator bug or hand-made pod), an
#: artifact that failed verification (see the termination message for which reason), and an
#: image built for another device than the pool's nodes.
EXIT_CONFIG = 2
EXIT_UNVERIFIED = 3
EXIT_WRONG_DEVICE = 4

DEFAULT_TERMINATION_LOG = "/dev/termination-log"
DEFAULT_MODEL_DIR = "/models/artifact"
#: The first argument that makes the entrypoint the verify step (the init container's args).
VERIFY_STEP = "verify"
#: Environment: where the verify step leaves the verified directory for the engine container.
RECORD_ENV = "TOKENFLEET_VERIFIED_RECORD"

#: exec(program, argv, env): os.execvpe in production; tests inject a recorder.
Exec = Callable[[str, list[str], dict[str, str]], None]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """What the operator tells the worker, parsed once from the environment."""

    uri: str
    digest: str
    signature_uri: str = ""
    public_key: Path | None = None
    identity: str = ""
    issuer: str = ""
    model_dir: str = DEFAULT_MODEL_DIR
    termination_log: Path = Path(DEFAULT_TERMINATION_LOG)
    fetch_timeout: float = 30.0
    engine: str = engines.VLLM
    device: str = "gpu"  # what the image's engine is built for (TOKENFLEET_DEVICE)
    pool_device: str = "gpu"  # what the pool's nodes have (TOKENFLEET_POOL_DEVICE)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Config:
        """Refuses (ValueError) a missing artifact or anything but exactly one trust method."""
        uri, digest = (
            env.get("TOKENFLEET_ARTIFACT_URI", ""),
            env.get("TOKENFLEET_ARTIFACT_DIGEST", ""),
        )
        if not uri or not digest:
            raise ValueError("TOKENFLEET_ARTIFACT_URI and TOKENFLEET_ARTIFACT_DIGEST must be set")
        key = env.get("TOKENFLEET_TRUST_PUBLIC_KEY", "")
        identity = env.get("TOKENFLEET_TRUST_IDENTITY", "")
        issuer = env.get("TOKENFLEET_TRUST_ISSUER", "")
        engine = env.get("TOKENFLEET_ENGINE", "") or engines.VLLM
        if engine not in engines.ENGINES:
            raise ValueError(
                f"TOKENFLEET_ENGINE must be one of {', '.join(engines.ENGINES)}, not {engine!r}"
            )
        device = env.get("TOKENFLEET_DEVICE", "") or "gpu"
        pool_device = env.get("TOKENFLEET_POOL_DEVICE", "") or "gpu"
        for name, value in (("TOKENFLEET_DEVICE", device), ("TOKENFLEET_POOL_DEVICE", pool_device)):
            if value not in engines.DEVICES:
                raise ValueError(
                    f"{name} must be one of {', '.join(engines.DEVICES)}, not {value!r}"
                )
        if bool(key) == bool(identity) or bool(identity) != bool(issuer):
            raise ValueError(
                "set exactly one trust method: TOKENFLEET_TRUST_PUBLIC_KEY, or both "
                "TOKENFLEET_TRUST_IDENTITY and TOKENFLEET_TRUST_ISSUER"
            )
        return cls(
            uri=uri,
            digest=digest,
            signature_uri=env.get("TOKENFLEET_SIGNATURE_URI", ""),
            public_key=Path(key) if key else None,
            identity=identity,
            issuer=issuer,
            model_dir=env.get("TOKENFLEET_MODEL_DIR", DEFAULT_MODEL_DIR),
            termination_log=Path(env.get("TOKENFLEET_TERMINATION_LOG", DEFAULT_TERMINATION_LOG)),
            fetch_timeout=float(env.get("TOKENFLEET_FETCH_TIMEOUT_SECONDS", "30")),
            engine=engine,
            device=device,
            pool_device=pool_device,
        )


def render(
    args: Sequence[str],
    *,
    placeholder: str,
    served: Path,
    engine: str = engines.VLLM,
    env: Mapping[str, str] | None = None,
) -> list[str]:
    """The engine's argv (``vllm serve`` by default): the model placeholder (or a missing model)
    becomes ``served``."""
    rest = list(args)
    if rest and rest[0] == placeholder:
        rest = rest[1:]
    elif rest and not rest[0].startswith("-"):
        raise ValueError(f"the first argument must be the model placeholder {placeholder}")
    return engines.argv(engine, rest, served=str(served), env=env or {})


def serving_env(env: Mapping[str, str]) -> dict[str, str]:
    """vLLM's environment: as given, with the hub off (only verified files may be loaded)."""
    return {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


Verifier = Callable[[Config], tuple[Verdict, Path | None]]


def verify_with_model_signing(config: Config) -> tuple[Verdict, Path | None]:
    """The real verifier: fetch into the model directory's parent, then model_signing."""
    from tokenfleet.signing import verify  # sigstore loads only in the worker, not on import

    trust = verify.Trust(
        public_key=config.public_key, identity=config.identity, issuer=config.issuer
    )
    staging = Path(config.model_dir).parent / "staging"
    return verify.verify_artifact(
        config.uri,
        trust=trust,
        expected_digest=config.digest,
        signature_uri=config.signature_uri,
        workdir=None if config.uri.startswith("file://") else staging,
        timeout=config.fetch_timeout,
    )


def report(verdict: Verdict, termination_log: Path, *, passes_too: bool = False) -> None:
    """The verdict on stdout (logs) and, when it refuses (or always, for the verify step,
    whose container ends either way), in the termination message."""
    print(verdict.to_json(), flush=True)
    if verdict.verified and not passes_too:
        return  # leave the termination message to vLLM's own failures (FallbackToLogsOnError)
    try:
        termination_log.write_text(verdict.to_json())
    except OSError as error:
        print(f"could not write {termination_log}: {error}", file=sys.stderr)


def run(
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    verifier: Verifier = verify_with_model_signing,
    exec_: Exec = os.execvpe,
) -> int:
    """Parse → check the device → verify → report → exec. Returns an exit code only when it
    does not exec."""
    config = _checked(env)
    if isinstance(config, int):
        return config
    try:
        render(args, placeholder=config.model_dir, served=Path(config.model_dir))
    except ValueError as error:  # refuse before spending minutes on a download
        print(f"tokenfleet worker: {error}", file=sys.stderr)
        return EXIT_CONFIG
    verdict, served = verifier(config)
    report(verdict, config.termination_log)
    if not verdict.verified or served is None:
        return EXIT_UNVERIFIED
    argv = render(args, placeholder=config.model_dir, served=served, engine=config.engine, env=env)
    exec_(argv[0], argv, serving_env(env))
    return 0  # only reached when exec_ is a test double


def _checked(env: Mapping[str, str]) -> Config | int:
    """The configuration, or the exit code of a refusal decided before any download."""
    try:
        config = Config.from_env(env)
    except ValueError as error:
        print(f"tokenfleet worker: {error}", file=sys.stderr)
        return EXIT_CONFIG
    mismatch = engines.device_mismatch(config.engine, image=config.device, pool=config.pool_device)
    if mismatch:  # before the download: no artifact makes this engine fit these nodes
        verdict = Verdict(reason=Reason.DEVICE_MISMATCH, message=mismatch)
        report(verdict, config.termination_log, passes_too=True)
        return EXIT_WRONG_DEVICE
    return config


def verify_step(*, env: Mapping[str, str], verifier: Verifier = verify_with_model_signing) -> int:
    """The init container: check the device → verify → the verdict in the termination message,
    pass or refusal → on a pass, the record for the engine container. Exit 0 only on a pass."""
    record = env.get(RECORD_ENV, "")
    if not record:
        print(f"tokenfleet worker: {RECORD_ENV} must be set for the verify step", file=sys.stderr)
        return EXIT_CONFIG
    config = _checked(env)
    if isinstance(config, int):
        return config
    verdict, served = verifier(config)
    report(verdict, config.termination_log, passes_too=True)
    if not verdict.verified or served is None:
        return EXIT_UNVERIFIED
    body = {"served": str(served), "verdict": verdict.to_json()}
    Path(record).write_text(json.dumps(body, separators=(",", ":")))
    return 0


def serve_verified(args: Sequence[str], *, env: Mapping[str, str], exec_: Exec = os.execvpe) -> int:
    """The engine container after the verify step: exec the engine on the directory the record
    names, only when the record's verdict passed for the digest this container was given; the
    verdict it serves under is the first line of its log."""
    config = _checked(env)
    if isinstance(config, int):
        return config
    try:
        body = json.loads(Path(env[RECORD_ENV]).read_text())
        served, recorded = Path(str(body["served"])), parse(str(body["verdict"]))
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"tokenfleet worker: no verification record ({error}); not serving", file=sys.stderr)
        return EXIT_UNVERIFIED
    if recorded is None or not recorded.verified:
        print(
            "tokenfleet worker: the record holds no passing verdict; not serving", file=sys.stderr
        )
        return EXIT_UNVERIFIED
    if recorded.digest.lower() != config.digest.lower():
        print(
            f"tokenfleet worker: the record verified {recorded.digest}, not {config.digest}; "
            "not serving",
            file=sys.stderr,
        )
        return EXIT_UNVERIFIED
    try:
        argv = render(
            args, placeholder=config.model_dir, served=served, engine=config.engine, env=env
        )
    except ValueError as error:
        print(f"tokenfleet worker: {error}", file=sys.stderr)
        return EXIT_CONFIG
    print(recorded.to_json(), flush=True)
    exec_(argv[0], argv, serving_env(env))
    return 0  # only reached when exec_ is a test double


def main(args: Sequence[str], *, env: Mapping[str, str]) -> int:
    """``verify`` → the verify step; a record to read → serve it; otherwise verify and serve."""
    if args[:1] == [VERIFY_STEP]:
        return verify_step(env=env)
    if env.get(RECORD_ENV):
        return serve_verified(args, env=env)
    return run(args, env=env)

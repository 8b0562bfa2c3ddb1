"""Artifact verification with real model-signing and real EC keys, as a table of tamperings:
good, changed/missing/extra file, wrong key (with and without the key hint), forged payload,
garbage signature, wrong pinned digest, missing directory/signature, unsupported scheme, s3
without boto3 — over file:// and over http:// from a local server."""

from __future__ import annotations

import base64
import functools
import http.server
import json
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tokenfleet.signing import fetch, keys, verify
from tokenfleet.signing.verdict import Reason

FILES = {
    "config.json": b'{"architectures": ["TinyForCausalLM"]}',
    "model.safetensors": b"\x00" * 4096,
    "tokenizer/tokenizer.json": b'{"version": "1.0"}',
}


@pytest.fixture(scope="module")
def keypair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return keys.generate(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def other_keypair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return keys.generate(tmp_path_factory.mktemp("other-keys"))


@pytest.fixture
def signed(tmp_path: Path, keypair: tuple[Path, Path]) -> tuple[Path, str]:
    """A small model directory with model.sig inside; returns (directory, pinned digest)."""
    model = tmp_path / "tiny-model"
    for name, content in FILES.items():
        (model / name).parent.mkdir(parents=True, exist_ok=True)
        (model / name).write_bytes(content)
    digest = verify.sign(model, private_key=keypair[0], signature=model / "model.sig")
    return model, digest


def _rewrite_payload(signature: Path, change: Callable[[dict], None]) -> None:  # type: ignore[type-arg]
    bundle = json.loads(signature.read_bytes())
    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    change(statement)
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    signature.write_text(json.dumps(bundle))


def _strip_key_hint(signature: Path) -> None:
    bundle = json.loads(signature.read_bytes())
    bundle["verificationMaterial"]["publicKey"] = {}
    signature.write_text(json.dumps(bundle))


def _forge(statement: dict) -> None:  # type: ignore[type-arg]
    statement["predicate"]["resources"][0]["digest"] = "0" * 64


Tamper = Callable[[Path], None]
TAMPERINGS: list[tuple[str, Tamper, Reason, bool]] = [
    # id, what is done to the model directory, expected reason, use the other key
    ("good", lambda m: None, Reason.VERIFIED, False),
    ("changed-file", lambda m: (m / "config.json").write_text("{}"), Reason.DIGEST_MISMATCH, False),
    ("missing-file", lambda m: (m / "model.safetensors").unlink(), Reason.DIGEST_MISMATCH, False),
    ("extra-file", lambda m: (m / "evil.py").write_text("x"), Reason.DIGEST_MISMATCH, False),
    ("wrong-key", lambda m: None, Reason.UNTRUSTED_SIGNER, True),
    (
        "wrong-key-no-hint",
        lambda m: _strip_key_hint(m / "model.sig"),
        Reason.SIGNATURE_INVALID,
        True,
    ),
    (
        "forged-manifest",
        lambda m: _rewrite_payload(m / "model.sig", _forge),
        Reason.SIGNATURE_INVALID,
        False,
    ),
    (
        "garbage-signature",
        lambda m: (m / "model.sig").write_text("{"),
        Reason.SIGNATURE_INVALID,
        False,
    ),
    ("missing-signature", lambda m: (m / "model.sig").unlink(), Reason.ARTIFACT_UNREACHABLE, False),
    ("missing-directory", shutil.rmtree, Reason.ARTIFACT_UNREACHABLE, False),
]


@pytest.mark.parametrize(
    ("tamper", "expected", "use_other_key"),
    [pytest.param(t, r, o, id=i) for i, t, r, o in TAMPERINGS],
)
def test_file_artifact(
    signed: tuple[Path, str],
    keypair: tuple[Path, Path],
    other_keypair: tuple[Path, Path],
    tamper: Tamper,
    expected: Reason,
    use_other_key: bool,
) -> None:
    model, digest = signed
    tamper(model)
    public = (other_keypair if use_other_key else keypair)[1]
    verdict, served = verify.verify_artifact(
        model.as_uri(), trust=verify.Trust(public_key=public), expected_digest=digest
    )
    assert verdict.reason is expected, verdict.message
    assert verdict.verified == (expected is Reason.VERIFIED)
    assert (served == model) if verdict.verified else served is None
    if verdict.verified:
        assert verdict.digest == digest
        assert verdict.signer == keys.signer_name(public.read_bytes())


def test_changed_file_is_named_in_the_message(
    signed: tuple[Path, str], keypair: tuple[Path, Path]
) -> None:
    model, digest = signed
    (model / "tokenizer" / "tokenizer.json").write_text("{}")
    verdict, _ = verify.verify_artifact(
        model.as_uri(), trust=verify.Trust(public_key=keypair[1]), expected_digest=digest
    )
    assert "tokenizer/tokenizer.json" in verdict.message


def test_a_valid_signature_over_other_files_than_pinned_is_a_digest_mismatch(
    signed: tuple[Path, str], keypair: tuple[Path, Path]
) -> None:
    model, _ = signed
    verdict, _ = verify.verify_artifact(
        model.as_uri(),
        trust=verify.Trust(public_key=keypair[1]),
        expected_digest="sha256:" + "a" * 64,
    )
    assert verdict.reason is Reason.DIGEST_MISMATCH
    assert "pins sha256:aaaa" in verdict.message


def test_signature_may_live_outside_the_directory(
    tmp_path: Path, signed: tuple[Path, str], keypair: tuple[Path, Path]
) -> None:
    model, digest = signed
    elsewhere = tmp_path / "sigs" / "tiny.sig"
    elsewhere.parent.mkdir()
    (model / "model.sig").rename(elsewhere)
    verdict, _ = verify.verify_artifact(
        model.as_uri(),
        signature_uri=elsewhere.as_uri(),
        trust=verify.Trust(public_key=keypair[1]),
        expected_digest=digest,
    )
    assert verdict.reason is Reason.VERIFIED, verdict.message


def test_unusable_public_key_is_an_untrusted_signer(
    tmp_path: Path, signed: tuple[Path, str]
) -> None:
    model, digest = signed
    bad = tmp_path / "bad.pem"
    bad.write_text("not a key")
    verdict, _ = verify.verify_artifact(
        model.as_uri(), trust=verify.Trust(public_key=bad), expected_digest=digest
    )
    assert verdict.reason is Reason.UNTRUSTED_SIGNER


@pytest.mark.parametrize(
    ("uri", "needle"),
    [
        pytest.param("ftp://example/model", "unsupported artifact scheme", id="ftp"),
        pytest.param("s3://bucket/model", "tokenfleet[s3]", id="s3-without-boto3"),
    ],
)
def test_unreachable_schemes(uri: str, needle: str, keypair: tuple[Path, Path]) -> None:
    pytest.importorskip("model_signing")
    if uri.startswith("s3") and _has_boto3():
        pytest.skip("boto3 is installed: the missing-extra message cannot show")
    verdict, _ = verify.verify_artifact(
        uri, trust=verify.Trust(public_key=keypair[1]), expected_digest=""
    )
    assert verdict.reason is Reason.ARTIFACT_UNREACHABLE
    assert needle in verdict.message


def _has_boto3() -> bool:
    try:
        import boto3  # type: ignore[import-not-found, unused-ignore]  # noqa: F401
    except ImportError:
        return False
    return True


def test_trust_needs_exactly_one_method(keypair: tuple[Path, Path]) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        verify.Trust()
    with pytest.raises(ValueError, match="exactly one"):
        verify.Trust(public_key=keypair[1], identity="me@example.com", issuer="https://x")


# --- http(s):// ------------------------------------------------------------------------------


@pytest.fixture
def served(signed: tuple[Path, str]) -> Iterator[str]:
    """The signed model's parent directory over HTTP on a loopback port; yields the model URL."""
    model, _ = signed
    handler = functools.partial(_QuietHandler, directory=str(model.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/{model.name}"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.mark.parametrize(
    ("tamper", "expected"),
    [
        pytest.param(lambda m: None, Reason.VERIFIED, id="good"),
        pytest.param(
            lambda m: (m / "model.safetensors").write_bytes(b"\x01"),
            Reason.DIGEST_MISMATCH,
            id="changed-file",
        ),
        pytest.param(
            lambda m: (m / "config.json").unlink(), Reason.ARTIFACT_UNREACHABLE, id="missing-file"
        ),
        pytest.param(
            lambda m: (m / "model.sig").unlink(), Reason.ARTIFACT_UNREACHABLE, id="no-signature"
        ),
    ],
)
def test_http_artifact(
    tmp_path: Path,
    signed: tuple[Path, str],
    served: str,
    keypair: tuple[Path, Path],
    tamper: Tamper,
    expected: Reason,
) -> None:
    model, digest = signed
    tamper(model)
    workdir = tmp_path / "download"
    verdict, local = verify.verify_artifact(
        served,
        trust=verify.Trust(public_key=keypair[1]),
        expected_digest=digest,
        workdir=workdir,
        timeout=5,
    )
    assert verdict.reason is expected, verdict.message
    if verdict.verified:
        assert local == workdir / "model"
        assert (local / "tokenizer" / "tokenizer.json").read_bytes() == FILES[
            "tokenizer/tokenizer.json"
        ]


def test_http_downloads_only_the_signed_files(
    tmp_path: Path, signed: tuple[Path, str], served: str, keypair: tuple[Path, Path]
) -> None:
    model, digest = signed
    (model / "unsigned-extra.bin").write_bytes(b"never fetched")
    verdict, local = verify.verify_artifact(
        served,
        trust=verify.Trust(public_key=keypair[1]),
        expected_digest=digest,
        workdir=tmp_path / "dl",
        timeout=5,
    )
    assert verdict.verified, verdict.message
    assert local is not None
    assert not (local / "unsigned-extra.bin").exists()


def test_unreachable_host_is_artifact_unreachable(
    keypair: tuple[Path, Path], tmp_path: Path
) -> None:
    # Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
    verdict, _ = verify.verify_artifact(
        "http://127.0.0.1:9/model",
        trust=verify.Trust(public_key=keypair[1]),
        expected_digest="",
        workdir=tmp_path,
        timeout=2,
    )
    assert verdict.reason is Reason.ARTIFACT_UNREACHABLE


def test_fetch_signature_location_default_and_explicit() -> None:
    assert fetch.signature_location("http://h/m/") == "http://h/m/model.sig"
    assert fetch.signature_location("http://h/m", "http://h/s.sig") == "http://h/s.sig"

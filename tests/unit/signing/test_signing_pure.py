"""The pure halves of artifact trust: the verdict's wire form (termination message) and what a
bundle claims (root digest, file names, unsafe names refused); plus the CLI end to end."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tokenfleet.signing import __main__ as cli
from tokenfleet.signing import bundle, verdict
from tokenfleet.signing.verdict import Reason, Verdict


@pytest.mark.parametrize("reason", list(Reason), ids=str)
def test_verdict_round_trips_through_json(reason: Reason) -> None:
    original = Verdict(reason=reason, message="m", digest="sha256:" + "1" * 64, signer="key:x")
    assert verdict.parse(original.to_json()) == original
    assert json.loads(original.to_json())["verified"] is (reason is Reason.VERIFIED)


def test_long_messages_fit_a_termination_message() -> None:
    long = Verdict(reason=Reason.DIGEST_MISMATCH, message="Hash mismatch for 'f' " * 10_000)
    text = long.to_json()
    assert len(text.encode()) < verdict.TERMINATION_MESSAGE_LIMIT
    parsed = verdict.parse(text)
    assert parsed is not None
    assert parsed.message.endswith("…")


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("Error: OOM", id="plain-text"),
        pytest.param("[1, 2]", id="list"),
        pytest.param('{"reason": "Sunny"}', id="unknown-reason"),
        pytest.param('{"message": "x"}', id="no-reason"),
    ],
)
def test_parse_refuses_what_is_not_a_verdict(text: str) -> None:
    assert verdict.parse(text) is None


def _bundle(names: list[str], root: str = "ab" * 32) -> bytes:
    statement = {
        "subject": [{"name": "m", "digest": {"sha256": root}}],
        "predicate": {
            "resources": [{"name": n, "digest": "00", "algorithm": "sha256"} for n in names]
        },
    }
    payload = base64.b64encode(json.dumps(statement).encode()).decode()
    return json.dumps({"dsseEnvelope": {"payload": payload}}).encode()


def test_bundle_claims() -> None:
    raw = _bundle(["config.json", "sub/w.bin"])
    assert bundle.root_digest(raw) == "sha256:" + "ab" * 32
    assert bundle.file_names(raw) == ["config.json", "sub/w.bin"]


@pytest.mark.parametrize(
    "name",
    ["../etc/passwd", "/etc/passwd", "a/../../b", "a//b", "./a", ".", ".."],
)
def test_bundle_refuses_names_that_escape_the_directory(name: str) -> None:
    with pytest.raises(bundle.MalformedBundle):
        bundle.file_names(_bundle([name]))


@pytest.mark.parametrize(
    "raw",
    [b"", b"{}", b'{"dsseEnvelope": {"payload": "!!"}}', b'{"dsseEnvelope": {"payload": "WzFd"}}'],
    ids=["empty", "no-envelope", "bad-base64", "payload-not-object"],
)
def test_malformed_bundles(raw: bytes) -> None:
    with pytest.raises(bundle.MalformedBundle):
        bundle.root_digest(raw)


def test_cli_keygen_sign_verify_and_tamper(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    assert cli.main(["keygen", str(tmp_path / "keys")]) == 0
    assert cli.main(["sign", str(model), "--private-key", str(tmp_path / "keys/private.pem")]) == 0
    digest = capsys.readouterr().out.strip().splitlines()[-1]
    assert digest.startswith("sha256:")
    verify_args = [
        "verify",
        model.as_uri(),
        "--digest",
        digest,
        "--public-key",
        str(tmp_path / "keys/public.pem"),
    ]
    assert cli.main(verify_args) == 0
    assert json.loads(capsys.readouterr().out)["reason"] == "Verified"
    (model / "config.json").write_text('{"tampered": true}')
    assert cli.main(verify_args) == 1
    assert json.loads(capsys.readouterr().out)["reason"] == "DigestMismatch"

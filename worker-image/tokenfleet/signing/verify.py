"""Sign and verify model directories with OpenSSF model-signing; map its errors to a verdict.

model_signing raises ``ValueError`` for nearly everything, so the mapping reads its messages
(pinned to model-signing 1.1): "Key mismatch" is another key's signature (UntrustedSigner),
"Signature mismatch" lists changed, missing or extra files (DigestMismatch), and cryptography's
``InvalidSignature`` is a signature that does not match its payload (SignatureInvalid). A valid
signature over files whose root digest is not the one the spec pins is a DigestMismatch too.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from model_signing import hashing, signing, verifying

from tokenfleet.signing import bundle, fetch, keys
from tokenfleet.signing.verdict import Reason, Verdict


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Trust:
    """Who may have signed: a PEM public key, or a Sigstore identity and issuer. Exactly one."""

    public_key: Path | None = None
    identity: str = ""
    issuer: str = ""

    def __post_init__(self) -> None:
        if (self.public_key is None) == (not self.identity):
            raise ValueError("trust: give exactly one of a public key or a Sigstore identity")


def sign(model_dir: Path, *, private_key: Path, signature: Path) -> str:
    """Sign every file of ``model_dir`` with an EC key; return the root digest to pin.

    The signature file is left out of the manifest so it may live inside the directory.
    """
    ignored = (
        [signature.resolve().relative_to(model_dir.resolve())]
        if signature.resolve().is_relative_to(model_dir.resolve())
        else []
    )
    config = hashing.Config().set_ignored_paths(paths=ignored)
    signing.Config().use_elliptic_key_signer(private_key=private_key).set_hashing_config(
        config
    ).sign(model_dir, signature)
    return bundle.root_digest(signature.read_bytes())


def verify(model_dir: Path, *, signature: Path, trust: Trust, expected_digest: str) -> Verdict:
    """Check the signature, the signer, every file's digest and the pinned root digest."""
    try:
        raw = signature.read_bytes()
    except OSError as error:
        return Verdict(reason=Reason.ARTIFACT_UNREACHABLE, message=f"signature: {error}")
    try:
        digest = bundle.root_digest(raw)
    except bundle.MalformedBundle as error:
        return Verdict(reason=Reason.SIGNATURE_INVALID, message=str(error))
    try:
        config, signer = _verifier(trust)
    except (OSError, ValueError) as error:
        return Verdict(
            reason=Reason.UNTRUSTED_SIGNER, message=f"trust policy unusable: {error}", digest=digest
        )
    failure = _check(config, model_dir, signature)
    if failure is not None:
        return dataclasses.replace(failure, digest=digest)
    if expected_digest and digest != expected_digest:
        return Verdict(
            reason=Reason.DIGEST_MISMATCH,
            message=f"signed files have root digest {digest}, but the spec pins {expected_digest}",
            digest=digest,
            signer=signer,
        )
    return Verdict(
        reason=Reason.VERIFIED,
        message="signature and every file verified",
        digest=digest,
        signer=signer,
    )


def _verifier(trust: Trust) -> tuple[verifying.Config, str]:
    if trust.public_key is not None:
        signer = keys.signer_name(trust.public_key.read_bytes())
        config = verifying.Config().use_elliptic_key_verifier(public_key=trust.public_key)
        return config, signer
    config = verifying.Config().use_sigstore_verifier(
        identity=trust.identity, oidc_issuer=trust.issuer
    )
    return config, f"sigstore:{trust.identity} ({trust.issuer})"


def _check(config: verifying.Config, model_dir: Path, signature: Path) -> Verdict | None:
    """None when model_signing accepts; otherwise the verdict its exception means."""
    if not model_dir.is_dir():
        return Verdict(
            reason=Reason.ARTIFACT_UNREACHABLE, message=f"{model_dir}: no such directory"
        )
    try:
        config.verify(model_dir, signature)
    except InvalidSignature:
        return Verdict(
            reason=Reason.SIGNATURE_INVALID,
            message="the signature does not match its signed manifest",
        )
    except ValueError as error:
        return Verdict(reason=_reason_of(str(error)), message=str(error))
    except OSError as error:
        return Verdict(reason=Reason.ARTIFACT_UNREACHABLE, message=str(error))
    except Exception as error:  # sigstore's verification errors share no base with the above
        return Verdict(reason=_reason_of(str(error)), message=f"{type(error).__name__}: {error}")
    return None


def _reason_of(message: str) -> Reason:
    if message.startswith("Signature mismatch"):
        return Reason.DIGEST_MISMATCH
    lowered = message.lower()
    if "key mismatch" in lowered or "identity" in lowered or "issuer" in lowered:
        return Reason.UNTRUSTED_SIGNER
    return Reason.SIGNATURE_INVALID


def verify_artifact(
    uri: str,
    *,
    trust: Trust,
    expected_digest: str,
    signature_uri: str = "",
    workdir: Path | None = None,
    timeout: float = fetch.DEFAULT_TIMEOUT,
    limits: fetch.Limits | None = None,
) -> tuple[Verdict, Path | None]:
    """Fetch, then verify; return the verdict and, when verified, the local model directory.

    Remote files land in ``workdir`` (a fresh temporary directory if None, left for the caller:
    the engine serves from it).
    """
    if workdir is None and not uri.startswith("file://"):
        workdir = Path(tempfile.mkdtemp(prefix="tokenfleet-artifact-"))
    try:
        fetched = fetch.fetch(
            uri,
            signature_uri=signature_uri,
            workdir=workdir or Path(),
            timeout=timeout,
            limits=limits,
        )
    except fetch.Unreachable as error:
        return Verdict(reason=Reason.ARTIFACT_UNREACHABLE, message=str(error)), None
    verdict = verify(
        fetched.model_dir, signature=fetched.signature, trust=trust, expected_digest=expected_digest
    )
    return verdict, (fetched.model_dir if verdict.verified else None)

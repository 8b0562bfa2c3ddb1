"""EC P-256 signing keys in PEM files, and the signer name of a public key."""

from __future__ import annotations

import hashlib
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

PRIVATE_KEY_FILE = "private.pem"
PUBLIC_KEY_FILE = "public.pem"


def generate(directory: Path) -> tuple[Path, Path]:
    """Write a new P-256 key pair into ``directory``; return (private, public) paths.

    P-256 because model_signing accepts P-256/384/521 and P-256 is what every KMS offers.
    The private key file is created readable by its owner only.
    """
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    private = directory / PRIVATE_KEY_FILE
    public = directory / PUBLIC_KEY_FILE
    private.touch(mode=0o600, exist_ok=False)
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(public_pem(key.public_key()))
    return private, public


def public_pem(key: ec.EllipticCurvePublicKey) -> bytes:
    """SubjectPublicKeyInfo PEM, the form model_signing hashes for its key hint."""
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def signer_name(pem: bytes) -> str:
    """``key:sha256:<hex>`` — the same hash model_signing records as the bundle's key hint."""
    key = serialization.load_pem_public_key(pem)
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ValueError("the public key is not an elliptic-curve key")
    return "key:sha256:" + hashlib.sha256(public_pem(key)).hexdigest()

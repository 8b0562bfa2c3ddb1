"""Credentials for the local control plane: a service-account key, an admin token, a kubeconfig."""

from __future__ import annotations

import secrets
from pathlib import Path

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa


def write_service_account_key(path: Path) -> None:
    """An RSA key that signs and verifies service-account tokens (one key does both here)."""
    if path.exists():
        return
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def write_token_file(path: Path) -> str:
    """A static token file with one cluster-admin user; returns the token."""
    if path.exists():
        return path.read_text().split(",", 1)[0]
    token = secrets.token_hex(24)
    path.write_text(f'{token},tokenfleet-admin,tokenfleet-admin,"system:masters"\n')
    path.chmod(0o600)
    return token


def kubeconfig(*, server: str, token: str, user: str = "tokenfleet-admin") -> str:
    """A kubeconfig for the local API server (its serving certificate is self-signed)."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "tokenfleet", "cluster": {"server": server, "insecure-skip-tls-verify": True}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {
                "name": "tokenfleet",
                "context": {"cluster": "tokenfleet", "user": user, "namespace": "default"},
            }
        ],
        "current-context": "tokenfleet",
    }
    return yaml.safe_dump(doc, sort_keys=False)

"""Credentials for the local control plane: a service-account key, an admin token, a kubeconfig,
and a small certificate authority for client certificates (the real node's kubelet, and the API
server's own client certificate towards that kubelet)."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import secrets
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


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


def kubeconfig(
    *, server: str, token: str, user: str = "tokenfleet-admin", ca: Path | None = None
) -> str:
    """A kubeconfig for the local API server, verifying its serving certificate against ``ca``
    (the self-signed one it writes into its cert dir on first start). Only before that first
    start, when there is none yet, does it skip verification; the stack then writes it again."""
    cluster: dict[str, Any] = {"server": server}
    if ca is not None and ca.exists():
        cluster["certificate-authority-data"] = base64.b64encode(ca.read_bytes()).decode()
    else:
        cluster["insecure-skip-tls-verify"] = True
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "tokenfleet", "cluster": cluster}],
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


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CertPair:
    """A PEM certificate and its private key on disk."""

    cert: Path
    key: Path


def write_ca(folder: Path) -> CertPair:
    """The stack's certificate authority (made once per state directory): the API server trusts
    client certificates it signed (the real node's kubelet), and so does the kubelet."""
    pair = CertPair(cert=folder / "ca.crt", key=folder / "ca.key")
    if pair.cert.exists() and pair.key.exists():
        return pair
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tokenfleet-local-ca")])
    cert = (
        _builder(name, name, key.public_key(), days=3650)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    _write_pair(pair, cert, key)
    return pair


def issue_client_cert(
    ca: CertPair, *, common_name: str, groups: tuple[str, ...], out: CertPair
) -> CertPair:
    """A client certificate signed by ``ca``: Kubernetes reads the user from the common name and
    the groups from the organizations (``system:node:NAME`` in ``system:nodes`` for a kubelet)."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        + [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    )
    cert = (
        _builder(subject, ca_cert.subject, key.public_key(), days=365)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write_pair(out, cert, key)
    return out


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey, *, days: int
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # tolerate a little clock skew
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def _write_pair(pair: CertPair, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    pair.cert.parent.mkdir(parents=True, exist_ok=True)
    pair.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    pair.key.chmod(0o600)
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def client_cert_kubeconfig(*, server: str, ca_file: Path | None, user: str, pair: CertPair) -> str:
    """A kubeconfig that authenticates with a client certificate."""
    cluster: dict[str, object] = {"server": server}
    if ca_file is None:
        cluster["insecure-skip-tls-verify"] = True
    else:
        cluster["certificate-authority"] = str(ca_file)
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "tokenfleet", "cluster": cluster}],
        "users": [
            {
                "name": user,
                "user": {"client-certificate": str(pair.cert), "client-key": str(pair.key)},
            }
        ],
        "contexts": [{"name": "tokenfleet", "context": {"cluster": "tokenfleet", "user": user}}],
        "current-context": "tokenfleet",
    }
    return yaml.safe_dump(doc, sort_keys=False)

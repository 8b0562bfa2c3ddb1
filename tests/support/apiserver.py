"""A second real kube-apiserver beside the session's, on the same etcd, with what the session's
does not have: a serving certificate from a CA of our own (so clients can verify it), client
certificate authentication, and an audit log of every write (who wrote what, and when).

Built from the devstack's own command line (controlplane.apiserver), so it serves the same
cluster: objects written through either server are seen by both.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import ipaddress
import json
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from support.cluster import BIN_DIR, Cluster
from tokenfleet.devstack import controlplane

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "verbs": ["create", "update", "patch", "delete"]},
        {"level": "None"},
    ],
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path  # CN=tokenfleet-cert-admin, O=system:masters
    client_key: Path


def _name(cn: str, org: str = "") -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(parts)


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    return path


def _sign(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    *,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    ca: bool = False,
    server: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def make_pki(folder: Path, *, cn: str = "tokenfleet-test-ca") -> Pki:
    """A CA, a serving certificate for 127.0.0.1 and an admin client certificate."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(cn)
    ca = _sign(ca_name, ca_key, issuer=ca_name, issuer_key=ca_key, ca=True)
    pem = serialization.Encoding.PEM
    (folder / "ca.crt").write_bytes(ca.public_bytes(pem))
    server_key, client_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    server = _sign(
        _name("kube-apiserver"), server_key, issuer=ca_name, issuer_key=ca_key, server=True
    )
    client = _sign(
        _name("tokenfleet-cert-admin", "system:masters"),
        client_key,
        issuer=ca_name,
        issuer_key=ca_key,
    )
    (folder / "server.crt").write_bytes(server.public_bytes(pem))
    (folder / "client.crt").write_bytes(client.public_bytes(pem))
    return Pki(
        ca=folder / "ca.crt",
        server_cert=folder / "server.crt",
        server_key=_write_key(server_key, folder / "server.key"),
        client_cert=folder / "client.crt",
        client_key=_write_key(client_key, folder / "client.key"),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class AuditedServer:
    url: str
    pki: Pki
    audit_log: Path
    admin_token: str

    def writes(self, **match: str) -> list[dict[str, Any]]:
        """Audit events of completed writes whose objectRef has every ``match`` field."""
        out = []
        for line in self.audit_log.read_text().splitlines():
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            if event.get("stage") == "ResponseComplete" and all(
                ref.get(k) == v for k, v in match.items()
            ):
                out.append(event)
        return out

    def kubeconfig(
        self, path: Path, user: dict[str, Any], *, ca: Path | None = None, trust: str = "ca"
    ) -> Path:
        """trust: "ca" (ours, or ``ca``), "system" (no CA: the system's), "insecure"."""
        cluster: dict[str, Any] = {"server": self.url}
        if trust == "ca":
            cluster["certificate-authority"] = str(ca or self.pki.ca)
        elif trust == "insecure":
            cluster["insecure-skip-tls-verify"] = True
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "audited", "cluster": cluster}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "audited", "context": {"cluster": "audited", "user": "u"}}],
            "current-context": "audited",
        }
        path.write_text(yaml.safe_dump(doc))
        return path


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def audited_apiserver(cluster: Cluster, folder: Path) -> Iterator[AuditedServer]:
    pki = make_pki(folder / "pki")
    policy = folder / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    audit_log = folder / "audit.log"
    audit_log.touch()
    ports = controlplane.Ports(**{**cluster.info["ports"], "apiserver": _free_port()})
    files = controlplane.Files(root=cluster.state_dir)
    argv = [
        a for a in controlplane.apiserver(BIN_DIR, ports, files) if not a.startswith("--cert-dir")
    ]
    argv += [
        f"--tls-cert-file={pki.server_cert}",
        f"--tls-private-key-file={pki.server_key}",
        f"--client-ca-file={pki.ca}",
        f"--audit-policy-file={policy}",
        f"--audit-log-path={audit_log}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",  # an event is on disk before the response: no lag to wait out
    ]
    token = files.tokens.read_text().split(",", 1)[0]
    server = AuditedServer(
        url=f"https://127.0.0.1:{ports.apiserver}", pki=pki, audit_log=audit_log, admin_token=token
    )
    with (folder / "apiserver.log").open("ab") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        context = ssl.create_default_context(cafile=str(pki.ca))
        deadline = time.monotonic() + 90
        while True:
            request = urllib.request.Request(
                f"{server.url}/readyz", headers={"Authorization": f"Bearer {token}"}
            )
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(request, context=context, timeout=2) as answer,
            ):
                if answer.status == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((folder / "apiserver.log").read_text()[-3000:])
            time.sleep(0.3)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

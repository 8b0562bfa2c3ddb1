"""Attacks on a fetcher that downloads what a ModelAdapter's author names (the operator's
verification; issue #35 finding 6).

Matrix, against a real HTTP server on loopback: an artifact larger than the byte cap (declared
and undeclared length) × a server that trickles bytes (the whole fetch has a deadline, not each
read) × private, loopback and link-local addresses (refused unless their network is allowed,
redirects included) × a host that resolves to an allowed address when checked and to loopback
when connected (DNS rebinding, on the first URL and on a redirect: the checked address is the
one connected to) × file:// artifacts outside the allowed roots. Without limits a fetch behaves
as before (the workers' own fetches).
"""

from __future__ import annotations

import datetime
import http.server
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tokenfleet.signing import fetch

LOOPBACK = ("127.0.0.0/8",)


class _Attacker(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path.startswith("/big-declared"):
            self._head(200, length=10 * 1024 * 1024)
            self.wfile.write(b"x" * 1024)
        elif self.path.startswith("/big"):
            self._head(200, chunked=True)
            for _ in range(64):  # 4 MiB, no length declared
                piece = b"x" * 65536
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
        elif self.path.startswith("/trickle"):
            self._head(200, chunked=True)
            try:
                for _ in range(600):  # a byte every 0.1 s: each read is quick, the whole is not
                    self.wfile.write(b"1\r\nx\r\n")
                    self.wfile.flush()
                    time.sleep(0.1)
            except OSError:
                return
        elif self.path.startswith("/to-ftp"):
            self.send_response(302)
            self.send_header("Location", "ftp://127.0.0.1/model.sig")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path.startswith("/to-metadata"):
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self._head(200, length=5)
            self.wfile.write(b"small")

    def _head(self, status: int, *, length: int = 0, chunked: bool = False) -> None:
        self.send_response(status)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(length))
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Attacker)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def limits(**overrides: object) -> fetch.Limits:
    base: dict[str, object] = {
        "max_bytes": 1024 * 1024,
        "seconds": 2.0,
        "allowed_networks": LOOPBACK,
    }
    return fetch.Limits(**{**base, **overrides})  # type: ignore[arg-type]


def fetch_signature(url: str, tmp_path: Path, bounds: fetch.Limits | None) -> fetch.Fetched:
    return fetch.fetch(
        url + "/artifact", signature_uri=url, workdir=tmp_path, timeout=1.0, limits=bounds
    )


@pytest.mark.parametrize("path", ["/big", "/big-declared"], ids=["undeclared", "declared"])
def test_an_artifact_over_the_byte_cap_is_refused(server: str, tmp_path: Path, path: str) -> None:
    with pytest.raises(fetch.Unreachable, match="over 1048576 bytes"):
        fetch_signature(server + path, tmp_path, limits())
    written = sum(f.stat().st_size for f in tmp_path.rglob("*") if f.is_file())
    assert written <= 1024 * 1024  # it stopped at the cap: the volume never filled


def test_a_trickling_server_meets_the_whole_fetch_deadline(server: str, tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(fetch.Unreachable, match="over 2 s in all"):
        fetch_signature(server + "/trickle", tmp_path, limits())
    assert time.monotonic() - started < 5  # the deadline plus at most one read's timeout


@pytest.mark.parametrize(
    ("path", "allowed", "refused"),
    [
        pytest.param("/sig", (), "127.0.0.1, a private, loopback", id="loopback-refused"),
        pytest.param("/sig", ("10.250.0.1/32",), "127.0.0.1, a private", id="other-allowed"),
        pytest.param("/to-metadata", LOOPBACK, "169.254.169.254", id="redirect-to-metadata"),
        pytest.param("/to-ftp", LOOPBACK, "not an http", id="redirect-to-ftp"),
        pytest.param("/sig", LOOPBACK, "", id="loopback-allowed"),
    ],
)
def test_private_addresses_are_refused_unless_allowed(
    server: str, tmp_path: Path, path: str, allowed: tuple[str, ...], refused: str
) -> None:
    bounds = limits(allowed_networks=allowed)
    if refused:
        with pytest.raises(fetch.Unreachable, match=refused):
            fetch_signature(server + path, tmp_path, bounds)
    else:
        got = fetch_signature(server + path, tmp_path, bounds)
        assert got.signature.read_bytes() == b"small"


@pytest.mark.parametrize(
    "host",
    ["169.254.169.254", "10.0.0.1", "192.168.1.1", "[::1]", "[fd00:ec2::254]", "100.64.0.1"],
)
def test_metadata_and_private_literals_are_refused(tmp_path: Path, host: str) -> None:
    with pytest.raises(fetch.Unreachable, match="private, loopback or link-local"):
        fetch_signature(f"http://{host}/x", tmp_path, limits(allowed_networks=()))


def test_file_artifacts_are_read_only_below_the_allowed_roots(tmp_path: Path) -> None:
    inside = tmp_path / "examples" / "a"
    inside.mkdir(parents=True)
    (inside / "model.sig").write_text("{}")
    bounds = limits(file_roots=(str(tmp_path / "examples"),))
    assert fetch.fetch(inside.as_uri(), workdir=tmp_path, limits=bounds).model_dir == inside
    with pytest.raises(fetch.Unreachable, match="only below"):
        fetch.fetch(Path("/etc").as_uri(), workdir=tmp_path, limits=bounds)
    with pytest.raises(fetch.Unreachable, match="none allowed"):
        fetch.fetch(inside.as_uri(), workdir=tmp_path, limits=limits())


def test_without_limits_a_fetch_is_as_before(server: str, tmp_path: Path) -> None:
    got = fetch_signature(server + "/sig", tmp_path, None)  # loopback, unbounded: the workers'
    assert got.signature.read_bytes() == b"small"


class _Named(http.server.BaseHTTPRequestHandler):
    """Answers every GET with the server's own name; /hop redirects to the rebinding host."""

    protocol_version = "HTTP/1.1"
    name = b""

    def do_GET(self) -> None:
        if self.path.startswith("/hop"):
            self.send_response(302)
            self.send_header(
                "Location", f"http://rebind-2.test:{self.server.server_address[1]}/sig"
            )
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.name)))
        self.end_headers()
        self.wfile.write(self.name)

    def log_message(self, format: str, *args: object) -> None:
        pass


def _serve(
    address: str, port: int, name: bytes, tls: ssl.SSLContext | None = None
) -> http.server.ThreadingHTTPServer:
    handler = type("Handler", (_Named,), {"name": name})
    httpd = http.server.ThreadingHTTPServer((address, port), handler)
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def _rebinding_resolver(first: str, asked: list[str]) -> Callable[..., list[tuple[object, ...]]]:
    """getaddrinfo, except that rebind-*.test is ``first`` the first time each name is asked
    and 127.0.0.1 after that (what a rebinding attacker's DNS server with a zero TTL does)."""
    real: Callable[..., list[tuple[object, ...]]] = socket.getaddrinfo

    def resolve(host: object, *args: object, **kwargs: object) -> list[tuple[object, ...]]:
        if not (isinstance(host, str) and host.startswith("rebind-")):
            return real(host, *args, **kwargs)
        answer = first if host not in asked else "127.0.0.1"
        asked.append(host)
        sock_port = args[0] if args and isinstance(args[0], int) else 0
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (answer, sock_port))]

    return resolve


@pytest.fixture
def rebinding(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, list[str]]]:
    """Two servers on one port: 127.0.0.2 stands for the public address the policy allows (so
    nothing leaves the machine), 127.0.0.1 for the private service behind it; rebind-*.test
    resolves to the first, then to the second (:func:`_rebinding_resolver`)."""
    public = _serve("127.0.0.2", 0, b"public")
    port = public.server_address[1]
    private = _serve("127.0.0.1", port, b"private")
    asked: list[str] = []
    monkeypatch.setattr(socket, "getaddrinfo", _rebinding_resolver("127.0.0.2", asked))
    yield port, asked
    public.shutdown()
    private.shutdown()


@pytest.mark.parametrize(
    "start",
    [
        pytest.param("rebind-1.test", id="first-url"),
        pytest.param("127.0.0.2", id="redirect"),  # an honest first hop to /hop → rebind-2.test
    ],
)
def test_a_rebinding_host_cannot_reach_loopback(
    rebinding: tuple[int, list[str]], tmp_path: Path, start: str
) -> None:
    """The address checked is the address connected to: a host that resolves to an allowed
    address for the check and to 127.0.0.1 for the connection reaches the allowed server, never
    loopback (issue 35, finding 6: the check resolved, then urllib resolved again)."""
    port, asked = rebinding
    bounds = limits(allowed_networks=("127.0.0.2/32",))
    path = "/sig" if start.startswith("rebind-") else "/hop"
    got = fetch_signature(f"http://{start}:{port}{path}", tmp_path, bounds)
    assert got.signature.read_bytes() == b"public", f"resolved {asked}"


def _self_signed(folder: Path, host: str) -> tuple[Path, Path]:
    """A certificate for ``host`` (DNS name only, no IP) that is its own trust anchor."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / f"{host}.crt", folder / f"{host}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@pytest.mark.parametrize(
    ("cert_host", "outcome"),
    [
        pytest.param("rebind-1.test", "public", id="certificate-for-the-url-host"),
        pytest.param("other.test", "certificate verify failed", id="certificate-for-another"),
    ],
)
def test_a_pinned_https_connection_still_verifies_the_urls_host(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cert_host: str,
    outcome: str,
) -> None:
    """Pinning moves only the TCP connection: SNI and the certificate's hostname check stay
    on the URL's name (a certificate naming only rebind-1.test verifies when the connection is
    pinned to its checked address; one for another name does not)."""
    cert, key = _self_signed(tmp_path, cert_host)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    public = _serve("127.0.0.3", 0, b"public", tls)
    port = public.server_address[1]
    private = _serve("127.0.0.1", port, b"private", tls)
    monkeypatch.setattr(socket, "getaddrinfo", _rebinding_resolver("127.0.0.3", []))
    monkeypatch.setattr(ssl, "_create_default_https_context", lambda: _trusting(cert))
    bounds = limits(allowed_networks=("127.0.0.3/32",))
    url = f"https://rebind-1.test:{port}/sig"
    try:
        if outcome == "public":
            got = fetch_signature(url, tmp_path / "out", bounds)
            assert got.signature.read_bytes() == b"public"
        else:
            with pytest.raises(fetch.Unreachable, match=outcome):
                fetch_signature(url, tmp_path / "out", bounds)
    finally:
        public.shutdown()
        private.shutdown()


def _trusting(cert: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(cert))
    assert context.check_hostname and context.verify_mode is ssl.CERT_REQUIRED
    return context

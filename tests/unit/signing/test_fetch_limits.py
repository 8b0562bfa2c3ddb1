"""Attacks on a fetcher that downloads what a ModelAdapter's author names (the operator's
verification; issue #35 finding 6).

Matrix, against a real HTTP server on loopback: an artifact larger than the byte cap (declared
and undeclared length) × a server that trickles bytes (the whole fetch has a deadline, not each
read) × private, loopback and link-local addresses (refused unless their network is allowed,
redirects included) × file:// artifacts outside the allowed roots. Without limits a fetch
behaves as before (the workers' own fetches).
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

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

"""Bring an artifact's files and signature onto local disk: file://, http(s):// and s3://.

A remote artifact is a directory of files beside its signature (``<uri>/model.sig`` unless
``signature_uri`` says otherwise). The signature's manifest says which files to download, so no
directory listing is needed; only listed files are fetched, and verification then checks each.
Any failure to read raises :class:`Unreachable` (the ArtifactUnreachable verdict).
"""

from __future__ import annotations

import dataclasses
import functools
import http.client
import ipaddress
import shutil
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from tokenfleet.signing import bundle

#: The signature's name beside the model files when ``signature_uri`` is empty.
SIGNATURE_FILE = "model.sig"
#: Seconds one connection or read may stall before the fetch fails (not the whole download).
DEFAULT_TIMEOUT = 30.0
_CHUNK = 1 << 20  # bytes copied per read: large files stream without being held in memory


class Unreachable(Exception):
    """The artifact or its signature could not be read."""


#: Addresses a bounded fetch refuses unless allowed by name: loopback, private, link-local
#: (cloud metadata at 169.254.169.254 and fd00:ec2::254), carrier-grade NAT, unique-local,
#: multicast, unspecified. A ModelAdapter's author names the URL; the operator must not become
#: their way into the cluster's own services or the node's metadata endpoint.
PRIVATE_NETWORKS = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "::/128",
        "::1/128",
        "::ffff:0:0/96",
        "fc00::/7",
        "fe80::/10",
        "ff00::/8",
    )
)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """Bounds of one fetch, for a fetcher that downloads what someone else names (the operator).

    ``max_bytes`` and ``seconds`` hold for the whole fetch, signature and files together;
    ``allowed_networks`` are the private networks (CIDR) it may still reach, ``file_roots`` the
    directories a file:// artifact may lie below (none: file:// refused)."""

    max_bytes: int
    seconds: float
    allowed_networks: tuple[str, ...] = ()
    file_roots: tuple[str, ...] = ()


class _Spend:
    """What a bounded fetch has used so far: bytes, and time against its deadline."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.bytes = 0
        self.deadline = time.monotonic() + limits.seconds

    def remaining_seconds(self, url: str) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Unreachable(f"{url}: the fetch took over {self.limits.seconds:g} s in all")
        return left

    def take(self, count: int, url: str) -> None:
        self.bytes += count
        if self.bytes > self.limits.max_bytes:
            raise Unreachable(
                f"{url}: the artifact is over {self.limits.max_bytes} bytes, the most this "
                "fetcher downloads"
            )


def checked_address(host: str, allowed_networks: tuple[str, ...]) -> str:
    """The one address a bounded fetch connects to for ``host``: the host is resolved once,
    every address it resolves to is checked, and the first is returned to connect to — never
    resolved again, so a name that answers differently the second time (DNS rebinding) cannot
    slip a private address past the check. Raises :class:`Unreachable` when the host does not
    resolve, or when an address of it is private and its network is not allowed."""
    allowed = [ipaddress.ip_network(n, strict=False) for n in allowed_networks]
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError as error:
        raise Unreachable(f"{host} does not resolve: {error}") from error
    addresses = [str(info[4][0]).split("%", 1)[0] for info in infos]
    for text in addresses:
        address = ipaddress.ip_address(text)
        if any(address in net for net in allowed):
            continue
        if any(address in net for net in PRIVATE_NETWORKS):
            raise Unreachable(
                f"{host} is {address}, a private, loopback or link-local address this fetcher "
                "does not reach (allow its network in the operator's settings if it is yours)"
            )
    if not addresses:
        raise Unreachable(f"{host} does not resolve: no address")
    return addresses[0]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Fetched:
    """Where the artifact's files and signature are on local disk."""

    model_dir: Path
    signature: Path


class Source(Protocol):
    """Reads one object of a remote artifact into a local file."""

    def download(self, url: str, target: Path) -> None: ...


def signature_location(uri: str, signature_uri: str = "") -> str:
    """The signature's URI: as given, or ``model.sig`` inside the artifact's directory."""
    return signature_uri or f"{uri.rstrip('/')}/{SIGNATURE_FILE}"


def fetch(
    uri: str,
    *,
    signature_uri: str = "",
    workdir: Path,
    timeout: float = DEFAULT_TIMEOUT,
    limits: Limits | None = None,
) -> Fetched:
    """Local paths of the artifact's files and signature; downloads into ``workdir`` if remote.
    ``limits``: bound the whole fetch (bytes, time, addresses, local roots); None: unbounded."""
    scheme = urllib.parse.urlsplit(uri).scheme
    signature_url = signature_location(uri, signature_uri)
    if scheme == "file":
        if limits is not None:
            _inside_roots((uri, signature_url), limits.file_roots)
        return _local(uri, signature_url)
    source: Source
    if scheme in ("http", "https"):
        source = HttpSource(timeout=timeout, spend=_Spend(limits) if limits else None)
    elif limits is not None:  # an S3 client's downloads cannot be bounded as they go
        raise Unreachable(f"{scheme}:// artifacts are not fetched here: use http(s)")
    elif scheme == "s3":
        source = S3Source.create()
    else:
        raise Unreachable(f"unsupported artifact scheme {scheme!r}: use file, http(s) or s3")
    return download(uri, signature_url, source=source, workdir=workdir)


def _inside_roots(urls: tuple[str, ...], roots: tuple[str, ...]) -> None:
    for url in urls:
        path = _path_of(url).resolve()
        if not any(path.is_relative_to(Path(root).resolve()) for root in roots):
            raise Unreachable(
                f"{url}: file:// artifacts are read here only below "
                f"{', '.join(roots) or '(no directory: none allowed)'}"
            )


def _path_of(url: str) -> Path:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "file":
        raise Unreachable(f"a file:// artifact needs a file:// signature, not {url!r}")
    return Path(urllib.parse.unquote(parts.path))


def _local(uri: str, signature_url: str) -> Fetched:
    model_dir, signature = _path_of(uri), _path_of(signature_url)
    if not model_dir.is_dir():
        raise Unreachable(f"{uri}: no such model directory")
    if not signature.is_file():
        raise Unreachable(f"{signature_url}: no such signature file")
    return Fetched(model_dir=model_dir, signature=signature)


def download(uri: str, signature_url: str, *, source: Source, workdir: Path) -> Fetched:
    """Download the signature, then every file its manifest lists, below ``workdir``."""
    signature = workdir / SIGNATURE_FILE
    model_dir = workdir / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    source.download(signature_url, signature)
    try:
        names = bundle.file_names(signature.read_bytes())
    except bundle.MalformedBundle:
        # Verification reports SignatureInvalid for it; there is nothing to download.
        return Fetched(model_dir=model_dir, signature=signature)
    base = uri.rstrip("/")
    for name in names:
        target = model_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        source.download(f"{base}/{urllib.parse.quote(name)}", target)
    return Fetched(model_dir=model_dir, signature=signature)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HttpSource:
    """Plain GETs; redirects are followed, anything but 200 fails. With ``spend`` (a bounded
    fetch), every URL and redirect is checked against the address policy first, and the bytes
    and the deadline are counted across all of the fetch's downloads."""

    timeout: float = DEFAULT_TIMEOUT
    spend: _Spend | None = None

    def download(self, url: str, target: Path) -> None:
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise Unreachable(f"{url}: not an http(s) URL")
        spend = self.spend
        opener = (
            urllib.request.build_opener()
            if spend is None
            else _pinned_opener(spend.limits.allowed_networks)
        )
        try:
            timeout = (
                self.timeout if spend is None else min(self.timeout, spend.remaining_seconds(url))
            )
            with opener.open(url, timeout=timeout) as response, target.open("wb") as out:
                if spend is None:
                    shutil.copyfileobj(response, out, _CHUNK)
                    return
                _declared(response, spend, url)
                # read1: one receive per call, each bounded by the socket's timeout, so the
                # deadline is checked between receives (a trickle cannot hold a read open).
                while piece := response.read1(_CHUNK):
                    spend.take(len(piece), url)
                    spend.remaining_seconds(url)
                    out.write(piece)
        except Unreachable:
            raise
        except (urllib.error.URLError, OSError, ValueError) as error:
            raise Unreachable(f"{url}: {error}") from error


def _declared(response: object, spend: _Spend, url: str) -> None:
    """Refuse before reading when the declared length already exceeds what is left."""
    length = getattr(response, "headers", {}).get("Content-Length")
    if length and length.isdigit() and spend.bytes + int(length) > spend.limits.max_bytes:
        spend.take(int(length), url)


def _pinned_opener(allowed_networks: tuple[str, ...]) -> urllib.request.OpenerDirector:
    """An opener whose every connection (the first URL's and each redirect's) goes to the
    address :func:`checked_address` checked. No proxy: a proxy would resolve the host itself,
    out of the policy's reach. TLS still names the host: SNI, ``Host`` and the certificate's
    hostname check are the URL's, only the TCP connection is pinned."""
    return urllib.request.build_opener(
        urllib.request.ProxyHandler({}),
        _PinnedHTTPHandler(allowed_networks),
        _PinnedHTTPSHandler(allowed_networks),
        _CheckedRedirects(),
    )


Connector = Callable[[tuple[str, int], float | None, tuple[str, int] | None], socket.socket]


def _pinned_connector(allowed_networks: tuple[str, ...]) -> Connector:
    """``socket.create_connection`` for one http.client connection, to the checked address."""

    def connect(
        address: tuple[str, int],
        timeout: float | None = None,
        source: tuple[str, int] | None = None,
    ) -> socket.socket:
        host, port = address
        pinned = checked_address(host, allowed_networks)
        return socket.create_connection((pinned, port), timeout, source)

    return connect


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(
        self, host: str, *, timeout: float | None, allowed_networks: tuple[str, ...]
    ) -> None:
        super().__init__(host, timeout=timeout)
        self._create_connection = _pinned_connector(allowed_networks)


class _PinnedHTTPS(http.client.HTTPSConnection):
    """HTTPSConnection.connect wraps the pinned socket with ``server_hostname=self.host``: SNI
    and the certificate check stay on the URL's name."""

    def __init__(
        self,
        host: str,
        *,
        timeout: float | None,
        context: ssl.SSLContext | None = None,
        allowed_networks: tuple[str, ...],
    ) -> None:
        super().__init__(host, timeout=timeout, context=context)
        self._create_connection = _pinned_connector(allowed_networks)


class _PinnedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, allowed_networks: tuple[str, ...]) -> None:
        super().__init__()
        self._allowed = allowed_networks

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        factory = functools.partial(_PinnedHTTP, allowed_networks=self._allowed)
        return self.do_open(factory, req)


class _PinnedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(
        self, allowed_networks: tuple[str, ...], context: ssl.SSLContext | None = None
    ) -> None:
        super().__init__(context=context)
        self._allowed, self._pinned_context = allowed_networks, context

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        factory = functools.partial(_PinnedHTTPS, allowed_networks=self._allowed)
        return self.do_open(factory, req, context=self._pinned_context)


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects stay on http(s), whose connections are pinned: urllib would also follow one to
    ftp://, which no pinned handler carries. The new host is not resolved here: its connection
    resolves it once, checks and pins it (a second resolution here would be one to rebind)."""

    def redirect_request(  # type: ignore[no-untyped-def]  # noqa: PLR0917 - urllib's signature
        self, req, fp, code, msg, headers, newurl
    ):
        if urllib.parse.urlsplit(newurl).scheme not in ("http", "https"):
            raise Unreachable(f"{newurl} (a redirect): not an http(s) URL")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


@dataclasses.dataclass(frozen=True, slots=True)
class S3Source:
    """GetObject through boto3 (the optional ``tokenfleet[s3]`` extra); credentials as usual."""

    client: object

    @classmethod
    def create(cls) -> S3Source:
        try:
            import boto3  # type: ignore[import-not-found, unused-ignore]
        except ImportError as error:
            raise Unreachable(
                "s3:// artifacts need boto3: install the extra with pip install 'tokenfleet[s3]'"
            ) from error
        return cls(boto3.client("s3"))

    def download(self, url: str, target: Path) -> None:
        parts = urllib.parse.urlsplit(url)
        key = urllib.parse.unquote(parts.path.lstrip("/"))
        try:
            self.client.download_file(parts.netloc, key, str(target))  # type: ignore[attr-defined]
        except Exception as error:  # botocore's errors are many; every one means unreachable
            raise Unreachable(f"{url}: {error}") from error

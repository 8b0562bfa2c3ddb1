"""Bring an artifact's files and signature onto local disk: file://, http(s):// and s3://.

A remote artifact is a directory of files beside its signature (``<uri>/model.sig`` unless
``signature_uri`` says otherwise). The signature's manifest says which files to download, so no
directory listing is needed; only listed files are fetched, and verification then checks each.
Any failure to read raises :class:`Unreachable` (the ArtifactUnreachable verdict).
"""

from __future__ import annotations

import dataclasses
import shutil
import urllib.error
import urllib.parse
import urllib.request
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
    uri: str, *, signature_uri: str = "", workdir: Path, timeout: float = DEFAULT_TIMEOUT
) -> Fetched:
    """Local paths of the artifact's files and signature; downloads into ``workdir`` if remote."""
    scheme = urllib.parse.urlsplit(uri).scheme
    signature_url = signature_location(uri, signature_uri)
    if scheme == "file":
        return _local(uri, signature_url)
    source: Source
    if scheme in ("http", "https"):
        source = HttpSource(timeout=timeout)
    elif scheme == "s3":
        source = S3Source.create()
    else:
        raise Unreachable(f"unsupported artifact scheme {scheme!r}: use file, http(s) or s3")
    return download(uri, signature_url, source=source, workdir=workdir)


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
    """Plain GETs; redirects are followed, anything but 200 fails."""

    timeout: float = DEFAULT_TIMEOUT

    def download(self, url: str, target: Path) -> None:
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise Unreachable(f"{url}: not an http(s) URL")
        try:
            with (
                urllib.request.urlopen(url, timeout=self.timeout) as response,  # noqa: S310
                target.open("wb") as out,
            ):
                shutil.copyfileobj(response, out, _CHUNK)
        except (urllib.error.URLError, OSError, ValueError) as error:
            raise Unreachable(f"{url}: {error}") from error


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

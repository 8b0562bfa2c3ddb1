"""Read what a model_signing bundle claims, without checking it (pure).

Used twice: before verification, to learn which files to download from an http(s):// or s3://
artifact (a forged list only makes verification fail later), and after verification succeeded,
to read the signed root digest that ``spec.artifact.digest`` pins.
"""

from __future__ import annotations

import base64
import json
import posixpath
from typing import Any


class MalformedBundle(ValueError):
    """The signature file is not a model_signing Sigstore bundle."""


def _statement(bundle: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(bundle)["dsseEnvelope"]["payload"]
        statement = json.loads(base64.b64decode(payload))
    except (ValueError, KeyError, TypeError) as error:
        raise MalformedBundle(f"not a model_signing bundle: {error}") from error
    if not isinstance(statement, dict):
        raise MalformedBundle("the bundle's payload is not an in-toto statement")
    return statement


def root_digest(bundle: bytes) -> str:
    """The in-toto subject digest (sha256 over every file's digest), as ``sha256:<hex>``."""
    try:
        value = _statement(bundle)["subject"][0]["digest"]["sha256"]
    except (KeyError, IndexError, TypeError) as error:
        raise MalformedBundle(f"the statement has no subject digest: {error}") from error
    return f"sha256:{value}"


def file_names(bundle: bytes) -> list[str]:
    """Relative paths of the signed files; refuses names that would escape the model directory."""
    try:
        names = [str(r["name"]) for r in _statement(bundle)["predicate"]["resources"]]
    except (KeyError, TypeError) as error:
        raise MalformedBundle(f"the statement lists no resources: {error}") from error
    for name in names:
        normal = posixpath.normpath(name)
        if normal.startswith(("/", "../")) or normal in ("..", ".") or normal != name:
            raise MalformedBundle(f"unsafe file name in the signed manifest: {name!r}")
    return names

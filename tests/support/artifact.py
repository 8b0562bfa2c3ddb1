"""The real signed tiny artifact that integration tests deploy when verification is not their
point: example 02's ``tiny-chat/`` with its pinned digest and the public key that signed it.

The local platform verifies every ModelDeployment's artifact before a simulated engine starts
(as the worker image does), so a made-up digest would leave every worker NotReady. Tests that
deploy models use :func:`spec` for ``spec.artifact`` and apply :func:`trust_secret` beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from support.cluster import REPO

EXAMPLE = REPO / "examples" / "02-model-deployment"
MODEL_DIR: Path = EXAMPLE / "tiny-chat"
#: What ModelDeployment.spec.artifact.trust.publicKey names; the key is public.pem.
SECRET = "model-signing-key"
DIGEST: str = yaml.safe_load((EXAMPLE / "modeldeployment.yaml").read_text())["spec"]["artifact"][
    "digest"
]
PUBLIC_KEY: str = (EXAMPLE / "public.pem").read_text()


def spec(*, secret: str = SECRET, uri: str = "") -> dict[str, Any]:
    """``spec.artifact`` for the shipped artifact (``uri`` overrides where it is read from: a
    tampered or missing copy)."""
    return {
        "uri": uri or MODEL_DIR.as_uri(),
        "digest": DIGEST,
        "trust": {"publicKey": {"name": secret}},
    }


def trust_secret(ns: str, *, name: str = SECRET, public_key: str = PUBLIC_KEY) -> dict[str, Any]:
    """The Secret holding the public key a ModelDeployment's workers verify against."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": ns},
        "stringData": {"public.pem": public_key},
    }

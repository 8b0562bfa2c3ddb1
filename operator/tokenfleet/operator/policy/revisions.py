"""Revision names (pure): a stable hash of what a worker pod runs — the artifact and the engine.

Two specs that differ only in what does not reach the pod (served names, pools, rollout policy,
fallback) share a revision, so editing those never starts a rollout. The hash is over canonical
JSON of the wire form (camelCase, defaults included), so key order, and spelling a default out
or leaving it implicit, make no difference; a changed default in a new TokenFleet version does
roll, because it changes what runs.
"""

from __future__ import annotations

import hashlib
import json

from tokenfleet.api.deployment import ModelDeploymentSpec

#: Hex characters of the hash in a revision name: 10 (40 bits) makes a collision between two
#: revisions of one deployment vanishingly unlikely and keeps names readable.
HASH_LENGTH = 10
#: Revision names are label values (at most 63 characters): room for "-" and the hash.
_NAME_ROOM = 63 - 1 - HASH_LENGTH


def revision_hash(spec: ModelDeploymentSpec) -> str:
    """Hex sha256 over the artifact and engine settings, canonically serialised."""
    content = {
        "artifact": spec.artifact.model_dump(mode="json", by_alias=True),
        "engine": spec.engine.model_dump(mode="json", by_alias=True),
    }
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def revision_name(deployment: str, spec: ModelDeploymentSpec) -> str:
    """``<deployment>-<10 hex>``, trimmed to fit a label value."""
    prefix = deployment[:_NAME_ROOM].rstrip("-.")
    return f"{prefix}-{revision_hash(spec)[:HASH_LENGTH]}"

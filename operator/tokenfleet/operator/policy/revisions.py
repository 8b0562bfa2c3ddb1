"""Revision names (pure): a stable hash of what a worker pod runs — the artifact and the engine.

Two specs that differ only in what does not reach the pod (served names, pools, rollout policy,
fallback) share a revision, so editing those never starts a rollout. The hash is over JSON of
the wire form with sorted keys (camelCase, defaults included, unset optionals left out), so key
order, and spelling a default out or leaving it implicit, make no difference; a changed default
in a new TokenFleet version does roll, because it changes what runs. The name is the hash's
first characters: it labels worker pods and names their Deployments.

The image is part of what runs. A spec is fitted to its pools' device before it is hashed
(plan.devices fills an unset engine.image with that device's image); an unfitted spec hashes
as on GPU pools, with the GPU image, which was every spec's default before CPU pools: so no
GPU revision name changed when engine.image became optional.
"""

from __future__ import annotations

import hashlib
import json

from tokenfleet.api.deployment import GPU_IMAGE, ModelDeploymentSpec

#: Hex characters in a revision name: 10 (40 bits) makes a collision between two revisions of
#: one deployment vanishingly unlikely and keeps pod and Deployment names readable.
NAME_LENGTH = 10


def revision_hash(spec: ModelDeploymentSpec) -> str:
    """Hex sha256 over the artifact and engine settings."""
    engine = {"image": GPU_IMAGE, **spec.engine.to_wire()}
    identity = {"artifact": spec.artifact.to_wire(), "engine": engine}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def revision_of(spec: ModelDeploymentSpec) -> str:
    """The revision name: the hash's first ``NAME_LENGTH`` hex characters."""
    return revision_hash(spec)[:NAME_LENGTH]

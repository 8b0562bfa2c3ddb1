"""The outcome of verifying an artifact, and its wire form (pure).

A worker writes its verdict as JSON to the container's termination message (and the node agent
to a pod annotation); the operator parses it back with :func:`parse`. The failure reasons are
the ones ModelDeployment's ``Verified`` condition reports: four about the artifact, and
``DeviceMismatch``, which the worker decides before it fetches anything (its image is built for
another device than the pool's nodes), reported the same way so that the same path shows it.
"""

from __future__ import annotations

import dataclasses
import enum
import json

#: Kubernetes keeps at most 4096 bytes of a termination message; stay under it with room.
TERMINATION_MESSAGE_LIMIT = 4096
#: Long diff messages (one line per changed file) are cut to this many characters.
MESSAGE_LIMIT = 2048


class Reason(enum.StrEnum):
    """Why an artifact may or may not be served; CamelCase for condition reasons."""

    VERIFIED = "Verified"
    SIGNATURE_INVALID = "SignatureInvalid"
    DIGEST_MISMATCH = "DigestMismatch"
    UNTRUSTED_SIGNER = "UntrustedSigner"
    ARTIFACT_UNREACHABLE = "ArtifactUnreachable"
    #: Not about the artifact: the image's engine is built for another device than the pool's.
    DEVICE_MISMATCH = "DeviceMismatch"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """What verification concluded about one artifact.

    ``digest`` is the signed manifest's root digest (``sha256:<hex>``) when the signature could
    be read; ``signer`` names the key (``key:sha256:<hex of the PEM public key>``) or the
    Sigstore identity, once the signature checked out.
    """

    reason: Reason
    message: str = ""
    digest: str = ""
    signer: str = ""

    @property
    def verified(self) -> bool:
        return self.reason is Reason.VERIFIED

    def to_json(self) -> str:
        """Compact JSON that fits a termination message."""
        body = {
            "verified": self.verified,
            "reason": str(self.reason),
            "message": _cut(self.message, MESSAGE_LIMIT),
            "digest": self.digest,
            "signer": self.signer,
        }
        return json.dumps(body, separators=(",", ":"), sort_keys=True)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse(text: str) -> Verdict | None:
    """A verdict from a termination message or annotation; None if it is not one of ours."""
    try:
        body = json.loads(text)
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("reason") not in set(Reason):
        return None
    reason = Reason(body["reason"])
    return Verdict(
        reason=reason,
        message=str(body.get("message", "")),
        digest=str(body.get("digest", "")),
        signer=str(body.get("signer", "")),
    )

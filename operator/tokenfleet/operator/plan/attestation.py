"""What a revision's serving workers prove about its artifact (pure).

``Verified`` is reported from verdicts, never inferred from readiness: every worker that counts
(Ready, not terminating, of the revision) must carry a verdict — its verify init container's
termination message (plan.verify_step) — that passed for the digest the revision pins, under an
image of the image policy. One worker without one is enough to withhold ``Verified``, and the
condition names it and says how to fix it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tokenfleet.operator.plan import devices, observed
from tokenfleet.signing import verdict

#: Ready workers serve with no verdict naming their artifact (made by hand, of an image that
#: skips the verify step, or from before it).
NO_VERDICT = "NoVerdict"
#: A Ready worker's verdict passed for another digest than the revision pins.
VERDICT_MISMATCH = "VerdictMismatch"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Attestation:
    """The verdicts of a revision's counted (Ready, not terminating) workers."""

    revision: str
    digest: str  # the digest the revision pins; "" when unknown (any passing verdict names it)
    counted: int
    signer: str = ""  # the signer the first passing verdict names
    missing: tuple[str, ...] = ()  # pods without a passing verdict (or outside the policy)
    foreign: tuple[tuple[str, str], ...] = ()  # (pod, digest) passes for another digest

    @property
    def complete(self) -> bool:
        """Every counted worker proved the revision's digest (and at least one counts)."""
        return self.counted > 0 and not self.missing and not self.foreign

    @property
    def reason(self) -> str:
        return VERDICT_MISMATCH if self.foreign else NO_VERDICT

    def message(self) -> str:
        """What is missing, and how to fix it."""
        pinned = self.digest or "its pinned digest"
        if self.foreign:
            pods = ", ".join(f"{pod} ({digest or 'no digest'})" for pod, digest in self.foreign)
            return (
                f"{len(self.foreign)} of {self.counted} Ready workers of revision "
                f"{self.revision} verified another artifact than {pinned}: {pods}; a worker "
                "the operator renders verifies its own revision's digest, so these pods were "
                "not made for it: delete them"
            )
        return (
            f"{len(self.missing)} of {self.counted} Ready workers of revision {self.revision} "
            f"carry no verdict for {pinned} ({', '.join(self.missing)}): Verified needs each "
            "serving worker's verify init container to have recorded a pass in its termination "
            "message; workers the operator renders from an image of operator.allowedImages "
            "do, so delete pods made by hand or left from before the verify step"
        )


def _names(found: verdict.Verdict | None, digest: str) -> bool:
    """A passing verdict for ``digest`` ("" matches any passing verdict)."""
    if found is None or not found.verified:
        return False
    return not digest or found.digest.lower() == digest.lower()


def attest(
    pods: Sequence[observed.WorkerPod],
    *,
    revision: str,
    digest: str,
    allowed_images: Sequence[str] | None,
) -> Attestation:
    """The counted workers of ``revision`` and what their verdicts prove; ``allowed_images``
    None: every image is of the policy (unit tests)."""
    counted = [p for p in pods if p.revision == revision and p.ready and not p.terminating]
    missing: list[str] = []
    foreign: list[tuple[str, str]] = []
    signer = ""
    for pod in counted:
        found = verdict.parse(pod.verdict) if pod.verdict else None
        allowed = allowed_images is None or devices.image_allowed(pod.image, allowed_images)
        if allowed and _names(found, digest):
            signer = signer or (found.signer if found else "")
        elif allowed and found is not None and found.verified:
            foreign.append((pod.name, found.digest))
        else:
            missing.append(pod.name)
    return Attestation(
        revision=revision,
        digest=digest,
        counted=len(counted),
        signer=signer,
        missing=tuple(missing),
        foreign=tuple(foreign),
    )

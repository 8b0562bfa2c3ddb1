"""Whether a refused revision is verified again (pure): its trust then + its trust now → decision.

A worker verifies its artifact once, when it starts, against the trust it was given (the public
key in the Secret the spec names, mounted into the pod). A refusal therefore stands for that
trust only: once the Secret holds another key, the refusal says nothing about the revision any
more, and its workers must verify again. The spec's own inputs need no help here (a changed
artifact URI, digest, signature or trust policy is a new revision, verified afresh); what
changes under an unchanged spec is the Secret's content, so that is what the fingerprint holds.

::

    refused? ──no──▶ keep (NotRefused; a revision with none records the current fingerprint)
       │yes
    trust now readable? ──no──▶ keep (TrustUnknown: try again next pass)
       │yes
    recorded when it was verified? ──no──▶ re-verify (NoFingerprint: refused before
       │yes                                 fingerprints were recorded; once)
    the same now? ──yes──▶ keep (TrustUnchanged)
       │no
    re-verify (TrustChanged)

The fingerprint to record is the one current when a verification begins (a new revision, or a
re-verification): workers read their trust after that moment, so any later change is seen as a
difference on a later pass, never lost.
"""

from __future__ import annotations

import dataclasses
import enum


class Why(enum.StrEnum):
    NOT_REFUSED = "NotRefused"
    TRUST_UNKNOWN = "TrustUnknown"
    TRUST_UNCHANGED = "TrustUnchanged"
    TRUST_CHANGED = "TrustChanged"
    NO_FINGERPRINT = "NoFingerprint"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """Whether to verify again, the fingerprint the revision records from now on, and why."""

    reverify: bool
    fingerprint: str
    why: Why


def decide(*, refused: bool, recorded: str, current: str | None) -> Decision:
    """``recorded``: the fingerprint the revision's verification began under ("" when none was
    recorded); ``current``: this pass's (None when it could not be read, or was not read)."""
    if not refused:  # the first fingerprint seen is this verification's baseline
        return Decision(reverify=False, fingerprint=recorded or current or "", why=Why.NOT_REFUSED)
    if current is None:
        return Decision(reverify=False, fingerprint=recorded, why=Why.TRUST_UNKNOWN)
    if not recorded:
        return Decision(reverify=True, fingerprint=current, why=Why.NO_FINGERPRINT)
    if recorded == current:
        return Decision(reverify=False, fingerprint=recorded, why=Why.TRUST_UNCHANGED)
    return Decision(reverify=True, fingerprint=current, why=Why.TRUST_CHANGED)

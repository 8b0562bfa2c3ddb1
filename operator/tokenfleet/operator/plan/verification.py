"""A refused revision, checked again when its trust changes, and what to tell the user (pure).

The loop reads the spec's trust Secret only while it matters (:func:`needs_trust`: the spec's
revision is new, or refused) and hands its :func:`fingerprint` to :func:`plan`, which asks
``policy.reverify`` whether the refusal still stands. When it does not, the :class:`Recheck`
names the revision's worker Deployments to restart (the loop sets the fingerprint on their pod
template, as ``kubectl rollout restart`` sets its annotation: new pods verify against the
Secret as it is now, and a refused pod goes once its replacement is Ready), the refused pods
whose refusals no longer count, the fingerprint the revision records, and the observation that
takes a blocked rollout back to Verifying. :func:`remedy` turns a refusal into what to fix,
for the Verified condition and the rollout message.

A restart rather than deleting the refused pods: the operator's account may patch worker
Deployments but not delete pods, and a rolling restart (surge 1, none unavailable) never takes
a Ready worker away before its replacement verified.

Why a read per pass rather than a watch on Secrets: RBAC cannot name the Secrets
ModelDeployments refer to, so a watch would need a cluster-wide ``watch`` on every Secret's
data; the operator's existing field-selected ``list`` reads exactly the one Secret a refused
revision names, and the loop's pass interval (5 s) bounds how late a change is seen.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence

from tokenfleet.api.deployment import (
    ModelDeploymentSpec,
    ModelDeploymentStatus,
    Revision,
    TrustPolicy,
)
from tokenfleet.operator.plan import desired, observed
from tokenfleet.operator.policy import reverify, rollout
from tokenfleet.signing import verdict
from tokenfleet.signing.verdict import Reason

#: The fingerprint of a public-key trust whose Secret, or whose key in it, does not exist.
ABSENT = "absent"
#: The fingerprint of a Sigstore identity: it lives in the spec, so it changes only with a new
#: revision, and there is nothing outside the spec to watch.
SIGSTORE = "sigstore"

#: The verifier's reasons that refuse an artifact.
REFUSALS = frozenset(r.value for r in Reason if r is not Reason.VERIFIED)

#: What the operator does about a refusal whose cause lies outside the spec.
_REVERIFIES = "the operator re-verifies on change"
#: What happens when the fix is a change to spec.artifact.
_NEW_REVISION = "a changed spec.artifact is a new revision, verified afresh"


def fingerprint(trust: TrustPolicy, key: bytes | None) -> str:
    """What the workers verify against, as a short value: sha256 of the public key the trust
    Secret holds (``key``, None when the Secret or key is missing), or :data:`SIGSTORE`."""
    if trust.public_key is None:
        return SIGSTORE
    return ABSENT if key is None else "sha256:" + hashlib.sha256(key).hexdigest()


def _entry(spec: ModelDeploymentSpec, status: ModelDeploymentStatus | None) -> Revision | None:
    revision = desired.revision_of(spec)
    return next((r for r in (status.revisions if status else []) if r.name == revision), None)


def refused(entry: Revision | None) -> bool:
    """Whether a revision's line in status records a verifier's refusal."""
    return entry is not None and not entry.verified and entry.reason in REFUSALS


def needs_trust(spec: ModelDeploymentSpec, status: ModelDeploymentStatus | None) -> bool:
    """Whether this pass must read the trust Secret: the spec names one, and its revision is
    new (the fingerprint its verification begins under) or refused (has the Secret changed?).
    A verified revision never needs it, so a healthy fleet costs no Secret reads."""
    if spec.artifact.trust.public_key is None:
        return False
    entry = _entry(spec, status)
    return entry is None or refused(entry)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Recheck:
    """The spec's revision against its trust this pass."""

    revision: str
    decision: reverify.Decision
    #: Worker Deployments to restart for ``decision.fingerprint`` (their pod template gets it as
    #: labels.TRUST_FINGERPRINT), so their pods verify again against the trust as it is now.
    restart: tuple[str, ...] = ()
    #: Names of the revision's pods whose refusals no longer count: refused before a restart
    #: for the current trust, they linger until their replacements are Ready.
    stale: tuple[str, ...] = ()
    detail: str = ""  # what changed, for the rollout message

    def observation(self) -> rollout.Observation | None:
        """What the rollout machine sees: the trust changed (a blocked canary verifies again)."""
        if not self.decision.reverify:
            return None
        return rollout.Observation(
            outcome=rollout.Outcome.TRUST_CHANGED, revision=self.revision, detail=self.detail
        )


def plan(
    *,
    namespace: str,
    spec: ModelDeploymentSpec,
    status: ModelDeploymentStatus | None,
    pods: Sequence[observed.WorkerPod],
    sets: Sequence[observed.WorkerSet],
    current: str | None,
) -> Recheck:
    """Whether the spec's revision is verified again, and which refusals are stale; ``current``
    is this pass's :func:`fingerprint` (None when not read, or unreadable: nothing is decided
    on it). ``pods`` and ``sets`` are the workers of the deployment's pools."""
    revision = desired.revision_of(spec)
    entry = _entry(spec, status)
    decision = reverify.decide(
        refused=refused(entry),
        recorded=entry.trust_fingerprint if entry else "",
        current=current,
    )
    own = [p for p in pods if p.revision == revision and not p.terminating]
    if not decision.reverify:
        return Recheck(revision=revision, decision=decision, stale=_superseded(own, decision))
    return Recheck(
        revision=revision,
        decision=decision,
        restart=tuple(sorted(s.name for s in sets if s.revision == revision)),
        stale=tuple(p.name for p in own if _refusal(p.verdict)),
        detail=_detail(namespace, spec, decision),
    )


def _superseded(own: Sequence[observed.WorkerPod], decision: reverify.Decision) -> tuple[str, ...]:
    """Refused pods started before the restart for the current fingerprint, once a pod that
    restart started exists: with surge 1 and none unavailable, a refused pod is removed only
    when its replacement is Ready, and until then its refusal is history, not news (this holds
    after an operator restart too: the pods carry the fingerprint they were started for)."""
    current = decision.fingerprint
    if not current or not any(p.trust == current for p in own):
        return ()
    return tuple(p.name for p in own if p.trust != current and _refusal(p.verdict))


def _refusal(text: str) -> bool:
    seen = verdict.parse(text) if text else None
    return seen is not None and not seen.verified


def _detail(namespace: str, spec: ModelDeploymentSpec, decision: reverify.Decision) -> str:
    key = spec.artifact.trust.public_key
    if decision.why is reverify.Why.TRUST_CHANGED and key is not None:
        return f"trust Secret {namespace}/{key.name} changed"
    return "its refusal predates the trust fingerprints this operator records"


def remedy(reason: str, *, namespace: str, spec: ModelDeploymentSpec, current: str | None) -> str:
    """What to fix for a refusal, as a phrase ("" for a reason that is not a refusal);
    ``current`` tells a missing trust Secret from one holding another key."""
    trust, artifact = spec.artifact.trust, spec.artifact
    key = trust.public_key
    secret = f"Secret {namespace}/{key.name}" if key else ""
    match reason:
        case Reason.UNTRUSTED_SIGNER if key is not None and current == ABSENT:
            return f"the trust {secret} has no key {key.key!r}; create it ({_REVERIFIES})"
        case Reason.UNTRUSTED_SIGNER if key is not None:
            return (
                f"signature not by a trusted key: the public key in {secret} does not match "
                f"the signer; update the Secret ({_REVERIFIES})"
            )
        case Reason.UNTRUSTED_SIGNER if trust.sigstore is not None:
            return (
                f"signature not by {trust.sigstore.identity} ({trust.sigstore.issuer}); sign "
                f"with that identity or change spec.artifact.trust ({_NEW_REVISION})"
            )
        case Reason.SIGNATURE_INVALID if key is not None:
            return (
                f"the signature does not verify with the public key in {secret}; update the "
                f"Secret if it holds another key ({_REVERIFIES}), or re-sign the files "
                f"({_NEW_REVISION})"
            )
        case Reason.SIGNATURE_INVALID:
            return f"the signature does not verify; re-sign the files ({_NEW_REVISION})"
        case Reason.DIGEST_MISMATCH:
            return (
                "the files differ from what spec.artifact.digest pins; restore them, or pin "
                f"the digest of the files that were signed ({_NEW_REVISION})"
            )
        case Reason.ARTIFACT_UNREACHABLE:
            return (
                f"the files or their signature could not be fetched from {artifact.uri}; make "
                f"them reachable or fix spec.artifact ({_NEW_REVISION})"
            )
        case Reason.DEVICE_MISMATCH:
            return (
                f"engine.image {spec.engine.image} is built for another device than its pool's "
                "nodes (the image's TOKENFLEET_DEVICE against the pool's accelerator.kind); "
                "remove engine.image to run the pool's default image, or set one built for "
                "the pool's device (a new revision)"
            )
    return ""

"""A ModelDeployment's status, decided from values (pure).

A pool runs one model: when several ModelDeployments list the same pool, the oldest claim
(creation time, then name) wins and the others are told so, without retry storms.

``Compatible`` says whether the spec fits its pools' device (plan.devices): its message names
the device, the image and a CPU replica's sizing, or the misfit and its fix (a Warning Event
when it turns False).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Literal

from tokenfleet.api.base import Condition, rfc3339
from tokenfleet.api.deployment import (
    ModelDeploymentSpec,
    ModelDeploymentStatus,
    Phase,
    Revision,
    RolloutStatus,
)
from tokenfleet.operator.plan import (
    attestation,
    canary,
    desired,
    devices,
    gate,
    observed,
    reporting,
    verification,
)
from tokenfleet.operator.plan.reporting import Event, condition
from tokenfleet.operator.policy import analysis, rollout


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """A ModelDeployment's claim on a pool; sorts oldest first."""

    created: str
    name: str

    def key(self) -> tuple[str, str]:
        return (self.created, self.name)


def winner(claims: Sequence[Claim]) -> Claim | None:
    return min(claims, key=Claim.key) if claims else None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ModelInputs:
    """Everything a ModelDeployment's status depends on."""

    namespace: str
    name: str
    generation: int | None
    spec: ModelDeploymentSpec
    status: ModelDeploymentStatus | None  # as the last pass wrote it; None: new, or unreadable
    existing_pools: frozenset[str]
    pool_owner: Mapping[str, str]  # pool → name of the ModelDeployment that won it
    pods: Sequence[observed.WorkerPod]  # worker pods of this model's pools
    now: datetime.datetime
    judgment: analysis.Judgment | None = None  # a canary analysis, when one was due
    #: the whole gate's evidence (quality replay, custom checks, throughput); when set, its
    #: latency judgment is used instead of ``judgment``
    evidence: gate.Evidence | None = None
    #: this pass's trust fingerprint (plan.verification), None when it was not read
    trust: str | None = None
    #: the spec's revision against that trust; its stale pods are left out of this pass
    recheck: verification.Recheck | None = None
    #: the spec fitted to its pools (``spec`` is its fitted spec); None: not judged (no
    #: Compatible condition)
    fit: devices.Fit | None = None
    #: the image policy (plan.devices.image_allowed): a Ready pod's verdict counts only under
    #: an image of the policy; None: every image is (unit tests)
    allowed_images: Sequence[str] | None = None


def _availability(inputs: ModelInputs, ready: int) -> tuple[Phase, bool, str, str]:
    """(phase, available, reason, message) of a ModelDeployment."""
    spec = inputs.spec
    missing = [p for p in spec.pools if p not in inputs.existing_pools]
    taken = {
        p: inputs.pool_owner[p]
        for p in spec.pools
        if p in inputs.pool_owner and inputs.pool_owner[p] != inputs.name
    }
    if missing:
        return (
            "Pending",
            False,
            "PoolNotFound",
            f"InferencePool {reporting.names(missing)} does not "
            f"exist in namespace {inputs.namespace}; create it or fix spec.pools",
        )
    if len(taken) == len(spec.pools):
        owners = reporting.names(sorted(f"{p} (by {m})" for p, m in taken.items()))
        return (
            "Pending",
            False,
            "PoolClaimed",
            f"every pool is already running another model: "
            f"{owners}; a pool runs one model, so point spec.pools at a free pool",
        )
    if ready > 0:
        return ("Available", True, "ReplicasReady", f"{ready} replicas ready")
    return ("Progressing", False, "ReplicasStarting", "no replica is ready yet")


#: Event reasons for the rollout decisions a user should see (others use the decision's why).
_EVENT_REASONS: dict[rollout.Why, tuple[Literal["Normal", "Warning"], str]] = {
    rollout.Why.STEP_PASSED: ("Normal", "CanaryStepPassed"),
    rollout.Why.ANALYSIS_FAILED: ("Warning", "RolledBack"),
    rollout.Why.QUALITY_REGRESSION: ("Warning", "RolledBack"),
    rollout.Why.ABORTED: ("Warning", "RolledBack"),
    rollout.Why.PROMOTED: ("Normal", "Promoted"),
    rollout.Why.MANUAL_PROMOTE: ("Normal", "Promoted"),
    rollout.Why.VERIFICATION_FAILED: ("Warning", "VerificationFailed"),
}


def _event(decision: rollout.Decision) -> Event:
    kind, reason = _EVENT_REASONS.get(decision.why, ("Normal", decision.why.value))
    return Event(type=kind, reason=reason, message=decision.message)


def _revision_entry(
    inputs: ModelInputs, name: str, weights: Mapping[str, int], old: Sequence[Revision]
) -> Revision:
    """One revision's line in status, from its pods' verdicts (plan.attestation): a refusal
    wins; verified when every Ready worker's verdict passed for the revision's digest; not
    verified when a Ready worker has no such verdict; before any worker is Ready, a passing
    verdict (the engine still loading) or what was known before."""
    before = next((r for r in old if r.name == name), Revision(name=name, digest=""))
    recheck = inputs.recheck if inputs.recheck and inputs.recheck.revision == name else None
    if recheck is not None and recheck.decision.reverify:  # its refusal no longer stands
        before = Revision(name=name, digest=before.digest)
    current = name == desired.revision_of(inputs.spec)
    digest = inputs.spec.artifact.digest if current else before.digest
    seen = canary.verdict_of(inputs.pods, name)
    proof = _attest(inputs, name, digest)
    if seen is not None and not seen.verified:
        verified, reason, signer = False, str(seen.reason), seen.signer
    elif proof.complete:
        verified, reason, signer = True, "Verified", proof.signer
    elif proof.counted:  # Ready workers, and one of them proved nothing
        verified, reason, signer = False, proof.reason, ""
    elif seen is not None and (not digest or seen.digest.lower() == digest.lower()):
        verified, reason, signer = True, "Verified", seen.signer
    else:
        verified, reason, signer = before.verified, before.reason, before.signer
    return Revision(
        name=name,
        digest=digest,
        verified=verified,
        reason=reason,
        signer=signer,
        trust_fingerprint=recheck.decision.fingerprint if recheck else before.trust_fingerprint,
        ready_replicas=proof.counted,
        weight=int(weights.get(name, 0)),
    )


def _attest(inputs: ModelInputs, revision: str, digest: str) -> attestation.Attestation:
    return attestation.attest(
        inputs.pods, revision=revision, digest=digest, allowed_images=inputs.allowed_images
    )


Verdict = tuple[bool, str, str]  # condition status, reason, message

#: A revision whose Ready pods carry no verdict for its digest (plan.attestation).
NO_VERDICT = attestation.NO_VERDICT


def _verified(inputs: ModelInputs, state: rollout.State, entries: Sequence[Revision]) -> Verdict:
    """Verified is about the spec's revision: the verifier's reason when it was refused."""
    revision = desired.revision_of(inputs.spec)
    if state.phase is rollout.Phase.BLOCKED and state.canary == revision:
        stable = state.stable or "(none)"
        return (
            False,
            state.reason,
            _remedied(
                inputs,
                state.reason,
                f"revision {revision} refused ({state.reason}); stable {stable} keeps all traffic",
            ),
        )
    if state.phase is rollout.Phase.VERIFYING and state.reason == rollout.Why.TRUST_CHANGED:
        return (False, "Verifying", f"its trust changed: verifying revision {revision} again")
    entry = next((e for e in entries if e.name == revision), None)
    if entry and entry.verified:
        signer = entry.signer or "a trusted signer"
        return (True, "Verified", f"revision {revision} verified, signed by {signer}")
    if entry and entry.reason in (attestation.NO_VERDICT, attestation.VERDICT_MISMATCH):
        return (False, entry.reason, _attest(inputs, revision, entry.digest).message())
    if entry and entry.reason:  # a refusal outside a rollout: the stable's pods restarted
        refusal = f"revision {revision} refused ({entry.reason})"
        return (False, entry.reason, _remedied(inputs, entry.reason, refusal))
    return (False, "Verifying", f"waiting for revision {revision}'s workers to verify it")


def _remedied(inputs: ModelInputs, reason: str, message: str) -> str:
    """The message, then what would fix the refusal (when the reason is one)."""
    fix = verification.remedy(
        reason, namespace=inputs.namespace, spec=inputs.spec, current=inputs.trust
    )
    return f"{message}; {fix}" if fix else message


def _rollout_conditions(state: rollout.State, message: str) -> list[tuple[str, Verdict]]:
    in_flight = state.phase in rollout.ACTIVE
    rolled_back = state.phase is rollout.Phase.ROLLED_BACK
    return [
        ("Progressing", (in_flight, state.phase.value, message or "no rollout in flight")),
        (
            "RolledBack",
            (
                rolled_back,
                state.reason if rolled_back else "NotRolledBack",
                message if rolled_back else "the spec's revision was not rolled back",
            ),
        ),
    ]


def plan_model(inputs: ModelInputs) -> tuple[ModelDeploymentStatus, list[Event]]:
    """New status and the events its changes deserve: the rollout advanced by what this pass
    saw, the revisions with their traffic weights, and the conditions."""
    inputs = _without_stale(inputs)
    spec, now, gen = inputs.spec, inputs.now, inputs.generation
    revision = desired.revision_of(spec)
    old = inputs.status
    before = old.rollout if old and old.rollout else RolloutStatus()
    gated = gate.evaluate(
        inputs.evidence or gate.Evidence(latency=inputs.judgment),
        before=before,
        state=canary.state_of(old),
        spec=spec.rollout.analysis,
        stamp=rfc3339(now),
    )
    judgment = gated.judgment
    seen = canary.Seen(
        revision=revision,
        recheck=inputs.recheck.observation() if inputs.recheck else None,
        verification=_with_remedy(
            inputs,
            canary.verification(inputs.pods, revision, digest=spec.artifact.digest),
        ),
        judgment=judgment,
    )
    moved = canary.advance(canary.state_of(old), spec=spec.rollout, seen=seen, now=now.timestamp())
    state, message = moved.decision.state, moved.message or before.message
    names = [n for n in dict.fromkeys((state.stable, state.canary or revision)) if n]
    entries = [
        _revision_entry(inputs, n, moved.decision.weights, old.revisions if old else [])
        for n in names
    ]
    phase, available, reason, availability = _availability(
        inputs, sum(e.ready_replicas for e in entries)
    )
    verdicts = [
        ("Available", (available, reason, availability)),
        ("Verified", _verified(inputs, state, entries)),
        *_rollout_conditions(state, message),
        *_compatible(inputs.fit),
    ]
    old_conditions = old.conditions if old else []
    conditions = [
        condition(old_conditions, type=t, status=st, reason=r, message=m, now=now, generation=gen)
        for t, (st, r, m) in verdicts
    ]
    analysed = judgment.message if judgment else before.last_analysis
    # a judgment counts while a canary takes traffic (the loop only asks for one then)
    measuring = canary.state_of(old).phase in (rollout.Phase.PROGRESSING, rollout.Phase.PAUSED)
    analysed_at = now.timestamp() if judgment and measuring else canary.analysed_at(old)
    machine = canary.status_fields(
        moved.decision, last_analysis=analysed, last_analysis_at=analysed_at, message=message
    )
    extras = {"quality": gated.quality, "scores": gated.scores, "checks": gated.checks}
    rollout_status = machine.rollout.model_copy(update=extras) if machine.rollout else None
    status = ModelDeploymentStatus(
        observed_generation=gen,
        phase=phase,
        stable_revision=machine.stable_revision,
        canary_revision=machine.canary_revision,
        canary_step=machine.canary_step,
        rollout=rollout_status,
        revisions=entries,
        history=gate.history(
            old.history if old else [], moved.notable, revisions=entries, stamp=rfc3339(now)
        ),
        conditions=conditions,
    )
    events = _quality_events(gated) + [_event(d) for d in moved.notable]
    return status, events + _availability_events(old_conditions, conditions, availability)


def _without_stale(inputs: ModelInputs) -> ModelInputs:
    """Plan without the pods whose refusals no longer count (their workers were restarted to
    verify again; they linger until their replacements are Ready)."""
    stale = frozenset(inputs.recheck.stale if inputs.recheck else ())
    if not stale:
        return inputs
    return dataclasses.replace(inputs, pods=[p for p in inputs.pods if p.name not in stale])


def _with_remedy(
    inputs: ModelInputs, seen: rollout.Observation | None
) -> rollout.Observation | None:
    if seen is None or seen.outcome is not rollout.Outcome.VERIFICATION_FAILED:
        return seen
    fix = verification.remedy(
        seen.detail, namespace=inputs.namespace, spec=inputs.spec, current=inputs.trust
    )
    return dataclasses.replace(seen, remedy=fix)


def _quality_events(gated: gate.Gate) -> list[Event]:
    """One Event when a golden-set replay's verdict lands, with the scores."""
    if not gated.replayed or gated.quality is None:
        return []
    q = gated.quality
    failed = q.verdict in ("Failed", "Invalid")
    reason = "QualityRegression" if q.verdict == "Failed" else f"Quality{q.verdict}"
    return [Event(type="Warning" if failed else "Normal", reason=reason, message=q.message)]


def _compatible(fit: devices.Fit | None) -> list[tuple[str, Verdict]]:
    if fit is None:
        return []
    if fit.misfit is not None:
        return [("Compatible", (False, fit.misfit.reason, fit.misfit.message))]
    return [("Compatible", (True, "PoolsFit", fit.summary))]


def _availability_events(
    old: Sequence[Condition], new: Sequence[Condition], message: str
) -> list[Event]:
    events = []
    if misfit := reporting.changed_to(old, new, "Compatible", "False"):
        events.append(Event(type="Warning", reason=misfit.reason, message=misfit.message))
    problem = reporting.changed_to(old, new, "Available", "False")
    if problem and problem.reason in ("PoolNotFound", "PoolClaimed"):
        events.append(Event(type="Warning", reason=problem.reason, message=problem.message))
    if reporting.changed_to(old, new, "Available", "True"):
        events.append(Event(type="Normal", reason="Available", message=message))
    return events

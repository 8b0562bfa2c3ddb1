"""The bridge between ModelDeployment and the rollout machine (pure): spec → steps and
thresholds, status → machine state, what a pass saw → observations, decision → status fields.

The loop reads ``state_of(status)``, gathers a :class:`Seen` (the spec's revision, its pods'
verification, a canary analysis when one was due), calls :func:`advance` and writes
``status_fields(decision)`` back (a typed status, which the loop dumps when it writes it); the
state round-trips through status exactly, which is what lets an operator restart resume at the
same step. :func:`pool_revisions` tells the pool's
planner which revisions' workers to run meanwhile.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import math
from collections.abc import Sequence

from tokenfleet.api import base
from tokenfleet.api.deployment import ModelDeploymentStatus, Rollout, RolloutStatus
from tokenfleet.operator.plan import observed
from tokenfleet.operator.policy import analysis, rollout
from tokenfleet.signing import verdict


def steps_of(spec: Rollout) -> tuple[rollout.Step, ...]:
    """The spec's canary steps in the machine's units (seconds)."""
    return tuple(rollout.Step(weight=s.weight, hold=float(s.hold_seconds)) for s in spec.steps)


def thresholds_of(spec: Rollout) -> analysis.Thresholds:
    """The spec's analysis thresholds; milliseconds become seconds."""
    a = spec.analysis
    return analysis.Thresholds(
        min_samples=a.min_samples,
        max_ttft_p99_ratio=a.max_ttft_p99_ratio,
        max_inter_token_p99_ratio=a.max_inter_token_p99_ratio,
        max_error_rate=a.max_error_rate,
        max_ttft_p99=None if a.max_ttft_p99_ms is None else a.max_ttft_p99_ms / 1000,
        max_inter_token_p99=(
            None if a.max_inter_token_p99_ms is None else a.max_inter_token_p99_ms / 1000
        ),
    )


def _seconds(stamp: str | None) -> float:
    return base.from_rfc3339(stamp).timestamp() if stamp else 0.0


def _stamp(seconds: float) -> str:
    return base.rfc3339(datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC))


def state_of(status: ModelDeploymentStatus | None) -> rollout.State:
    """The machine state stored in status; a new deployment starts Promoted with no stable."""
    if status is None or status.rollout is None:
        return rollout.State()
    r = status.rollout
    return rollout.State(
        phase=rollout.Phase(r.phase),
        stable=status.stable_revision,
        canary=status.canary_revision,
        step=r.step,
        step_started=_seconds(r.step_started_at),
        step_passed=r.step_passed,
        reason=r.reason,
    )


def status_fields(
    decision: rollout.Decision,
    *,
    last_analysis: str = "",
    last_analysis_at: float = 0.0,
    message: str | None = None,
) -> ModelDeploymentStatus:
    """A status carrying the machine state and the decision (the planner adds the rest);
    ``message`` is the rollout message to keep, by default the decision's."""
    state = decision.state
    return ModelDeploymentStatus(
        stable_revision=state.stable,
        canary_revision=state.canary,
        canary_step=state.step,
        rollout=RolloutStatus(
            phase=state.phase.value,
            step=state.step,
            step_started_at=_stamp(state.step_started) if state.step_started else None,
            step_passed=state.step_passed,
            reason=state.reason,
            message=decision.message if message is None else message,
            last_analysis=last_analysis,
            last_analysis_at=_stamp(last_analysis_at) if last_analysis_at else None,
        ),
    )


def analysis_due(
    status: ModelDeploymentStatus | None, *, now: float, interval: float, remembered: float = 0.0
) -> bool:
    """Whether a canary analysis is due: one interval after the latest, whether this process
    remembers it or only status does (a restarted operator does not analyse at once)."""
    recorded = analysed_at(status)
    if recorded > now:  # written by a clock ahead of ours: it says nothing about our interval
        recorded = 0.0
    return now - max(remembered, recorded) >= interval


def analysed_at(status: ModelDeploymentStatus | None) -> float:
    """Unix seconds of the latest analysis in status (0 when none, or unreadable: an edited
    status must not stop the rollout)."""
    try:
        return _seconds(status.rollout.last_analysis_at) if status and status.rollout else 0.0
    except ValueError:
        return 0.0


def verification(
    pods: Sequence[observed.WorkerPod], revision: str, *, digest: str = ""
) -> rollout.Observation | None:
    """What the revision's pods say about its artifact; None while none has said anything.

    One refusal is enough to block (the files are the same for every pod; the most frequent
    reason is reported). A passing verdict for ``digest`` (any digest when "") passes the gate;
    readiness alone never does: every worker's verify init container records its verdict, pass
    or refusal (plan.verify_step), and so does the local platform's node agent.
    """
    own = [p for p in pods if p.revision == revision and not p.terminating]
    verdicts = [v for v in (verdict.parse(p.verdict) for p in own if p.verdict) if v]
    refused = collections.Counter(str(v.reason) for v in verdicts if not v.verified)
    if refused:
        reason = refused.most_common(1)[0][0]
        return rollout.Observation(outcome=rollout.Outcome.VERIFICATION_FAILED, detail=reason)
    if any(v.verified and (not digest or v.digest.lower() == digest.lower()) for v in verdicts):
        return rollout.Observation(outcome=rollout.Outcome.VERIFIED)
    return None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Seen:
    """What one reconcile pass saw, as values."""

    revision: str  # the spec's revision (artifact + engine hash)
    #: TRUST_CHANGED when a refusal of that revision no longer stands (plan.verification)
    recheck: rollout.Observation | None = None
    verification: rollout.Observation | None = None  # from that revision's pods
    judgment: analysis.Judgment | None = None  # a canary analysis, when one was due


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Advance:
    """The pass's last decision, the notable ones on the way (one Event each), and the message
    worth keeping in status (the last decision that said something new)."""

    decision: rollout.Decision
    notable: tuple[rollout.Decision, ...]
    message: str


def observations(spec: Rollout, seen: Seen) -> list[rollout.Observation]:
    """The pass's observations in the order they apply: the spec's revision first (a new one
    starts over), then a changed trust (a blocked revision verifies again), verification, the
    manual controls (levels in the spec), and last the analysis or, without one, a timer tick
    so a passed step's hold can end."""
    out = [rollout.Observation(outcome=rollout.Outcome.NEW_REVISION, revision=seen.revision)]
    if seen.recheck is not None:
        out.append(seen.recheck)
    if seen.verification is not None:
        out.append(seen.verification)
    if spec.abort:
        out.append(rollout.Observation(outcome=rollout.Outcome.ABORT))
    if spec.promote:
        out.append(rollout.Observation(outcome=rollout.Outcome.PROMOTE))
    paused = rollout.Outcome.PAUSE if spec.paused else rollout.Outcome.RESUME
    out.append(rollout.Observation(outcome=paused))
    if seen.judgment is not None:
        out.append(rollout.Observation(outcome=seen.judgment.outcome, detail=seen.judgment.message))
    out.append(rollout.Observation(outcome=rollout.Outcome.HOLD_ELAPSED))
    return out


def advance(state: rollout.State, *, spec: Rollout, seen: Seen, now: float) -> Advance:
    """Apply one pass's observations to the machine, in order. The message kept is the last
    notable decision's, else the last one that was not "unchanged" ("" keeps the old one)."""
    steps = steps_of(spec)
    unchanged = rollout.Observation(outcome=rollout.Outcome.UNCHANGED)
    decision = rollout.decide(state, unchanged, steps=steps, now=now)
    notable: list[rollout.Decision] = []
    message = ""
    for observation in observations(spec, seen):
        decision = rollout.decide(decision.state, observation, steps=steps, now=now)
        if decision.notable:
            notable.append(decision)
        elif decision.why is not rollout.Why.UNCHANGED and not notable:
            message = decision.message
    if notable:
        message = notable[-1].message
    return Advance(decision=decision, notable=tuple(notable), message=message)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolRevisions:
    """Which revisions' workers a pool runs while a rollout is under way.

    ``kept`` (the stable revision) runs on: its spec is no longer in the manifest, so its
    Deployments are neither re-rendered nor deleted, only scaled with the pool
    (``pool.kept_scale``). Beside it run :meth:`canary_replicas`
    workers of the spec's revision. Without a kept revision the spec's revision is placed
    normally, and other revisions' workers go once it is fully ready (promotion).
    """

    kept: str = ""
    weight: int = 0  # the canary's traffic percent, which sizes it
    floor: int = 0  # fewest canary workers: 1 while a canary runs (to verify and measure it)

    def canary_replicas(self, total: int) -> int:
        """Canary workers for a pool of ``total``: its share of traffic, at least the floor."""
        return max(self.floor, math.ceil(total * self.weight / 100)) if self.floor else 0


def pool_revisions(
    status: ModelDeploymentStatus | None, *, revision: str, spec: Rollout
) -> PoolRevisions:
    """What to run for a spec at ``revision``, given the rollout state in status: the canary
    sized by its step's weight (verifying: the first step's, so it is ready when traffic
    comes); none once rolled back or while a new spec waits for its first decision; one to
    re-verify while blocked (a transient ArtifactUnreachable may clear)."""
    state = state_of(status)
    if not state.stable or (state.stable == revision and state.phase not in rollout.ACTIVE):
        return PoolRevisions()
    if state.canary != revision or state.phase is rollout.Phase.ROLLED_BACK:
        return PoolRevisions(kept=state.stable)
    if state.phase is rollout.Phase.BLOCKED:
        return PoolRevisions(kept=state.stable, floor=1)
    steps = steps_of(spec)
    weight = steps[min(state.step, len(steps) - 1)].weight
    return PoolRevisions(kept=state.stable, weight=weight, floor=1)


def verdict_of(pods: Sequence[observed.WorkerPod], revision: str) -> verdict.Verdict | None:
    """The latest word on a revision's artifact from its pods: a refusal wins, then a
    verification naming its signer; None while no pod has reported."""
    own = [p for p in pods if p.revision == revision and not p.terminating]
    verdicts = [v for v in (verdict.parse(p.verdict) for p in own if p.verdict) if v]
    refused = [v for v in verdicts if not v.verified]
    if refused:
        return refused[0]
    return verdicts[0] if verdicts else None

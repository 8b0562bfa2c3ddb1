"""The bridge between ModelDeployment and the rollout machine (pure): spec → steps and
thresholds, status → machine state, decision → status fields.

The loop (wired later) reads ``state_of(status)``, turns what it saw into observations, calls
``rollout.decide`` and writes ``status_fields(decision)`` back; the state round-trips through
status exactly, which is what lets an operator restart resume at the same step.
"""

from __future__ import annotations

import collections
import datetime
from collections.abc import Sequence
from typing import Any

from tokenfleet.api.deployment import ModelDeploymentStatus, Rollout, RolloutStatus
from tokenfleet.operator import observed
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
    if not stamp:
        return 0.0
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _stamp(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


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


def status_fields(decision: rollout.Decision, *, last_analysis: str = "") -> dict[str, Any]:
    """The status keys (wire form) that carry the machine state and the decision."""
    state = decision.state
    return {
        "stableRevision": state.stable,
        "canaryRevision": state.canary,
        "canaryStep": state.step,
        "rollout": RolloutStatus(
            phase=state.phase.value,
            step=state.step,
            step_started_at=_stamp(state.step_started) if state.step_started else None,
            step_passed=state.step_passed,
            reason=state.reason,
            message=decision.message,
            last_analysis=last_analysis,
        ).to_wire(),
    }


def verification(pods: Sequence[observed.WorkerPod], revision: str) -> rollout.Observation | None:
    """What the revision's pods say about its artifact; None while none has said anything.

    One refusal is enough to block (the files are the same for every pod; the most frequent
    reason is reported). A pod that is Ready, or that reported Verified, proves verification:
    the worker image only starts vLLM after it.
    """
    own = [p for p in pods if p.revision == revision and not p.terminating]
    verdicts = [v for v in (verdict.parse(p.verdict) for p in own if p.verdict) if v]
    refused = collections.Counter(str(v.reason) for v in verdicts if not v.verified)
    if refused:
        reason = refused.most_common(1)[0][0]
        return rollout.Observation(outcome=rollout.Outcome.VERIFICATION_FAILED, detail=reason)
    if any(p.ready for p in own) or any(v.verified for v in verdicts):
        return rollout.Observation(outcome=rollout.Outcome.VERIFIED)
    return None

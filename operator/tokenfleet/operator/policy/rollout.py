"""The canary rollout as a state machine (pure): state + one observation + now → next state.

Phases::

    Verifying ──verified──▶ Progressing(step i) ──pass & hold──▶ … ──last step──▶ Promoted
      │   ▲                  │   ▲      │
      │   │trust changed     │   │      └──analysis failed / abort──▶ RolledBack
      ▼   │                  ▼   │resume
     Blocked              Paused

The first revision a deployment ever has is promoted as soon as it verifies (there is nothing to
compare it with). A revision that has not verified never gets traffic: Verifying and Blocked keep
the stable revision at 100%. A step passes when its hold has elapsed *and* an analysis during the
step passed; any failed analysis (latency, errors, custom checks) or a quality regression on
the golden set rolls back at once, paused or not. A step of weight 100 promotes.

Idempotence: the shell turns the spec into observations each pass. Re-applying an unchanged
spec yields ``UNCHANGED`` (or ``NEW_REVISION`` naming the stable or current canary revision),
which never restarts a finished rollout. Manual controls are levels in the spec (``paused``,
``abort``, ``promote``): they act only where they make sense — promote never skips
verification and never revives a rolled-back or blocked revision; abort and promote do nothing
once the rollout has finished. A blocked revision verifies again when the trust it was refused
under changes (``TRUST_CHANGED``: policy.reverify decides that); stable keeps all traffic
meanwhile, as while Verifying. The state is small and lives in status, so an operator restart
resumes at the same step.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence


class Phase(enum.StrEnum):
    VERIFYING = "Verifying"
    PROGRESSING = "Progressing"
    PAUSED = "Paused"
    PROMOTED = "Promoted"
    ROLLED_BACK = "RolledBack"
    BLOCKED = "Blocked"


#: Phases in which a canary is still in flight.
ACTIVE = frozenset({Phase.VERIFYING, Phase.PROGRESSING, Phase.PAUSED})


class Outcome(enum.StrEnum):
    """One thing the shell observed since the last decision."""

    VERIFIED = "Verified"
    VERIFICATION_FAILED = "VerificationFailed"
    ANALYSIS_PASSED = "AnalysisPassed"
    ANALYSIS_FAILED = "AnalysisFailed"
    QUALITY_FAILED = "QualityFailed"  # the golden set scored the canary too far below stable
    INSUFFICIENT_SAMPLES = "InsufficientSamples"
    HOLD_ELAPSED = "HoldElapsed"  # a timer tick; the machine checks the hold itself
    PAUSE = "Pause"
    RESUME = "Resume"
    ABORT = "Abort"
    PROMOTE = "Promote"
    UNCHANGED = "Unchanged"
    NEW_REVISION = "NewRevision"
    TRUST_CHANGED = "TrustChanged"  # the trust a refusal was made under is no longer current


class Why(enum.StrEnum):
    """The reason a decision reports (a condition reason and Event reason)."""

    FIRST_REVISION = "FirstRevision"
    NEW_REVISION = "NewRevision"
    SUPERSEDED = "Superseded"
    REVERTED = "Reverted"
    VERIFIED = "Verified"
    VERIFICATION_FAILED = "VerificationFailed"
    STEP_PASSED = "StepPassed"
    HOLDING = "Holding"
    ANALYSIS_FAILED = "AnalysisFailed"
    QUALITY_REGRESSION = "QualityRegression"
    INSUFFICIENT_SAMPLES = "InsufficientSamples"
    PAUSED = "Paused"
    RESUMED = "Resumed"
    ABORTED = "Aborted"
    MANUAL_PROMOTE = "ManualPromote"
    PROMOTED = "Promoted"
    UNCHANGED = "Unchanged"
    TRUST_CHANGED = "TrustChanged"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """A canary step: traffic percent for the canary and seconds to hold it."""

    weight: int
    hold: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class State:
    """What the machine carries between decisions; stored in ModelDeployment.status.

    ``canary`` stays set after a rollback or block, so re-applying that same revision is
    recognised as unchanged (a revert to stable clears it: going forward again is a new try).
    ``reason`` is the last decision's reason (for a block, the verifier's: SignatureInvalid,
    DigestMismatch, UntrustedSigner, ArtifactUnreachable, or DeviceMismatch).
    """

    phase: Phase = Phase.PROMOTED
    stable: str = ""
    canary: str = ""
    step: int = 0
    step_started: float = 0.0  # unix seconds the current step (or resume) began
    step_passed: bool = False  # an analysis passed during the current step
    reason: str = ""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """An outcome, with the revision it names (NEW_REVISION) or its detail (a verifier's
    reason for VERIFICATION_FAILED, the analysis summary for analysis outcomes, what changed
    for TRUST_CHANGED); ``remedy`` says what would fix a VERIFICATION_FAILED."""

    outcome: Outcome
    revision: str = ""
    detail: str = ""
    remedy: str = ""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """The next state, traffic weights per revision, and whether a user should be told."""

    state: State
    weights: Mapping[str, int]
    why: Why
    message: str
    notable: bool  # a state change worth a Kubernetes Event


def weights(state: State, steps: Sequence[Step]) -> dict[str, int]:
    """Traffic percent per revision. Only Progressing and Paused give the canary any."""
    if state.phase in (Phase.PROGRESSING, Phase.PAUSED) and state.canary:
        canary = steps[min(state.step, len(steps) - 1)].weight
        if not state.stable:
            return {state.canary: 100}
        return {state.stable: 100 - canary, state.canary: canary}
    return {state.stable: 100} if state.stable else {}


def decide(
    state: State, observation: Observation, *, steps: Sequence[Step], now: float
) -> Decision:
    """Apply one observation. Unknown combinations keep the state (and say so)."""
    if observation.outcome is Outcome.NEW_REVISION:
        return _new_revision(state, observation.revision, steps=steps, now=now)
    handler = _HANDLERS.get(state.phase)
    result = handler(state, observation, steps, now) if handler else None
    if result is None:
        return _stay(state, steps, Why.UNCHANGED, f"{observation.outcome} changes nothing now")
    return result


_Result = Decision | None


def _stay(state: State, steps: Sequence[Step], why: Why, message: str) -> Decision:
    return Decision(
        state=state, weights=weights(state, steps), why=why, message=message, notable=False
    )


def _to(
    state: State, steps: Sequence[Step], why: Why, message: str, *, reason: str = ""
) -> Decision:
    state = dataclasses.replace(state, reason=reason or why.value)
    return Decision(
        state=state, weights=weights(state, steps), why=why, message=message, notable=True
    )


def _new_revision(state: State, revision: str, *, steps: Sequence[Step], now: float) -> Decision:
    canary_pending = state.phase in ACTIVE or state.phase is Phase.BLOCKED
    if revision == state.canary or (revision == state.stable and not canary_pending):
        return _stay(state, steps, Why.UNCHANGED, f"revision {revision} is already known")
    if revision == state.stable:
        reverted = State(phase=Phase.PROMOTED, stable=state.stable, canary="", step_started=now)
        return _to(
            reverted,
            steps,
            Why.REVERTED,
            f"spec is back at stable revision {revision}; canary {state.canary} dropped",
        )
    why = Why.SUPERSEDED if canary_pending and state.canary else Why.NEW_REVISION
    if not state.stable:
        why = Why.FIRST_REVISION
    verifying = State(phase=Phase.VERIFYING, stable=state.stable, canary=revision, step_started=now)
    return _to(
        verifying,
        steps,
        why,
        f"revision {revision} created; verifying its artifact before any traffic",
    )


def _start(state: State, steps: Sequence[Step], now: float, why: Why, message: str) -> Decision:
    """Enter step 0, or promote at once when there is no stable revision to compare with."""
    if not state.stable:
        return _promote(
            state,
            steps,
            now,
            Why.PROMOTED,
            f"first revision {state.canary} verified; promoted with nothing to compare against",
        )
    started = dataclasses.replace(
        state, phase=Phase.PROGRESSING, step=0, step_started=now, step_passed=False
    )
    if steps[0].weight >= 100:
        return _promote(started, steps, now, Why.PROMOTED, "the only step is 100%: promoted")
    return _to(started, steps, why, message)


def _promote(state: State, steps: Sequence[Step], now: float, why: Why, message: str) -> Decision:
    promoted = State(phase=Phase.PROMOTED, stable=state.canary, canary="", step_started=now)
    return _to(promoted, steps, why, message)


def _roll_back(state: State, steps: Sequence[Step], why: Why, message: str) -> Decision:
    return _to(
        dataclasses.replace(state, phase=Phase.ROLLED_BACK, step_passed=False), steps, why, message
    )


def _advance(state: State, steps: Sequence[Step], now: float) -> Decision:
    """The current step passed: the next step, or promotion after the last (or at 100%)."""
    following = state.step + 1
    if following >= len(steps) or steps[following].weight >= 100:
        return _promote(
            state,
            steps,
            now,
            Why.PROMOTED,
            f"canary {state.canary} passed every step; promoted to stable",
        )
    moved = dataclasses.replace(state, step=following, step_started=now, step_passed=False)
    return _to(
        moved,
        steps,
        Why.STEP_PASSED,
        f"step {state.step + 1} passed; canary {state.canary} now at {steps[following].weight}%",
    )


def _hold_over(state: State, steps: Sequence[Step], now: float) -> bool:
    return now - state.step_started >= steps[min(state.step, len(steps) - 1)].hold


def _verifying(state: State, seen: Observation, steps: Sequence[Step], now: float) -> _Result:
    match seen.outcome:
        case Outcome.VERIFIED:
            return _start(
                state,
                steps,
                now,
                Why.VERIFIED,
                f"revision {state.canary} verified; canary at {steps[0].weight}%",
            )
        case Outcome.VERIFICATION_FAILED:
            blocked = dataclasses.replace(state, phase=Phase.BLOCKED)
            return _to(
                blocked,
                steps,
                Why.VERIFICATION_FAILED,
                _remedied(
                    f"revision {state.canary} failed verification ({seen.detail}); "
                    "rollout halted, stable keeps all traffic",
                    seen,
                ),
                reason=seen.detail or Why.VERIFICATION_FAILED.value,
            )
        case Outcome.ABORT:
            return _roll_back(state, steps, Why.ABORTED, "rollout aborted before any traffic")
    return None


def _progressing(state: State, seen: Observation, steps: Sequence[Step], now: float) -> _Result:
    match seen.outcome:
        case Outcome.ANALYSIS_PASSED | Outcome.HOLD_ELAPSED:
            passed = state.step_passed or seen.outcome is Outcome.ANALYSIS_PASSED
            if passed and _hold_over(state, steps, now):
                return _advance(state, steps, now)
            held = dataclasses.replace(state, step_passed=passed)
            waiting = "holding" if passed else "waiting for a passing analysis"
            return _stay(held, steps, Why.HOLDING, f"step {state.step + 1}: {waiting}")
        case Outcome.INSUFFICIENT_SAMPLES:
            return _stay(
                state,
                steps,
                Why.INSUFFICIENT_SAMPLES,
                f"step {state.step + 1}: {seen.detail or 'too few canary requests'}",
            )
        case Outcome.PAUSE:
            return _to(
                dataclasses.replace(state, phase=Phase.PAUSED),
                steps,
                Why.PAUSED,
                f"paused at step {state.step + 1} by spec.rollout.paused",
            )
    return _in_flight(state, seen, steps, now)


def _paused(state: State, seen: Observation, steps: Sequence[Step], now: float) -> _Result:
    match seen.outcome:
        case Outcome.ANALYSIS_PASSED:
            return _stay(
                dataclasses.replace(state, step_passed=True),
                steps,
                Why.PAUSED,
                f"paused at step {state.step + 1}; analysis passing",
            )
        case Outcome.RESUME:
            resumed = dataclasses.replace(state, phase=Phase.PROGRESSING, step_started=now)
            return _to(
                resumed,
                steps,
                Why.RESUMED,
                f"resumed at step {state.step + 1}; its hold starts again",
            )
    return _in_flight(state, seen, steps, now)


def _in_flight(state: State, seen: Observation, steps: Sequence[Step], now: float) -> _Result:
    """What Progressing and Paused share: failures, abort, promote."""
    match seen.outcome:
        case Outcome.ANALYSIS_FAILED:
            return _roll_back(
                state,
                steps,
                Why.ANALYSIS_FAILED,
                f"canary {state.canary} worse than stable ({seen.detail}); rolled back to stable",
            )
        case Outcome.QUALITY_FAILED:
            return _roll_back(
                state,
                steps,
                Why.QUALITY_REGRESSION,
                f"canary {state.canary} answers worse than stable ({seen.detail}); "
                "rolled back to stable",
            )
        case Outcome.VERIFICATION_FAILED:
            blocked = dataclasses.replace(state, phase=Phase.BLOCKED, step_passed=False)
            return _to(
                blocked,
                steps,
                Why.VERIFICATION_FAILED,
                _remedied(
                    f"canary {state.canary} pods failed verification ({seen.detail}); "
                    "traffic returned to stable",
                    seen,
                ),
                reason=seen.detail or Why.VERIFICATION_FAILED.value,
            )
        case Outcome.ABORT:
            return _roll_back(state, steps, Why.ABORTED, "rollout aborted by spec.rollout.abort")
        case Outcome.PROMOTE:
            return _promote(
                state,
                steps,
                now,
                Why.MANUAL_PROMOTE,
                f"canary {state.canary} promoted by spec.rollout.promote",
            )
    return None


def _remedied(message: str, seen: Observation) -> str:
    return f"{message}; {seen.remedy}" if seen.remedy else message


def _blocked(state: State, seen: Observation, steps: Sequence[Step], now: float) -> _Result:
    match seen.outcome:
        case Outcome.VERIFIED:
            # ArtifactUnreachable is often transient: pods that verify later may start the canary.
            return _start(
                state,
                steps,
                now,
                Why.VERIFIED,
                f"revision {state.canary} verified after all; canary at {steps[0].weight}%",
            )
        case Outcome.TRUST_CHANGED if seen.revision in ("", state.canary):
            again = dataclasses.replace(
                state, phase=Phase.VERIFYING, step=0, step_started=now, step_passed=False
            )
            changed = f" ({seen.detail})" if seen.detail else ""
            return _to(
                again,
                steps,
                Why.TRUST_CHANGED,
                f"the trust revision {state.canary} was refused under changed{changed}; "
                "verifying it again before any traffic",
            )
    return None


_HANDLERS = {
    Phase.VERIFYING: _verifying,
    Phase.PROGRESSING: _progressing,
    Phase.PAUSED: _paused,
    Phase.BLOCKED: _blocked,
}

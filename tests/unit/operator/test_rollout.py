"""The rollout state machine as a table: every phase × every outcome → next phase, weights,
reason. Then journeys (good canary promotes, bad canary rolls back, first revision, re-apply,
revert, pause/resume, hold timing) and a property: a canary that has not verified since it
became the canary never receives traffic, and weights always sum to 100."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenfleet.operator.policy import rollout
from tokenfleet.operator.policy.rollout import Observation, Outcome, Phase, State, Step, Why

S, C, N = "chat-stable", "chat-canary", "chat-new"
STEPS = (Step(weight=10, hold=60), Step(weight=50, hold=60), Step(weight=100, hold=0))
NOW = 10_000.0
STARTED = NOW - 100  # the current step's hold (60 s) is over

BASE = State(stable=S, canary=C, step=0, step_started=STARTED)
STATES = {
    Phase.VERIFYING: dataclasses.replace(BASE, phase=Phase.VERIFYING),
    Phase.PROGRESSING: dataclasses.replace(BASE, phase=Phase.PROGRESSING),
    Phase.PAUSED: dataclasses.replace(BASE, phase=Phase.PAUSED),
    Phase.PROMOTED: State(phase=Phase.PROMOTED, stable=S, step_started=STARTED),
    Phase.ROLLED_BACK: dataclasses.replace(BASE, phase=Phase.ROLLED_BACK),
    Phase.BLOCKED: dataclasses.replace(BASE, phase=Phase.BLOCKED, reason="DigestMismatch"),
}
OBSERVATIONS = {
    Outcome.VERIFIED: Observation(outcome=Outcome.VERIFIED),
    Outcome.VERIFICATION_FAILED: Observation(
        outcome=Outcome.VERIFICATION_FAILED, detail="DigestMismatch"
    ),
    Outcome.ANALYSIS_PASSED: Observation(outcome=Outcome.ANALYSIS_PASSED),
    Outcome.ANALYSIS_FAILED: Observation(outcome=Outcome.ANALYSIS_FAILED, detail="TTFT p99 high"),
    Outcome.QUALITY_FAILED: Observation(outcome=Outcome.QUALITY_FAILED, detail="0.4 vs 1.0"),
    Outcome.INSUFFICIENT_SAMPLES: Observation(outcome=Outcome.INSUFFICIENT_SAMPLES),
    Outcome.HOLD_ELAPSED: Observation(outcome=Outcome.HOLD_ELAPSED),
    Outcome.PAUSE: Observation(outcome=Outcome.PAUSE),
    Outcome.RESUME: Observation(outcome=Outcome.RESUME),
    Outcome.ABORT: Observation(outcome=Outcome.ABORT),
    Outcome.PROMOTE: Observation(outcome=Outcome.PROMOTE),
    Outcome.UNCHANGED: Observation(outcome=Outcome.UNCHANGED),
    Outcome.NEW_REVISION: Observation(outcome=Outcome.NEW_REVISION, revision=N),
    Outcome.TRUST_CHANGED: Observation(
        outcome=Outcome.TRUST_CHANGED, revision=C, detail="trust Secret ns/k changed"
    ),
}

STABLE_ONLY = {S: 100}
STEP1 = {S: 90, C: 10}
STEP2 = {S: 50, C: 50}
PROMOTED_C = {C: 100}

P, Out = Phase, Outcome
#: (phase, outcome) → (next phase, weights, why). Every pair appears exactly once.
TABLE: dict[tuple[Phase, Outcome], tuple[Phase, dict[str, int], Why]] = {
    (P.VERIFYING, Out.VERIFIED): (P.PROGRESSING, STEP1, Why.VERIFIED),
    (P.VERIFYING, Out.VERIFICATION_FAILED): (P.BLOCKED, STABLE_ONLY, Why.VERIFICATION_FAILED),
    (P.VERIFYING, Out.ANALYSIS_PASSED): (P.VERIFYING, STABLE_ONLY, Why.UNCHANGED),
    (P.VERIFYING, Out.ANALYSIS_FAILED): (P.VERIFYING, STABLE_ONLY, Why.UNCHANGED),
    (P.VERIFYING, Out.QUALITY_FAILED): (P.VERIFYING, STABLE_ONLY, Why.UNCHANGED),  # no replay
    (P.VERIFYING, Out.INSUFFICIENT_SAMPLES): (P.VERIFYING, STABLE_ONLY, Why.UNCHANGED),
    (P.VERIFYING, Out.HOLD_ELAPSED): (P.VERIFYING, STABLE_ONLY, Why.UNCHANGED),
    (P.VERIFYING, Out.PAUSE): (P.VERIFYING, STABLE_ONLY, Why.UNCHANGED),
    (P.VERIFYING, Out.RESUME): (P.VERIFYING, STABLE_ONLY, Why.UNCHANGED),
    (P.VERIFYING, Out.ABORT): (P.ROLLED_BACK, STABLE_ONLY, Why.ABORTED),
    (P.VERIFYING, Out.PROMOTE): (P.VERIFYING, STABLE_ONLY, Why.UNCHANGED),  # never skip verify
    (P.VERIFYING, Out.UNCHANGED): (P.VERIFYING, STABLE_ONLY, Why.UNCHANGED),
    (P.VERIFYING, Out.NEW_REVISION): (P.VERIFYING, STABLE_ONLY, Why.SUPERSEDED),
    (P.VERIFYING, Out.TRUST_CHANGED): (P.VERIFYING, STABLE_ONLY, Why.UNCHANGED),  # not refused
    (P.PROGRESSING, Out.VERIFIED): (P.PROGRESSING, STEP1, Why.UNCHANGED),
    (P.PROGRESSING, Out.VERIFICATION_FAILED): (P.BLOCKED, STABLE_ONLY, Why.VERIFICATION_FAILED),
    (P.PROGRESSING, Out.ANALYSIS_PASSED): (P.PROGRESSING, STEP2, Why.STEP_PASSED),
    (P.PROGRESSING, Out.ANALYSIS_FAILED): (P.ROLLED_BACK, STABLE_ONLY, Why.ANALYSIS_FAILED),
    (P.PROGRESSING, Out.QUALITY_FAILED): (P.ROLLED_BACK, STABLE_ONLY, Why.QUALITY_REGRESSION),
    (P.PROGRESSING, Out.INSUFFICIENT_SAMPLES): (P.PROGRESSING, STEP1, Why.INSUFFICIENT_SAMPLES),
    (P.PROGRESSING, Out.HOLD_ELAPSED): (P.PROGRESSING, STEP1, Why.HOLDING),  # no pass yet
    (P.PROGRESSING, Out.PAUSE): (P.PAUSED, STEP1, Why.PAUSED),
    (P.PROGRESSING, Out.RESUME): (P.PROGRESSING, STEP1, Why.UNCHANGED),
    (P.PROGRESSING, Out.ABORT): (P.ROLLED_BACK, STABLE_ONLY, Why.ABORTED),
    (P.PROGRESSING, Out.PROMOTE): (P.PROMOTED, PROMOTED_C, Why.MANUAL_PROMOTE),
    (P.PROGRESSING, Out.UNCHANGED): (P.PROGRESSING, STEP1, Why.UNCHANGED),
    (P.PROGRESSING, Out.NEW_REVISION): (P.VERIFYING, STABLE_ONLY, Why.SUPERSEDED),
    (P.PROGRESSING, Out.TRUST_CHANGED): (P.PROGRESSING, STEP1, Why.UNCHANGED),
    (P.PAUSED, Out.VERIFIED): (P.PAUSED, STEP1, Why.UNCHANGED),
    (P.PAUSED, Out.VERIFICATION_FAILED): (P.BLOCKED, STABLE_ONLY, Why.VERIFICATION_FAILED),
    (P.PAUSED, Out.ANALYSIS_PASSED): (P.PAUSED, STEP1, Why.PAUSED),  # paused: no step up
    (P.PAUSED, Out.ANALYSIS_FAILED): (P.ROLLED_BACK, STABLE_ONLY, Why.ANALYSIS_FAILED),
    (P.PAUSED, Out.QUALITY_FAILED): (P.ROLLED_BACK, STABLE_ONLY, Why.QUALITY_REGRESSION),
    (P.PAUSED, Out.INSUFFICIENT_SAMPLES): (P.PAUSED, STEP1, Why.UNCHANGED),
    (P.PAUSED, Out.HOLD_ELAPSED): (P.PAUSED, STEP1, Why.UNCHANGED),
    (P.PAUSED, Out.PAUSE): (P.PAUSED, STEP1, Why.UNCHANGED),
    (P.PAUSED, Out.RESUME): (P.PROGRESSING, STEP1, Why.RESUMED),
    (P.PAUSED, Out.ABORT): (P.ROLLED_BACK, STABLE_ONLY, Why.ABORTED),
    (P.PAUSED, Out.PROMOTE): (P.PROMOTED, PROMOTED_C, Why.MANUAL_PROMOTE),
    (P.PAUSED, Out.UNCHANGED): (P.PAUSED, STEP1, Why.UNCHANGED),
    (P.PAUSED, Out.NEW_REVISION): (P.VERIFYING, STABLE_ONLY, Why.SUPERSEDED),
    (P.PAUSED, Out.TRUST_CHANGED): (P.PAUSED, STEP1, Why.UNCHANGED),
    **{
        (P.PROMOTED, o): (P.PROMOTED, STABLE_ONLY, Why.UNCHANGED)
        for o in Outcome
        if o is not Out.NEW_REVISION
    },
    (P.PROMOTED, Out.NEW_REVISION): (P.VERIFYING, STABLE_ONLY, Why.NEW_REVISION),
    **{
        (P.ROLLED_BACK, o): (P.ROLLED_BACK, STABLE_ONLY, Why.UNCHANGED)
        for o in Outcome
        if o is not Out.NEW_REVISION
    },
    (P.ROLLED_BACK, Out.NEW_REVISION): (P.VERIFYING, STABLE_ONLY, Why.NEW_REVISION),
    **{
        (P.BLOCKED, o): (P.BLOCKED, STABLE_ONLY, Why.UNCHANGED)
        for o in Outcome
        if o not in (Out.NEW_REVISION, Out.VERIFIED, Out.TRUST_CHANGED)
    },
    (P.BLOCKED, Out.VERIFIED): (P.PROGRESSING, STEP1, Why.VERIFIED),  # e.g. unreachable, then ok
    # the key it was refused under was replaced: verify again, still no traffic
    (P.BLOCKED, Out.TRUST_CHANGED): (P.VERIFYING, STABLE_ONLY, Why.TRUST_CHANGED),
    (P.BLOCKED, Out.NEW_REVISION): (P.VERIFYING, STABLE_ONLY, Why.SUPERSEDED),
}


def test_the_table_covers_every_phase_and_outcome() -> None:
    assert set(TABLE) == {(p, o) for p in Phase for o in Outcome}


@pytest.mark.parametrize(
    ("phase", "outcome"),
    [pytest.param(p, o, id=f"{p}-{o}") for p in Phase for o in Outcome],
)
def test_transition(phase: Phase, outcome: Outcome) -> None:
    expected_phase, expected_weights, expected_why = TABLE[(phase, outcome)]
    state = STATES[phase]
    decision = rollout.decide(state, OBSERVATIONS[outcome], steps=STEPS, now=NOW)
    assert (decision.state.phase, dict(decision.weights), decision.why) == (
        expected_phase,
        expected_weights,
        expected_why,
    ), decision.message
    changed = (
        decision.state.phase != state.phase
        or decision.state.canary != state.canary
        or dict(decision.weights) != rollout.weights(state, STEPS)
    )
    assert decision.notable == changed, "an Event exactly when users see a change"
    assert state == STATES[phase], "the input state must not change"
    if expected_why is Why.UNCHANGED:
        assert decision.state == state
    if expected_phase is Phase.BLOCKED and phase is not Phase.BLOCKED:
        assert decision.state.reason == "DigestMismatch"


# --- journeys ---------------------------------------------------------------------------------


def run(
    state: State, *observations: Observation | Outcome, start: float = NOW, tick: float = 30
) -> list[rollout.Decision]:
    """Feed observations ``tick`` seconds apart; return every decision."""
    out, now = [], start
    for seen in observations:
        observation = seen if isinstance(seen, Observation) else Observation(outcome=seen)
        decision = rollout.decide(state, observation, steps=STEPS, now=now)
        out.append(decision)
        state, now = decision.state, now + tick
    return out


def new(revision: str) -> Observation:
    return Observation(outcome=Outcome.NEW_REVISION, revision=revision)


PROMOTED_S = State(phase=Phase.PROMOTED, stable=S)


def test_good_canary_steps_up_and_promotes() -> None:
    decisions = run(
        PROMOTED_S,
        new(C),
        Out.VERIFIED,
        Out.ANALYSIS_PASSED,  # t+60: 30 s into a 60 s hold: holding
        Out.ANALYSIS_PASSED,  # t+90: hold over → 50%
        Out.ANALYSIS_PASSED,
        Out.ANALYSIS_PASSED,  # next step is 100%: promote
    )
    assert [dict(d.weights) for d in decisions] == [
        STABLE_ONLY,
        STEP1,
        STEP1,
        STEP2,
        STEP2,
        PROMOTED_C,
    ]
    assert [d.why for d in decisions] == [
        Why.NEW_REVISION,
        Why.VERIFIED,
        Why.HOLDING,
        Why.STEP_PASSED,
        Why.HOLDING,
        Why.PROMOTED,
    ]
    final = decisions[-1].state
    assert (final.phase, final.stable, final.canary) == (Phase.PROMOTED, C, "")


def test_a_pass_early_in_the_hold_counts_once_the_hold_is_over() -> None:
    decisions = run(
        PROMOTED_S, new(C), Out.VERIFIED, Out.ANALYSIS_PASSED, Out.HOLD_ELAPSED, tick=40
    )
    assert decisions[2].why is Why.HOLDING and decisions[2].state.step_passed
    assert decisions[3].why is Why.STEP_PASSED
    assert dict(decisions[3].weights) == STEP2


def test_bad_canary_rolls_back_at_the_first_failed_analysis() -> None:
    decisions = run(PROMOTED_S, new(C), Out.VERIFIED, Out.ANALYSIS_FAILED)
    last = decisions[-1]
    assert (last.state.phase, dict(last.weights), last.why) == (
        Phase.ROLLED_BACK,
        STABLE_ONLY,
        Why.ANALYSIS_FAILED,
    )
    assert last.notable


def test_insufficient_samples_never_promote() -> None:
    decisions = run(PROMOTED_S, new(C), Out.VERIFIED, *[Out.INSUFFICIENT_SAMPLES] * 20, tick=600)
    assert decisions[-1].state.phase is Phase.PROGRESSING
    assert dict(decisions[-1].weights) == STEP1


def test_first_revision_is_promoted_once_verified_and_gets_nothing_before() -> None:
    decisions = run(State(), new(C), Out.VERIFIED)
    assert decisions[0].why is Why.FIRST_REVISION and dict(decisions[0].weights) == {}
    assert decisions[1].state.phase is Phase.PROMOTED and dict(decisions[1].weights) == {C: 100}


def test_first_revision_that_fails_verification_serves_nothing() -> None:
    decisions = run(
        State(), new(C), Observation(outcome=Out.VERIFICATION_FAILED, detail="UntrustedSigner")
    )
    assert decisions[-1].state.phase is Phase.BLOCKED
    assert decisions[-1].state.reason == "UntrustedSigner"
    assert dict(decisions[-1].weights) == {}


@pytest.mark.parametrize(
    ("state", "revision"),
    [
        pytest.param(PROMOTED_S, S, id="re-apply-after-promotion"),
        pytest.param(STATES[Phase.ROLLED_BACK], C, id="re-apply-rolled-back-revision"),
        pytest.param(STATES[Phase.BLOCKED], C, id="re-apply-blocked-revision"),
        pytest.param(STATES[Phase.PROGRESSING], C, id="re-apply-mid-rollout"),
        pytest.param(STATES[Phase.ROLLED_BACK], S, id="re-apply-stable-after-rollback"),
    ],
)
def test_reapplying_a_known_revision_changes_nothing(state: State, revision: str) -> None:
    decision = rollout.decide(state, new(revision), steps=STEPS, now=NOW)
    assert decision.state == state
    assert decision.why is Why.UNCHANGED and not decision.notable


@pytest.mark.parametrize("phase", [Phase.VERIFYING, Phase.PROGRESSING, Phase.PAUSED, Phase.BLOCKED])
def test_going_back_to_stable_drops_the_canary(phase: Phase) -> None:
    decision = rollout.decide(STATES[phase], new(S), steps=STEPS, now=NOW)
    assert (decision.state.phase, decision.state.canary, decision.why) == (
        Phase.PROMOTED,
        "",
        Why.REVERTED,
    )
    assert dict(decision.weights) == STABLE_ONLY
    # Going forward again is a fresh attempt.
    again = rollout.decide(decision.state, new(C), steps=STEPS, now=NOW)
    assert again.state.phase is Phase.VERIFYING


def test_a_blocked_canary_whose_trust_changed_verifies_again_and_then_steps_up() -> None:
    changed = Observation(outcome=Out.TRUST_CHANGED, revision=C, detail="trust Secret ns/k changed")
    refused = Observation(
        outcome=Out.VERIFICATION_FAILED, detail="UntrustedSigner", remedy="update the Secret"
    )
    decisions = run(PROMOTED_S, new(C), refused, changed, Out.VERIFIED)
    blocked, again, verified = decisions[1:]
    assert blocked.state.phase is Phase.BLOCKED
    assert blocked.message.endswith("stable keeps all traffic; update the Secret")
    assert (again.state.phase, again.why, again.notable) == (
        Phase.VERIFYING,
        Why.TRUST_CHANGED,
        True,
    )
    assert again.state.reason == "TrustChanged" and again.state.step_started == NOW + 60
    assert "trust Secret ns/k changed" in again.message and dict(again.weights) == STABLE_ONLY
    assert verified.state.phase is Phase.PROGRESSING and dict(verified.weights) == STEP1


@pytest.mark.parametrize(
    "revision",
    [pytest.param(N, id="another-revision"), pytest.param(S, id="the-stable")],
)
def test_a_trust_change_of_another_revision_leaves_a_blocked_canary_blocked(
    revision: str,
) -> None:
    changed = Observation(outcome=Out.TRUST_CHANGED, revision=revision)
    decision = rollout.decide(STATES[Phase.BLOCKED], changed, steps=STEPS, now=NOW)
    assert decision.state == STATES[Phase.BLOCKED] and decision.why is Why.UNCHANGED


def test_resume_restarts_the_hold_of_the_current_step() -> None:
    decisions = run(
        STATES[Phase.PAUSED], Out.RESUME, Out.ANALYSIS_PASSED, Out.HOLD_ELAPSED, tick=30
    )
    assert decisions[0].state.step_started == NOW
    assert decisions[1].why is Why.HOLDING  # 30 s into a fresh 60 s hold
    assert decisions[2].why is Why.STEP_PASSED


def test_a_state_rebuilt_from_its_fields_decides_the_same() -> None:
    """An operator restart reads the state back from status: same step, same next move."""
    mid = run(PROMOTED_S, new(C), Out.VERIFIED, Out.ANALYSIS_PASSED, Out.ANALYSIS_PASSED)[-1].state
    rebuilt = State(**{f.name: getattr(mid, f.name) for f in dataclasses.fields(State)})
    for outcome in Outcome:
        seen = OBSERVATIONS[outcome]
        assert rollout.decide(rebuilt, seen, steps=STEPS, now=NOW + 500) == rollout.decide(
            mid, seen, steps=STEPS, now=NOW + 500
        )


def test_a_single_100_percent_step_promotes_on_verification() -> None:
    only = (Step(weight=100, hold=0),)
    verifying = STATES[Phase.VERIFYING]
    decision = rollout.decide(verifying, Observation(outcome=Out.VERIFIED), steps=only, now=NOW)
    assert decision.state.phase is Phase.PROMOTED and dict(decision.weights) == PROMOTED_C


# --- property ---------------------------------------------------------------------------------

observations = st.one_of(
    st.sampled_from([o for o in Outcome if o is not Outcome.NEW_REVISION]).map(
        lambda o: Observation(outcome=o, detail="DigestMismatch")
    ),
    st.sampled_from([S, C, N, "chat-other"]).map(new),
)


@given(st.lists(observations, max_size=40))
def test_an_unverified_canary_never_gets_traffic(seen: Sequence[Observation]) -> None:
    state, now = PROMOTED_S, NOW
    verified: set[str] = {S}
    for observation in seen:
        decision = rollout.decide(state, observation, steps=STEPS, now=now)
        if decision.state.canary != state.canary:
            verified.discard(decision.state.canary)
        if observation.outcome is Outcome.VERIFIED and state.canary:
            verified.add(state.canary)
        weights = dict(decision.weights)
        assert not weights or sum(weights.values()) == 100
        for revision, weight in weights.items():
            assert weight == 0 or revision in verified, (revision, decision)
        state, now = decision.state, now + 45

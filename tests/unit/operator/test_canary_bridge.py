"""The rollout state survives a trip through ModelDeployment.status (what an operator restart
relies on) for every phase; spec steps and thresholds convert with the right units."""

from __future__ import annotations

import pytest

from tokenfleet.api.deployment import ModelDeploymentStatus, Rollout
from tokenfleet.operator import canary
from tokenfleet.operator.policy import rollout
from tokenfleet.operator.policy.rollout import Observation, Outcome, Phase, State

NOW = 1_795_000_000.0  # whole seconds: status stores RFC 3339 to the second


@pytest.mark.parametrize("phase", list(Phase), ids=str)
def test_state_round_trips_through_status(phase: Phase) -> None:
    state = State(
        phase=phase,
        stable="m-aaa",
        canary="m-bbb",
        step=1,
        step_started=NOW,
        step_passed=True,
        reason="DigestMismatch",
    )
    decision = rollout.Decision(
        state=state, weights={}, why=rollout.Why.HOLDING, message="m", notable=False
    )
    wire = {"phase": "Progressing", **canary.status_fields(decision, last_analysis="ok")}
    status = ModelDeploymentStatus.model_validate(wire)
    assert canary.state_of(status) == state
    assert status.rollout is not None and status.rollout.last_analysis == "ok"
    assert wire["rollout"]["stepStartedAt"].endswith("Z")


def test_restart_mid_rollout_resumes_at_the_same_step() -> None:
    steps = canary.steps_of(Rollout())
    state = State(phase=Phase.PROMOTED, stable="m-aaa")
    for seen, at in [
        (Observation(outcome=Outcome.NEW_REVISION, revision="m-bbb"), NOW),
        (Observation(outcome=Outcome.VERIFIED), NOW + 10),
        (Observation(outcome=Outcome.ANALYSIS_PASSED), NOW + 400),  # default hold 300 s
    ]:
        decision = rollout.decide(state, seen, steps=steps, now=at)
        state = decision.state
    assert (state.phase, state.step) == (Phase.PROGRESSING, 1)
    # The operator dies; a new one reads status back.
    status = ModelDeploymentStatus.model_validate(canary.status_fields(decision))
    resumed = canary.state_of(status)
    assert resumed == state
    nxt = rollout.decide(
        resumed, Observation(outcome=Outcome.HOLD_ELAPSED), steps=steps, now=NOW + 500
    )
    assert nxt.why is rollout.Why.HOLDING  # same step, its hold still running


def test_no_status_means_a_fresh_machine() -> None:
    assert canary.state_of(None) == State()
    assert canary.state_of(ModelDeploymentStatus()) == State()


def test_spec_units() -> None:
    spec = Rollout.model_validate(
        {"steps": [{"weight": 20, "holdSeconds": 90}], "analysis": {"maxTtftP99Ms": 800}}
    )
    assert canary.steps_of(spec) == (rollout.Step(weight=20, hold=90.0),)
    limits = canary.thresholds_of(spec)
    assert limits.max_ttft_p99 == 0.8 and limits.max_inter_token_p99 is None

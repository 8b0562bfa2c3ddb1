"""The rollout state survives a trip through ModelDeployment.status (what an operator restart
relies on) for every phase; spec steps and thresholds convert with the right units; a
revision's verification is read from its pods' verdicts (annotation or termination message)."""

from __future__ import annotations

import uuid

import pytest

from tokenfleet.api import labels
from tokenfleet.api.deployment import ModelDeploymentStatus, Rollout
from tokenfleet.operator.plan import canary, observed
from tokenfleet.operator.policy import rollout
from tokenfleet.operator.policy.rollout import Observation, Outcome, Phase, State
from tokenfleet.signing.verdict import Reason, Verdict

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
    wire = {**canary.status_fields(decision, last_analysis="ok").to_wire(), "phase": "Progressing"}
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
    status = ModelDeploymentStatus.model_validate(canary.status_fields(decision).to_wire())
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


# --- verification as the operator sees it ------------------------------------------------------

REFUSED = Verdict(reason=Reason.DIGEST_MISMATCH, message="Hash mismatch for 'a'").to_json()
UNTRUSTED = Verdict(reason=Reason.UNTRUSTED_SIGNER).to_json()
OK = Verdict(reason=Reason.VERIFIED, signer="key:sha256:ab").to_json()


def worker(
    revision: str = "rev-b",
    *,
    ready: bool = False,
    verdict_text: str = "",
    terminating: bool = False,
) -> observed.WorkerPod:
    return observed.WorkerPod(
        name=f"p-{uuid.uuid4().hex[:5]}",
        zone="zone-a",
        revision=revision,
        ready=ready,
        terminating=terminating,
        unschedulable_since=None,
        verdict=verdict_text,
    )


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        pytest.param([], None, id="no-pods"),
        pytest.param([worker()], None, id="starting"),
        pytest.param([worker(ready=True)], None, id="ready-without-a-verdict-is-no-pass"),
        pytest.param([worker(verdict_text=OK)], Outcome.VERIFIED, id="verified-verdict"),
        pytest.param([worker(verdict_text=REFUSED)], Outcome.VERIFICATION_FAILED, id="refused"),
        pytest.param(
            [worker(ready=True), worker(verdict_text=REFUSED)],
            Outcome.VERIFICATION_FAILED,
            id="one-refusal-blocks",
        ),
        pytest.param([worker("rev-a", verdict_text=REFUSED)], None, id="other-revision"),
        pytest.param([worker(verdict_text=REFUSED, terminating=True)], None, id="terminating"),
        pytest.param([worker(verdict_text="not json")], None, id="garbage-ignored"),
    ],
)
def test_verification_of_a_revision(
    pods: list[observed.WorkerPod], expected: Outcome | None
) -> None:
    seen = canary.verification(pods, "rev-b")
    assert (seen.outcome if seen else None) == expected


def test_the_most_frequent_refusal_is_reported() -> None:
    pods = [
        worker(verdict_text=REFUSED),
        worker(verdict_text=REFUSED),
        worker(verdict_text=UNTRUSTED),
    ]
    seen = canary.verification(pods, "rev-b")
    assert seen is not None and seen.detail == "DigestMismatch"


def _pod(
    annotations: dict[str, str],
    statuses: list[dict[str, object]],
    init: list[dict[str, object]] | None = None,
) -> dict[str, object]:
    return {
        "metadata": {"name": "p", "annotations": annotations, "labels": {labels.REVISION: "rev-b"}},
        "status": {"containerStatuses": statuses, "initContainerStatuses": init or []},
    }


def _verify(state: dict[str, object], last: dict[str, object] | None = None) -> dict[str, object]:
    """The verify init container's status, as the kubelet writes it."""
    return {"name": "verify", "state": state, **({"lastState": last} if last else {})}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        # anyone who may patch the pod may write an annotation: never a verdict
        pytest.param(_pod({labels.VERDICT: OK}, []), "", id="an-annotation-is-not-a-verdict"),
        pytest.param(
            _pod({}, [], [_verify({"terminated": {"exitCode": 0, "message": OK}})]),
            OK,
            id="the-verify-step-passed",
        ),
        pytest.param(
            _pod(
                {},
                [],
                [
                    _verify(
                        {"waiting": {"reason": "CrashLoopBackOff"}},
                        {"terminated": {"exitCode": 3, "message": REFUSED}},
                    )
                ],
            ),
            REFUSED,
            id="the-verify-step-refused-and-retries",
        ),
        pytest.param(
            _pod(
                {},
                [{"name": "vllm", "state": {"terminated": {"exitCode": 0, "message": OK}}}],
            ),
            "",
            id="a-pass-in-the-engine-containers-message-is-not-read",
        ),
        pytest.param(
            _pod(
                {},
                [
                    {
                        "name": "vllm",
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                        "lastState": {"terminated": {"exitCode": 3, "message": REFUSED}},
                    }
                ],
            ),
            REFUSED,
            id="termination-message",
        ),
        pytest.param(
            _pod(
                {},
                [
                    {
                        "name": "vllm",
                        "ready": True,
                        "state": {"running": {"startedAt": "2026-01-01T12:01:00Z"}},
                        "lastState": {"terminated": {"exitCode": 3, "message": REFUSED}},
                    }
                ],
            ),
            "",
            id="refusal-of-a-run-before-the-ready-one-is-stale",
        ),
        pytest.param(
            _pod(
                {},
                [
                    {
                        "name": "vllm",
                        "ready": False,
                        "state": {"running": {"startedAt": "2026-01-01T12:01:00Z"}},
                        "lastState": {"terminated": {"exitCode": 3, "message": REFUSED}},
                    }
                ],
            ),
            REFUSED,
            id="refusal-stands-while-the-next-run-verifies",
        ),
        pytest.param(
            _pod(
                {}, [{"name": "vllm", "state": {"terminated": {"message": "CUDA out of memory"}}}]
            ),
            "",
            id="engine-log-is-not-a-verdict",
        ),
        pytest.param(_pod({}, []), "", id="nothing-yet"),
    ],
)
def test_worker_pod_carries_the_verdict_text(obj: dict[str, object], expected: str) -> None:
    assert observed.worker_pod(obj).verdict == expected


def test_the_next_analysis_is_due_an_interval_after_the_last_even_after_a_restart() -> None:
    state = State(phase=Phase.PROGRESSING, stable="m-aaa", canary="m-bbb", step_started=NOW)
    decision = rollout.Decision(
        state=state, weights={}, why=rollout.Why.HOLDING, message="m", notable=False
    )
    wire = canary.status_fields(decision, last_analysis="ok", last_analysis_at=NOW + 30).to_wire()
    status = ModelDeploymentStatus.model_validate(wire)
    assert canary.analysed_at(status) == NOW + 30  # round-trips through status
    # a restarted operator remembers nothing, and still waits out the interval
    assert not canary.analysis_due(status, now=NOW + 50, interval=60)
    assert canary.analysis_due(status, now=NOW + 90, interval=60)
    # this process's own memory counts when status lags its write
    assert not canary.analysis_due(status, now=NOW + 100, interval=60, remembered=NOW + 80)
    assert canary.analysis_due(None, now=NOW, interval=60)  # never analysed: due at once


def test_an_unreadable_or_future_analysis_time_does_not_stall_the_canary() -> None:
    status = ModelDeploymentStatus.model_validate(
        {"rollout": {"phase": "Progressing", "lastAnalysisAt": "yesterday-ish"}}
    )
    assert canary.analysed_at(status) == 0.0
    assert canary.analysis_due(status, now=NOW, interval=60)
    ahead = ModelDeploymentStatus.model_validate(
        {"rollout": {"phase": "Progressing", "lastAnalysisAt": "2099-01-01T00:00:00Z"}}
    )
    assert canary.analysis_due(ahead, now=NOW, interval=60)  # another clock's: not ours to wait
    assert not canary.analysis_due(ahead, now=NOW + 30, interval=60, remembered=NOW)

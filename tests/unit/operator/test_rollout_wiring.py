"""The rollout wired into the planners (pure): a ModelDeployment's status driven pass by pass
through a canary (verify, step, promote; tampered, untrusted, rolled back, aborted, paused,
re-applied, resumed after a restart), with the weights the gateway reads, the Verified and
RolledBack conditions and one Event per transition; and the pool's worker sets during a
rollout (stable kept as it runs, the canary sized by its weight, gone after a rollback)."""

from __future__ import annotations

import dataclasses
import datetime
import json
from typing import Any

import pytest

from tokenfleet.api import labels
from tokenfleet.api.deployment import ModelDeploymentSpec, ModelDeploymentStatus
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.operator.plan import canary, desired, model_status, observed, pools
from tokenfleet.operator.policy import analysis, rollout
from tokenfleet.operator.policy.rollout import Outcome, Phase
from tokenfleet.signing.verdict import Reason, Verdict

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
ZONES = ("zone-a", "zone-b", "zone-c")
POOL = InferencePoolSpec.model_validate(
    {"accelerator": {"product": "H100"}, "zones": {"names": list(ZONES)}, "replicas": {"min": 6}}
)
STABLE_DIGEST = "sha256:" + "a" * 64
CANARY_DIGEST = "sha256:" + "b" * 64
SIGNER = "key:sha256:feed"


def spec(digest: str = CANARY_DIGEST, **rollout_spec: Any) -> ModelDeploymentSpec:
    return ModelDeploymentSpec.model_validate(
        {
            "model": {"name": "m"},
            "pools": ["p"],
            "artifact": {
                "uri": "file:///m",
                "digest": digest,
                "trust": {"publicKey": {"name": "k"}},
            },
            "rollout": {
                "steps": [{"weight": 10, "holdSeconds": 5}, {"weight": 50, "holdSeconds": 5}],
                "analysis": {"intervalSeconds": 1, "minSamples": 10},
                **rollout_spec,
            },
        }
    )


STABLE = desired.revision_of(spec(STABLE_DIGEST))
CANARY = desired.revision_of(spec())
NEWER_DIGEST = "sha256:" + "d" * 64
#: The digest each revision's verify step names in its passing verdict.
DIGESTS = {desired.revision_of(spec(d)): d for d in (STABLE_DIGEST, CANARY_DIGEST, NEWER_DIGEST)}


def worker(
    revision: str, *, ready: bool = True, seen: Reason | None = Reason.VERIFIED, n: int = 0
) -> observed.WorkerPod:
    signer, digest = (SIGNER if ready else ""), DIGESTS.get(revision, "")
    text = "" if seen is None else Verdict(reason=seen, signer=signer, digest=digest).to_json()
    return observed.WorkerPod(
        name=f"{revision}-{n}",
        zone=ZONES[n % 3],
        revision=revision,
        ready=ready,
        terminating=False,
        unschedulable_since=None,
        verdict=text,
    )


STABLE_PODS = [worker(STABLE, n=i) for i in range(3)]


def pods(per_zone: int, revision: str) -> list[observed.WorkerPod]:
    return [
        dataclasses.replace(worker(revision, n=i), name=f"{revision}-{i}")
        for i in range(3 * per_zone)
    ]


def inputs(**overrides: Any) -> pools.PoolInputs:
    nodes = [
        observed.NodeRecord(
            name=f"n-{z}",
            ready=True,
            allocatable={labels.GPU_RESOURCE: "8"},
            labels={labels.TOPOLOGY_ZONE: z, labels.GPU_PRODUCT: "H100"},
        )
        for z in ZONES
    ]
    base: dict[str, Any] = dict(
        namespace="ns",
        name="p",
        uid="u1",
        generation=3,
        spec=POOL,
        status=None,
        model=spec(),
        rival_models=[],
        pods=[],
        sets=[],
        nodes=nodes,
        now=NOW,
    )
    return pools.PoolInputs(**{**base, **overrides})


def as_sets(result: pools.PoolPlan) -> list[observed.WorkerSet]:
    return [observed.worker_set(m) for m in result.apply if m["kind"] == "Deployment"]


PASSED = analysis.Judgment(outcome=Outcome.ANALYSIS_PASSED, message="canary within thresholds")
FAILED = analysis.Judgment(
    outcome=Outcome.ANALYSIS_FAILED, message="TTFT p99 900 ms > 1.5 × stable 20 ms"
)


@dataclasses.dataclass
class Pass:
    """One reconcile pass's result."""

    status: dict[str, Any]
    events: list[str]

    @property
    def phase(self) -> str:
        return str(self.status["rollout"]["phase"])

    @property
    def weights(self) -> dict[str, int]:
        return {r["name"]: r["weight"] for r in self.status["revisions"]}

    def condition(self, kind: str) -> dict[str, Any]:
        return next(c for c in self.status["conditions"] if c["type"] == kind)


def run(
    status: dict[str, Any],
    *,
    model: ModelDeploymentSpec | None = None,
    worker_pods: list[observed.WorkerPod] | None = None,
    at: float = 0,
    judgment: analysis.Judgment | None = None,
) -> Pass:
    got, events = model_status.plan_model(
        model_status.ModelInputs(
            namespace="ns",
            name="md",
            generation=2,
            spec=model or spec(),
            status=ModelDeploymentStatus.model_validate(status) if status else None,
            existing_pools=frozenset({"p"}),
            pool_owner={"p": "md"},
            pods=STABLE_PODS if worker_pods is None else worker_pods,
            now=NOW + datetime.timedelta(seconds=at),
            judgment=judgment,
        )
    )
    # what the API server would store: the status round-trips through its schema
    ModelDeploymentStatus.model_validate(got.to_wire())
    return Pass(status=json.loads(json.dumps(got.to_wire())), events=[e.reason for e in events])


def promoted_stable() -> dict[str, Any]:
    first = run({}, model=spec(STABLE_DIGEST))
    assert first.phase == "Promoted" and first.weights == {STABLE: 100}
    assert first.events == ["FirstRevision", "Promoted", "Available"]
    return first.status


def canary_at_first_step() -> dict[str, Any]:
    verifying = run(promoted_stable(), worker_pods=STABLE_PODS)
    assert verifying.phase == "Verifying" and verifying.events == ["NewRevision"]
    assert verifying.weights == {STABLE: 100, CANARY: 0}
    started = run(verifying.status, worker_pods=[*STABLE_PODS, worker(CANARY)], at=1)
    assert started.phase == "Progressing" and started.events == ["Verified"]
    return started.status


def test_first_revision_is_promoted_once_a_worker_verifies() -> None:
    waiting = run({}, model=spec(STABLE_DIGEST), worker_pods=[])
    assert waiting.phase == "Verifying" and waiting.weights == {STABLE: 0}
    assert waiting.condition("Verified")["reason"] == "Verifying"
    done = run(waiting.status, model=spec(STABLE_DIGEST), worker_pods=STABLE_PODS)
    assert done.phase == "Promoted" and done.weights == {STABLE: 100}
    assert done.condition("Verified") | {"lastTransitionTime": ""} == {
        "type": "Verified",
        "status": "True",
        "reason": "Verified",
        "message": f"revision {STABLE} verified, signed by {SIGNER}",
        "lastTransitionTime": "",
        "observedGeneration": 2,
    }
    entry = done.status["revisions"][0]
    assert (entry["digest"], entry["signer"], entry["readyReplicas"]) == (STABLE_DIGEST, SIGNER, 3)


def test_good_canary_steps_up_and_is_promoted() -> None:
    status = canary_at_first_step()
    assert run(status, at=1).weights == {STABLE: 90, CANARY: 10}
    held = run(status, worker_pods=[*STABLE_PODS, worker(CANARY)], at=3, judgment=PASSED)
    assert held.phase == "Progressing" and held.events == []  # hold of 5 s not over
    assert held.status["rollout"]["lastAnalysis"] == "canary within thresholds"
    stepped = run(held.status, worker_pods=[*STABLE_PODS, worker(CANARY)], at=7)
    assert stepped.events == ["CanaryStepPassed"] and stepped.weights == {STABLE: 50, CANARY: 50}
    assert stepped.status["canaryStep"] == 1
    done = run(stepped.status, worker_pods=[*STABLE_PODS, worker(CANARY)], at=13, judgment=PASSED)
    assert done.events == ["Promoted"] and done.phase == "Promoted"
    assert done.weights == {CANARY: 100}
    assert done.status["stableRevision"] == CANARY and done.status["canaryRevision"] == ""
    # Re-applying the same manifest afterwards starts nothing.
    again = run(done.status, worker_pods=[worker(CANARY)], at=60, judgment=PASSED)
    assert again.events == [] and again.status == done.status


@pytest.mark.parametrize(
    "reason", [Reason.DIGEST_MISMATCH, Reason.UNTRUSTED_SIGNER, Reason.SIGNATURE_INVALID], ids=str
)
def test_a_refused_canary_is_blocked_and_stable_keeps_everything(reason: Reason) -> None:
    verifying = run(promoted_stable())
    refused = [*STABLE_PODS, worker(CANARY, ready=False, seen=reason)]
    blocked = run(verifying.status, worker_pods=refused, at=1)
    assert blocked.phase == "Blocked" and blocked.events == ["VerificationFailed"]
    assert blocked.weights == {STABLE: 100, CANARY: 0}
    verified = blocked.condition("Verified")
    assert (verified["status"], verified["reason"]) == ("False", str(reason))
    assert blocked.status["rollout"]["reason"] == str(reason)
    canary_entry = blocked.status["revisions"][1]
    assert (canary_entry["verified"], canary_entry["reason"]) == (False, str(reason))
    assert blocked.condition("Available")["status"] == "True"
    # Told once; a re-apply of the same (bad) manifest changes nothing.
    assert run(blocked.status, worker_pods=refused, at=2).events == []


def test_failed_analysis_rolls_back_at_once_even_during_a_hold() -> None:
    status = canary_at_first_step()
    back = run(status, worker_pods=[*STABLE_PODS, worker(CANARY)], at=2, judgment=FAILED)
    assert back.phase == "RolledBack" and back.events == ["RolledBack"]
    assert back.weights == {STABLE: 100, CANARY: 0}
    rolled = back.condition("RolledBack")
    assert (rolled["status"], rolled["reason"]) == ("True", "AnalysisFailed")
    assert "TTFT p99 900 ms" in rolled["message"]
    assert run(back.status, at=3, judgment=PASSED).events == []  # a finished rollout stays


@pytest.mark.parametrize(
    ("controls", "phase", "events", "weights"),
    [
        pytest.param({"abort": True}, "RolledBack", ["RolledBack"], {STABLE: 100, CANARY: 0}),
        pytest.param({"promote": True}, "Promoted", ["Promoted"], {CANARY: 100}),
        pytest.param({"paused": True}, "Paused", ["Paused"], {STABLE: 90, CANARY: 10}),
    ],
)
def test_manual_controls_in_the_spec(
    controls: dict[str, Any], phase: str, events: list[str], weights: dict[str, int]
) -> None:
    status = canary_at_first_step()
    model = spec(**controls)
    assert desired.revision_of(model) == CANARY  # rollout controls are not a new revision
    done = run(status, model=model, worker_pods=[*STABLE_PODS, worker(CANARY)], at=2)
    assert (done.phase, done.events, done.weights) == (phase, events, weights)


def test_paused_never_advances_and_resumes_with_a_fresh_hold() -> None:
    status = canary_at_first_step()
    paused = run(status, model=spec(paused=True), at=2, judgment=PASSED)
    waited = run(paused.status, model=spec(paused=True), at=60, judgment=PASSED)
    assert waited.phase == "Paused" and waited.status["canaryStep"] == 0
    resumed = run(waited.status, at=61)
    assert resumed.events == ["Resumed"] and resumed.phase == "Progressing"
    assert run(resumed.status, at=63, judgment=PASSED).status["canaryStep"] == 0  # hold restarts


def test_operator_restart_resumes_at_the_same_step() -> None:
    status = canary_at_first_step()
    stepped = run(status, at=7, judgment=PASSED)
    assert stepped.status["canaryStep"] == 1
    # A new operator process has nothing but status: same step, same weights, no new events.
    reread = run(stepped.status, at=8)
    assert reread.status["canaryStep"] == 1 and reread.events == []
    assert reread.weights == {STABLE: 50, CANARY: 50}


def test_a_newer_revision_supersedes_a_running_canary() -> None:
    status = canary_at_first_step()
    newer = spec(NEWER_DIGEST)
    superseded = run(status, model=newer, at=2)
    assert superseded.events == ["Superseded"] and superseded.phase == "Verifying"
    assert superseded.weights == {STABLE: 100, desired.revision_of(newer): 0}


# --- the pool's worker sets during a rollout ------------------------------------------------


def rollout_status(phase: Phase, step: int = 0) -> ModelDeploymentStatus:
    state = rollout.State(phase=phase, stable=STABLE, canary=CANARY, step=step, step_started=1.0)
    decision = rollout.Decision(
        state=state, weights={}, why=rollout.Why.HOLDING, message="", notable=False
    )
    return ModelDeploymentStatus.model_validate(canary.status_fields(decision).to_wire())


STABLE_SETS = [
    observed.WorkerSet(
        name=f"p-{z}-{STABLE}", zone=z, revision=STABLE, replicas=2, applied_hash="x"
    )
    for z in ZONES
]


def canary_replicas(result: pools.PoolPlan) -> int:
    return sum(s.replicas for s in as_sets(result) if s.revision == CANARY)


@pytest.mark.parametrize(
    ("phase", "step", "expected"),
    [
        pytest.param(Phase.VERIFYING, 0, 1, id="verifying-sized-for-step-1"),
        pytest.param(Phase.PROGRESSING, 0, 1, id="10pct-of-6-is-1"),
        pytest.param(Phase.PROGRESSING, 1, 3, id="50pct-of-6-is-3"),
        pytest.param(Phase.PAUSED, 1, 3, id="paused-keeps-its-share"),
        pytest.param(Phase.BLOCKED, 0, 1, id="blocked-one-to-reverify"),
        pytest.param(Phase.ROLLED_BACK, 1, 0, id="rolled-back-none"),
    ],
)
def test_pool_keeps_stable_and_sizes_the_canary_by_weight(
    phase: Phase, step: int, expected: int
) -> None:
    result = pools.plan_pool(
        inputs(
            model=spec(),
            model_status=rollout_status(phase, step),
            sets=STABLE_SETS,
            pods=pods(2, STABLE),
        )
    )
    assert canary_replicas(result) == expected
    assert not any(s.revision == STABLE for s in as_sets(result))  # stable is not re-rendered
    assert result.delete == []  # and never deleted during a rollout
    assert result.status.ready_replicas == 6  # the pool reports what serves: stable


def test_pool_deletes_a_rolled_back_canary_and_promotion_retires_stable() -> None:
    canary_sets = [
        observed.WorkerSet(
            name=f"p-{z}-{CANARY}", zone=z, revision=CANARY, replicas=1, applied_hash="y"
        )
        for z in ZONES
    ]
    stable_pods = pods(2, STABLE)
    back = pools.plan_pool(
        inputs(
            model=spec(),
            model_status=rollout_status(Phase.ROLLED_BACK),
            sets=STABLE_SETS + canary_sets,
            pods=stable_pods,
        )
    )
    assert back.delete == sorted(s.name for s in canary_sets)
    promoted = ModelDeploymentStatus.model_validate(
        {"stableRevision": CANARY, "rollout": {"phase": "Promoted"}}
    )
    growing = pools.plan_pool(
        inputs(
            model=spec(), model_status=promoted, sets=STABLE_SETS + canary_sets, pods=stable_pods
        )
    )
    assert growing.delete == []  # the old stable serves until the new one is fully ready
    assert sum(s.replicas for s in as_sets(growing) if s.revision == CANARY) == 6
    ready = pools.plan_pool(
        inputs(
            model=spec(),
            model_status=promoted,
            sets=STABLE_SETS + as_sets(growing),
            pods=pods(2, CANARY),
        )
    )
    assert ready.delete == sorted(s.name for s in STABLE_SETS)


def test_spread_is_even_and_deterministic() -> None:
    assert pools.spread(4, ["zone-c", "zone-a", "zone-b"]) == {
        "zone-a": 2,
        "zone-b": 1,
        "zone-c": 1,
    }
    assert pools.spread(1, []) == {}


@pytest.mark.parametrize(
    ("worker_pods", "status", "reason", "words"),
    [
        pytest.param([], "False", "Verifying", "waiting for", id="no-worker-yet"),
        pytest.param(  # Ready is no verdict: the verify step records one on every worker
            [worker(STABLE, ready=True, seen=None)],
            "False",
            "NoVerdict",
            "1 of 1 Ready workers",
            id="ready-without-a-verdict-is-not-verified",
        ),
        pytest.param(
            [worker(STABLE, ready=False, seen=None)],
            "False",
            "Verifying",
            "waiting for",
            id="starting-without-a-verdict-is-verifying",
        ),
        pytest.param(
            [worker(STABLE, ready=False, seen=Reason.DIGEST_MISMATCH)],
            "False",
            "DigestMismatch",
            "refused (DigestMismatch)",
            id="refused",
        ),
        pytest.param(
            [worker(STABLE, ready=True, seen=Reason.VERIFIED)],
            "True",
            "Verified",
            f"signed by {SIGNER}",
            id="verdict-names-the-signer",
        ),
    ],
)
def test_verified_condition_from_a_verdict_never_from_readiness(
    worker_pods: list[observed.WorkerPod], status: str, reason: str, words: str
) -> None:
    got = run({}, model=spec(STABLE_DIGEST), worker_pods=worker_pods).condition("Verified")
    assert (got["status"], got["reason"]) == (status, reason), got
    assert words in got["message"], got
    assert STABLE in got["message"]


def test_a_ready_worker_without_a_verdict_is_not_verified() -> None:
    got = run({}, model=spec(STABLE_DIGEST), worker_pods=[worker(STABLE, seen=None)])
    entry = got.status["revisions"][0]
    assert entry["readyReplicas"] == 1
    assert not entry.get("verified") and entry.get("reason") == "NoVerdict"
    assert not entry.get("signer")  # nothing observed names one

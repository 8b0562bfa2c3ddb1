"""The pool plan from values: children rendered per zone, applied only on change, an old revision
kept until the new one is ready, the stable revision scaled with the pool during a rollout,
status conditions and the events their changes deserve; the status as written has the shape
the CRD stores and reads back as planned."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import pytest

from tokenfleet.api import crd, labels
from tokenfleet.api.base import Condition
from tokenfleet.api.deployment import ModelDeploymentSpec, ModelDeploymentStatus
from tokenfleet.api.pool import AutoscalingStatus, InferencePoolSpec, InferencePoolStatus
from tokenfleet.operator.plan import canary, desired, model_status, observed, pools
from tokenfleet.operator.policy import rollout, scaling, signal_health
from tokenfleet.signals import jobs
from tokenfleet.signing.verdict import Reason, Verdict

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
ZONES = ("zone-a", "zone-b", "zone-c")
POOL = InferencePoolSpec.model_validate(
    {
        "accelerator": {"product": "H100"},
        "zones": {"names": list(ZONES)},
        "replicas": {"min": 6, "max": 24},
    }
)
MODEL = ModelDeploymentSpec.model_validate(
    {
        "model": {"name": "m", "aliases": ["m2"]},
        "pools": ["p"],
        "artifact": {
            "uri": "file:///m",
            "digest": "sha256:" + "c" * 64,
            "trust": {"publicKey": {"name": "k"}},
        },
        "engine": {"maxModelLen": 4096, "extraArgs": ["--enable-chunked-prefill"]},
    }
)
REVISION = desired.revision_of(MODEL)


def node(zone: str, *, ready: bool = True, product: str = "H100") -> observed.NodeRecord:
    return observed.NodeRecord(
        name=f"n-{zone}",
        ready=ready,
        allocatable={labels.GPU_RESOURCE: "8"},
        labels={labels.TOPOLOGY_ZONE: zone, labels.GPU_PRODUCT: product},
    )


def pods(
    counts: dict[str, int], revision: str = REVISION, ready: bool = True
) -> list[observed.WorkerPod]:
    return [
        observed.WorkerPod(
            name=f"{z}-{i}",
            zone=z,
            revision=revision,
            ready=ready,
            terminating=False,
            unschedulable_since=None,
        )
        for z, n in counts.items()
        for i in range(n)
    ]


def inputs(**overrides: Any) -> pools.PoolInputs:
    base: dict[str, Any] = dict(
        namespace="ns",
        name="p",
        uid="u1",
        generation=3,
        spec=POOL,
        status=None,
        model=MODEL,
        rival_models=[],
        pods=[],
        sets=[],
        nodes=[node(z) for z in ZONES],
        now=NOW,
    )
    return pools.PoolInputs(**{**base, **overrides})


def applied_sets(result: pools.PoolPlan) -> dict[str, int]:
    return {
        m["metadata"]["labels"][labels.ZONE]: m["spec"]["replicas"]
        for m in result.apply
        if m["kind"] == "Deployment"
    }


def as_sets(result: pools.PoolPlan) -> list[observed.WorkerSet]:
    return [observed.worker_set(m) for m in result.apply if m["kind"] == "Deployment"]


def cond(result: pools.PoolPlan, kind: str) -> Condition:
    return next(c for c in result.status.conditions if c.type == kind)


def test_fresh_pool_gets_one_deployment_per_zone_plus_budget_and_service() -> None:
    result = pools.plan_pool(inputs())
    assert applied_sets(result) == dict.fromkeys(ZONES, 2)
    kinds = sorted(m["kind"] for m in result.apply)
    assert kinds == ["Deployment"] * 3 + ["PodDisruptionBudget", "Service"]
    assert result.delete == []
    assert result.status.replicas == 6 and result.status.observed_generation == 3
    assert cond(result, "Ready").reason == "ReplicasStarting"
    assert [e.reason for e in result.events] == ["Scaled"]


def test_nothing_is_applied_again_when_nothing_changed() -> None:
    first = pools.plan_pool(inputs())
    steady = inputs(sets=as_sets(first), pods=pods(dict.fromkeys(ZONES, 2)), status=first.status)
    second = pools.plan_pool(steady)
    assert [m["kind"] for m in second.apply] == ["PodDisruptionBudget", "Service"]  # not indexed
    third = pools.plan_pool(
        inputs(sets=as_sets(first), pods=pods(dict.fromkeys(ZONES, 2)), status=second.status)
    )
    assert third.status == second.status and third.events == []
    assert cond(third, "Ready").status == "True"


def test_worker_pod_is_rendered_from_the_engine_settings() -> None:
    manifest = next(m for m in pools.plan_pool(inputs()).apply if m["kind"] == "Deployment")
    pod = manifest["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"][:4] == [desired.MODEL_DIR, "--served-model-name", "m", "m2"]
    assert (
        "--max-model-len" in container["args"] and "--enable-chunked-prefill" in container["args"]
    )
    assert container["resources"]["limits"] == {labels.GPU_RESOURCE: "1"}
    assert pod["nodeSelector"] == {labels.TOPOLOGY_ZONE: "zone-a", labels.GPU_PRODUCT: "H100"}
    assert (
        container["startupProbe"]["failureThreshold"] * container["startupProbe"]["periodSeconds"]
        >= 600
    )
    assert "exec" in container["readinessProbe"]
    # the fixed preStop sleep became a drain that waits for running requests (issue 17)
    hook = container["lifecycle"]["preStop"]["exec"]["command"]
    assert hook[:3] == ["python3", "-m", "tokenfleet.worker.drain"]
    assert int(hook[hook.index("--max-seconds") + 1]) > 0
    assert pod["terminationGracePeriodSeconds"] >= 60
    assert pod["terminationGracePeriodSeconds"] > int(hook[hook.index("--max-seconds") + 1])
    assert manifest["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert set(manifest["metadata"]["labels"]) == {
        labels.ROLE,
        labels.POOL,
        labels.MODEL,
        labels.REVISION,
        labels.ZONE,
    }


def test_a_new_revision_replaces_the_old_only_once_ready() -> None:
    old_sets = [
        observed.WorkerSet(name=f"p-{z}-old", zone=z, revision="old", replicas=2, applied_hash="x")
        for z in ZONES
    ]
    starting = pools.plan_pool(
        inputs(sets=old_sets, pods=pods(dict.fromkeys(ZONES, 2), revision="old"))
    )
    assert starting.delete == []  # the old revision keeps serving
    assert applied_sets(starting) == dict.fromkeys(ZONES, 2)
    ready = pools.plan_pool(
        inputs(sets=old_sets + as_sets(starting), pods=pods(dict.fromkeys(ZONES, 2)))
    )
    assert ready.delete == sorted(s.name for s in old_sets)


def test_zone_loss_moves_the_share_and_explains_it() -> None:
    before = pools.plan_pool(inputs(pods=pods(dict.fromkeys(ZONES, 2))))
    nodes = [node("zone-a"), node("zone-b", ready=False), node("zone-c")]
    lost = pools.plan_pool(
        inputs(
            nodes=nodes,
            status=before.status,
            sets=as_sets(before),
            pods=pods(dict.fromkeys(ZONES, 2)),
        )
    )
    assert applied_sets(lost) == {"zone-a": 3, "zone-c": 3}
    assert [s for s in lost.delete if "zone-b" in s]
    degraded = cond(lost, "Degraded")
    assert degraded.reason == "ZoneLost"
    assert (
        degraded.message
        == "zone-b lost: 1 of 1 nodes NotReady; its 2 replicas moved to zone-a and zone-c"
    )
    assert [e.reason for e in lost.events] == ["ZoneLost"]  # total unchanged: no Scaled event
    again = pools.plan_pool(
        inputs(nodes=nodes, status=lost.status, pods=pods({"zone-a": 3, "zone-c": 3}))
    )
    assert cond(again, "Degraded").message == degraded.message  # stable across passes
    assert "ZoneLost" not in {e.reason for e in again.events}  # one event per transition


def test_no_model_and_no_matching_nodes_are_explained() -> None:
    idle = pools.plan_pool(inputs(model=None))
    assert applied_sets(idle) == {} and cond(idle, "Ready").reason == "NoModelDeployment"
    assert next(e for e in idle.events if e.reason == "NoModelDeployment").type == "Normal"
    nothing = pools.plan_pool(inputs(nodes=[node(z, product="A100") for z in ZONES]))
    assert applied_sets(nothing) == {}
    assert cond(nothing, "Ready").reason == "NoHealthyZone"
    assert "no node offers the accelerator" in cond(nothing, "Ready").message


def test_condition_transition_time_moves_only_on_status_change() -> None:
    first = pools.plan_pool(inputs())
    later = NOW + datetime.timedelta(minutes=5)
    second = pools.plan_pool(inputs(status=first.status, now=later, sets=as_sets(first)))
    assert cond(second, "Ready").last_transition_time == cond(first, "Ready").last_transition_time


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        pytest.param([], None, id="none"),
        pytest.param(
            [
                model_status.Claim(created="2026-01-02", name="b"),
                model_status.Claim(created="2026-01-01", name="z"),
            ],
            "z",
            id="oldest-wins",
        ),
        pytest.param(
            [
                model_status.Claim(created="2026-01-01", name="b"),
                model_status.Claim(created="2026-01-01", name="a"),
            ],
            "a",
            id="tie-by-name",
        ),
    ],
)
def test_oldest_claim_wins_a_pool(claims: list[model_status.Claim], expected: str | None) -> None:
    won = model_status.winner(claims)
    assert (won.name if won else None) == expected


def model_inputs(**overrides: Any) -> model_status.ModelInputs:
    base: dict[str, Any] = dict(
        namespace="ns",
        name="md",
        generation=1,
        spec=MODEL,
        status=None,
        existing_pools=frozenset({"p"}),
        pool_owner={"p": "md"},
        pods=[],
        now=NOW,
    )
    return model_status.ModelInputs(**{**base, **overrides})


@pytest.mark.parametrize(
    ("overrides", "phase", "reason"),
    [
        pytest.param({}, "Progressing", "ReplicasStarting", id="starting"),
        pytest.param({"pods": pods({"zone-a": 1})}, "Available", "ReplicasReady", id="available"),
        pytest.param({"existing_pools": frozenset()}, "Pending", "PoolNotFound", id="missing-pool"),
        pytest.param({"pool_owner": {"p": "other"}}, "Pending", "PoolClaimed", id="pool-taken"),
    ],
)
def test_model_status(overrides: dict[str, Any], phase: str, reason: str) -> None:
    status, events = model_status.plan_model(model_inputs(**overrides))
    assert status.phase == phase
    available = next(c for c in status.conditions if c.type == "Available")
    assert available.reason == reason
    if reason in ("PoolNotFound", "PoolClaimed"):
        # the first revision's rollout starts regardless (FirstRevision, an informational Event)
        assert [e.reason for e in events] == ["FirstRevision", reason]
        _, again = model_status.plan_model(model_inputs(**overrides, status=status))
        assert again == []  # told once, not every pass


def test_autoscaler_demand_is_placed_and_explained() -> None:
    block = AutoscalingStatus.model_validate(
        {
            "demand": 9,
            "reason": "QueueAge",
            "message": "QueueAge: 9 replicas",
            "recommendations": {"QueueAge": 9},
            "decisions": [],
        }
    )
    result = pools.plan_pool(inputs(demand=9, autoscaling=block, metrics_ok=True))
    assert result.status.replicas == 9 and applied_sets(result) == dict.fromkeys(ZONES, 3)
    assert result.status.last_scaling is not None
    assert result.status.last_scaling.reason == "QueueAge"
    assert result.status.autoscaling == block
    assert cond(result, "MetricsUnavailable").status == "False"


def test_unreadable_metrics_are_a_condition() -> None:
    result = pools.plan_pool(
        inputs(
            autoscaling=AutoscalingStatus.model_validate(
                {
                    "demand": 6,
                    "reason": "MetricsUnavailable",
                    "message": "",
                    "recommendations": {},
                    "decisions": [],
                }
            ),
            metrics_ok=False,
        )
    )
    missing = cond(result, "MetricsUnavailable")
    assert missing.status == "True" and "never scaling down on silence" in missing.message


def test_a_missing_signal_makes_the_condition_true_and_one_event() -> None:
    block = AutoscalingStatus.model_validate(
        {"demand": 6, "reason": "KVCache", "message": "", "recommendations": {}, "decisions": []}
    )
    gone = signal_health.missing(
        policy=scaling.Policy(),
        signals=scaling.Signals(kv_cache_usage=0.2, waiting=0.0),
        namespace="ns",
        pool="p",
        ready=3,
        targets={
            jobs.WORKERS: signal_health.JobHealth(up=1),
            jobs.GATEWAY: signal_health.JobHealth(down=1, error="connection refused"),
        },
    )
    fresh = pools.plan_pool(inputs(autoscaling=block, metrics_ok=True))
    assert cond(fresh, "MetricsUnavailable").status == "False"
    silent = pools.plan_pool(
        inputs(autoscaling=block, metrics_ok=True, metrics_missing=gone, status=fresh.status)
    )
    condition = cond(silent, "MetricsUnavailable")
    assert (condition.status, condition.reason) == ("True", "SignalsMissing")
    assert 'tokenfleet_gateway_queue_oldest_age_seconds{pool="ns/p"}' in condition.message
    assert "job tokenfleet-gateway has no up target (0 of 1 up: connection refused)" in (
        condition.message
    )
    assert [e.reason for e in silent.events if e.type == "Warning"] == ["SignalsMissing"]
    again = pools.plan_pool(
        inputs(autoscaling=block, metrics_ok=True, metrics_missing=gone, status=silent.status)
    )
    assert not [e for e in again.events if e.reason == "SignalsMissing"]  # once per change


def test_sim_annotations_reach_the_worker_pods_and_nothing_else() -> None:
    result = pools.plan_pool(
        inputs(
            model_annotations={"sim.tokenfleet.io/args": "--time-to-first-token 1s", "team": "x"}
        )
    )
    template = next(m for m in result.apply if m["kind"] == "Deployment")["spec"]["template"]
    assert template["metadata"]["annotations"] == {
        "sim.tokenfleet.io/args": "--time-to-first-token 1s"
    }


def test_a_change_of_demand_is_an_event() -> None:
    def block(demand: int) -> AutoscalingStatus:
        return AutoscalingStatus.model_validate(
            {
                "demand": demand,
                "reason": "QueueAge",
                "message": f"QueueAge: {demand} replicas",
                "recommendations": {},
                "decisions": [],
            }
        )

    first = pools.plan_pool(inputs(demand=6, autoscaling=block(6), metrics_ok=True))
    same = pools.plan_pool(
        inputs(demand=6, autoscaling=block(6), metrics_ok=True, status=first.status)
    )
    assert "Autoscaled" not in {e.reason for e in same.events}
    more = pools.plan_pool(
        inputs(demand=9, autoscaling=block(9), metrics_ok=True, status=same.status)
    )
    assert [e.message for e in more.events if e.reason == "Autoscaled"] == ["QueueAge: 9 replicas"]


def mid_rollout(phase: str = "Progressing") -> ModelDeploymentStatus:
    state = rollout.State(phase=rollout.Phase(phase), stable="old", canary=REVISION, step=0)
    decision = rollout.Decision(
        state=state, weights={}, why=rollout.Why.HOLDING, message="", notable=False
    )
    return ModelDeploymentStatus.model_validate(canary.status_fields(decision).to_wire())


def stable_sets(per_zone: dict[str, int]) -> list[observed.WorkerSet]:
    return [
        observed.WorkerSet(name=f"p-{z}-old", zone=z, revision="old", replicas=n, applied_hash="x")
        for z, n in per_zone.items()
    ]


@pytest.mark.parametrize("phase", ["Progressing", "RolledBack"])
def test_the_stable_revision_follows_the_pool_during_a_rollout_and_after_a_rollback(
    phase: str,
) -> None:
    """Demand rises mid-canary (or after a rollback, until the spec changes): the stable
    revision grows with the placement; only its replicas change, its spec is not re-rendered."""
    busier = POOL.model_copy(update={"replicas": POOL.replicas.model_copy(update={"min": 12})})
    result = pools.plan_pool(
        inputs(
            spec=busier,
            sets=stable_sets(dict.fromkeys(ZONES, 2)),
            pods=pods(dict.fromkeys(ZONES, 2), revision="old"),
            model_status=mid_rollout(phase),
        )
    )
    assert result.scale == {f"p-{z}-old": 4 for z in ZONES}
    assert all(m["metadata"]["labels"][labels.REVISION] == REVISION for m in as_manifests(result))
    assert result.delete == []
    if phase == "Progressing":
        assert sum(applied_sets(result).values()) >= 1  # the canary beside it
    else:
        assert applied_sets(result) == {}


def test_the_stable_revision_cannot_start_in_a_new_zone_so_its_share_moves() -> None:
    """Stable runs only in zone-a and zone-b (zone-c came later): zone-c's share goes to them."""
    stable: dict[str, Any] = {
        "sets": stable_sets({"zone-a": 3, "zone-b": 3}),
        "pods": pods({"zone-a": 3, "zone-b": 3}, revision="old"),
    }
    as_placed = pools.plan_pool(inputs(**stable, model_status=mid_rollout()))
    assert as_placed.scale == {}  # 6 = 2 per zone, zone-c's 2 already on a and b
    busier = POOL.model_copy(update={"replicas": POOL.replicas.model_copy(update={"min": 12})})
    grown = pools.plan_pool(inputs(**stable, spec=busier, model_status=mid_rollout()))
    assert grown.scale == {"p-zone-a-old": 6, "p-zone-b-old": 6}


def test_a_steady_stable_revision_is_not_scaled_again() -> None:
    result = pools.plan_pool(
        inputs(
            sets=stable_sets(dict.fromkeys(ZONES, 2)),
            pods=pods(dict.fromkeys(ZONES, 2), revision="old"),
            model_status=mid_rollout(),
        )
    )
    assert result.scale == {}


def as_manifests(result: pools.PoolPlan) -> list[dict[str, Any]]:
    return [m for m in result.apply if m["kind"] == "Deployment"]


def test_a_count_moved_by_kept_scale_is_set_back_when_the_revision_is_placed_again() -> None:
    """After a rollback the spec is reverted to the stable revision: its Deployments are placed
    normally again, and the counts kept_scale patched (the hash unchanged) are re-applied."""
    first = pools.plan_pool(inputs())
    patched = [
        observed.WorkerSet(
            name=s.name, zone=s.zone, revision=s.revision, replicas=4, applied_hash=s.applied_hash
        )
        for s in as_sets(first)
    ]
    again = pools.plan_pool(inputs(sets=patched, pods=pods(dict.fromkeys(ZONES, 4))))
    assert applied_sets(again) == dict.fromkeys(ZONES, 2)


def test_a_stable_revision_only_in_lost_zones_is_left_alone() -> None:
    """Not grown where it cannot run (a healthy zone-a would take all 6: the test tells)."""
    lost = [node("zone-a", ready=False), node("zone-b"), node("zone-c")]
    result = pools.plan_pool(
        inputs(
            nodes=lost,
            sets=stable_sets({"zone-a": 3}),
            pods=pods({"zone-a": 3}, revision="old", ready=False),
            model_status=mid_rollout(),
        )
    )
    assert result.scale == {}


def _unknown_keys(wire: Any, schema: dict[str, Any], path: str = "status") -> list[str]:
    """Keys of ``wire`` the CRD's structural schema does not declare (the API server would
    prune them)."""
    if isinstance(wire, list):
        return [k for item in wire for k in _unknown_keys(item, schema["items"], f"{path}[]")]
    if not isinstance(wire, dict) or "properties" not in schema:
        return []
    props = schema["properties"]
    return [f"{path}.{k}" for k in wire if k not in props] + [
        u for k, v in wire.items() if k in props for u in _unknown_keys(v, props[k], f"{path}.{k}")
    ]


def _status_schema(kind: str) -> dict[str, Any]:
    found = next(k for k in crd.KINDS if k.kind == kind)
    return dict(crd.openapi_schema(found)["properties"]["status"])


def test_the_pool_status_written_has_the_shape_the_crd_stores() -> None:
    result = pools.plan_pool(inputs(pods=pods({"zone-a": 1})))
    wire = result.status.to_wire()
    assert set(wire) == {
        "observedGeneration",
        "replicas",
        "readyReplicas",
        "warmReplicas",
        "zones",
        "lastScaling",
        "conditions",
    }  # no autoscaler: no autoscaling block
    assert wire["zones"][0] == {
        "name": "zone-a",
        "desired": 2,
        "ready": 1,
        "healthy": True,
        "message": "",
    }
    assert wire["lastScaling"]["time"] == "2026-01-01T12:00:00Z"
    assert wire["conditions"][0] == {
        "type": "Ready",
        "status": "False",
        "reason": "ReplicasStarting",
        "message": "1 of 6 replicas ready",
        "lastTransitionTime": "2026-01-01T12:00:00Z",
        "observedGeneration": 3,
    }
    assert _unknown_keys(wire, _status_schema("InferencePool")) == []
    assert InferencePoolStatus.model_validate(wire) == result.status  # read back as written


def test_the_model_status_written_has_the_shape_the_crd_stores() -> None:
    passed = Verdict(reason=Reason.VERIFIED, digest=MODEL.artifact.digest, signer="key:x")
    verified = [dataclasses.replace(p, verdict=passed.to_json()) for p in pods({"zone-a": 1})]
    status, _ = model_status.plan_model(model_inputs(pods=verified))
    wire = status.to_wire()
    assert set(wire) == {
        "observedGeneration",
        "phase",
        "stableRevision",
        "canaryRevision",
        "canaryStep",
        "rollout",
        "revisions",
        "history",  # the first revision's promotion
        "conditions",
    }
    assert [h["outcome"] for h in wire["history"]] == ["Promoted"]
    assert set(wire["revisions"][0]) == {
        "name",
        "digest",
        "verified",
        "reason",
        "signer",
        "trustFingerprint",
        "readyReplicas",
        "weight",
    }
    assert wire["rollout"]["stepStartedAt"] == "2026-01-01T12:00:00Z"
    assert _unknown_keys(wire, _status_schema("ModelDeployment")) == []
    assert ModelDeploymentStatus.model_validate(wire) == status


def test_no_data_yet_is_neither_unreadable_nor_fresh() -> None:
    """Prometheus answers, every job is up, but nothing recommends yet (no ready worker, no
    request): the condition says so instead of blaming Prometheus."""
    block = AutoscalingStatus.model_validate(
        {
            "demand": 3,
            "reason": "MetricsUnavailable",
            "message": "",
            "recommendations": {},
            "decisions": [],
        }
    )
    waiting = cond(
        pools.plan_pool(inputs(autoscaling=block, metrics_ok=True)), "MetricsUnavailable"
    )
    assert (waiting.status, waiting.reason) == ("False", "AwaitingData")

"""The fleet simulator: every request ends exactly once, a seed replays exactly (in another
process, compiled or interpreted), a queue with a
known analytical answer (M/M/c) comes out right, the replica model's closed-form capacity holds
in simulation, calibration recovers a known replica, and zone loss retries what it can."""

from __future__ import annotations

import json
import math
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tokenfleet.capacity.planning import Profile, ProfilePoint
from tokenfleet.sim.calibrate import CalibrationError, calibrate
from tokenfleet.sim.engine import Simulation
from tokenfleet.sim.scalers import sustainable_rps
from tokenfleet.sim.scenario import Performance, Scenario


def scenario(**overrides: Any) -> Scenario:
    return Scenario.model_validate(scenario_doc(**overrides))


def scenario_doc(**overrides: Any) -> dict[str, Any]:
    """A small fleet, overloaded mid-run while a zone is lost: every outcome happens."""
    doc: dict[str, Any] = {
        "name": "small",
        "durationSeconds": 60,
        "seed": 3,
        "performance": {
            "maxNumSeqs": 16,
            "kvCacheTokens": 40000,
            "coldStartSeconds": 20,
            "stepBaseSeconds": 0.01,
        },
        "pools": [
            {
                "name": "chat",
                "spec": {
                    "zones": {"names": ["a", "b", "c"], "tolerateLoss": 1},
                    "warm": {"perZone": 1},
                    "replicas": {"min": 3, "max": 30},
                    "autoscaling": {"maxScaleUpStep": 10, "scaleUpStabilizationSeconds": 5},
                    "admission": {
                        "classes": [
                            {
                                "name": "interactive",
                                "priority": 200,
                                "maxQueueDepth": 40,
                                "maxQueueAgeMs": 2000,
                            },
                            {
                                "name": "batch",
                                "priority": 100,
                                "maxQueueDepth": 400,
                                "maxQueueAgeMs": 10000,
                            },
                        ]
                    },
                },
            }
        ],
        "streams": [
            {
                "name": "chat",
                "class": "interactive",
                "rate": [{"at": 0, "rps": 20}, {"at": 20, "rps": 20}, {"at": 25, "rps": 60}],
                "inputTokens": {"mean": 500, "p99": 2000, "max": 4000},
                "outputTokens": {"mean": 100, "p99": 400},
                "sharedPrefix": {"share": 0.5, "groups": 4, "tokens": 200},
            },
            {
                "name": "batch",
                "class": "batch",
                "tenant": "pipelines",
                "rate": [{"at": 0, "rps": 10}],
                "inputTokens": {"mean": 1000},
                "outputTokens": {"mean": 200},
            },
        ],
        "zoneLosses": [{"at": 30, "zone": "b", "detectedAfter": 5}],
    }
    doc.update(overrides)
    return doc


def test_every_request_ends_exactly_once() -> None:
    sim = Simulation(scenario())
    ended_ids: set[int] = set()

    def once(req: Any) -> None:
        assert req.index not in ended_ids, f"request {req.index} ended twice"
        ended_ids.add(req.index)

    sim.rec.watch = once
    result = sim.run()
    assert sim.rec.open == 0
    assert len(ended_ids) == result.requests
    ended = sum(
        g["served"] + g["shed"] + g["timed_out"] + g["failed"] for g in result.classes.values()
    )
    assert ended == sum(g["arrived"] for g in result.classes.values()) == result.requests
    outcomes = {
        o
        for g in result.classes.values()
        for o in ("served", "shed", "timed_out", "failed")
        if g[o]
    }
    assert outcomes >= {"served", "failed"}  # the overload and the zone loss both bit
    assert any(g["shed"] + g["timed_out"] for g in result.classes.values())


def test_a_seed_replays_exactly_and_another_seed_differs() -> None:
    first = Simulation(scenario()).run()
    again = Simulation(scenario()).run()
    other = Simulation(scenario(seed=4)).run()
    assert first.classes == again.classes
    assert first.gpu_hours == again.gpu_hours
    assert first.timeline == again.timeline
    assert first.classes != other.classes
    # results cross processes (the benchmarks run policies in parallel)
    assert pickle.loads(pickle.dumps(first)) == first


@pytest.mark.parametrize("cores", ["compiled", "interpreted"])
def test_a_seed_replays_exactly_in_another_process(cores: str, tmp_path: Path) -> None:
    """Another process hashes strings differently, and may run the interpreted sources instead
    of the compiled cores (tokenfleet.native): the decisions must not change."""
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(scenario_doc()))
    env = {
        **os.environ,
        "PYTHONHASHSEED": "random",
        "TOKENFLEET_NATIVE": "1" if cores == "compiled" else "0",
    }
    argv = ["--scaler", "tokenfleet", "--quiet", "--out", str(tmp_path)]
    run = subprocess.run(
        [sys.executable, "-m", "tokenfleet.sim", str(path), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    there = json.loads((tmp_path / "results.json").read_text())[0]
    assert there["compiled"] is (cores == "compiled"), "no compiled build: run `make native`"
    here = Simulation(scenario()).run()
    assert there["classes"] == json.loads(json.dumps(here.classes))
    assert there["timeline"] == json.loads(json.dumps(here.timeline))
    assert there["gpuHours"] == here.gpu_hours


def erlang_c_wait(servers: int, arrival: float, service: float) -> float:
    """Mean time in queue of M/M/c."""
    a = arrival * service
    rho = a / servers
    top = a**servers / math.factorial(servers) / (1 - rho)
    p_wait = top / (sum(a**k / math.factorial(k) for k in range(servers)) + top)
    return p_wait * service / (servers * (1 - rho))


def test_a_fleet_of_one_sequence_replicas_is_an_m_m_c_queue() -> None:
    # 4 replicas that each run one sequence, exponential service (output tokens x step),
    # Poisson arrivals, one FIFO class with room to wait: Erlang C gives the mean wait.
    sc = Scenario.model_validate(
        {
            "name": "mmc",
            "durationSeconds": 3000,
            "seed": 11,
            "tickSeconds": 0.005,  # a waiter starts at the tick after a slot frees
            "scaleIntervalSeconds": 3600,
            "performance": {
                "maxNumSeqs": 1,
                "stepBaseSeconds": 0.01,
                "stepPerSequenceSeconds": 0,
                "prefillPerTokenSeconds": 0,
                "coldStartSeconds": 0,
            },
            "pools": [
                {
                    "name": "p",
                    "initialReplicas": 4,
                    "spec": {
                        "zones": {"names": ["a"]},
                        "warm": {"perZone": 0},
                        "replicas": {"min": 4, "max": 4},
                        "autoscaling": {"enabled": False},
                        "admission": {
                            "classes": [
                                {
                                    "name": "only",
                                    "priority": 1,
                                    "maxQueueDepth": 100000,
                                    "maxQueueAgeMs": 3600000,
                                    "defaultDeadlineMs": 3600000,
                                }
                            ]
                        },
                    },
                }
            ],
            "streams": [
                {
                    "name": "s",
                    "class": "only",
                    "rate": [{"at": 0, "rps": 3}],
                    "inputTokens": {"mean": 1, "dist": "fixed"},
                    "outputTokens": {"mean": 100, "dist": "exponential", "max": 100000},
                }
            ],
            "slo": {"only": {"ttftSeconds": 3600, "interTokenSeconds": 1}},
        }
    )
    sim = Simulation(sc, "static-peak")
    waits: list[float] = []
    services: list[float] = []

    def keep(req: Any) -> None:
        waits.append(req.dispatched - req.arrival)
        services.append(req.finished - req.dispatched)

    sim.rec.watch = keep
    result = sim.run()
    assert result.classes["only"]["served"] == result.requests > 8000
    service = sum(services) / len(services)
    expected = erlang_c_wait(4, result.requests / sc.duration_seconds, service)
    measured = sum(waits) / len(waits)
    assert measured == pytest.approx(expected, rel=0.12), (measured, expected, service)


@pytest.mark.parametrize(("load", "meets"), [(0.85, True), (1.25, False)])
def test_the_closed_form_capacity_holds_in_simulation(load: float, meets: bool) -> None:
    perf = Performance(kv_cache_tokens=10**7, cold_start_seconds=0)
    rate = sustainable_rps(perf, 1000, 200, itl=0.05)
    sc = Scenario.model_validate(
        {
            "name": "one-replica",
            "durationSeconds": 90,
            "performance": perf.to_wire(),
            "pools": [
                {
                    "name": "p",
                    "initialReplicas": 1,
                    "spec": {
                        "zones": {"names": ["a"]},
                        "warm": {"perZone": 0},
                        "replicas": {"min": 1, "max": 1},
                        "autoscaling": {"enabled": False},
                        "admission": {
                            "classes": [
                                {
                                    "name": "c",
                                    "priority": 1,
                                    "maxQueueDepth": 100000,
                                    "maxQueueAgeMs": 600000,
                                    "defaultDeadlineMs": 600000,
                                }
                            ]
                        },
                    },
                }
            ],
            "streams": [
                {
                    "name": "s",
                    "class": "c",
                    "rate": [{"at": 0, "rps": rate * load}],
                    "inputTokens": {"mean": 1000, "dist": "fixed"},
                    "outputTokens": {"mean": 200, "dist": "fixed"},
                }
            ],
            "slo": {"c": {"ttftSeconds": 2.0, "interTokenSeconds": 0.05}},
        }
    )
    result = Simulation(sc, "static-peak").run()
    attained = result.classes["c"]["within_slo"]
    assert (attained > 0.95) is meets, (rate, attained, result.classes["c"])


def test_calibration_recovers_a_known_replica() -> None:
    base, per_seq, per_tok = 0.008, 0.00004, 0.00001
    points = []
    for running, prefill_per_step in ((4, 100), (32, 600), (128, 2000), (256, 3000)):
        step = base + per_seq * running + per_tok * prefill_per_step
        points.append(
            ProfilePoint(
                offered_rps=running,
                throughput_rps=running / 10,
                ttft_p99_seconds=0.2,
                inter_token_p99_seconds=step,
                prefill_tokens_per_second=prefill_per_step / step,
                decode_tokens_per_second=running / step,
            )
        )
    fitted = calibrate(Profile(model="m", points=points, max_num_seqs=300), Performance())
    assert fitted.step_base_seconds == pytest.approx(base, rel=1e-6)
    assert fitted.step_per_sequence_seconds == pytest.approx(per_seq, rel=1e-6)
    assert fitted.prefill_per_token_seconds == pytest.approx(per_tok, rel=1e-6)
    assert fitted.max_num_seqs == 300
    with pytest.raises(CalibrationError, match="at least 3"):
        calibrate(Profile(model="m", points=points[:2]), Performance())


def test_a_lost_zone_retries_unanswered_requests_and_replaces_its_replicas() -> None:
    sim = Simulation(scenario())
    result = sim.run()
    reasons = {k for g in result.classes.values() for k in g["reasons"]}
    assert "ReplicaLost" in reasons  # streams cut after their first token fail...
    assert "NoReplica" not in reasons  # ...the others found another replica
    pool = sim.pools["chat"]
    assert pool.known_lost == {"b"}
    assert all(r.zone != "b" for r in pool.ready)
    timeline = result.timeline["chat"]
    # after the loss and a cold start, more replicas are ready than survived it
    survived = timeline["ready"][31]
    assert max(timeline["ready"][31 + 25 :]) > survived

"""LoRA adapters in the simulator: the replica's slots and loads, the traffic's Zipf draws, and
the 2,000-adapter scenario under both placements.

Matrix: a replica's slots (load on first use, wait for the load, LRU eviction order, reload of
an evicted adapter, at most ``max_loras`` adapters in a batch, base-model requests going ahead
of one waiting for a slot); the traffic (Zipf popularity by rank, per-stream ids, no draw for a
stream without adapters); the scenario (affinity beats blind on hit ratio and churn, by bounds;
slots never exceeded; the report's table); and base-model traffic unchanged (figures pinned from
before adapters).
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tokenfleet.cli import main as tokenfleet
from tokenfleet.sim import traffic
from tokenfleet.sim.engine import Simulation
from tokenfleet.sim.replica import (
    ADAPTER_HIT,
    ADAPTER_MISS,
    ADAPTER_UNSENT,
    NO_ADAPTER,
    Replica,
    Request,
)
from tokenfleet.sim.result import Result
from tokenfleet.sim.scenario import ADAPTER_ROUTINGS, AdapterRouting, Performance, Scenario

ROOT = Path(__file__).parents[3]
LOAD = 1.0


class Log:
    """First tokens and finishes a replica reports."""

    def __init__(self) -> None:
        self.first: dict[int, float] = {}
        self.done: dict[int, float] = {}

    def first_token(self, req: Request, at: float) -> None:
        self.first[req.index] = at

    def finish(self, req: Request, at: float) -> None:
        self.done[req.index] = at


def replica(max_loras: int = 2, **perf: Any) -> Replica:
    return Replica(
        0,
        "a",
        Performance(max_loras=max_loras, adapter_load_seconds=LOAD, cold_start_seconds=0, **perf),
        0.0,
    )


def request(index: int, adapter: int, at: float, output: int = 10) -> Request:
    return Request(
        index=index,
        stream=0,
        cls="c",
        arrival=at,
        deadline=at + 60,
        input_tokens=100,
        output_tokens=output,
        prefix=-1,
        prefix_tokens=0,
        adapter=adapter,
    )


def send(r: Replica, log: Log, req: Request) -> Request:
    r.accept(req, req.arrival, log.first_token, log.finish)
    return req


def run(r: Replica, log: Log, until: float) -> None:
    r.advance(until, log.first_token, log.finish)


def test_first_use_loads_and_the_request_waits_for_the_load() -> None:
    r, log = replica(), Log()
    first = send(r, log, request(0, adapter=7, at=0.0))
    run(r, log, 5.0)
    assert first.adapter_hit == ADAPTER_MISS and r.slots.loads == 1
    assert LOAD <= log.first[0] < LOAD + 0.05
    again = send(r, log, request(1, adapter=7, at=5.0))
    run(r, log, 10.0)
    assert again.adapter_hit == ADAPTER_HIT and r.slots.loads == 1
    assert log.first[1] - 5.0 < 0.05


def test_lru_eviction_order_and_reload_of_the_evicted() -> None:
    r, log = replica(max_loras=2), Log()
    for i, (adapter, at) in enumerate([(1, 0.0), (2, 2.0), (1, 4.0)]):
        send(r, log, request(i, adapter=adapter, at=at))
        run(r, log, at + 2.0)
    assert list(r.slots.loaded) == [2, 1]  # 1 was used last
    send(r, log, request(3, adapter=3, at=6.0))
    run(r, log, 8.0)
    assert list(r.slots.loaded) == [1, 3] and r.slots.evictions == 1  # 2, least recent, went
    back = send(r, log, request(4, adapter=2, at=8.0))
    run(r, log, 10.0)
    assert back.adapter_hit == ADAPTER_MISS and r.slots.loads == 4
    assert list(r.slots.loaded) == [3, 2] and log.first[4] >= 8.0 + LOAD


def test_a_batch_never_mixes_more_than_max_loras_adapters() -> None:
    r, log = replica(max_loras=2), Log()
    for i in range(12):
        send(r, log, request(i, adapter=i % 4, at=0.01 * i, output=200))
    seen = 0
    t = 0.0
    while len(log.done) < 12:
        t += 0.05
        run(r, log, t)
        running = {req.adapter for _, _, req in r.decoding} | {req.adapter for req in r.prefill}
        assert len(running) <= 2 and len(r.slots.loaded) <= 2
        seen = max(seen, len(running))
    assert seen == 2  # two in the batch at once: the limit is reached, not just kept


def test_a_base_request_goes_ahead_of_one_waiting_for_a_slot() -> None:
    r, log = replica(max_loras=1), Log()
    send(r, log, request(0, adapter=1, at=0.0, output=400))
    run(r, log, 1.5)  # adapter 1 loaded and in use
    blocked = send(r, log, request(1, adapter=2, at=1.5))
    base = send(r, log, request(2, adapter=-1, at=1.5))
    run(r, log, 2.0)
    assert base.adapter_hit == NO_ADAPTER and 2 in log.first  # not stuck behind it
    assert 1 not in log.first and blocked.adapter_hit == ADAPTER_MISS
    run(r, log, 20.0)
    assert log.first[1] >= log.done[0] + LOAD  # a slot only once adapter 1 was free


# ---- traffic ---------------------------------------------------------------------------------


def scenario_of(streams: list[dict[str, Any]], **extra: Any) -> Scenario:
    return Scenario.model_validate(
        {"name": "t", "durationSeconds": 20, "pools": [{"name": "p"}], "streams": streams, **extra}
    )


def stream(**extra: Any) -> dict[str, Any]:
    return {
        "name": "s",
        "class": "c",
        "rate": [{"at": 0, "rps": 500}],
        "inputTokens": {"mean": 100},
        "outputTokens": {"mean": 10},
        **extra,
    }


def test_zipf_popularity_by_rank_and_per_stream_ids() -> None:
    sc = scenario_of([stream(), stream(adapters={"count": 100, "zipf": 1.0})])
    drawn = [
        (s, a)
        for sec in traffic.seconds(sc)
        for s, a in zip(sec.streams, sec.adapters, strict=True)
    ]
    assert all(a == -1 for s, a in drawn if s == 0)
    counts = collections.Counter(a - traffic.ADAPTER_OFFSET for s, a in drawn if s == 1)
    assert set(counts) <= set(range(100))
    total = sum(counts.values())
    harmonic = sum(1 / k for k in range(1, 101))
    assert counts[0] / total == pytest.approx(1 / harmonic, rel=0.1)  # ~19%
    assert counts[0] > 1.5 * counts[1] > 1.5 * counts[3]  # 1/1, 1/2, 1/4


def test_a_stream_without_adapters_draws_what_it_drew_before() -> None:
    plain = scenario_of([stream()])
    mixed = scenario_of([stream(), stream(adapters={"count": 10, "share": 0.5})])
    before = [(sec.times, sec.inputs, sec.outputs) for sec in traffic.seconds(plain)]
    after = [
        tuple([x for x, s in zip(col, sec.streams, strict=True) if s == 0] for col in cols)
        for sec in traffic.seconds(mixed)
        for cols in [(sec.times, sec.inputs, sec.outputs)]
    ]
    assert before == after


# ---- the 2,000-adapter scenario ----------------------------------------------------------------

SCENARIO = ROOT / "examples/05-simulations/lora-adapters-zipf.yaml"


@pytest.fixture(scope="module")
def placements() -> dict[str, Result]:
    """Both placements over the scenario's first 60 s (~6,000 requests each), slots checked at
    every request's end."""
    sc = Scenario.model_validate(yaml.safe_load(SCENARIO.read_text()))
    sc = sc.model_copy(update={"duration_seconds": 60})
    assert sc.streams[0].adapters is not None and sc.streams[0].adapters.count == 2000
    results: dict[str, Result] = {}
    slots = sc.performance.max_loras
    for placement in ADAPTER_ROUTINGS:
        sim = Simulation(sc, "tokenfleet", placement)

        def check(req: Request, sim: Simulation = sim) -> None:
            for r in sim.pools["base"].replicas:
                assert len(r.slots.loaded) <= slots
                assert sum(1 for n in r.slots.users.values() if n) <= slots

        sim.rec.watch = check
        results[placement] = sim.run()
    return results


def test_affinity_finds_adapters_loaded_more_often(placements: dict[str, Result]) -> None:
    affinity, blind = placements["affinity"].adapters, placements["blind"].adapters
    assert affinity["requests"] == blind["requests"] > 4000  # the same traffic
    assert affinity["hit_ratio"] >= 0.35 and blind["hit_ratio"] <= 0.20
    assert affinity["hit_ratio"] >= blind["hit_ratio"] + 0.2


def test_affinity_loads_less(placements: dict[str, Result]) -> None:
    affinity, blind = placements["affinity"].adapters, placements["blind"].adapters
    assert affinity["loads_per_minute"] <= 0.75 * blind["loads_per_minute"]
    assert affinity["evictions"] < blind["evictions"]
    assert affinity["ttft_p99"] < blind["ttft_p99"]


def test_base_requests_are_reported_apart(placements: dict[str, Result]) -> None:
    for result in placements.values():
        a = result.adapters
        assert a["base_requests"] > 1000 and a["base_ttft_p50"] < 0.05
        assert a["requests"] + a["base_requests"] == result.requests


# ---- base-model traffic unchanged ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "requests", "figures", "gpu_hours"),
    [
        pytest.param(
            "examples/05-simulations/long-context-tenant.yaml",
            20509,
            (20509, 0, 0, 0.005122600979192149, 0.12350817714564763, 0.00912648521548836),
            0.2944444444444434,
            id="long-context-tenant",
        ),
        pytest.param(
            "bench/scenarios/flooding-tenant.yaml",
            4048,
            (3015, 716, 317, 0.09794912579280712, 3.0347102272114412, 0.016039162312760123),
            0.008333333333333347,
            id="flooding-tenant",
        ),
    ],
)
def test_base_model_figures_as_before_adapters(
    path: str, requests: int, figures: tuple[float, ...], gpu_hours: float
) -> None:
    """The first 10 s of each, as main computed them before adapters existed (0de1a38); pinned
    again when routing began to count the scrape as a correction of its own in-flight count
    and admission to judge waits in token work (issue 15), which moved them."""
    sc = Scenario.model_validate(yaml.safe_load((ROOT / path).read_text()))
    result = Simulation(sc.model_copy(update={"duration_seconds": 10}), "tokenfleet").run()
    g = result.classes["interactive"]
    got = (g["served"], g["shed"], g["timed_out"], g["ttft_p50"], g["ttft_p99"], g["itl_p99"])
    assert result.requests == requests
    assert got == pytest.approx(figures, rel=1e-9)
    assert result.gpu_hours == pytest.approx(gpu_hours, rel=1e-9)
    assert result.adapters == {}


def test_the_report_prints_both_placements_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", str(SCENARIO), "--duration", "5", "--quiet", "--out", str(tmp_path)]
    assert tokenfleet(argv) == 0
    tables = capsys.readouterr().out.split("\n\n")
    adapters = next(t for t in tables if t.startswith("adapters ")).splitlines()
    assert "hit ratio" in adapters[0] and "loads/min" in adapters[0]
    assert [line.split()[0] for line in adapters[1:]] == ["tokenfleet/affinity", "tokenfleet/blind"]
    saved = json.loads((tmp_path / "results.json").read_text())
    assert [r["adapterRouting"] for r in saved] == ["affinity", "blind"]
    assert all(r["adapters"]["requests"] > 0 for r in saved)


def test_a_scenario_without_adapters_runs_each_scaler_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = ROOT / "examples/05-simulations/long-context-tenant.yaml"
    argv = ["simulate", str(plain), "--duration", "3", "--quiet", "--out", str(tmp_path)]
    argv += ["--scaler", "tokenfleet"]
    assert tokenfleet(argv) == 0
    out = capsys.readouterr().out
    assert "hit ratio" not in out and "/affinity" not in out
    assert len(json.loads((tmp_path / "results.json").read_text())) == 1


def one_adapter(rps: float, placement: AdapterRouting) -> tuple[int, int]:
    """One adapter at ``rps`` on four replicas for 30 s: (loads, replicas holding it at the end)."""
    sc = Scenario.model_validate(
        {
            "name": "one-adapter",
            "durationSeconds": 30,
            "seed": 3,
            "performance": {"coldStartSeconds": 0, "maxLoras": 2, "maxNumSeqs": 64},
            "pools": [
                {
                    "name": "p",
                    "initialReplicas": 4,
                    "spec": {
                        "zones": {"names": ["a"], "tolerateLoss": 0},
                        "warm": {"perZone": 0},
                        "replicas": {"min": 4, "max": 4},
                        "routing": {"policy": "LeastLoad"},
                    },
                }
            ],
            "streams": [
                stream(
                    rate=[{"at": 0, "rps": rps}],
                    outputTokens={"mean": 200, "dist": "fixed"},
                    adapters={"count": 1},
                )
            ],
        }
    )
    sim = Simulation(sc, "tokenfleet", placement)
    result = sim.run()
    holding = sum(1 for r in sim.pools["p"].replicas if r.slots.loaded)
    return result.adapters["loads"], holding


@pytest.mark.parametrize(
    ("rps", "placement", "loads", "holding"),
    [
        pytest.param(2, "affinity", 1, 1, id="light: affinity keeps it on one replica"),
        pytest.param(2, "blind", 4, 4, id="light: blind loads it everywhere"),
        pytest.param(300, "affinity", 4, 4, id="hot: affinity grows it past the bound"),
    ],
)
def test_an_adapter_grows_onto_more_replicas_only_when_its_load_needs_them(
    rps: float, placement: AdapterRouting, loads: int, holding: int
) -> None:
    assert one_adapter(rps, placement) == (loads, holding)


def test_adapter_requests_shed_at_the_gateway_stay_adapter_requests() -> None:
    """Every request uses an adapter, at twice what one replica carries with a short queue:
    the shed ones count as adapter requests never sent, not as base-model requests."""
    sc = Scenario.model_validate(
        {
            "name": "overload",
            "durationSeconds": 10,
            "performance": {"coldStartSeconds": 0, "maxLoras": 4, "maxNumSeqs": 8},
            "pools": [
                {
                    "name": "p",
                    "initialReplicas": 1,
                    "spec": {
                        "zones": {"names": ["a"], "tolerateLoss": 0},
                        "warm": {"perZone": 0},
                        "replicas": {"min": 1, "max": 1},
                        "admission": {
                            "classes": [
                                {
                                    "name": "c",
                                    "priority": 100,
                                    "maxQueueDepth": 4,
                                    "maxQueueAgeMs": 500,
                                }
                            ]
                        },
                    },
                }
            ],
            "streams": [
                stream(
                    rate=[{"at": 0, "rps": 100}],
                    outputTokens={"mean": 100, "dist": "fixed"},
                    adapters={"count": 50},
                )
            ],
        }
    )
    result = Simulation(sc, "tokenfleet", "affinity").run()
    a = result.adapters
    lost = result.classes["c"]["shed"] + result.classes["c"]["timed_out"]
    assert lost > 0 and a["base_requests"] == 0 and a["requests"] == result.requests
    assert a["sent"] == result.requests - lost and request(0, 5, 0.0).adapter_hit == ADAPTER_UNSENT


@pytest.mark.parametrize("cores", ["compiled", "interpreted"])
def test_adapter_runs_replay_exactly_in_another_process(cores: str, tmp_path: Path) -> None:
    """Compiled or not, with another string hash seed: the same adapter figures."""
    env = {
        **os.environ,
        "PYTHONHASHSEED": "random",
        "TOKENFLEET_NATIVE": "1" if cores == "compiled" else "0",
    }
    argv = [str(SCENARIO), "--duration", "10", "--quiet", "--out", str(tmp_path)]
    run = subprocess.run(
        [sys.executable, "-m", "tokenfleet.sim", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    there = json.loads((tmp_path / "results.json").read_text())
    assert all(r["compiled"] is (cores == "compiled") for r in there), "run `make native`"
    sc = Scenario.model_validate(yaml.safe_load(SCENARIO.read_text()))
    sc = sc.model_copy(update={"duration_seconds": 10})
    for saved, placement in zip(there, ADAPTER_ROUTINGS, strict=True):
        here = Simulation(sc, "tokenfleet", placement).run()
        assert saved["adapters"] == json.loads(json.dumps(here.adapters))
        assert saved["classes"] == json.loads(json.dumps(here.classes))

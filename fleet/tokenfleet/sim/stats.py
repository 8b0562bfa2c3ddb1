"""Measuring a simulation run as it goes: a row per ended request, a sample per second."""

from __future__ import annotations

import array
import collections
from collections.abc import Callable

import numpy as np

from tokenfleet import native
from tokenfleet.sim.replica import Request
from tokenfleet.sim.result import OUTCOMES, Columns, Result, adapters_of, summary_of
from tokenfleet.sim.scenario import Scenario

OUTCOME_CODES = {o: i for i, o in enumerate(OUTCOMES)}
INT_COLUMNS = ("stream", "outcome", "reason", "met", "input", "output", "second", "adapter")
FLOAT_COLUMNS = ("ttft", "itl")


class Recorder:
    """Collects a run's measurements as requests end and seconds pass.

    A request's end appends one row of plain numbers (it happens millions of times); grouping
    by class and tenant happens once, at the end, in numpy.
    """

    def __init__(self, scenario: Scenario, scaler: str, adapter_routing: str = "affinity") -> None:
        self.scenario = scenario
        self.scaler = scaler
        self.adapter_routing = adapter_routing
        self.slo = [
            (scenario.slo_of(s.cls).ttft_seconds, scenario.slo_of(s.cls).inter_token_seconds)
            for s in scenario.streams
        ]
        self.overhead = scenario.performance.request_overhead_seconds
        self.reasons: dict[str, int] = {"": 0}
        # one row per ended request, interleaved (two appends per request, not nine)
        self.ints: array.array[int] = array.array("q")  # INT_COLUMNS
        self.floats: array.array[float] = array.array("d")  # FLOAT_COLUMNS
        self.cls_of: dict[int, str] = {}
        self.timeline: dict[str, dict[str, list[float]]] = {}
        self.gpu_seconds = 0.0
        self.prefill_seconds = 0.0
        self.decode_seconds = 0.0
        self.adapter_loads = 0
        self.adapter_evictions = 0
        self.open = 0
        self.total = 0
        self.watch: Callable[[Request], None] | None = None  # hears every ended request (tests)

    def arrived(self, req: Request) -> None:
        self.open += 1
        self.total += 1

    def ended(self, req: Request) -> None:
        if self.watch is not None:
            self.watch(req)
        self.open -= 1
        self.cls_of.setdefault(req.stream, req.cls)
        ttft = itl = 0.0
        met = 0
        outcome = OUTCOME_CODES[req.outcome]
        if outcome == 0:
            assert req.first_token is not None and req.finished is not None
            ttft = req.first_token - req.arrival + self.overhead
            itl = (req.finished - req.first_token) / (req.output - 1) if req.output > 1 else 0.0
            slo_ttft, slo_itl = self.slo[req.stream]
            met = 1 if ttft <= slo_ttft and itl <= slo_itl else 0
        reason = self.reasons.setdefault(req.reason, len(self.reasons))
        second = int(req.arrival)
        self.ints.extend(
            (req.stream, outcome, reason, met, req.input, req.output, second, req.adapter_hit)
        )
        self.floats.extend((ttft, itl))

    def sample(self, second: int, pool: str, **values: float) -> None:
        series = self.timeline.setdefault(pool, collections.defaultdict(list))
        series["t"].append(float(second))
        for k, v in values.items():
            series[k].append(float(v))

    def busy(self, prefill: float, decode: float) -> None:
        self.prefill_seconds += prefill
        self.decode_seconds += decode

    def adapter_work(self, loads: int, evictions: int) -> None:
        self.adapter_loads += loads
        self.adapter_evictions += evictions

    def columns(self) -> Columns:
        ints = np.frombuffer(self.ints, dtype=np.int64).reshape(-1, len(INT_COLUMNS))
        floats = np.frombuffer(self.floats, dtype=np.float64).reshape(-1, len(FLOAT_COLUMNS))
        return Columns(
            **{name: ints[:, i] for i, name in enumerate(INT_COLUMNS)},
            **{name: floats[:, i] for i, name in enumerate(FLOAT_COLUMNS)},
        )

    def result(self, wall: float, cpu: float) -> Result:
        sc = self.scenario
        cols = self.columns()
        reasons = sorted(self.reasons, key=self.reasons.__getitem__)
        gpu_hours = self.gpu_seconds / 3600
        cost = gpu_hours * sc.gpu_hour_price
        busy = self.prefill_seconds + self.decode_seconds
        share_in = self.prefill_seconds / busy if busy else 0.5
        served = cols.outcome == 0
        served_in = int(cols.input[served].sum())
        served_out = int(cols.output[served].sum())
        classes: dict[str, list[int]] = collections.defaultdict(list)
        tenants: dict[str, list[int]] = collections.defaultdict(list)
        for i, s in enumerate(sc.streams):
            classes[self.cls_of.get(i, s.cls)].append(i)
            tenants[s.tenant].append(i)
        seconds = int(sc.duration_seconds)
        attainment = {}
        for cls, streams in classes.items():
            rows = np.isin(cols.stream, streams)
            sec = cols.second[rows]
            arrived = np.bincount(sec, minlength=seconds)[:seconds]
            met = np.bincount(sec, weights=cols.met[rows], minlength=seconds)[:seconds]
            attainment[cls] = np.where(arrived > 0, met / np.maximum(arrived, 1), 1.0).tolist()
        return Result(
            scenario=sc.name,
            scaler=self.scaler,
            requests=self.total,
            wall_seconds=wall,
            cpu_seconds=cpu,
            compiled=native.active(),
            simulated_seconds=sc.duration_seconds,
            classes={
                c: summary_of(np.isin(cols.stream, ss), cols, reasons)
                for c, ss in sorted(classes.items())
            },
            tenants={
                t: summary_of(np.isin(cols.stream, ss), cols, reasons)
                for t, ss in sorted(tenants.items())
            },
            gpu_hours=gpu_hours,
            cost=cost,
            cost_per_million_input=cost * share_in / served_in * 1e6 if served_in else 0.0,
            cost_per_million_output=cost * (1 - share_in) / served_out * 1e6 if served_out else 0.0,
            timeline={p: dict(v) for p, v in self.timeline.items()},
            attainment=attainment,
            adapter_routing=self.adapter_routing,
            adapters=adapters_of(
                cols,
                loads=self.adapter_loads,
                evictions=self.adapter_evictions,
                minutes=sc.duration_seconds / 60,
            ),
        )

"""What a simulation run measured: per class and tenant, over time, in GPU-hours and dollars.

Plain (interpreted) on purpose: a Result crosses processes (the benchmarks run policies in
parallel), and mypyc's frozen dataclasses do not unpickle.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

OUTCOMES = ("served", "shed", "timed_out", "failed")


def summary_of(rows: np.ndarray[Any, Any], cols: Columns, reasons: list[str]) -> dict[str, Any]:
    """The summary of a group of requests (a boolean selection of the columns)."""
    outcome = cols.outcome[rows]
    served = rows & (cols.outcome == 0)
    ttft = cols.ttft[served] if served.any() else np.zeros(1)
    itl = cols.itl[served] if served.any() else np.zeros(1)
    arrived = int(rows.sum())
    why = np.bincount(cols.reason[rows], minlength=len(reasons))
    return {
        "arrived": arrived,
        "within_slo": float(cols.met[rows].sum()) / arrived if arrived else 1.0,
        **{o: int((outcome == i).sum()) for i, o in enumerate(OUTCOMES)},
        "reasons": {reasons[i]: int(n) for i, n in enumerate(why) if n and reasons[i]},
        "ttft_p50": float(np.percentile(ttft, 50)),
        "ttft_p99": float(np.percentile(ttft, 99)),
        "itl_p99": float(np.percentile(itl, 99)),
        "input_tokens": int(cols.input[served].sum()),
        "output_tokens": int(cols.output[served].sum()),
    }


def adapters_of(cols: Columns, *, loads: int, evictions: int, minutes: float) -> dict[str, Any]:
    """LoRA figures: how often a request found its adapter loaded where it went (hit ratio),
    load churn, and TTFT of served requests with and without an adapter; empty without any
    adapter request. ``adapter`` codes (sim.replica): 0 none, 1 found loaded, 2 not, 3 never
    sent to a replica; the hit ratio is over the requests sent."""
    with_adapter = cols.adapter > 0
    requests = int(with_adapter.sum())
    if not requests:
        return {}
    served = cols.outcome == 0

    def ttft(rows: np.ndarray[Any, Any]) -> tuple[float, float]:
        values = cols.ttft[rows & served]
        if not len(values):
            return 0.0, 0.0
        return float(np.percentile(values, 50)), float(np.percentile(values, 99))

    hits = int((cols.adapter == 1).sum())
    sent = hits + int((cols.adapter == 2).sum())
    (a50, a99), (b50, b99) = ttft(with_adapter), ttft(~with_adapter)
    return {
        "requests": requests,
        "sent": sent,
        "hits": hits,
        "hit_ratio": hits / sent if sent else 0.0,
        "loads": loads,
        "loads_per_minute": loads / minutes if minutes else 0.0,
        "evictions": evictions,
        "ttft_p50": a50,
        "ttft_p99": a99,
        "base_requests": int((~with_adapter).sum()),
        "base_ttft_p50": b50,
        "base_ttft_p99": b99,
    }


@dataclasses.dataclass(frozen=True, slots=True)
class Columns:
    """Every ended request, one row each (numpy views of the recorder's arrays)."""

    stream: np.ndarray[Any, Any]
    outcome: np.ndarray[Any, Any]
    reason: np.ndarray[Any, Any]
    met: np.ndarray[Any, Any]
    ttft: np.ndarray[Any, Any]
    itl: np.ndarray[Any, Any]
    input: np.ndarray[Any, Any]
    output: np.ndarray[Any, Any]
    second: np.ndarray[Any, Any]
    adapter: np.ndarray[Any, Any]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    scenario: str
    scaler: str
    requests: int
    wall_seconds: float
    cpu_seconds: float
    compiled: bool  # ran on the mypyc-compiled cores (tokenfleet.native)
    simulated_seconds: float
    classes: dict[str, dict[str, Any]]
    tenants: dict[str, dict[str, Any]]
    gpu_hours: float
    cost: float
    cost_per_million_input: float
    cost_per_million_output: float
    timeline: dict[str, dict[str, list[float]]]  # pool → series (one value per second)
    attainment: dict[str, list[float]]  # class → within-SLO share by arrival second
    adapter_routing: str = "affinity"
    adapters: dict[str, Any] = dataclasses.field(default_factory=dict)  # see adapters_of

    @property
    def label(self) -> str:
        """The run's name in tables: its scaler, and its adapter placement when it had any."""
        return f"{self.scaler}/{self.adapter_routing}" if self.adapters else self.scaler

    @property
    def speed(self) -> float:
        """Requests simulated per CPU second: one core; wall time varies with the machine."""
        return self.requests / self.cpu_seconds if self.cpu_seconds else 0.0

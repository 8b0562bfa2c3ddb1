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

    @property
    def speed(self) -> float:
        """Requests simulated per CPU second: one core; wall time varies with the machine."""
        return self.requests / self.cpu_seconds if self.cpu_seconds else 0.0

"""A workload on a combined pool, or on a prefill pool and a decode pool with KV transfer
between them: simulated request by request, to check the planner's sizing
(``tokenfleet.capacity.disaggregation``) against queueing.

- **combined**: the simulator's own replica (``sim.replica.Replica``, chunked prefill), each
  request to the replica with the fewest in flight.
- **prefill pool**: each replica prefills its queue first come first served, a prompt taking
  ``input x (per_token + base / chunk)`` (full chunks); the request goes to the replica that
  frees first.
- **the link**: each prefill replica's NIC sends one prompt's KV at a time
  (``latency + input x kv_bytes / bandwidth``), in the order the prompts finished — the
  transfer queue. A transfer is lost with probability ``loss`` (found at its end): the request
  is prefilled again from the start (recompute), on whichever replica frees first.
- **decode pool**: the same replica model with prefill beside decoding at zero cost (the KV
  arrived): a transferred sequence goes to the decode replica with the fewest in flight and is
  admitted when it has a sequence slot and KV room for the whole context (else it waits there:
  the decode pool's admission); its first token is its admission. KV is not reserved on the
  decode side during the transfer, so a decode pool near its KV limit looks slightly better
  than it is.

TTFT and TPOT (mean time per output token after the first) are measured per request; the SLO
is met when both are within their objectives. The traffic is Poisson at a constant rate.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
import random

import numpy as np
from pydantic import Field

from tokenfleet.api.base import Model
from tokenfleet.capacity import disaggregation
from tokenfleet.sim import traffic
from tokenfleet.sim.replica import Replica, Request
from tokenfleet.sim.scenario import Performance, Tokens


class Slo(Model):
    ttft_p95_seconds: float = Field(default=1.0, gt=0, description="Time to first token, p95.")
    tpot_p95_seconds: float = Field(
        default=0.05, gt=0, description="Time per output token after the first, p95."
    )


class Simulate(Model):
    duration_seconds: float = Field(default=60.0, gt=0, description="Arrivals for this long.")
    seed: int = Field(default=1, description="The same seed replays exactly.")
    scale: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="Simulate this share of the rate on the same share of each pool (at least "
        "one replica): a fleet of identical replicas behind least-loaded routing scales.",
    )


class Workload(Model):
    """A disaggregation question: traffic, objectives, the model's shape, the link, the replica."""

    rps: float = Field(gt=0, description="Requests per second to carry.")
    input_tokens: Tokens = Field(description="Prompt tokens.")
    output_tokens: Tokens = Field(description="Generated tokens.")
    slo: Slo = Field(default_factory=Slo, description="Objectives.")
    target_utilization: float = Field(
        default=0.7, gt=0, le=1, description="Share of each replica ceiling planned for."
    )
    model: disaggregation.ModelShape = Field(
        default_factory=disaggregation.ModelShape, description="Attention shape (KV size)."
    )
    link: disaggregation.Link = Field(
        default_factory=disaggregation.Link, description="Prefill → decode network."
    )
    performance: Performance = Field(
        default_factory=Performance, description="One replica (as in simulation scenarios)."
    )
    simulate: Simulate = Field(default_factory=Simulate, description="The check's run.")
    gpu_hour_price: float = Field(default=2.5, ge=0, description="Dollars per GPU-hour.")

    def replica(self) -> disaggregation.Replica:
        p = self.performance
        return disaggregation.Replica(
            base=p.step_base_seconds,
            per_sequence=p.step_per_sequence_seconds,
            per_token=p.prefill_per_token_seconds,
            chunk=p.max_num_batched_tokens,
            max_seqs=p.max_num_seqs,
            kv_tokens=p.kv_cache_tokens,
        )

    def traffic(self, rps: float | None = None) -> disaggregation.Traffic:
        tail = self.input_tokens.p99 or self.input_tokens.mean
        return disaggregation.Traffic(
            rps=self.rps if rps is None else rps,
            input_tokens=self.input_tokens.mean,
            output_tokens=self.output_tokens.mean,
            input_tail=tail,
            ttft=self.slo.ttft_p95_seconds,
            tpot=self.slo.tpot_p95_seconds,
            utilization=self.target_utilization,
        )

    def decide(self) -> disaggregation.Verdict:
        return disaggregation.decide(
            self.replica(), self.traffic(), self.link, kv_bytes=self.model.kv_bytes_per_token()
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Measured:
    design: str
    replicas: int
    requests: int
    ttft_p95: float
    tpot_p95: float
    within_slo: float
    lost_transfers: int
    transfer_wait_p95: float  # seconds a finished prompt waited for its NIC


def _p95(values: list[float]) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, math.ceil(0.95 * len(values)) - 1)]


def _requests(w: Workload, rps: float) -> list[Request]:
    """Poisson arrivals at ``rps`` for the run's duration, token counts drawn as the
    simulator's scenarios draw them (``traffic.draw``)."""
    rng = np.random.default_rng(w.simulate.seed)
    n = int(rng.poisson(rps * w.simulate.duration_seconds))
    times = np.sort(rng.uniform(0.0, w.simulate.duration_seconds, n))
    inputs = traffic.draw(rng, w.input_tokens, n)
    outputs = traffic.draw(rng, w.output_tokens, n)
    return [
        Request(
            index=i,
            stream=0,
            cls="interactive",
            arrival=float(times[i]),
            deadline=math.inf,
            input_tokens=int(inputs[i]),
            output_tokens=int(outputs[i]),
            prefix=-1,
            prefix_tokens=0,
        )
        for i in range(n)
    ]


def _first(req: Request, at: float) -> None:
    req.first_token = at


def _done(req: Request, at: float) -> None:
    req.finished = at


def _measure(design: str, replicas: int, reqs: list[Request], slo: Slo, **extra: float) -> Measured:
    ttft, tpot, ok = [], [], 0
    for r in reqs:
        if r.first_token is None or r.finished is None:
            continue
        a = r.first_token - r.arrival
        b = (r.finished - r.first_token) / max(1, r.output - 1)
        ttft.append(a)
        tpot.append(b)
        ok += a <= slo.ttft_p95_seconds and b <= slo.tpot_p95_seconds
    return Measured(
        design=design,
        replicas=replicas,
        requests=len(reqs),
        ttft_p95=_p95(ttft),
        tpot_p95=_p95(tpot),
        within_slo=ok / len(reqs) if reqs else 1.0,
        lost_transfers=int(extra.get("lost", 0)),
        transfer_wait_p95=extra.get("wait", 0.0),
    )


def _scaled(n: int, scale: float) -> int:
    return max(1, round(n * scale))


def run_combined(w: Workload, replicas: int) -> Measured:
    """The combined pool of ``replicas`` (scaled by ``simulate.scale``)."""
    n = _scaled(replicas, w.simulate.scale)
    rps = w.rps * n / replicas
    perf = w.performance.model_copy(update={"cold_start_seconds": 0.0, "prefill_mode": "chunked"})
    pool = [Replica(i, "z", perf, 0.0) for i in range(n)]
    reqs = _requests(w, rps)
    for req in reqs:
        best = min(pool, key=lambda r: (r.in_flight, r.id))
        best.accept(req, req.arrival, _first, _done)
    for r in pool:
        r.advance(_drain(r), _first, _done)
    return _measure("combined", replicas, reqs, w.slo)


def _drain(r: Replica) -> float:
    """A time by which a replica has finished everything (generous)."""
    return r.clock + 1e6


def run_disaggregated(w: Workload, prefill: int, decode: int) -> Measured:
    """``prefill`` + ``decode`` replicas (scaled by ``simulate.scale``), the link between."""
    scale = w.simulate.scale
    n_p, n_d = _scaled(prefill, scale), _scaled(decode, scale)
    rps = w.rps * min(n_p / prefill, n_d / decode)
    reqs = _requests(w, rps)
    loss_rng = random.Random(w.simulate.seed + 1)
    p = w.performance
    per_prompt_token = p.prefill_per_token_seconds + p.step_base_seconds / p.max_num_batched_tokens
    kv_bytes = w.model.kv_bytes_per_token()
    dperf = p.model_copy(
        update={
            "cold_start_seconds": 0.0,
            "prefill_mode": "separate",
            "prefill_per_token_seconds": 0.0,
        }
    )
    decoders = [Replica(i, "z", dperf, 0.0) for i in range(n_d)]
    engine_free = [0.0] * n_p
    nic_free = [0.0] * n_p
    events: list[tuple[float, int, int, Request]] = []  # (time, seq, kind, request)
    seq = itertools.count()
    arrive, landed = 0, 1
    for req in reqs:
        heapq.heappush(events, (req.arrival, next(seq), arrive, req))
    lost, waits = 0, []
    while events:
        t, _, kind, req = heapq.heappop(events)
        if kind == arrive:
            i = min(range(n_p), key=lambda k: (engine_free[k], k))
            done = max(t, engine_free[i]) + req.input * per_prompt_token
            engine_free[i] = done
            start = max(done, nic_free[i])
            waits.append(start - done)
            nic_free[i] = start + w.link.seconds(req.input, kv_bytes)
            heapq.heappush(events, (nic_free[i], next(seq), landed, req))
        elif loss_rng.random() < w.link.loss:
            lost += 1
            heapq.heappush(events, (t, next(seq), arrive, req))  # recompute
        else:
            best = min(decoders, key=lambda r: (r.in_flight, r.id))
            best.accept(req, t, _first, _done)
    for r in decoders:
        r.advance(_drain(r), _first, _done)
    return _measure("disaggregated", prefill + decode, reqs, w.slo, lost=lost, wait=_p95(waits))

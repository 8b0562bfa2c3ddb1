"""Scaling with and without the engines' preemptions, on a toy KV-cache model (no processes).

Each engine has a KV cache of BLOCKS blocks. A request takes PROMPT blocks when admitted and
one block more per second of decode for DECODE seconds. vLLM's scheduler, reduced to what
matters here: a waiting request is admitted while its prompt fits; every second each running
request needs one more block, and when none is free the newest running request is preempted
(its blocks freed, it waits again and starts over: recomputation). Arrivals go to the engine
with the fewest requests; the rate steps up at STEP_AT. Every INTERVAL seconds the operator's
own ``scaling.decide`` runs on what Prometheus would show — mean KV usage, waiting requests,
arrival and completion rates, and, for the ``+preemptions`` policy only, the preemption rate
over the last minute — and new engines are ready COLD_START seconds later.

Printed per policy and KV target: preemptions, request latency p50/p95 (arrival to last token),
engine-seconds (cost), when the pool first grew and its peak (the load only steps up, so
scale-down is not modelled). A toy: it shows the decision's logic on a
KV cache that thrashes while its mean usage reads near the target, not a forecast.

    .venv/bin/python bench/preemptions.py [--seconds 900] [--targets 0.8,0.9,0.95]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import statistics

from tokenfleet.operator.policy import scaling

BLOCKS = 400  # KV blocks per engine
PROMPT = 24  # blocks a request takes when admitted
DECODE = 24  # seconds of decode, one block each
RATE_BEFORE, STEP_AT = 1.0, 120  # requests/s, and when the load steps up (s)
INTERVAL = 5  # the operator's reconcile interval (s), its default
COLD_START = 60  # seconds from a scale-up to a ready engine
START = datetime.datetime(2026, 12, 7, tzinfo=datetime.UTC)


@dataclasses.dataclass
class Request:
    arrived: int
    blocks: int = 0
    decoded: int = 0


@dataclasses.dataclass
class Engine:
    ready_at: int
    running: list[Request] = dataclasses.field(default_factory=list)
    waiting: list[Request] = dataclasses.field(default_factory=list)

    def used(self) -> int:
        return sum(r.blocks for r in self.running)

    def step(self, now: int, done: list[int]) -> int:
        """One second of the scheduler; returns the preemptions it made."""
        preempted = 0
        for req in list(self.running):
            if req not in self.running:  # preempted earlier in this second
                continue
            while self.used() >= BLOCKS and req in self.running:
                victim = self.running.pop()  # the newest running request
                victim.blocks, victim.decoded = 0, 0
                self.waiting.insert(0, victim)
                preempted += 1
            if req in self.running:
                req.blocks += 1
                req.decoded += 1
                if req.decoded >= DECODE:
                    self.running.remove(req)
                    done.append(now - req.arrived)
        while self.waiting and self.used() + PROMPT <= BLOCKS:
            req = self.waiting.pop(0)
            req.blocks = PROMPT
            self.running.append(req)
        return preempted


@dataclasses.dataclass(frozen=True)
class Outcome:
    preemptions: int
    p50: float
    p95: float
    engine_seconds: int
    first_growth: int | None
    peak: int


def run(*, seconds: int, target: float, after: float, preemptions: bool) -> Outcome:
    policy = scaling.Policy(target_kv_cache_usage=target, min_replicas=3, max_replicas=16)
    engines = [Engine(ready_at=0) for _ in range(3)]
    state = scaling.State(replicas=3)
    done: list[int] = []
    preempted_at: list[int] = []
    arrivals_at: list[int] = []
    done_at: list[int] = []
    owed, cost, first_growth = 0.0, 0, None
    for now in range(seconds):
        ready = [e for e in engines if e.ready_at <= now]
        owed += after if now >= STEP_AT else RATE_BEFORE
        while owed >= 1:
            owed -= 1
            min(ready, key=lambda e: len(e.running) + len(e.waiting)).waiting.append(Request(now))
            arrivals_at.append(now)
        for engine in ready:
            finished = len(done)
            preempted_at += [now] * engine.step(now, done)
            done_at += [now] * (len(done) - finished)
        cost += len(engines)
        if now % INTERVAL or now < 60:
            continue
        signals = scaling.Signals(
            kv_cache_usage=statistics.fmean(e.used() / BLOCKS for e in ready),
            waiting=float(sum(len(e.waiting) for e in ready)),
            arrival_rate=sum(1 for t in arrivals_at if t > now - 60) / 60,
            completion_rate=sum(1 for t in done_at if t > now - 60) / 60,
            preemption_rate=(
                sum(1 for t in preempted_at if t > now - 60) / 60 if preemptions else None
            ),
        )
        decision = scaling.decide(
            policy=policy,
            signals=signals,
            state=state,
            ready=len(ready),
            starting=len(engines) - len(ready),
            now=START + datetime.timedelta(seconds=now),
        )
        state = decision.state
        if decision.replicas > len(engines):
            first_growth = now if first_growth is None else first_growth
            engines += [
                Engine(ready_at=now + COLD_START) for _ in range(decision.replicas - len(engines))
            ]
    cuts = statistics.quantiles(done, n=20)
    return Outcome(
        preemptions=len(preempted_at),
        p50=statistics.median(done),
        p95=cuts[18],
        engine_seconds=cost,
        first_growth=first_growth,
        peak=len(engines),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=900)
    parser.add_argument("--targets", default="0.8,0.9,0.95")
    parser.add_argument("--after", default="1.3,1.45,1.9", help="req/s after the step")
    args = parser.parse_args()
    print(
        f"{BLOCKS} blocks per engine, requests of {PROMPT}+{DECODE} blocks over {DECODE} s, "
        f"{RATE_BEFORE} req/s, then more at {STEP_AT} s, cold start {COLD_START} s, "
        f"{args.seconds} s"
    )
    print(
        f"{'req/s':>5} {'KV target':>9} {'policy':<22} {'preempted':>9} {'p50 s':>6} {'p95 s':>6} "
        f"{'engine-s':>8} {'grew at':>7} {'engines':>7}"
    )
    grid = [(float(a), float(t)) for a in args.after.split(",") for t in args.targets.split(",")]
    for after, target in grid:
        for name, with_preemptions in (("KV+waiting (before)", False), ("+preemptions", True)):
            o = run(seconds=args.seconds, target=target, after=after, preemptions=with_preemptions)
            grew = "-" if o.first_growth is None else f"{o.first_growth}s"
            print(
                f"{after:>5} {target:>9} {name:<22} {o.preemptions:>9} {o.p50:>6.0f} {o.p95:>6.0f} "
                f"{o.engine_seconds:>8} {grew:>7} {o.peak:>7}"
            )


if __name__ == "__main__":
    main()

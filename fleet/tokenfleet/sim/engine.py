"""The fleet simulator's clock: arrivals into pools, replicas running, zones failing, scalers.

Time moves in ticks. Each tick, in order: zone events; replicas finishing their cold start
join the routable set; expired waiters leave and waiters start while slots are free; the
tick's arrivals are admitted and routed at their own times (the chosen replica catches up to
that instant first, so latency is exact, not rounded to ticks); every replica runs to the end
of the tick; and at each scale interval every pool's scaler sets replicas per zone.

Every request ends exactly once: served, shed (refused at admission), timed out (expired in a
queue) or failed (its replica died after its first token; before that it is retried).
"""

from __future__ import annotations

import gc
import itertools
import math
import random
import time
from collections.abc import Callable, Iterator

from tokenfleet.gateway.policy import admission, routing
from tokenfleet.operator.policy import forecast
from tokenfleet.sim import scalers, seasons, traffic
from tokenfleet.sim.pool import Pool
from tokenfleet.sim.replica import Request, mark_first_token
from tokenfleet.sim.result import Result
from tokenfleet.sim.scenario import AdapterRouting, Scaler, Scenario
from tokenfleet.sim.stats import Recorder

DRAIN_LIMIT_SECONDS = 900.0


class Simulation:
    """One scenario under one scaler (and one placement of LoRA requests)."""

    def __init__(
        self,
        scenario: Scenario,
        scaler: Scaler = "tokenfleet",
        adapter_routing: AdapterRouting = "affinity",
    ) -> None:
        self.scenario = scenario
        self.scaler_name = scaler
        self.rng = random.Random(scenario.seed)
        self.rec = Recorder(scenario, scaler, adapter_routing)
        self.ids = itertools.count()
        tenants = (
            [(s.tenant, float(s.share)) for s in scenario.streams]
            if scenario.fair_queuing
            else None
        )
        self.pools = {
            p.name: Pool(
                p.name,
                p.spec,
                scenario.performance,
                rec=self.rec,
                rng=self.rng,
                ids=self.ids,
                tenants=tenants,
                adapter_affinity=adapter_routing == "affinity",
            )
            for p in scenario.pools
        }
        self.buckets = [
            routing.PoolOption(
                key=p.name,
                max_input_tokens=p.spec.max_input_tokens,
                classes=frozenset(p.spec.routing.classes),
            )
            for p in scenario.pools
        ]
        self.stream_pool = [s.pool for s in scenario.streams]
        self.stream_cls = [s.cls for s in scenario.streams]
        self.stream_prefix = [s.shared_prefix.tokens for s in scenario.streams]
        self.stream_zones = [list(s.zones) for s in scenario.streams]
        self.stream_sent = [0] * len(scenario.streams)  # arrivals so far: whose turn a zone is
        initial = {p.name: p.initial_replicas for p in scenario.pools}
        self._arrivals: Iterator[traffic.Second] = iter(())
        self._second: traffic.Second | None = None
        self._index = 0
        self.scalers = {
            name: self._scaler(pool, initial[name]) for name, pool in self.pools.items()
        }

    # ---- scalers -------------------------------------------------------------------------

    def offered_need(self, pool: str) -> Callable[[float], int]:
        """Replicas the offered load of ``pool`` needs at time t (the oracle's knowledge)."""
        sc = self.scenario
        streams = [s for s in sc.streams if s.pool in ("", pool)]
        if not streams:
            return lambda t: 0
        itl = min(sc.slo_of(s.cls).inter_token_seconds for s in streams)

        def need(t: float) -> int:
            rates = [s.rps(t) for s in streams]
            total = sum(rates)
            if total <= 0:
                return 0
            mean_in = sum(r * s.input_tokens.mean for r, s in zip(rates, streams, strict=True))
            mean_out = sum(r * s.output_tokens.mean for r, s in zip(rates, streams, strict=True))
            per = scalers.sustainable_rps(sc.performance, mean_in / total, mean_out / total, itl)
            per *= scalers.ORACLE_UTILIZATION
            return math.ceil(total / per) if per > 0 else 0

        return need

    def _scaler(self, pool: Pool, initial: int | None) -> scalers.Scaler:
        need = self.offered_need(pool.name)
        spec = pool.spec
        demand = need(0.0) if initial is None else initial
        if self.scaler_name == "tokenfleet":
            return scalers.TokenFleet(spec, demand)
        if self.scaler_name == "reactive":
            return scalers.TokenFleet(spec, demand, schedules=False)
        if self.scaler_name == "forecast":
            return self._forecast(pool, demand)
        if self.scaler_name == "hpa-cpu":
            return scalers.hpa_cpu(spec, demand)
        if self.scaler_name == "keda-queue":
            return scalers.keda_queue(spec, demand)
        if self.scaler_name == "static-peak":
            peak = max(need(t) for t in range(math.ceil(self.scenario.duration_seconds) + 1))
            return scalers.Fixed(scalers.place(spec, peak, pool.zone_view(), headroom=True))
        return scalers.Oracle(spec, need, self.scenario.performance.cold_start_seconds)

    def offered_rps(self, pool: str) -> Callable[[float], float]:
        """Requests/s offered to ``pool`` at time t."""
        streams = [s for s in self.scenario.streams if s.pool in ("", pool)]
        return lambda t: sum(s.rps(t) for s in streams)

    def _forecast(self, pool: Pool, demand: int) -> scalers.Forecast:
        """The reactive policy with the forecast floor, its history drawn from its own seed
        (so every policy's traffic draws stay the same)."""
        sc, h = self.scenario, self.scenario.history
        past = seasons.history(
            self.offered_rps(pool.name),
            window=sc.duration_seconds,
            days=h.days,
            step=h.step_seconds,
            noise=h.noise,
            weekend_factor=h.weekend_factor,
            rng=random.Random(sc.seed + 1),
            recurring=h.recurring,
        )
        streams = [s for s in sc.streams if s.pool in ("", pool.name)] or list(sc.streams)
        rate0 = [max(s.rps(0.0), 1e-9) for s in streams]
        total = sum(rate0)
        mean_in = sum(r * s.input_tokens.mean for r, s in zip(rate0, streams, strict=True))
        mean_out = sum(r * s.output_tokens.mean for r, s in zip(rate0, streams, strict=True))
        itl = min(sc.slo_of(s.cls).inter_token_seconds for s in streams)
        per = scalers.sustainable_rps(sc.performance, mean_in / total, mean_out / total, itl)
        return scalers.Forecast(
            pool.spec,
            demand,
            history=past,
            step=h.step_seconds,
            lead=sc.performance.cold_start_seconds + sc.scale_interval_seconds,
            per_replica_rps=per * scalers.ORACLE_UTILIZATION,
            models=[forecast.Model(m) for m in h.models],
        )

    def _initial(self, pool: Pool) -> dict[str, int]:
        """The fleet each policy keeps in steady state at the opening load, ready at t=0."""
        scaler = self.scalers[pool.name]
        zones = pool.zone_view()
        if isinstance(scaler, scalers.TokenFleet):
            return scalers.place(pool.spec, scaler.state.replicas, zones, headroom=True)
        if isinstance(scaler, scalers.Forecast):
            state = scaler.reactive.state
            return scalers.place(pool.spec, state.replicas, zones, headroom=True)
        if isinstance(scaler, scalers.Hpa):
            return scalers.place(pool.spec, scaler.replicas, zones, headroom=False)
        return scaler.targets(pool.view(0.0, 1.0))

    # ---- the clock -----------------------------------------------------------------------

    def _arrive(
        self, t: float, stream: int, n_in: int, n_out: int, prefix: int, *, adapter: int
    ) -> None:
        name = self.stream_pool[stream] or routing.choose_pool(
            self.buckets, prompt_tokens=n_in, cls=self.stream_cls[stream]
        )
        assert name is not None
        pool = self.pools[name]
        cls = admission.class_for(self.stream_cls[stream], pool.policies)
        req = Request(
            index=next(self.ids),
            stream=stream,
            cls=cls,
            arrival=t,
            deadline=t + pool.policies[cls].default_deadline,
            input_tokens=n_in,
            output_tokens=n_out,
            prefix=prefix,
            prefix_tokens=self.stream_prefix[stream] if prefix >= 0 else 0,
            zone=self._gateway_zone(stream),
            adapter=adapter,
        )
        req.pool = name
        self.rec.arrived(req)
        if n_in > pool.spec.max_input_tokens:
            pool.end(req, "shed", "ContextTooLong", t)
        else:
            pool.admit(req, t)

    def _gateway_zone(self, stream: int) -> str:
        """The zone of the gateway replica the stream's next request reaches (they take turns,
        as a load balancer spreads clients over the gateway's replicas)."""
        zones = self.stream_zones[stream]
        if not zones:
            return ""
        sent = self.stream_sent[stream]
        self.stream_sent[stream] = sent + 1
        return zones[sent % len(zones)]

    def _zone_events(self, now: float) -> None:
        for loss in self.scenario.zone_losses:
            for pool in self.pools.values():
                if loss.zone not in pool.zones:
                    continue
                if loss.at <= now and loss.zone not in pool.dead_zones:
                    pool.lose_zone(loss.zone, now)
                known = loss.at + loss.detected_after <= now
                if known and loss.zone not in pool.known_lost:
                    pool.learn_loss(loss.zone)

    def run(self, progress: Callable[[float], None] | None = None) -> Result:
        """Simulate the scenario; ``progress`` hears the simulated time each second."""
        # Millions of short-lived requests would trigger the cyclic collector constantly; they
        # are freed by reference counting (a request drops its cycle with its replica when it
        # ends), so the collector only costs time here.
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run(progress)
        finally:
            if enabled:
                gc.enable()

    def _run(self, progress: Callable[[float], None] | None) -> Result:
        sc = self.scenario
        dt = sc.tick_seconds
        wall, cpu = time.perf_counter(), time.process_time()
        for pool in self.pools.values():
            for zone, n in self._initial(pool).items():
                for _ in range(n):
                    pool.create(zone, 0.0, ready=True)
            pool.make_ready(0.0)
        self._arrivals = traffic.seconds(sc)
        self._second = next(self._arrivals, None)
        self._index = tick = 0
        next_scale, next_sample = sc.scale_interval_seconds, 0
        while True:
            now = tick * dt
            if now >= sc.duration_seconds and self.rec.open == 0:
                break
            if now > sc.duration_seconds + DRAIN_LIMIT_SECONDS:
                raise RuntimeError(f"{self.rec.open} requests still open after the drain limit")
            end = now + dt
            self._tick(now, end)
            if end + 1e-9 >= next_scale:
                for pool in self.pools.values():
                    view = pool.view(end, sc.scale_interval_seconds)
                    pool.reconcile(self.scalers[pool.name].targets(view), end)
                next_scale += sc.scale_interval_seconds
            if end + 1e-9 >= next_sample:
                self._sample(next_sample, end)
                next_sample += 1
                if progress is not None:
                    progress(end)
            tick += 1
        for pool in self.pools.values():
            for r in pool.replicas:
                self.rec.busy(r.busy_prefill, r.busy_decode)
                self.rec.adapter_work(r.slots.loads, r.slots.evictions)
        return self.rec.result(wall=time.perf_counter() - wall, cpu=time.process_time() - cpu)

    def _tick(self, now: float, end: float) -> None:
        sc = self.scenario
        self._zone_events(now)
        pools = self.pools.values()
        for pool in pools:
            pool.make_ready(now)
            pool.expire(now)
            pool.wake(now)
        self._admit_until(end)
        for pool in pools:
            for r in pool.replicas:
                r.advance(end, mark_first_token, pool.finished)
            pool.reap()
            if now < sc.duration_seconds:
                self.rec.gpu_seconds += pool.holding() * sc.performance.gpus * sc.tick_seconds

    def _admit_until(self, end: float) -> None:
        """Every arrival before ``end``, each at its own time."""
        while self._second is not None:
            second, index = self._second, self._index
            times = second.times
            while index < len(times) and times[index] < end:
                self._arrive(
                    times[index],
                    second.streams[index],
                    second.inputs[index],
                    second.outputs[index],
                    second.prefixes[index],
                    adapter=second.adapters[index],
                )
                index += 1
            self._index = index
            if index < len(times):
                return
            self._second, self._index = next(self._arrivals, None), 0

    def _sample(self, second: int, now: float) -> None:
        for pool in self.pools.values():
            ready = pool.ready
            self.rec.sample(
                second,
                pool.name,
                ready=len(ready),
                holding=pool.holding(),
                queued=sum(pool.book.queued.values()),
                oldest=pool.oldest_age(now),
                kv=sum(r.kv_usage() for r in ready) / len(ready) if ready else 0.0,
            )
            pool.tick_rate(1.0)
            pool.scrape(now)

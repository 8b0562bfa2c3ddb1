"""One simulated pool: its gateway side (queues, in-flight counts, routing) and its replicas.

The gateway side keeps the gateway's own bookkeeping, a :class:`~tokenfleet.gateway.policy.
queue_book.QueueBook`, and calls the product's cores exactly as ``tokenfleet.gateway.queues`` and
``router`` do: ``admission.admit`` for each arrival, ``admission.next_up`` whenever slots may be
free, ``admission.expire`` for waiters past their age or deadline, ``admission.displaced`` for
those a higher class queued ahead of, and ``routing.pick`` for the
replica with the request built by ``routing.ask`` (a LoRA request under adapter affinity:
``adapters.place`` over every ready replica's slots instead). Each request is charged to its
stream's tenant in the queue book's fair queue, as the gateway's ``queues.Fair`` does (the
simulator knows each request's output, so the charge needs no settling). Scaling sets replicas
per zone through :meth:`Pool.reconcile`.
"""

from __future__ import annotations

import collections
import itertools
import random

from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.gateway.policy import adapters, admission, fairness, prefix, routing
from tokenfleet.gateway.policy.admission import ClassPolicy, PoolLoad
from tokenfleet.gateway.policy.queue_book import QueueBook
from tokenfleet.gateway.policy.rejections import Rejected
from tokenfleet.operator.policy import placement, scaling
from tokenfleet.sim.replica import Replica, Request, mark_first_token
from tokenfleet.sim.scalers import PoolView
from tokenfleet.sim.scenario import Performance
from tokenfleet.sim.stats import Recorder

CHARS_PER_TOKEN = 4  # to turn a shared prefix's tokens into the prompt text routing hashes
#: The operator reads rates and the p95 queue wait over Prometheus' last minute
#: (``tokenfleet.signals.queries``, window "1m"): the scaler's view averages as long.
SIGNAL_WINDOW_SECONDS = 60.0
#: A request's time per output token counts once per gap, up to this many: the engines'
#: histogram counts every gap, so long answers weigh more (bounded, to keep a look cheap).
TPOT_SAMPLES_PER_REQUEST = 64


def percentile(values: list[float], p: int) -> float | None:
    """The ``p``-th percentile of ``values`` as the other looks take theirs; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[int(p / 100 * (len(ordered) - 1))]


#: The simulated gateway models no outlier ejection: no replica fails on its own.
NONE_EJECTED: frozenset[str] = frozenset()


#: The golden ratio's fractional part: successive multiples spread evenly over [0, 1).
GOLDEN = 0.6180339887498949


class Pool:
    """A pool's gateway state and replicas."""

    def __init__(
        self,
        name: str,
        spec: InferencePoolSpec,
        perf: Performance,
        *,
        rec: Recorder,
        rng: random.Random,
        ids: itertools.count[int],
        tenants: list[tuple[str, float]] | None = None,
        adapter_affinity: bool = True,
    ) -> None:
        """``tenants``: per stream index, the tenant and share its requests are charged to in
        the fair queue; None queues first come first served. ``adapter_affinity``: LoRA
        requests are placed by ``adapters.place``; otherwise routed as any other request."""
        self.name, self.spec, self.perf = name, spec, perf
        self.tenants = tenants
        self.rec, self.rng, self.ids = rec, rng, ids
        self.zones = list(spec.zones.names) or ["zone-a", "zone-b", "zone-c"]
        self.dead_zones: set[str] = set()  # down now
        self.known_lost: set[str] = set()  # down, and the operator knows it
        targets = spec.ttft_targets_ms()  # tightened to the pool's TTFT objective
        self.policies: dict[str, ClassPolicy] = {
            c.name: ClassPolicy.of(c, ttft_target_ms=targets[c.name])
            for c in spec.admission.classes
        }
        self.queue_age_classes = scaling.queue_age_classes(
            spec.autoscaling.queue_age_classes,
            [(c.name, c.priority) for c in spec.admission.classes],
        )
        self.replicas: list[Replica] = []
        self.ready: list[Replica] = []
        self.endpoints: dict[int, routing.Endpoint] = {}
        self.group = routing.EMPTY
        self.routing = routing.Policy.of(spec.routing)
        self.prefix_aware = routing.wants_prefix(self.routing)
        self.sequence = 0  # the gateway's request counter (RoundRobin turns with it)
        self.prefixes = prefix.PrefixIndex()
        self.prefix_hashes: dict[int, tuple[bytes, ...]] = {}
        self.by_url: dict[str, Replica] = {}
        self.routed: dict[str, int] = {}  # requests in flight per replica, as the gateway counts
        self.loads: dict[str, routing.Load] = {}  # the gateway's last scrape of each replica
        self.book: QueueBook[Request] = QueueBook(self.policies)
        self.capacity = 0
        self.waits: list[float] = []  # queue waits of the scaling classes since the last look
        self.prompt_tokens = 0  # since the last look
        self.arrivals = 0
        self.served = 0
        self.generated_tokens = 0
        # the last minute of looks: (time, arrivals, served, prompt, generated, waits)
        self.window: collections.deque[tuple[float, int, int, int, int, list[float]]] = (
            collections.deque()
        )
        # latency objectives' percentiles, kept only when the pool (or its preview) states one:
        # time to first token of the scaling classes (the gateways' histogram), time per output
        # token of every request (the engines'); the last minute of looks, as for the waits
        tried = spec.autoscaling.previewed()
        self.measures_latency = any(
            a.ttft_objective is not None or a.tpot_objective is not None
            for a in (spec.autoscaling, tried)
            if a is not None
        )
        self.ttfts: list[float] = []
        self.tpots: list[float] = []
        self.latency_window: collections.deque[tuple[float, list[float], list[float]]] = (
            collections.deque()
        )
        self.load = self._load()
        self.adapter_affinity = adapter_affinity
        self.adapter_policy = adapters.Policy()

    # ---- gateway view ----------------------------------------------------------------------

    def _load(self) -> PoolLoad:
        # The book's view follows its counts, and capacity and rate change only between
        # ticks, so one view serves a whole tick.
        return self.book.load(self.capacity)

    def refresh(self) -> None:
        self.capacity = len(self.ready) * self.perf.max_num_seqs
        self.group = routing.Group.of([self.endpoints[r.id] for r in self.ready])
        self.load = self._load()

    def tick_rate(self, seconds: float) -> None:
        self.book.measure(seconds)
        self.refresh()

    def oldest_age(self, now: float, classes: list[str] | None = None) -> float:
        book = self.book
        return max(
            (book.oldest_age(c, now) for c in book.heads if classes is None or c in classes),
            default=0.0,
        )

    # ---- requests ------------------------------------------------------------------------

    def _tenant(self, req: Request) -> tuple[str, float]:
        tenants = self.tenants
        return tenants[req.stream] if tenants is not None else ("", 1.0)

    def admit(self, req: Request, now: float) -> None:
        self.arrivals += 1
        tenant, share = self._tenant(req)
        work = fairness.work(prompt_tokens=req.input, output_tokens=req.output) if tenant else 0.0
        cost = admission.work(prompt_tokens=req.input, max_tokens=req.output)
        decision = admission.admit(
            policies=self.policies,
            load=self.load,
            cls=req.cls,
            now=now,
            deadline=req.deadline,
            tenant=tenant,
            # graded shedding's draw: a low-discrepancy sequence over arrivals, so a run
            # replays exactly without a random source of its own
            draw=(req.index * GOLDEN) % 1.0,
            fair_work=work,
            tenant_share=share,
            cost=cost,
        )
        if type(decision) is Rejected:
            self.end(req, "shed", decision.reason.value, now)
            return
        if type(decision) is admission.Start:
            self.book.start(req.cls, tenant=tenant, share=share, work=work, now=now)
            self._started(req, now)
        else:
            assert type(decision) is admission.Enqueue
            self.book.enqueue(
                req,
                cls=req.cls,
                enqueued_at=req.arrival,
                deadline=req.deadline,
                tenant=tenant,
                share=share,
                work=work,
                cost=cost,
                patience=decision.patience,  # the core's, fixed now: as the gateway
            )
            self.wake(now)  # its tenant may be the fair choice at once, as in the gateway
            self.displace(req.cls, now)

    def displace(self, by: str, now: float) -> None:
        """Lower classes' waiters that a request of ``by`` put out of reach are refused now
        (``admission.displaced``), as the gateway refuses them."""
        book = self.book
        while True:
            fronts = [w for c in list(book.heads) for w in book.fronts(c)]
            gone = admission.displaced(
                policies=self.policies, load=self.load, fronts=fronts, by=by, now=now
            )
            if not gone:
                return
            for waiter, why in gone:
                req = book.remove(waiter)
                assert req is not None  # fronts are live waiters
                self.end(req, "shed", why.reason.value, now)

    def _started(self, req: Request, now: float) -> None:
        if req.cls in self.queue_age_classes:
            self.waits.append(now - req.arrival)
        self.dispatch(req, now)

    def _hashes(self, req: Request) -> tuple[bytes, ...]:
        """The prompt's block hashes as the gateway computes them (one synthetic text per
        shared prefix; the rest of a prompt is unique, so it never matches)."""
        if req.prefix < 0:
            return ()
        hashes = self.prefix_hashes.get(req.prefix)
        if hashes is None:
            text = f"shared prefix {req.prefix} ".ljust(req.prefix_tokens * CHARS_PER_TOKEN, ".")
            hashes = prefix.block_hashes(text, model="model", salt="")
            self.prefix_hashes[req.prefix] = hashes
        return hashes

    def dispatch(self, req: Request, now: float, tried: frozenset[str] = frozenset()) -> None:
        """Route a started request to a replica (again, after its replica died unanswered)."""
        if req.adapter >= 0 and self.adapter_affinity:
            url = self._place_adapter(req, now, tried)
        else:
            url = self._route(req, now, tried)
        if url is None:
            req.dispatched = req.dispatched or now  # its slot is released with it
            self.end(req, "failed", "NoReplica", now)
            return
        self.routed[url] += 1
        if req.dispatched is None:
            req.dispatched = now
        self.by_url[url].accept(req, now, mark_first_token, self.finished)

    def _route(self, req: Request, now: float, tried: frozenset[str]) -> str | None:
        """The gateway's routing: ``routing.pick`` with the request ``routing.ask`` builds."""
        hashes = self._hashes(req) if self.prefix_aware else ()
        self.sequence += 1
        ask = routing.ask(
            policy=self.routing,
            match=self.prefixes.match(hashes) if hashes else prefix.NO_MATCH,
            zone=req.zone,
            tried=tried,
            ejected=NONE_EJECTED,
            sequence=self.sequence,
        )
        choice = routing.pick(
            self.group,
            in_flight=self.routed,
            loads=self.loads,
            ask=ask,
            policy=self.routing,
            now=now,
            rng=self.rng,
        )
        if choice is None:
            return None
        url = choice.endpoint.url
        if hashes:
            self.prefixes.record(hashes, url)
        return url

    def _place_adapter(self, req: Request, now: float, tried: frozenset[str]) -> str | None:
        """A LoRA request under adapter affinity: ``adapters.place`` over the ready replicas'
        slots. The gateway is assumed to know them (its own loads, and what
        vllm:lora_requests_info reports): the replicas' own state, as of their last event."""
        self.sequence += 1
        candidates = [
            r.slots.holder(url=r.url, load=self.routed[r.url], now=now)
            for r in self.ready
            if r.url not in tried
        ]
        placed = adapters.place(
            adapter=req.adapter,
            candidates=candidates,
            policy=self.adapter_policy,
            tie=self.sequence,
        )
        return None if placed is None else placed.url

    def scrape(self, now: float) -> None:
        """What the gateway's scraper reads from each ready replica's /metrics."""
        for r in self.ready:
            self.loads[r.url] = routing.Load(
                waiting=len(r.waiting),
                kv_usage=r.kv_usage(),
                scraped_at=now,
                # vLLM counts prefilling sequences as running too
                running=r.running + len(r.prefill) + len(r.prefilling),
                own=self.routed.get(r.url, 0),
            )

    def finished(self, req: Request, at: float) -> None:
        """A replica finished ``req`` at ``at`` (its callback)."""
        replica = req.replica
        if replica is not None:
            self.routed[replica.url] -= 1
        self.served += 1
        self.prompt_tokens += req.input
        self.generated_tokens += req.output
        req.finished = at
        if self.measures_latency and req.first_token is not None:
            if req.cls in self.queue_age_classes:
                self.ttfts.append(req.first_token - req.arrival)
            if req.output > 1:  # its mean gap, once per gap: a token-weighted distribution
                gap = (at - req.first_token) / (req.output - 1)
                self.tpots.extend([gap] * min(req.output - 1, TPOT_SAMPLES_PER_REQUEST))
        self.end(req, "served", "", at)

    def end(self, req: Request, outcome: str, reason: str, now: float) -> None:
        req.outcome, req.reason = outcome, reason
        if req.finished is None:
            req.finished = now
        if outcome in ("served", "failed") and req.dispatched is not None:
            tenant, share = self._tenant(req)
            self.book.release(
                req.cls,
                completed=outcome == "served",
                held_seconds=req.finished - req.dispatched,
                tenant=tenant,
                share=share,
                cost=admission.work(prompt_tokens=req.input, max_tokens=req.output),
                prefill=None if req.first_token is None else req.first_token - req.dispatched,
            )
        self.rec.ended(req)

    def expire(self, now: float) -> None:
        """Waiters past their class's age or their deadline leave (oldest first per tenant)."""
        book = self.book
        for cls in self.policies:
            while True:
                fronts = book.fronts(cls)
                gone = admission.expire(
                    policies=self.policies, queued=fronts, now=now, prefill=book.prefill
                )
                if not gone:
                    break
                for waiter, why in gone:
                    req = book.remove(waiter)
                    assert req is not None  # fronts are live waiters
                    self.end(req, "timed_out", why.reason.value, now)

    def wake(self, now: float) -> None:
        """Start waiters while slots are free."""
        while self.book.heads:
            head = admission.next_up(policies=self.policies, load=self.load, now=now)
            if head is None:
                return
            req = self.book.begin(head)
            assert req is not None  # heads are live waiters
            self._started(req, now)

    # ---- replicas ------------------------------------------------------------------------

    def create(self, zone: str, now: float, *, ready: bool = False) -> None:
        r = Replica(next(self.ids), zone, self.perf, now)
        if ready:
            r.ready_at = now
        self.replicas.append(r)
        self.by_url[r.url] = r
        self.routed[r.url] = 0
        self.loads[r.url] = routing.IDLE

    def make_ready(self, now: float) -> None:
        """Replicas past their cold start join the routable set."""
        changed = False
        for r in self.replicas:
            if r.ready_at <= now and not r.draining and r.id not in self.endpoints:
                if r.zone in self.dead_zones:
                    continue  # pending on a lost zone's nodes: never scheduled
                self.endpoints[r.id] = routing.Endpoint(
                    url=r.url,
                    pool=self.name,
                    models=frozenset({"model"}),
                    zone=r.zone,
                    max_concurrency=self.perf.max_num_seqs,
                )
                self.ready.append(r)
                changed = True
        if changed:
            self.refresh()

    def _unroute(self, r: Replica) -> None:
        if r.id in self.endpoints:
            del self.endpoints[r.id]
            self.ready.remove(r)
            self.refresh()

    def reconcile(self, targets: dict[str, int], now: float) -> None:
        """Replicas per zone as the scaler wants: add cold ones, drain the extra."""
        for zone in self.zones:
            want = targets.get(zone, 0)
            mine = [r for r in self.replicas if r.zone == zone and not r.draining]
            for _ in range(want - len(mine)):
                self.create(zone, now)
            extra = len(mine) - want
            if extra <= 0:
                continue
            # starting replicas go first (no work lost), then the least busy ready ones
            victims = sorted(mine, key=lambda r: (r.ready_at <= now, r.in_flight, -r.id))
            for r in victims[:extra]:
                r.draining = True
                self._unroute(r)

    def reap(self) -> None:
        """Drained replicas with nothing left in flight are gone."""
        alive = []
        for r in self.replicas:
            if r.draining and r.idle:
                self.rec.busy(r.busy_prefill, r.busy_decode)
                self.rec.adapter_work(r.slots.loads, r.slots.evictions)
                del self.by_url[r.url]
                del self.routed[r.url]
                del self.loads[r.url]
            else:
                alive.append(r)
        self.replicas = alive

    def lose_zone(self, zone: str, now: float) -> None:
        """The zone went down: its replicas die with whatever they held."""
        self.dead_zones.add(zone)
        for r in [r for r in self.replicas if r.zone == zone]:
            self._unroute(r)
            held = r.evict_all()
            r.draining = True
            self.routed[r.url] = 0
            self.loads[r.url] = routing.IDLE
            for req in held:
                if req.first_token is None:
                    # keeps its admission slot (no byte was sent) and avoids the dead replica
                    self.dispatch(req, now, tried=frozenset({r.url}))
                else:
                    self.end(req, "failed", "ReplicaLost", now)

    def learn_loss(self, zone: str) -> None:
        """The operator notices the loss: placement avoids the zone, its pods are deleted."""
        self.known_lost.add(zone)
        for r in self.replicas:
            if r.zone == zone:
                r.draining = True

    def holding(self) -> int:
        """Replicas holding GPUs: pods pending on a lost zone's nodes hold none."""
        dead = self.dead_zones
        return sum(1 for r in self.replicas if r.zone not in dead) if dead else len(self.replicas)

    def zone_view(self) -> list[placement.Zone]:
        return [placement.Zone(name=z, healthy=z not in self.known_lost) for z in self.zones]

    def view(self, now: float, interval: float) -> PoolView:
        """What Prometheus would show the scaler about this pool: instant values now, rates and
        the p95 queue wait over the signal window (as the operator's queries ask)."""
        delay = self.spec.autoscaling.readiness_delay_seconds
        ready = self.ready
        window = self.window
        window.append(
            (now, self.arrivals, self.served, self.prompt_tokens, self.generated_tokens, self.waits)
        )
        while window and window[0][0] <= now - SIGNAL_WINDOW_SECONDS + 1e-6:  # ticks add floats
            window.popleft()
        span = min(SIGNAL_WINDOW_SECONDS, max(now, interval))
        waits = sorted(w for entry in window for w in entry[5])
        ttft: dict[int, float | None] = {95: None, 99: None}
        tpot: dict[int, float | None] = {95: None, 99: None}
        if self.measures_latency:
            latency = self.latency_window
            latency.append((now, self.ttfts, self.tpots))
            while latency and latency[0][0] <= now - SIGNAL_WINDOW_SECONDS + 1e-6:
                latency.popleft()
            ttfts = [v for entry in latency for v in entry[1]]
            tpots = [v for entry in latency for v in entry[2]]
            ttft = {p: percentile(ttfts, p) for p in ttft}
            tpot = {p: percentile(tpots, p) for p in tpot}
            self.ttfts, self.tpots = [], []
        view = PoolView(
            t=now,
            spec=self.spec,
            zones=self.zone_view(),
            ready=len(ready),
            starting=sum(
                1
                for r in self.replicas
                if not r.draining and r.ready_at > now and now - r.created < delay
            ),
            alive=sum(1 for r in self.replicas if not r.draining),
            oldest_queue_age=self.oldest_age(now, self.queue_age_classes),
            queue_wait_p95=waits[int(0.95 * (len(waits) - 1))] if waits else None,
            queue_length=sum(self.book.queued.values()),
            scaling_queue_length=sum(self.book.queued.get(c, 0) for c in self.queue_age_classes),
            engine_waiting=sum(len(r.waiting) for r in ready),
            kv_cache_usage=sum(r.kv_usage() for r in ready) / len(ready) if ready else None,
            busy=sum(min(1.0, r.busy_window / interval) for r in ready),
            prompt_tokens_rate=sum(e[3] for e in window) / span,
            generation_tokens_rate=sum(e[4] for e in window) / span,
            arrival_rate=sum(e[1] for e in window) / span,
            completion_rate=sum(e[2] for e in window) / span,
            ttft_p95=ttft[95],
            ttft_p99=ttft[99],
            tpot_p95=tpot[95],
            tpot_p99=tpot[99],
        )
        self.arrivals = self.served = 0
        self.waits = []
        self.prompt_tokens = self.generated_tokens = 0
        for r in self.replicas:
            r.busy_window = 0.0
        return view

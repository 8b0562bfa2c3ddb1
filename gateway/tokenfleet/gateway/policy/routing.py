"""Which endpoint serves a request (pure): filter → score → pick over an immutable snapshot.

Model → pool (context bucket, traffic class) → revision (canary weights, or a pin) → endpoint.
The endpoint step is a pipeline over a :class:`Group` (the endpoints of one model, pool and
revision, precomputed per snapshot):

1. **shortlist** — the endpoints believed to hold the request's prefix plus a seeded random
   sample of ``k`` others (power-of-k choices), so a pick costs O(k), not O(N), in a fleet of
   hundreds of replicas; a small group is scored whole;
2. **filter** — drop endpoints this request already tried and ejected outliers (when every
   endpoint is ejected, use them anyway: a probably-failing replica beats a certain 503);
3. **score** — ``prefix·affinity + load·(1 − relative load) + zone·same-zone`` where load is
   in-flight requests counted by this gateway (always current) plus what the last scrape saw
   beyond them (``waiting + running`` less this gateway's own count at scrape time: other
   gateways' requests), weighted down as the scrape ages, and a small KV-usage term; counting
   the scrape as a *correction* keeps a stale figure from herding simultaneous arrivals onto
   the replica that looked idle a second ago. A prefix no candidate is known to hold goes to
   its rendezvous-hash winner (highest ``hash(leading blocks, endpoint)``), so every gateway
   process sends a new prefix to the same replica without sharing state, and equal scores
   break towards the rendezvous order too; affinity is withdrawn from an endpoint with more
   requests than ``bounded_load`` × the shortlist's mean plus one (a hot prefix spreads
   instead of pinning one replica, and a cold one stays put); the zone bonus is withdrawn from
   a saturated endpoint (spill to other zones);
4. **pick** — the best score, ties broken by the rendezvous order when the request has a
   prefix, else by the injected ``rng``: decisions replay exactly.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from collections.abc import Collection, Mapping, Sequence
from typing import Literal, Protocol, TypeVar

from tokenfleet.api.pool import Routing
from tokenfleet.gateway.policy.prefix import NO_MATCH, Match

T = TypeVar("T")
#: Scores closer than this are a tie (floating-point noise must not break ties unfairly).
TIE = 1e-9


class Rng(Protocol):
    """A seeded random source with random.Random's methods: passed in, so picks replay exactly."""

    def choice(self, seq: Sequence[T]) -> T: ...

    def sample(self, population: Sequence[T], k: int) -> list[T]: ...

    def random(self) -> float: ...

    def uniform(self, a: float, b: float) -> float: ...


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """One ready worker."""

    url: str  # http://ip:port
    pool: str  # namespace/name of its InferencePool ("" in static mode)
    models: frozenset[str]  # served names it answers to
    revision: str = ""
    zone: str = ""
    max_concurrency: int = 64

    @property
    def namespace(self) -> str:
        """Its pool's namespace ("" in static mode): whose engine key it serves behind."""
        return self.pool.partition("/")[0] if "/" in self.pool else ""


@dataclasses.dataclass(frozen=True, slots=True)
class Group:
    """Endpoints interchangeable for one request (same model, pool, revision)."""

    endpoints: tuple[Endpoint, ...] = ()
    by_url: Mapping[str, Endpoint] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, endpoints: Sequence[Endpoint]) -> Group:
        return cls(tuple(endpoints), {e.url: e for e in endpoints})

    def __len__(self) -> int:
        return len(self.endpoints)


EMPTY = Group()


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """All ready endpoints at one instant; replaced whole, never mutated.

    Groups by (model, pool, revision) are built once here, so a request finds its candidates
    in O(1); ``""`` as pool or revision means any.
    """

    endpoints: tuple[Endpoint, ...] = ()
    groups: Mapping[tuple[str, str, str], Group] = dataclasses.field(
        default_factory=dict, compare=False
    )
    revision_sets: Mapping[tuple[str, str], frozenset[str]] = dataclasses.field(
        default_factory=dict, compare=False
    )

    def __post_init__(self) -> None:
        if self.groups or not self.endpoints:
            return
        found: dict[tuple[str, str, str], list[Endpoint]] = {}
        for e in self.endpoints:
            for model in e.models:
                for key in {
                    (model, "", ""),
                    (model, e.pool, ""),
                    (model, "", e.revision),
                    (model, e.pool, e.revision),
                }:
                    found.setdefault(key, []).append(e)
        object.__setattr__(self, "groups", {k: Group.of(v) for k, v in found.items()})
        revisions = {
            (model, pool): frozenset(e.revision for e in members)
            for (model, pool, revision), members in found.items()
            if not revision
        }
        object.__setattr__(self, "revision_sets", revisions)

    def group(self, model: str, *, pool: str = "", revision: str = "") -> Group:
        return self.groups.get((model, pool, revision), EMPTY)

    def serving(self, model: str) -> tuple[Endpoint, ...]:
        return self.group(model).endpoints

    def revisions(self, model: str, *, pool: str = "") -> frozenset[str]:
        """Revisions with at least one ready endpoint (precomputed: O(1))."""
        return self.revision_sets.get((model, pool), frozenset())

    def models(self) -> frozenset[str]:
        return frozenset(m for e in self.endpoints for m in e.models)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Load:
    """An endpoint's engine figures from the gateway's last scrape (its own in-flight count of
    the endpoint is always current and passed beside them: it changes on every request)."""

    waiting: int = 0
    """``vllm:num_requests_waiting``."""
    kv_usage: float = 0.0
    """``vllm:kv_cache_usage_perc`` (0–1)."""
    scraped_at: float | None = None
    """Monotonic seconds of the scrape; None when never scraped."""
    running: int = 0
    """``vllm:num_requests_running``."""
    own: int = 0
    """This gateway's in-flight count at the endpoint when the scrape was taken: the engine's
    figures already include those, and counting them twice would herd arrivals elsewhere."""

    def others(self, now: float, stale_after: float) -> float:
        """Requests the engine had beyond this gateway's own, weighted by the scrape's age
        (1 when fresh, falling to 0 at ``stale_after``): other gateways' load fades out
        instead of vanishing at once."""
        if self.scraped_at is None:
            return 0.0
        return max(0, self.waiting + self.running - self.own) * freshness(
            self, now=now, stale_after=stale_after
        )


def freshness(load: Load, *, now: float, stale_after: float) -> float:
    """1 for a scrape taken now, 0 at ``stale_after`` seconds old or never scraped."""
    if load.scraped_at is None or stale_after <= 0:
        return 0.0
    return max(0.0, 1.0 - (now - load.scraped_at) / stale_after)


#: Weight of KV usage (0–1) in an endpoint's pressure, against 1 per slot-full of requests: a
#: tie-breaker, not a driver — KV usage moves with prompt lengths, and as a driver a scrape's
#: figure would steer every arrival until the next scrape to one replica.
KV_WEIGHT = 0.05


def rendezvous(key: bytes, url: str) -> int:
    """The rendezvous (highest-random-weight) hash of a prefix key and an endpoint: the same in
    every gateway process (no per-process seed), so they agree on a new prefix's home."""
    return int.from_bytes(hashlib.blake2b(key + url.encode(), digest_size=8).digest(), "big")


IDLE = Load()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """Scoring weights and limits, from InferencePool.spec.routing."""

    kind: Literal["PrefixAware", "LeastLoad", "RoundRobin"] = "PrefixAware"
    prefix: float = 2.0
    load: float = 1.0
    zone: float = 0.5
    bounded_load: float = 2.0
    """Affinity only while an endpoint's load ≤ this × the shortlist mean (+ one request)."""
    sample: int = 8
    """k: endpoints scored besides the prefix holders when the group is larger."""
    stale_after: float = 5.0
    """Seconds after which scraped queue and KV figures are ignored (in-flight still counts)."""
    zone_saturation: float = 0.8
    """Load (share of max concurrency) at which the same-zone bonus is withdrawn: spill."""

    @classmethod
    def of(cls, r: Routing) -> Policy:
        """The policy an InferencePool's ``spec.routing`` declares."""
        return cls(
            kind=r.policy,
            prefix=r.prefix_weight,
            load=r.load_weight,
            zone=r.zone_weight,
            bounded_load=r.bounded_load,
            sample=r.sample_size,
        )


class Why(enum.StrEnum):
    """Why an endpoint was picked: a metric label."""

    ONLY = "only_one"
    PREFIX = "prefix"
    PREFIX_OVERLOADED = "prefix_overloaded"
    PREFIX_HOME = "prefix_home"
    """A prefix nobody was known to hold, sent to its rendezvous home."""
    ZONE = "zone"
    LOAD = "load"
    ROUND_ROBIN = "round_robin"
    ALL_EJECTED = "all_ejected"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Ask:
    """A request as routing sees it."""

    match: Match = NO_MATCH
    zone: str = ""
    """The gateway replica's zone ("" → no preference)."""
    tried: frozenset[str] = frozenset()
    """Endpoints this request already failed on (a retry goes elsewhere)."""
    ejected: frozenset[str] = frozenset()
    sequence: int = 0
    """A counter, for RoundRobin."""


FIRST_TRY = Ask()


def wants_prefix(policy: Policy) -> bool:
    """Whether routing reads the prompt's prefix: only PrefixAware does, so only then is the
    prompt hashed, matched against the index and recorded in it."""
    return policy.kind == "PrefixAware"


def ask(
    *,
    policy: Policy,
    match: Match,
    zone: str,
    tried: frozenset[str],
    ejected: frozenset[str],
    sequence: int,
) -> Ask:
    """One attempt of a request as routing sees it: the gateway and the simulator build it here.

    ``match``: the prompt's blocks in the prefix index (ignored unless :func:`wants_prefix`);
    ``zone``: the gateway replica's; ``tried``: endpoints this request already failed on;
    ``ejected``: outliers; ``sequence``: the caller's counter of attempts, which RoundRobin
    turns with. A first attempt that none of these shape (most requests) shares one value.
    """
    if not wants_prefix(policy):
        match = NO_MATCH
    if policy.kind != "RoundRobin":
        sequence = 0  # only RoundRobin reads it
    if not (match.total or zone or tried or ejected or sequence):
        return FIRST_TRY
    return Ask(match=match, zone=zone, tried=tried, ejected=ejected, sequence=sequence)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Choice:
    endpoint: Endpoint
    why: Why
    prefix_blocks: int = 0


def shortlist(group: Group, *, match: Match, k: int, rng: Rng) -> list[Endpoint]:
    """Prefix holders plus a seeded sample of k others; the whole group when that is smaller."""
    holders = [group.by_url[u] for u in match.blocks if u in group.by_url]
    if len(group) <= k + len(holders):
        return list(group.endpoints)
    seen = {e.url for e in holders}
    # k draws with replacement (random.sample costs ~10x more and this runs per request);
    # a repeat only shortens the shortlist by one
    endpoints, n, draw = group.endpoints, len(group.endpoints), rng.random
    for e in [endpoints[int(draw() * n)] for _ in range(k)]:
        if e.url not in seen:
            seen.add(e.url)
            holders.append(e)
    return holders


def usable(listed: Sequence[Endpoint], group: Group, ask: Ask) -> tuple[list[Endpoint], bool]:
    """Drop tried and ejected endpoints; (endpoints, whether only ejected ones were left)."""
    if not ask.tried and not ask.ejected:  # a first attempt with nobody ejected: most requests
        return list(listed), False
    fresh = [e for e in listed if e.url not in ask.tried]
    ok = [e for e in fresh if e.url not in ask.ejected]
    if ok:
        return ok, False
    if len(listed) < len(group):  # the sample was unlucky: look at everyone (rare, O(N))
        return usable(group.endpoints, group, ask)
    return fresh, bool(fresh)


def pick(
    group: Group,
    *,
    in_flight: dict[str, int],
    loads: dict[str, Load],
    ask: Ask,
    policy: Policy,
    now: float,
    rng: Rng,
    processes: int = 1,
) -> Choice | None:
    """The endpoint for one attempt of a request, with the reason; None when none is usable.

    ``processes``: gateway processes routing to these endpoints independently (each sees the
    others' requests only through scrapes, so its view of a load is off by about one request
    per other process: a new prefix's home within that many requests of the least loaded is
    as good a choice, and taking it keeps the processes agreeing).

    ``in_flight``: requests this gateway has running at each endpoint; ``loads``: the last
    scrape of each (absent → never scraped). Plain dicts, not Mappings: compiled
    (tokenfleet.native), a dict lookup is a C call and a Mapping's a Python method call."""
    listed = shortlist(group, match=ask.match, k=policy.sample, rng=rng)
    candidates, panic = usable(listed, group, ask)
    if not candidates:
        return None
    if len(candidates) == 1:
        only = candidates[0]
        return Choice(
            endpoint=only,
            why=Why.ALL_EJECTED if panic else Why.ONLY,
            prefix_blocks=ask.match.blocks.get(only.url, 0),
        )
    if policy.kind == "RoundRobin":
        ordered = sorted(candidates, key=lambda e: e.url)
        return Choice(endpoint=ordered[ask.sequence % len(ordered)], why=Why.ROUND_ROBIN)
    return _best(
        candidates,
        in_flight=in_flight,
        loads=loads,
        ask=ask,
        policy=policy,
        now=now,
        rng=rng,
        panic=panic,
        processes=processes,
    )


def _best(
    candidates: Sequence[Endpoint],
    *,
    in_flight: dict[str, int],
    loads: dict[str, Load],
    ask: Ask,
    policy: Policy,
    now: float,
    rng: Rng,
    panic: bool,
    processes: int,
) -> Choice:
    # The loops below inline Match.fraction(): this runs for every request of every gateway
    # (and millions of times in the fleet simulator).
    stale_after = policy.stale_after
    requests: list[float] = []
    press: list[float] = []  # what the load score compares
    for e in candidates:
        load = loads.get(e.url, IDLE)
        size = max(1, e.max_concurrency)
        r = (in_flight.get(e.url, 0) + load.others(now, stale_after)) / size
        requests.append(r)
        kv = (
            load.kv_usage * freshness(load, now=now, stale_after=stale_after)
            if load.kv_usage
            else 0.0
        )
        press.append(r + KV_WEIGHT * kv)
    top = max(press)
    # Bounded load counts requests only: KV usage moves with prompt lengths, and a spill on
    # that noise would copy a hot prefix to replicas that have no need of it.
    least = min(requests)
    ceiling = policy.bounded_load * sum(requests) / len(requests)
    prefix_w = policy.prefix if policy.kind == "PrefixAware" else 0.0
    zone_w = policy.zone if ask.zone else 0.0
    load_w = policy.load
    held, total, key = ask.match.blocks, ask.match.total, ask.match.key
    home = _home(candidates, held, key) if prefix_w and key else -1
    best: list[int] = []
    best_score = float("-inf")
    spilled = False
    affinity = [0.0] * len(candidates)
    local = [False] * len(candidates)
    for i, e in enumerate(candidates):
        fraction = held.get(e.url, 0) / total if prefix_w and total else 0.0
        step = 1 / max(1, e.max_concurrency)
        if (
            i == home
            and requests[i] <= least + max(1, processes) * step
            and requests[i] + step <= 1 + TIE
        ):
            # nobody holds it yet: its rendezvous home, as every process picks, unless that
            # has more requests beyond the least busy than the processes' views can be off by
            # (one each) or no free sequence (most such prompts are unique, and for them
            # balance comes first: a full engine would queue it behind a long prefill)
            fraction = 1.0
        elif fraction and requests[i] > ceiling + step:
            fraction, spilled = 0.0, True  # bounded load: a hot prefix must not pin one replica
        affinity[i] = fraction
        local[i] = bool(zone_w) and e.zone == ask.zone and press[i] < policy.zone_saturation
        score = (
            prefix_w * fraction
            + load_w * (1 - press[i] / top if top > 0 else 1.0)
            + zone_w * local[i]
        )
        if score > best_score + TIE:
            best, best_score = [i], score
        elif score >= best_score - TIE:
            best.append(i)
    if len(best) > 1 and prefix_w and key:
        # equal scores: the rendezvous order, so processes that agree on the scores agree on
        # the pick (a seeded random choice differs per process)
        best = [_first(candidates, best, key)]
    i = best[0] if len(best) == 1 else rng.choice(best)
    why = (
        Why.ALL_EJECTED
        if panic
        else Why.PREFIX_HOME
        if i == home and affinity[i]
        else Why.PREFIX
        if affinity[i]
        else Why.PREFIX_OVERLOADED
        if spilled
        else Why.ZONE
        if local[i] and not all(local)
        else Why.LOAD
    )
    return Choice(
        endpoint=candidates[i], why=why, prefix_blocks=ask.match.blocks.get(candidates[i].url, 0)
    )


def _home(candidates: Sequence[Endpoint], held: Mapping[str, int], key: bytes) -> int:
    """The rendezvous winner's index when no candidate is known to hold the prefix, else -1."""
    if any(e.url in held for e in candidates):
        return -1
    return _first(candidates, range(len(candidates)), key)


def _first(candidates: Sequence[Endpoint], among: Sequence[int], key: bytes) -> int:
    """Of the candidates at indexes ``among``, the one ranked first for ``key`` by rendezvous
    hashing (a plain loop: a key function's closure would cost the compiled hot path)."""
    best, top = among[0], -1
    for j in among:
        score = rendezvous(key, candidates[j].url)
        if score > top:
            best, top = j, score
    return best


def choose_revision(
    weights: Mapping[str, int], *, available: Collection[str], pinned: str | None, rng: Rng
) -> str | None:
    """The revision to serve a request end to end: ``""`` means any, None means none fits.

    A pin (a test header) wins if that revision has endpoints. Otherwise the operator's weights
    over revisions with ready endpoints; with no weights published, or none of the weighted
    revisions ready, any revision serves (availability over an exact split).
    """
    if pinned:
        return pinned if pinned in available else None
    live = [(r, w) for r, w in sorted(weights.items()) if w > 0 and r in available]
    if not live:
        return ""
    if len(live) == 1:
        return live[0][0]
    x = rng.random() * sum(w for _, w in live)
    for revision, w in live:
        x -= w
        if x < 0:
            return revision
    return live[-1][0]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolOption:
    """One pool serving a model, as pool choice needs it."""

    key: str
    max_input_tokens: int
    classes: frozenset[str] = frozenset()
    """Traffic classes the pool is dedicated to (e.g. batch); empty → general purpose."""


def choose_pool(options: Sequence[PoolOption], *, prompt_tokens: int, cls: str = "") -> str | None:
    """Of a model's pools: the smallest context bucket that fits the prompt, pools dedicated to
    the request's class first, then general pools, then pools dedicated to other classes; none
    fits → the largest (the context check then refuses with a clear 400)."""
    if len(options) == 1:  # one pool (most models): it is the answer either way
        return options[0].key
    fitting = [o for o in options if o.max_input_tokens >= prompt_tokens]
    if not fitting:
        return max(options, key=lambda o: o.max_input_tokens).key if options else None

    def rank(o: PoolOption) -> tuple[int, int]:
        fit = 0 if cls and cls in o.classes else 1 if not o.classes else 2
        return fit, o.max_input_tokens

    return min(fitting, key=rank).key

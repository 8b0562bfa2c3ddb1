"""Where a LoRA adapter's request goes (pure): affinity to replicas holding it, with bounded load.

A replica serves at most ``slots`` adapters at once (vLLM's ``--max-loras``); an adapter it
does not hold must first be loaded into a slot (seconds from disk), evicting the least recently
used adapter that no running request uses. So a request is cheapest where its adapter already
is, until that replica is busier than the spare capacity elsewhere is worth:

1. **holders** — replicas with the adapter loaded or loading. One qualifies while its load is
   at most ``spill_above`` requests above the least-loaded candidate's. The bound is additive,
   in requests, on purpose: what it trades is a fixed cost (one adapter load, ~1 s) against
   queueing behind extra requests, and that queueing grows with the gap in requests, not with
   a ratio of them (2x of nearly nothing costs nothing; 2x of a full batch is a queue). The
   least loaded qualifying holder wins, a loaded one before one still loading.
2. **load it elsewhere** — no holder qualifies (or none exists): the least loaded replica
   that can take a slot (a free one, or an unused adapter to evict), not loading something
   already, a free slot before an eviction. When the holders are all over the bound this
   *grows* the adapter onto one more replica; as they drain, the extra copy is simply evicted
   by LRU when slots are wanted, so a popular adapter holds as many replicas as its load needs.
3. **no slot anywhere** — every slot of every other candidate is in use: the least loaded
   holder if there is one (over the bound, it still serves soonest), else the least loaded
   replica, where the request waits for a slot (as vLLM makes it wait).

Ties go to ``tie`` modulo the tied candidates (the caller's request counter): no clock, no
randomness, no I/O, and nothing is mutated.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Hashable, Sequence


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Holder:
    """One candidate replica as adapter placement sees it."""

    url: str
    load: int
    """Requests in flight there (as the gateway counts them)."""
    adapters: tuple[Hashable, ...] = ()
    """Adapters loaded or loading, least recently used first (at most ``slots``)."""
    in_use: frozenset[Hashable] = frozenset()
    """Adapters with requests running: they cannot be evicted."""
    loading: frozenset[Hashable] = frozenset()
    """Adapters still loading (``in_use`` need not repeat them: a load is never evicted)."""
    slots: int = 1
    """``--max-loras``: adapters it can hold at once."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """Adapter placement's knob."""

    spill_above: int = 8
    """A holder takes the request while its load is at most this many requests above the
    least-loaded candidate's. 8 is an eighth of a 64-sequence batch: a few extra decode slots,
    which cost a step little, against a ~1 s adapter load."""
    affinity: bool = True
    """False: by load alone (the least-loaded candidate), loading the adapter there if it does
    not hold it — what an adapter-unaware router does; the baseline affinity is measured
    against."""


class Why(enum.StrEnum):
    """Why a replica was chosen: a metric label."""

    LOADED = "adapter_loaded"
    LOADING = "adapter_loading"
    FREE_SLOT = "load_free_slot"
    EVICT = "load_evict_lru"
    GROW = "grow_over_bound"
    OVER_BOUND = "adapter_loaded_over_bound"
    NO_SLOT = "wait_for_slot"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    url: str
    why: Why
    evict: Hashable | None = None
    """The adapter a load there would evict (its least recently used unused one)."""


def victim(holder: Holder) -> Hashable | None:
    """The adapter a new load would evict: the least recently used one not in use or loading;
    None when a slot is free or none can go."""
    if len(holder.adapters) < holder.slots:
        return None
    for adapter in holder.adapters:
        if adapter not in holder.in_use and adapter not in holder.loading:
            return adapter
    return None


def has_room(holder: Holder) -> bool:
    """Whether a new adapter can take a slot there now (free, or by evicting an unused one)."""
    return len(holder.adapters) < holder.slots or victim(holder) is not None


def _pick(tied: list[Holder], tie: int) -> Holder:
    return tied[0] if len(tied) == 1 else tied[tie % len(tied)]


def _least(holders: Sequence[Holder]) -> list[Holder]:
    low = min(h.load for h in holders)
    return [h for h in holders if h.load == low]


def place(
    *, adapter: Hashable, candidates: Sequence[Holder], policy: Policy, tie: int
) -> Placement | None:
    """The replica for a request using ``adapter``, with the reason; None without candidates."""
    if not candidates:
        return None
    if not policy.affinity:
        return _by_load_alone(adapter, candidates, tie)
    least = min(h.load for h in candidates)
    holders = [h for h in candidates if adapter in h.adapters]
    fit = [h for h in holders if h.load <= least + policy.spill_above]
    if fit:
        ready = [h for h in fit if adapter not in h.loading] or fit
        chosen = _pick(_least(ready), tie)
        why = Why.LOADING if adapter in chosen.loading else Why.LOADED
        return Placement(url=chosen.url, why=why)
    others = [h for h in candidates if adapter not in h.adapters]
    roomy = [h for h in others if has_room(h)]
    if roomy:
        calm = [h for h in roomy if not h.loading] or roomy
        tied = _least(calm)
        free = [h for h in tied if len(h.adapters) < h.slots] or tied
        chosen = _pick(free, tie)
        evict = victim(chosen)
        why = Why.GROW if holders else Why.EVICT if evict is not None else Why.FREE_SLOT
        return Placement(url=chosen.url, why=why, evict=evict)
    if holders:  # over the bound, but nowhere else can load it: a holder still serves soonest
        return Placement(url=_pick(_least(holders), tie).url, why=Why.OVER_BOUND)
    return Placement(url=_pick(_least(candidates), tie).url, why=Why.NO_SLOT)


def _by_load_alone(adapter: Hashable, candidates: Sequence[Holder], tie: int) -> Placement:
    chosen = _pick(_least(candidates), tie)
    if adapter in chosen.adapters:
        return Placement(
            url=chosen.url, why=Why.LOADING if adapter in chosen.loading else Why.LOADED
        )
    if not has_room(chosen):
        return Placement(url=chosen.url, why=Why.NO_SLOT)
    evict = victim(chosen)
    return Placement(
        url=chosen.url, why=Why.EVICT if evict is not None else Why.FREE_SLOT, evict=evict
    )

"""Fair shares among the tenants of one admission class: a virtual token counter (pure).

Priority classes stay strictly ordered; inside a class the next request to start is the head of
the tenant whose *virtual counter* is lowest (Sheng et al., "Fairness in Serving Large Language
Models", OSDI 2024: VTC). A tenant's counter grows by the token work it was served divided by its
share (``Tenant.spec.share``), so a tenant flooding long prompts runs up its counter and waits
behind tenants that asked for little, while a tenant alone gets the whole pool (the scheduler
never idles a slot while anyone waits: work-conserving).

Two rules keep the counters honest:

- **Charge by work, not by request.** Prompt tokens cost ``prompt_weight`` each and output tokens
  ``output_weight`` each (decode is the scarcer resource per token on most engines, so the
  default weighs output 2×, as the paper's evaluation does). A start is charged its prompt and
  reserved output; :func:`settle` corrects the output part to what was produced.
- **No banking while idle.** A tenant that returns after being idle is *lifted* to the lowest
  counter among the tenants that are waiting or running (:func:`lift`), so being away earns no
  credit to flood with later — the bound on unfairness stays constant instead of growing with
  the idle time.

A third keeps the light tenants' time to first token, not only their share: slots are not
preemptible, so a flood that took every slot while the others were between requests makes each
of them wait for one of its long requests to end. **Headroom** (:func:`headroom`): a tenant that
already holds its fair part of the class's slots leaves one slot free per other tenant seen in
the class within ``RECENT_SECONDS`` (at most a quarter of the slots). Alone — or once the others
have been quiet that long — it takes every slot.

Each call is O(active tenants): admission stays O(classes + active tenants).

        arrival ──▶ lift (idle tenant → min active counter) ──▶ queued under its tenant
        slot free ─▶ pick: lowest counter after its head's charge (the virtual finish), ties →
                     oldest ticket
        start ─────▶ charge prompt + reserved output, ÷ share
        finish ────▶ settle: + (produced − reserved) output, ÷ share
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from typing import Protocol, TypeVar

#: Default cost of one prompt token and one output token in counter units.
PROMPT_WEIGHT = 1.0
OUTPUT_WEIGHT = 2.0
#: Seconds since its last arrival that a tenant still counts as present for :func:`headroom`:
#: a tenant sending one request every two seconds finds a free slot each time.
RECENT_SECONDS = 2.0
#: Most of a class's slots headroom may hold free (a quarter: with a pool of 6 slots, 1).
MAX_HEADROOM = 0.25


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Weights:
    """What a token costs in counter units (prompt and output separately)."""

    prompt: float = PROMPT_WEIGHT
    output: float = OUTPUT_WEIGHT


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Head:
    """The oldest waiting request of one tenant in a class."""

    tenant: str
    ticket: int  # arrival order: ties between equal counters go to the older request
    work: float = 0.0  # what starting it will charge (before the share)
    share: float = 1.0


class Queued(Protocol):
    """What :func:`pick` reads of a waiter: its tenant, arrival order and charge."""

    @property
    def tenant(self) -> str: ...

    @property
    def ticket(self) -> int: ...

    @property
    def work(self) -> float: ...

    @property
    def share(self) -> float: ...


Q = TypeVar("Q", bound=Queued)


def work(*, prompt_tokens: int, output_tokens: int, weights: Weights = Weights()) -> float:
    """Token work in counter units (before dividing by the tenant's share)."""
    return weights.prompt * prompt_tokens + weights.output * output_tokens


def lift(
    counters: Mapping[str, float], *, tenant: str, active: Collection[str]
) -> dict[str, float]:
    """Counters after ``tenant`` arrives: an idle tenant is raised to the lowest active counter.

    ``active`` are the tenants with requests waiting or running (``tenant`` itself excluded when
    it was idle). A tenant already active keeps its counter; with nobody active, nothing moves.
    """
    others = [counters.get(t, 0.0) for t in active if t != tenant]
    if tenant in active or not others:
        return dict(counters) if tenant in counters else {**counters, tenant: 0.0}
    floor = min(others)
    return {**counters, tenant: max(counters.get(tenant, 0.0), floor)}


def charge(
    counters: Mapping[str, float], *, tenant: str, amount: float, share: float
) -> dict[str, float]:
    """Counters after ``tenant`` was served ``amount`` of work (negative: a correction)."""
    if share <= 0:
        raise ValueError(f"share must be positive, got {share}")
    return {**counters, tenant: counters.get(tenant, 0.0) + amount / share}


def settle(
    counters: Mapping[str, float],
    *,
    tenant: str,
    reserved_output: int,
    produced_output: int,
    share: float,
    weights: Weights = Weights(),
) -> dict[str, float]:
    """Correct a start's charge once its output is known (a cancel refunds what was not made)."""
    delta = weights.output * (produced_output - reserved_output)
    return charge(counters, tenant=tenant, amount=delta, share=share)


def pick(heads: Iterable[Q], counters: Mapping[str, float]) -> Q | None:
    """The head to start next: the lowest counter once its head is charged, then the oldest
    ticket; None when nobody waits.

    ``heads`` are each tenant's oldest waiter (a :class:`Head`, or the ledger's ``Waiting``).
    Ordering by the counter *after* the head's charge (its virtual finish, as weighted fair
    queuing orders packets) is the plain lowest-counter rule when the heads cost alike; when
    they do not, a tenant back from idle — lifted to the flood's counter — goes before the
    flood's long request instead of losing the tie to it."""
    best: Q | None = None
    best_key = (0.0, 0)
    for head in heads:
        key = (counters.get(head.tenant, 0.0) + head.work / head.share, head.ticket)
        if best is None or key < best_key:
            best, best_key = head, key
    return best


def forget(counters: Mapping[str, float], *, active: Collection[str]) -> dict[str, float]:
    """Counters of active tenants only, re-based so the lowest is 0 (bounded memory and floats).

    Safe at any time: :func:`lift` raises a returning tenant to the active minimum anyway, so
    dropping an idle tenant's counter changes no decision.
    """
    kept = {t: c for t, c in counters.items() if t in active}
    if not kept:
        return {}
    low = min(kept.values())
    return {t: c - low for t, c in kept.items()}


def headroom(
    *,
    tenant: str,
    capacity: int,
    holding: Mapping[str, int],
    seen: Mapping[str, tuple[float, float]],
    now: float,
    recent: float = RECENT_SECONDS,
) -> int:
    """Slots ``tenant`` must leave free in its class before it takes one more.

    ``holding``: tenant → running requests of the class; ``seen``: tenant → (last arrival,
    share). Zero unless other tenants arrived within ``recent`` seconds and ``tenant`` already
    holds its fair part of the ``capacity`` (capacity × share ÷ the present tenants' shares);
    then one per other present tenant, at most ``MAX_HEADROOM`` of the capacity — but at least
    one once the class has two slots: a small pool, or one gateway process's part of a pool
    (two processes each hold half), would otherwise keep none, and a light tenant's request
    would wait out one of the flood's long ones (issue 36: 83 % of them served on make up's
    two processes and three 2-sequence workers, 100 % with the slot kept)."""
    present = {t: share for t, (at, share) in seen.items() if now - at < recent and t != tenant}
    if not present:
        return 0
    share = seen[tenant][1] if tenant in seen else 1.0
    fair = capacity * share / (share + sum(present.values()))
    if holding.get(tenant, 0) < fair:
        return 0
    if capacity < 2:
        return 0
    return min(len(present), max(1, int(capacity * MAX_HEADROOM)))

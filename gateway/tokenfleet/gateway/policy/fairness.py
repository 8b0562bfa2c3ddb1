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

Each call is O(active tenants): admission stays O(classes + active tenants).

        arrival ──▶ lift (idle tenant → min active counter) ──▶ queued under its tenant
        slot free ─▶ pick: lowest counter among tenants with a head, ties → oldest ticket
        start ─────▶ charge prompt + reserved output, ÷ share
        finish ────▶ settle: + (produced − reserved) output, ÷ share
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping

#: Default cost of one prompt token and one output token in counter units.
PROMPT_WEIGHT = 1.0
OUTPUT_WEIGHT = 2.0


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


def pick(heads: Collection[Head], counters: Mapping[str, float]) -> Head | None:
    """The head to start next: lowest counter, then oldest ticket; None when nobody waits."""
    best: Head | None = None
    best_key = (0.0, 0)
    for head in heads:
        key = (counters.get(head.tenant, 0.0), head.ticket)
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

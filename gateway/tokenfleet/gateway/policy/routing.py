"""Which endpoint serves a request (pure): the simplest sound choice — least in flight.

Over an immutable snapshot of ready endpoints; ties broken by a seeded random source so that
equal replicas share load without a global round-robin counter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")


class Rng(Protocol):
    """A seeded random source (random.Random): passed in, so decisions replay exactly."""

    def choice(self, seq: Sequence[T]) -> T: ...


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """One ready worker."""

    url: str  # http://ip:port
    pool: str  # namespace/name of its InferencePool ("" in static mode)
    models: frozenset[str]  # served names it answers to
    revision: str = ""
    zone: str = ""
    max_concurrency: int = 64


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """All ready endpoints at one instant; replaced whole, never mutated."""

    endpoints: tuple[Endpoint, ...] = ()

    def serving(self, model: str) -> tuple[Endpoint, ...]:
        return tuple(e for e in self.endpoints if model in e.models)

    def models(self) -> frozenset[str]:
        return frozenset(m for e in self.endpoints for m in e.models)


def choose(
    candidates: Sequence[Endpoint],
    in_flight: Mapping[str, int],
    rng: Rng,
    exclude: frozenset[str] = frozenset(),
) -> Endpoint | None:
    """The candidate with the fewest requests in flight relative to its size."""
    usable = [e for e in candidates if e.url not in exclude]
    if not usable:
        return None
    best = min(in_flight.get(e.url, 0) / e.max_concurrency for e in usable)
    tied = [e for e in usable if in_flight.get(e.url, 0) / e.max_concurrency == best]
    return tied[0] if len(tied) == 1 else rng.choice(tied)


def choose_pool(buckets: Sequence[tuple[str, int]], prompt_tokens: int) -> str | None:
    """Of a model's pools as (key, max input tokens), in order: the first whose context bucket
    fits the prompt, else the largest (the context check then refuses it with a clear 400)."""
    for key, limit in buckets:
        if limit >= prompt_tokens:
            return key
    return max(buckets, key=lambda b: b[1])[0] if buckets else None

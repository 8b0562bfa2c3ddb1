"""Arrivals, one simulated second at a time: Poisson counts, uniform times, drawn token sizes.

numpy draws whole seconds at once (cheap); the engine walks them in time order. Each stream has
its own generator seeded from the scenario's seed, so adding a stream does not change others.
A stream's adapters are drawn after its other figures, so a stream without them draws exactly
what it drew before adapters existed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from tokenfleet.sim.scenario import Adapters, Scenario, Tokens

#: Adapter ids are per stream (as prefix groups are): stream i's adapters are i x this + rank.
ADAPTER_OFFSET = 1_000_000


@dataclass(frozen=True, slots=True)
class Second:
    """Arrivals of one second, sorted by time (plain lists: the engine indexes them)."""

    times: list[float]
    streams: list[int]
    inputs: list[int]
    outputs: list[int]
    prefixes: list[int]
    adapters: list[int]
    """-1 for the base model."""


def draw(rng: np.random.Generator, tokens: Tokens, n: int) -> np.ndarray:
    """``n`` token counts from ``tokens``' distribution, clipped to 1..max."""
    if tokens.dist == "exponential":
        values = np.ceil(rng.exponential(tokens.mean, n))
    else:
        sigma = tokens.sigma() if tokens.dist == "lognormal" else 0.0
        if sigma == 0.0:
            values = np.full(n, round(tokens.mean))
        else:
            values = np.rint(rng.lognormal(tokens.mu(), sigma, n))
    return np.clip(values, 1, tokens.max).astype(np.int64)


def popularity(adapters: Adapters) -> np.ndarray:
    """The cumulative Zipf distribution over adapter ranks 0..count-1 (rank 0 most popular)."""
    weights = np.arange(1, adapters.count + 1, dtype=np.float64) ** -adapters.zipf
    cdf: np.ndarray = np.cumsum(weights)
    cdf /= cdf[-1]
    return cdf


def _adapters(rng: np.random.Generator, adapters: Adapters, cdf: np.ndarray, n: int) -> np.ndarray:
    drawn = np.searchsorted(cdf, rng.uniform(0.0, 1.0, n), side="right").astype(np.int64)
    drawn = np.minimum(drawn, adapters.count - 1)  # a draw of exactly 1.0 (never, but bounded)
    if adapters.share < 1.0:
        drawn[rng.uniform(0.0, 1.0, n) >= adapters.share] = -1
    return drawn


def seconds(scenario: Scenario) -> Iterator[Second]:
    """Every second of offered load, from 0 to the scenario's duration."""
    gens = [np.random.default_rng([scenario.seed, i]) for i, _ in enumerate(scenario.streams)]
    cdfs = [popularity(s.adapters) if s.adapters else None for s in scenario.streams]
    for start in range(math.ceil(scenario.duration_seconds)):
        span = min(1.0, scenario.duration_seconds - start)
        parts = []
        for i, s in enumerate(scenario.streams):
            rng = gens[i]
            n = int(rng.poisson(s.rps(start + span / 2) * span))
            if n == 0:
                continue
            times = start + rng.uniform(0.0, span, n)
            prefix = np.full(n, -1, dtype=np.int64)
            if s.shared_prefix.share > 0:
                shared = rng.uniform(0.0, 1.0, n) < s.shared_prefix.share
                prefix[shared] = rng.integers(0, s.shared_prefix.groups, int(shared.sum()))
                # prefix groups are per stream: offset so streams never share one by accident
                prefix[shared] += i * 1_000_000
            adapter = np.full(n, -1, dtype=np.int64)
            cdf = cdfs[i]
            if s.adapters is not None and cdf is not None:
                adapter = _adapters(rng, s.adapters, cdf, n)
                adapter[adapter >= 0] += i * ADAPTER_OFFSET
            parts.append(
                (
                    times,
                    np.full(n, i, dtype=np.int64),
                    draw(rng, s.input_tokens, n),
                    draw(rng, s.output_tokens, n),
                    prefix,
                    adapter,
                )
            )
        if not parts:
            yield Second([], [], [], [], [], [])
            continue
        times, streams, inputs, outputs, prefixes, adapters = (
            np.concatenate(c) for c in zip(*parts, strict=True)
        )
        order = np.argsort(times, kind="stable")
        yield Second(
            times[order].tolist(),
            streams[order].tolist(),
            inputs[order].tolist(),
            outputs[order].tolist(),
            prefixes[order].tolist(),
            adapters[order].tolist(),
        )

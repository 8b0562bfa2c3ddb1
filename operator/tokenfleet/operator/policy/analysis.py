"""Canary analysis (pure): is the canary revision worse than stable over the last interval?

Compared per interval, from Prometheus: p99 time to first token, p99 inter-token latency and the
error rate. Latencies are judged against stable as a ratio (the canary's p99 may be at most
``ratio`` × stable's) and, when set, against an absolute ceiling; the error rate against an
absolute ceiling. Too few canary (or stable) requests, or a missing series, is
``INSUFFICIENT_SAMPLES`` — never a pass: silence must not promote.
"""

from __future__ import annotations

import dataclasses

from tokenfleet.operator.policy.rollout import Outcome


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    """One revision's figures over the analysis interval; None is "no series"."""

    requests: int
    ttft_p99: float | None = None  # seconds
    inter_token_p99: float | None = None  # seconds
    error_rate: float | None = None  # failed / all requests, 0..1


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Thresholds:
    """From ModelDeployment.spec.rollout.analysis."""

    min_samples: int = 50
    max_ttft_p99_ratio: float = 1.5
    max_inter_token_p99_ratio: float = 1.5
    max_error_rate: float = 0.02
    max_ttft_p99: float | None = None  # seconds; an absolute ceiling besides the ratio
    max_inter_token_p99: float | None = None  # seconds


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Judgment:
    """The verdict on one interval, with every failed check spelled out."""

    outcome: Outcome  # ANALYSIS_PASSED, ANALYSIS_FAILED or INSUFFICIENT_SAMPLES
    failures: tuple[str, ...] = ()
    message: str = ""


def _latency(
    name: str, canary: float, stable: float, *, ratio: float, ceiling: float | None
) -> list[str]:
    out = []
    if canary > ratio * stable:
        out.append(f"{name} p99 {canary * 1000:.0f} ms > {ratio:g} × stable {stable * 1000:.0f} ms")
    if ceiling is not None and canary > ceiling:
        out.append(f"{name} p99 {canary * 1000:.0f} ms > ceiling {ceiling * 1000:.0f} ms")
    return out


def judge(canary: Sample, stable: Sample, thresholds: Thresholds) -> Judgment:
    """Pass, fail (with reasons) or not enough data yet."""
    short = [
        f"{who} served {s.requests} < {thresholds.min_samples} requests"
        for who, s in (("canary", canary), ("stable", stable))
        if s.requests < thresholds.min_samples
    ]
    if short:
        return Judgment(outcome=Outcome.INSUFFICIENT_SAMPLES, message="; ".join(short))
    if (
        canary.ttft_p99 is None
        or canary.inter_token_p99 is None
        or canary.error_rate is None
        or stable.ttft_p99 is None
        or stable.inter_token_p99 is None
    ):
        return Judgment(
            outcome=Outcome.INSUFFICIENT_SAMPLES, message="a latency or error series is missing"
        )
    failures = [
        *_latency(
            "TTFT",
            canary.ttft_p99,
            stable.ttft_p99,
            ratio=thresholds.max_ttft_p99_ratio,
            ceiling=thresholds.max_ttft_p99,
        ),
        *_latency(
            "inter-token",
            canary.inter_token_p99,
            stable.inter_token_p99,
            ratio=thresholds.max_inter_token_p99_ratio,
            ceiling=thresholds.max_inter_token_p99,
        ),
    ]
    if canary.error_rate > thresholds.max_error_rate:
        failures.append(f"error rate {canary.error_rate:.1%} > {thresholds.max_error_rate:.1%}")
    if failures:
        return Judgment(
            outcome=Outcome.ANALYSIS_FAILED, failures=tuple(failures), message="; ".join(failures)
        )
    return Judgment(
        outcome=Outcome.ANALYSIS_PASSED,
        message=f"canary within thresholds over {canary.requests} requests",
    )

"""Canary analysis (pure): is the canary revision worse than stable over the last interval?

Compared per interval, from Prometheus: p99 time to first token, p99 inter-token latency and the
error rate. Latencies are judged against stable as a ratio (the canary's p99 may be at most
``ratio`` × stable's) and, when set, against an absolute ceiling; the error rate against an
absolute ceiling. Too few canary (or stable) requests is ``INSUFFICIENT_SAMPLES``. A breach on
any measured series fails at once (rolling back on partial evidence is safe); passing needs
every series present (promoting on partial evidence is not): silence never promotes.

:func:`combine` folds the custom PromQL checks and the golden-set quality verdict
(``policy/quality.py``) into the one judgment the rollout machine sees.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence

from tokenfleet.operator.policy.rollout import Outcome
from tokenfleet.signals import jobs


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
    name: str, canary: float | None, stable: float | None, *, ratio: float, ceiling: float | None
) -> list[str]:
    """Failed latency checks; a check whose series is missing neither fails nor passes."""
    out: list[str] = []
    if canary is None:
        return out
    if stable is not None and canary > ratio * stable:
        out.append(f"{name} p99 {canary * 1000:.0f} ms > {ratio:g} × stable {stable * 1000:.0f} ms")
    if ceiling is not None and canary > ceiling:
        out.append(f"{name} p99 {canary * 1000:.0f} ms > ceiling {ceiling * 1000:.0f} ms")
    return out


def judge(canary: Sample, stable: Sample, thresholds: Thresholds) -> Judgment:
    """Fail on any measured breach; pass only when every series is there and within bounds."""
    short = [
        f"{who} served {s.requests} < {thresholds.min_samples} requests"
        for who, s in (("canary", canary), ("stable", stable))
        if s.requests < thresholds.min_samples
    ]
    if short:
        return Judgment(outcome=Outcome.INSUFFICIENT_SAMPLES, message="; ".join(short))
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
    if canary.error_rate is not None and canary.error_rate > thresholds.max_error_rate:
        failures.append(f"error rate {canary.error_rate:.1%} > {thresholds.max_error_rate:.1%}")
    if failures:
        return Judgment(
            outcome=Outcome.ANALYSIS_FAILED, failures=tuple(failures), message="; ".join(failures)
        )
    missing = [
        name
        for name, value in (
            ("canary TTFT", canary.ttft_p99),
            ("canary inter-token", canary.inter_token_p99),
            ("canary error rate", canary.error_rate),
            ("stable TTFT", stable.ttft_p99),
            ("stable inter-token", stable.inter_token_p99),
        )
        if value is None
    ]
    if missing:
        return Judgment(
            outcome=Outcome.INSUFFICIENT_SAMPLES,
            message=f"no breach so far, but {', '.join(missing)} missing: cannot pass yet",
        )
    return Judgment(
        outcome=Outcome.ANALYSIS_PASSED,
        message=f"canary within thresholds over {canary.requests} requests",
    )


#: Which scrape job each analysis input comes from: latency from the engines, errors from the
#: gateways (tokenfleet.signals.jobs names them).
SOURCES = {"TTFT": jobs.WORKERS, "inter-token": jobs.WORKERS, "error rate": jobs.GATEWAY}
#: A reason an input can be missing while its job is scraped fine.
_QUIET = {
    "inter-token": "inter-token latency needs answers of two or more tokens",
    "TTFT": "no request reached these engines in the window",
    "error rate": "no gateway routed a request to this revision in the window",
}


def explained(judgment: Judgment, problems: dict[str, str | None]) -> Judgment:
    """A judgment waiting on missing inputs, with each input's likely cause: its scrape job's
    problem (``problems``: job → why it yields nothing, None when it is up) or, when the job
    is up, what else leaves that series empty. Any other judgment is returned as it is."""
    if judgment.outcome is not Outcome.INSUFFICIENT_SAMPLES or "missing" not in judgment.message:
        return judgment
    causes: list[str] = []
    for name, job in SOURCES.items():
        if f" {name}" not in judgment.message:
            continue
        cause = problems.get(job) or _QUIET[name]
        causes.append(f"{name}: {cause}")
    return dataclasses.replace(judgment, message=f"{judgment.message} ({'; '.join(causes)})")


# --- custom PromQL checks and the whole gate ---------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CheckValue:
    """A custom PromQL check's bounds and its values for canary and stable (None: no series)."""

    name: str
    canary: float | None
    stable: float | None = None
    max: float | None = None
    min: float | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CheckJudgment:
    name: str
    passed: bool | None  # None: no value, cannot pass yet
    message: str


def judge_check(check: CheckValue) -> CheckJudgment:
    """One custom check on the canary's value; stable's is shown for comparison only."""
    value = check.canary
    against = "" if check.stable is None else f" (stable {check.stable:g})"
    if value is None or math.isnan(value):
        return CheckJudgment(name=check.name, passed=None, message=f"{check.name}: no value")
    if check.max is not None and value > check.max:
        message = f"{check.name} {value:g} > max {check.max:g}{against}"
        return CheckJudgment(name=check.name, passed=False, message=message)
    if check.min is not None and value < check.min:
        message = f"{check.name} {value:g} < min {check.min:g}{against}"
        return CheckJudgment(name=check.name, passed=False, message=message)
    return CheckJudgment(name=check.name, passed=True, message=f"{check.name} {value:g}{against}")


class Quality(enum.StrEnum):
    """Where the golden-set replay of the current pair stands."""

    NOT_CONFIGURED = "NotConfigured"
    PENDING = "Pending"
    PASSED = "Passed"
    FAILED = "Failed"
    INVALID = "Invalid"  # the golden set could not be read: hold, never promote or roll back


def combine(
    latency: Judgment | None,
    *,
    checks: Sequence[CheckJudgment] = (),
    quality: Quality = Quality.NOT_CONFIGURED,
    quality_message: str = "",
) -> Judgment | None:
    """The one judgment the rollout machine sees. A quality regression fails at once (it is
    known as soon as the replay ends, analysis due or not); otherwise latency leads, then the
    custom checks, then quality must have passed (pending or unreadable holds the step)."""
    if quality is Quality.FAILED:
        return Judgment(
            outcome=Outcome.QUALITY_FAILED, failures=(quality_message,), message=quality_message
        )
    if latency is None or latency.outcome is Outcome.ANALYSIS_FAILED:
        return latency
    failed = [c.message for c in checks if c.passed is False]
    if failed:
        return Judgment(
            outcome=Outcome.ANALYSIS_FAILED, failures=tuple(failed), message="; ".join(failed)
        )
    if latency.outcome is not Outcome.ANALYSIS_PASSED:
        return latency
    waiting = [f"{c.message}: cannot pass yet" for c in checks if c.passed is None]
    if quality is Quality.PENDING:
        waiting.append("golden-set replay pending")
    if quality is Quality.INVALID:
        waiting.append(f"golden set unusable ({quality_message}): holding")
    if waiting:
        return Judgment(outcome=Outcome.INSUFFICIENT_SAMPLES, message="; ".join(waiting))
    shown = [latency.message, *(c.message for c in checks)]
    if quality is Quality.PASSED:
        shown.append(quality_message)
    return Judgment(outcome=Outcome.ANALYSIS_PASSED, message="; ".join(s for s in shown if s))


def cost_per_million(
    tokens_per_second: float | None, per_replica_hour: float | None
) -> float | None:
    """Cost of a million generated tokens on one replica at its measured throughput."""
    if tokens_per_second is None or per_replica_hour is None or tokens_per_second <= 0:
        return None
    return per_replica_hour / (tokens_per_second * 3600) * 1_000_000

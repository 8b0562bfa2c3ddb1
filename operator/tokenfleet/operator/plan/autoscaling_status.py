"""The autoscaler's block of a pool's status, decided from values (pure).

The loop runs the scaling decision (it needs Prometheus), builds this block from it, and hands
it to the pool's planner, which reports it and says which signal sized the pool.
"""

from __future__ import annotations

import datetime

from tokenfleet.api.base import rfc3339
from tokenfleet.api.pool import (
    AutoscalingStatus,
    ForecastStatus,
    ObjectiveStatus,
    PreviewStatus,
    ScalingDecision,
)
from tokenfleet.operator.policy import forecast, scaling

#: Decisions kept in status (the CRD allows ten): enough to see a morning's ramp.
KEPT_DECISIONS = 10
#: A decision's message in the history is cut here; the latest is kept whole beside it.
HISTORY_MESSAGE_CHARS = 300


def autoscaling_status(
    decision: scaling.Decision,
    *,
    old: AutoscalingStatus | None,
    now: datetime.datetime,
    preview: scaling.Decision | None = None,
    promoted: bool = False,
    policy: scaling.Policy | None = None,
    signals: scaling.Signals | None = None,
    forecasted: forecast.Made | None = None,
) -> AutoscalingStatus:
    """The autoscaler's status block: what the signals recommended and decided this pass, the
    last ten decisions that changed the demand, and what the previewed policy would decide
    (``promoted``: the preview acts, and ``preview`` is the spec's own targets' decision), and
    the acting ``policy``'s latency objectives beside what ``signals`` measured, and its
    ``forecasted`` floor."""
    decisions = list(old.decisions) if old else []
    if old is None or decision.replicas != old.demand:
        made = ScalingDecision(
            replicas=decision.replicas,
            reason=decision.why.value,
            message=decision.message[:HISTORY_MESSAGE_CHARS],
            time=rfc3339(now),
        )
        decisions = [*decisions, made][-KEPT_DECISIONS:]
    return AutoscalingStatus(
        demand=decision.replicas,
        reason=decision.why.value,
        message=decision.message,
        recommendations=decision.recommendations,
        decisions=decisions,
        preview=None
        if preview is None
        else PreviewStatus(
            would_be_replicas=preview.replicas,
            reason=preview.why.value,
            message=preview.message,
            recommendations=preview.recommendations,
            policy="spec" if promoted else "preview",
        ),
        objectives=[] if policy is None or signals is None else objectives(policy, signals),
        forecast=None if forecasted is None else forecast_status(forecasted),
    )


def forecast_status(made: forecast.Made) -> ForecastStatus:
    """The forecast floor as status shows it: the floor, the model its backtest chose, the load
    it expects and sizes for, its error, and — when Prometheus could not be read — why."""
    at = rfc3339(datetime.datetime.fromtimestamp(made.at, datetime.UTC))
    decision = made.decision
    if decision is None:
        return ForecastStatus(
            reason=forecast.UNREADABLE,
            message=f"{forecast.UNREADABLE}: Prometheus did not answer the range query of the "
            "pool's offered load; no floor until it does (the reactive signals still act)",
            time=at,
        )
    best = decision.errors[0] if decision.errors else None
    stale = (
        "; Prometheus did not answer the last range query: this forecast is kept"
        if made.stale
        else ""
    )
    return ForecastStatus(
        replicas=decision.replicas,
        reason=decision.why.value,
        model=decision.model.value if decision.model is not None else "",
        expected_requests_per_second=round(decision.expected, 3),
        upper_requests_per_second=round(decision.upper, 3),
        smape_percent=None if best is None else round(best.smape * 100, 1),
        buckets=made.buckets,
        message=decision.message + stale,
        time=at,
    )


def objectives(policy: scaling.Policy, signals: scaling.Signals) -> list[ObjectiveStatus]:
    """Each latency objective of ``policy`` with what was measured (None: no requests or no
    series) and whether it was met."""
    found = []
    for _, name, objective in scaling.objectives(policy):
        value = scaling.observed(signals, name, objective.percentile)
        found.append(
            ObjectiveStatus(
                name="ttft" if name == "ttft" else "tpot",
                percentile=objective.percentile,
                objective_ms=round(objective.seconds * 1000),
                observed_ms=None if value is None else round(value * 1000, 1),
                met=None if value is None else value <= objective.seconds,
            )
        )
    return found

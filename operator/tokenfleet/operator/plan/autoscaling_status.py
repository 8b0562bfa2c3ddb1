"""The autoscaler's block of a pool's status, decided from values (pure).

The loop runs the scaling decision (it needs Prometheus), builds this block from it, and hands
it to the pool's planner, which reports it and says which signal sized the pool.
"""

from __future__ import annotations

import datetime

from tokenfleet.api.base import rfc3339
from tokenfleet.api.pool import AutoscalingStatus, PreviewStatus, ScalingDecision
from tokenfleet.operator.policy import scaling

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
) -> AutoscalingStatus:
    """The autoscaler's status block: what the signals recommended and decided this pass, the
    last ten decisions that changed the demand, and what the previewed policy would decide
    (``promoted``: the preview acts, and ``preview`` is the spec's own targets' decision)."""
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
    )

"""The canary gate's evidence → the rollout's judgment and its status blocks (pure).

The loop gathers :class:`Evidence` each pass (a latency analysis and the custom checks when
one was due, a finished golden-set replay, throughput per revision) and this module turns it
into: the one judgment the rollout machine sees (``analysis.combine``), the status blocks that
show it (``rollout.quality``, ``rollout.scores``, ``rollout.checks``) and, when a rollout
decides, a bounded ``status.history`` line. A replay's verdict is kept in status for its
stable/canary pair, so a restarted operator does not replay again (answers at temperature 0
with a fixed seed do not change), and a new canary starts from Pending.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from tokenfleet.api.deployment import Analysis, Revision, RolloutStatus
from tokenfleet.api.quality import (
    MAX_HISTORY,
    CheckResult,
    GoldenSet,
    HistoryEntry,
    QualityStatus,
    RevisionScore,
)
from tokenfleet.operator.policy import analysis, quality, rollout


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Replay:
    """A finished golden-set replay: case name → answer text (None: the request failed) per
    revision, or why it could not run (an unreadable golden set)."""

    stable: str
    canary: str
    golden: GoldenSet | None = None
    answers: Mapping[str, Mapping[str, str | None]] = dataclasses.field(default_factory=dict)
    error: str = ""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Evidence:
    """What one pass measured for the canary gate (everything optional)."""

    latency: analysis.Judgment | None = None
    checks: tuple[analysis.CheckValue, ...] | None = None  # with the latency analysis
    replay: Replay | None = None
    throughput: Mapping[str, float | None] | None = None  # revision → tokens/s per replica


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Gate:
    judgment: analysis.Judgment | None
    quality: QualityStatus | None
    scores: list[RevisionScore]
    checks: list[CheckResult]
    replayed: bool  # a replay's result landed this pass (worth an Event)


def _replayed(
    replay: Replay, spec: Analysis, stamp: str
) -> tuple[QualityStatus, dict[str, RevisionScore]]:
    pair = {"stable_revision": replay.stable, "canary_revision": replay.canary}
    q = spec.quality
    if replay.golden is None or q is None:
        status = QualityStatus(**pair, verdict="Invalid", message=replay.error, measured_at=stamp)
        return status, {}
    scored = {
        rev: quality.score(replay.golden.cases, replay.answers.get(rev, {}))
        for rev in (replay.stable, replay.canary)
    }
    verdict = quality.gate(
        scored[replay.canary], scored[replay.stable], margin=q.margin, min_score=q.min_score
    )
    status = QualityStatus(
        **pair,
        verdict="Passed" if verdict.passed else "Failed",
        message=verdict.message,
        measured_at=stamp,
    )
    rows = {
        rev: RevisionScore(
            revision=rev,
            role="canary" if rev == replay.canary else "stable",
            score=round(s.score, 4),
            cases_passed=s.cases_passed,
            cases=s.cases,
            failures=quality.kept_failures(s),
        )
        for rev, s in scored.items()
    }
    return status, rows


def _quality_of(status: QualityStatus | None, spec: Analysis) -> tuple[analysis.Quality, str]:
    if spec.quality is None:
        return analysis.Quality.NOT_CONFIGURED, ""
    if status is None:
        return analysis.Quality.PENDING, ""
    return analysis.Quality(status.verdict), status.message


def evaluate(
    evidence: Evidence,
    *,
    before: RolloutStatus,
    state: rollout.State,
    spec: Analysis,
    stamp: str,
) -> Gate:
    """The gate for the pair in ``state`` (the machine state before this pass's decision)."""
    live = state.phase in (rollout.Phase.PROGRESSING, rollout.Phase.PAUSED)
    same_pair = before.quality is not None and (
        before.quality.stable_revision,
        before.quality.canary_revision,
    ) == (state.stable, state.canary)
    current = before.quality if same_pair else None
    rows = {r.revision: r for r in before.scores if r.revision in (state.stable, state.canary)}
    replay = evidence.replay
    fresh = replay is not None and (replay.stable, replay.canary) == (state.stable, state.canary)
    if spec.quality is not None and live and current is None:
        current = QualityStatus(stable_revision=state.stable, canary_revision=state.canary)
    waiting = current is not None and current.verdict == "Pending"
    if replay is not None and fresh and live and waiting:
        current, scored = _replayed(replay, spec, stamp)
        rows.update(scored)
    else:
        fresh = False
    rows = _with_throughput(rows, evidence.throughput, state=state, spec=spec)
    checks = [analysis.judge_check(c) for c in evidence.checks or ()]
    kind, message = _quality_of(current, spec)
    judgment = analysis.combine(
        evidence.latency, checks=checks, quality=kind, quality_message=message
    )
    shown = _check_rows(evidence.checks, checks) if evidence.checks is not None else before.checks
    order = [r for r in (state.stable, state.canary) if r in rows]
    return Gate(
        judgment=judgment if live else None,
        quality=current if live else before.quality,
        scores=[rows[r] for r in order],
        checks=list(shown),
        replayed=fresh,
    )


def _with_throughput(
    rows: dict[str, RevisionScore],
    throughput: Mapping[str, float | None] | None,
    *,
    state: rollout.State,
    spec: Analysis,
) -> dict[str, RevisionScore]:
    out = dict(rows)
    for rev, tps in (throughput or {}).items():
        role = "canary" if rev == state.canary else "stable"
        row = out.get(rev) or RevisionScore(revision=rev, role=role)
        out[rev] = row.model_copy(
            update={
                "tokens_per_second_per_replica": None if tps is None else round(tps, 2),
                "cost_per_million_tokens": _rounded(
                    analysis.cost_per_million(tps, spec.cost_per_replica_hour)
                ),
            }
        )
    return out


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _check_rows(
    values: Sequence[analysis.CheckValue], judged: Sequence[analysis.CheckJudgment]
) -> list[CheckResult]:
    return [
        CheckResult(
            name=v.name, canary=v.canary, stable=v.stable, passed=j.passed, message=j.message
        )
        for v, j in zip(values, judged, strict=True)
    ]


#: How each deciding reason reads in history.
_OUTCOMES: Mapping[rollout.Why, str] = {
    rollout.Why.PROMOTED: "Promoted",
    rollout.Why.MANUAL_PROMOTE: "Promoted",
    rollout.Why.ANALYSIS_FAILED: "RolledBack",
    rollout.Why.QUALITY_REGRESSION: "RolledBack",
    rollout.Why.ABORTED: "RolledBack",
    rollout.Why.VERIFICATION_FAILED: "Blocked",
}


def history(
    old: Sequence[HistoryEntry],
    notable: Sequence[rollout.Decision],
    *,
    revisions: Sequence[Revision],
    stamp: str,
) -> list[HistoryEntry]:
    """Append a line per deciding transition (promotion, rollback, block); keep the newest."""
    known = {r.name: r for r in revisions}
    out = list(old)
    for decision in notable:
        outcome = _OUTCOMES.get(decision.why)
        if outcome is None:
            continue
        state = decision.state
        name = state.stable if outcome == "Promoted" else state.canary
        entry = known.get(name, Revision(name=name, digest=""))
        out.append(
            HistoryEntry(
                revision=name,
                digest=entry.digest,
                signer=entry.signer,
                verdict=entry.reason,
                outcome=outcome,
                reason=decision.why.value if outcome != "Blocked" else state.reason,
                message=decision.message,
                at=stamp,
            )
        )
    return out[-MAX_HISTORY:]

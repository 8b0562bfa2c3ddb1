"""What ``kubectl tokenfleet`` shows, as plain values (pure): objects' status in, rows out.

Each view returns a :class:`View`: a title, column names, rows (tables by default) and the same
figures as a dict (``-o json|yaml``). The shell (``tokenfleet.kubectl_plugin``) fetches the
objects and prints; everything decided about what to show is here and tested as tables.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from tokenfleet.api.deployment import ModelDeploymentSpec, ModelDeploymentStatus
from tokenfleet.api.pool import InferencePoolSpec, InferencePoolStatus


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Table:
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class View:
    """Tables for a human, ``data`` for a program."""

    tables: tuple[Table, ...]
    data: Mapping[str, Any]
    lines: tuple[str, ...] = ()  # "key: value" lines printed before the tables


def _fmt(value: float | int | None, spec: str = "g") -> str:
    return "-" if value is None else format(value, spec)


def rollout_status(name: str, body: Mapping[str, Any]) -> View:
    """Phase, step, weights, the last analysis, quality scores, custom checks."""
    spec = ModelDeploymentSpec.model_validate(body.get("spec", {}))
    status = ModelDeploymentStatus.model_validate(body.get("status") or {})
    r = status.rollout
    steps = spec.rollout.steps
    step = f"{r.step + 1}/{len(steps)} ({steps[min(r.step, len(steps) - 1)].weight}%)" if r else "-"
    controls = [k for k in ("paused", "promote", "abort") if getattr(spec.rollout, k)]
    lines = (
        f"Name:          {name}",
        f"Phase:         {r.phase if r else '-'}",
        f"Reason:        {r.reason if r else '-'}",
        f"Step:          {step}",
        f"Stable:        {status.stable_revision or '-'}",
        f"Canary:        {status.canary_revision or '-'}",
        f"Controls:      {', '.join(controls) or 'none'} (spec.rollout)",
        f"Message:       {r.message if r else '-'}",
        f"Last analysis: {r.last_analysis if r and r.last_analysis else '-'}"
        + (f" (at {r.last_analysis_at})" if r and r.last_analysis_at else ""),
        f"Quality:       {_quality_line(status)}",
    )
    revisions = Table(
        title="Revisions",
        columns=("REVISION", "DIGEST", "VERIFIED", "SIGNER", "READY", "WEIGHT"),
        rows=tuple(
            (
                v.name,
                v.digest[:19] or "-",
                v.reason or str(v.verified),
                v.signer[:24] or "-",
                str(v.ready_replicas),
                f"{v.weight}%",
            )
            for v in status.revisions
        ),
    )
    scores = Table(
        title="Quality and cost",
        columns=("REVISION", "ROLE", "SCORE", "CASES", "TOKENS/S/REPLICA", "COST/1M TOKENS"),
        rows=tuple(
            (
                s.revision,
                s.role,
                _fmt(s.score, ".3f"),
                f"{s.cases_passed}/{s.cases}",
                _fmt(s.tokens_per_second_per_replica, ".1f"),
                _fmt(s.cost_per_million_tokens, ".4f"),
            )
            for s in (r.scores if r else [])
        ),
    )
    checks = Table(
        title="Checks",
        columns=("CHECK", "CANARY", "STABLE", "PASSED"),
        rows=tuple(
            (c.name, _fmt(c.canary), _fmt(c.stable), "-" if c.passed is None else str(c.passed))
            for c in (r.checks if r else [])
        ),
    )
    failures = Table(
        title="Failed golden cases",
        columns=("REVISION", "FAILURE"),
        rows=tuple((s.revision, f) for s in (r.scores if r else []) for f in s.failures),
    )
    data = {
        "name": name,
        "phase": r.phase if r else None,
        "step": r.step if r else None,
        "steps": len(steps),
        "stableRevision": status.stable_revision,
        "canaryRevision": status.canary_revision,
        "weights": {v.name: v.weight for v in status.revisions},
        "controls": {k: getattr(spec.rollout, k) for k in ("paused", "promote", "abort")},
        "rollout": r.to_wire() if r else None,
    }
    shown = tuple(t for t in (revisions, scores, checks, failures) if t.rows)
    return View(tables=shown, data=data, lines=lines)


def _quality_line(status: ModelDeploymentStatus) -> str:
    q = status.rollout.quality if status.rollout else None
    return f"{q.verdict}: {q.message}" if q else "not configured"


def rollout_history(name: str, body: Mapping[str, Any]) -> View:
    """The revisions a rollout decided on, oldest first."""
    status = ModelDeploymentStatus.model_validate(body.get("status") or {})
    rows = tuple(
        (
            h.at,
            h.revision,
            h.digest[:19] or "-",
            h.signer[:24] or "-",
            h.verdict or "-",
            h.outcome,
            h.reason or "-",
        )
        for h in status.history
    )
    table = Table(
        title=f"History of {name}",
        columns=("TIME", "REVISION", "DIGEST", "SIGNER", "VERDICT", "OUTCOME", "REASON"),
        rows=rows,
    )
    return View(
        tables=(table,), data={"name": name, "history": [h.to_wire() for h in status.history]}
    )


#: What each control command writes under spec.rollout (and nothing else).
CONTROLS: Mapping[str, Mapping[str, bool]] = {
    "pause": {"paused": True},
    "resume": {"paused": False},
    "promote": {"promote": True},
    "abort": {"abort": True},
    "clear": {"paused": False, "promote": False, "abort": False},
}


def control_patch(command: str) -> dict[str, Any]:
    """The merge patch a control command sends: the same spec fields GitOps would set."""
    return {"spec": {"rollout": dict(CONTROLS[command])}}


def pools(bodies: Sequence[Mapping[str, Any]]) -> View:
    """Desired, ready and warm replicas per pool and zone, with the autoscaler's reason and
    what a previewed policy would do (its would-be replicas for the pool, and why)."""
    rows, data = [], []
    for body in bodies:
        name = body["metadata"]["name"]
        spec = InferencePoolSpec.model_validate(body.get("spec", {}))
        status = InferencePoolStatus.model_validate(body.get("status") or {})
        auto = status.autoscaling
        reason = (auto.reason if auto else "") or (
            status.last_scaling.reason if status.last_scaling else "-"
        )
        tried = auto.preview if auto else None
        preview = "-" if tried is None else f"{tried.would_be_replicas} ({tried.reason})"
        if tried is not None and tried.policy == "spec":
            preview += " [spec's own; preview active]"
        for zone in status.zones:
            warm = min(spec.warm.per_zone, zone.ready)
            rows.append(
                (
                    name,
                    zone.name,
                    str(zone.desired),
                    str(zone.ready),
                    str(warm),
                    "yes" if zone.healthy else f"no: {zone.message}",
                    reason,
                    preview,
                )
            )
        data.append(
            {
                "name": name,
                "replicas": status.replicas,
                "readyReplicas": status.ready_replicas,
                "warmReplicas": status.warm_replicas,
                "zones": [z.to_wire() for z in status.zones],
                "warmPerZone": spec.warm.per_zone,
                "autoscaling": auto.to_wire() if auto else None,
            }
        )
    table = Table(
        title="Pools",
        columns=(
            "POOL",
            "ZONE",
            "DESIRED",
            "READY",
            "WARM",
            "HEALTHY",
            "SCALING REASON",
            "PREVIEW",
        ),
        rows=tuple(rows),
    )
    return View(tables=(table,), data={"pools": data})


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolLoad:
    """Live figures of one pool (None: no series)."""

    pool: str
    ttft_p99: float | None  # seconds
    queue_age: float | None  # seconds, the oldest queued request in any gateway
    kv_usage: float | None  # 0..1


def top(loads: Sequence[PoolLoad]) -> View:
    """Per-pool TTFT p99, oldest queue age and KV-cache usage."""
    table = Table(
        title="Live",
        columns=("POOL", "TTFT P99 (ms)", "QUEUE AGE (s)", "KV USAGE"),
        rows=tuple(
            (
                p.pool,
                _fmt(None if p.ttft_p99 is None else p.ttft_p99 * 1000, ".0f"),
                _fmt(p.queue_age, ".2f"),
                _fmt(None if p.kv_usage is None else p.kv_usage * 100, ".1f") + "%"
                if p.kv_usage is not None
                else "-",
            )
            for p in loads
        ),
    )
    data = {"pools": [dataclasses.asdict(p) for p in loads]}
    return View(tables=(table,), data=data)


def render(view: View) -> str:
    """Lines, then each table with aligned columns."""
    out = list(view.lines)
    for table in view.tables:
        widths = [
            max(len(c), *(len(r[i]) for r in table.rows)) if table.rows else len(c)
            for i, c in enumerate(table.columns)
        ]
        out += ["", f"{table.title}:"] if out else [f"{table.title}:"]
        out.append(
            "  ".join(c.ljust(w) for c, w in zip(table.columns, widths, strict=True)).rstrip()
        )
        out += [
            "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
            for row in table.rows
        ]
        if not table.rows:
            out.append("(none)")
    return "\n".join(out)

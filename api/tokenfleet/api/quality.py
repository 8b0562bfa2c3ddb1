"""The canary gate beyond latency: golden-set quality, custom PromQL checks, cost, history.

Spec side: ``ModelDeployment.spec.rollout.analysis.quality`` names a ConfigMap holding a golden
set (the :class:`GoldenSet` format below, YAML or JSON, under one key) and the margin the
canary's score may fall behind stable's; ``analysis.checks`` are a team's own PromQL gates.
Status side: the scores, per-check failures, throughput and cost per revision, and a bounded
history of the revisions a rollout has decided on (what ``kubectl tokenfleet rollout history``
shows).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from tokenfleet.api.base import DNS_LABEL, Model, cel, refuse_first, validations

#: A golden set's size bounds the replay: every case is two requests (stable and canary).
MAX_CASES = 200
#: Failures kept per revision in status (the first ones; the count says how many in all).
MAX_FAILURES = 10
#: Revisions kept in ``status.history``.
MAX_HISTORY = 10


class ConfigMapKeyRef(Model):
    """A key inside a ConfigMap in the same namespace."""

    name: str = Field(pattern=DNS_LABEL, max_length=253, description="ConfigMap name.")
    key: str = Field(default="golden.yaml", description="Key holding the golden set.")


class Quality(Model):
    """Replay a golden set against stable and canary; the canary may not score much worse."""

    golden_set: ConfigMapKeyRef = Field(description="The golden set (see docs/quality-gate.md).")
    margin: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="The canary passes when its score (0..1) is at least stable's minus this.",
    )
    min_score: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="An absolute floor: a canary scoring at least this passes even if it is "
        "further than the margin behind stable. Unset: the margin alone decides.",
    )
    seed: int = Field(default=0, description="Sampling seed sent with every replayed request.")
    max_tokens: int = Field(
        default=64, ge=1, le=4096, description="max_tokens of a case that sets none."
    )
    concurrency: int = Field(default=4, ge=1, le=32, description="Replayed requests in flight.")
    timeout_seconds: int = Field(default=30, ge=1, le=600, description="Per replayed request.")


class PromQLCheck(Model):
    """A team's own gate: a PromQL query and a bound on its value for the canary.

    ``$revision`` in the query becomes the revision measured (canary, and stable for
    comparison), ``$namespace`` and ``$model`` the deployment's; ``$window`` the analysis
    window (e.g. ``60s``). No value (no series) cannot pass a step.
    """

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel("has(self.max) || has(self.min)", "checks: each check needs max or min")
        )
    )

    name: str = Field(pattern=DNS_LABEL, max_length=63, description="Shown in status and events.")
    query: str = Field(min_length=1, max_length=2000, description="PromQL, one instant value.")
    max: float | None = Field(default=None, description="The canary's value may be at most this.")
    min: float | None = Field(default=None, description="The canary's value must be at least this.")

    @model_validator(mode="after")
    def _bounded(self) -> PromQLCheck:
        refuse_first([(self.max is None and self.min is None, "check needs max or min")])
        return self


# --- the golden set (the ConfigMap's content) -------------------------------------------------


class NumberCheck(Model):
    """The first number in the answer is within ``tolerance`` of ``value``."""

    value: float
    tolerance: float = Field(default=0.0, ge=0)


class JSONSchema(Model):
    """The JSON-schema subset checked: type, required, properties (nested), items."""

    type: Literal["object", "array", "string", "number", "integer", "boolean", "null"] | None = None
    required: list[str] = Field(default_factory=list)
    properties: dict[str, JSONSchema] = Field(default_factory=dict)
    items: JSONSchema | None = None


class Check(Model):
    """One expectation on an answer; exactly one kind per check."""

    exact: str | None = Field(default=None, description="The answer, stripped, equals this.")
    contains: str | None = Field(default=None, description="The answer contains this.")
    regex: str | None = Field(default=None, description="Python regex found in the answer.")
    json_schema: JSONSchema | None = Field(
        default=None, description="The answer is JSON valid against this schema subset."
    )
    number: NumberCheck | None = Field(default=None, description="A numeric answer.")

    @model_validator(mode="after")
    def _one_kind(self) -> Check:
        kinds = [k for k in (self.exact, self.contains, self.regex, self.json_schema, self.number)]
        refuse_first([(sum(k is not None for k in kinds) != 1, "set exactly one kind of check")])
        return self

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"regex {value!r} does not compile: {exc}") from exc
        return value


class GoldenCase(Model):
    """A prompt, and a reference answer (exact match) or checks, all of which must hold."""

    name: str = Field(min_length=1, max_length=63)
    prompt: str = Field(min_length=1)
    reference: str | None = Field(default=None, description="Shorthand for one exact check.")
    checks: list[Check] = Field(default_factory=list)
    weight: float = Field(default=1.0, gt=0)
    max_tokens: int | None = Field(default=None, ge=1, le=4096)

    @model_validator(mode="after")
    def _expects(self) -> GoldenCase:
        refuse_first([(self.reference is None and not self.checks, "needs reference or checks")])
        return self

    def all_checks(self) -> list[Check]:
        """The checks, with the reference answer as the first one."""
        first = [Check(exact=self.reference)] if self.reference is not None else []
        return first + list(self.checks)


class GoldenSet(Model):
    """What the ConfigMap key holds."""

    cases: list[GoldenCase] = Field(min_length=1, max_length=MAX_CASES)

    @model_validator(mode="after")
    def _unique(self) -> GoldenSet:
        names = [c.name for c in self.cases]
        refuse_first([(len(names) != len(set(names)), "case names must be unique")])
        return self


# --- status -------------------------------------------------------------------------------------


class RevisionScore(Model):
    """One revision's figures in the canary gate: quality next to speed and cost."""

    revision: str = Field(description="Revision name.")
    role: Literal["stable", "canary"] = Field(description="Its part in the rollout.")
    score: float | None = Field(default=None, description="Weighted golden-set score, 0..1.")
    cases_passed: int = Field(default=0, description="Golden cases that passed.")
    cases: int = Field(default=0, description="Golden cases replayed.")
    failures: list[str] = Field(
        default_factory=list, description=f"The first {MAX_FAILURES} failed checks, for a human."
    )
    tokens_per_second_per_replica: float | None = Field(
        default=None, description="Generated tokens/s per ready replica over the window."
    )
    cost_per_million_tokens: float | None = Field(
        default=None, description="analysis.costPerReplicaHour over measured throughput."
    )


class CheckResult(Model):
    """A PromQL check's latest values."""

    name: str = Field(description="The check's name from spec.rollout.analysis.checks.")
    canary: float | None = Field(default=None, description="The canary's value.")
    stable: float | None = Field(default=None, description="Stable's value, for comparison.")
    passed: bool | None = Field(default=None, description="Unset: no value yet.")
    message: str = Field(default="", description="The check's result, for a human.")


QualityVerdict = Literal["Pending", "Passed", "Failed", "Invalid"]


class QualityStatus(Model):
    """The golden-set replay for one stable/canary pair."""

    stable_revision: str = Field(default="", description="Stable revision replayed.")
    canary_revision: str = Field(default="", description="Canary revision replayed.")
    verdict: QualityVerdict = Field(
        default="Pending",
        description="Pending (replaying), Passed, Failed (QualityRegression) or Invalid (the "
        "golden set could not be read; the step holds).",
    )
    message: str = Field(default="", description="The scores against the margin, for a human.")
    measured_at: str | None = Field(default=None, description="RFC 3339 end of the replay.")


class HistoryEntry(Model):
    """One revision a rollout decided on."""

    revision: str = Field(description="Revision name.")
    digest: str = Field(default="", description="Artifact digest of the revision.")
    signer: str = Field(default="", description="Who signed its artifact.")
    verdict: str = Field(default="", description="Verification verdict of its artifact.")
    outcome: str = Field(description="Promoted, RolledBack or Blocked.")
    reason: str = Field(default="", description="The decision's reason, e.g. QualityRegression.")
    message: str = Field(default="", description="The decision, for a human.")
    at: str = Field(description="RFC 3339 time of the decision.")


def parse_golden(text: str, *, loads: Any) -> GoldenSet:
    """The golden set from a ConfigMap value; ``loads`` parses YAML or JSON text (injected:
    the API layer does not depend on a YAML library). Raises ValueError when invalid."""
    raw = loads(text)
    if not isinstance(raw, dict):
        raise ValueError("golden set: expected a mapping with 'cases'")
    return GoldenSet.model_validate(raw)

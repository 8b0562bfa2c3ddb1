"""Golden-set scoring and the quality gate (pure): answers in, scores and a verdict out.

Each golden case is a prompt with checks (exact, contains, regex, JSON-schema subset, number
within a tolerance); a case passes when every check holds, and a revision's score is the
weighted share of cases that passed (0..1). A case that got no answer (the request failed)
fails: a canary that cannot answer is not better for being silent.

The gate::

    canary ≥ stable − margin  ─────────────▶ Passed
    canary ≥ min_score (when set) ─────────▶ Passed   (an absolute floor the team accepts)
    otherwise ─────────────────────────────▶ Failed   → rollback, reason QualityRegression
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence

from tokenfleet.api.quality import MAX_FAILURES, Check, GoldenCase, JSONSchema

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
#: Enough of an answer to show in a failure message.
_SHOWN = 60


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Score:
    """One revision's result over the golden set."""

    score: float  # weighted share of cases passed, 0..1
    cases_passed: int
    cases: int
    failures: tuple[str, ...]  # "case: why", in case order


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    passed: bool
    message: str


def _shown(answer: str) -> str:
    flat = " ".join(answer.split())
    return repr(flat if len(flat) <= _SHOWN else flat[: _SHOWN - 1] + "…")


_JSON_TYPES: Mapping[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "null": (type(None),),
}


def schema_errors(value: object, schema: JSONSchema, path: str = "$") -> list[str]:
    """Where ``value`` breaks the schema subset (type, required, properties, items)."""
    if schema.type is not None:
        wanted = _JSON_TYPES[schema.type]
        is_bool = isinstance(value, bool)
        if not isinstance(value, wanted) or (is_bool and schema.type in ("number", "integer")):
            return [f"{path} is not {schema.type}"]
    errors: list[str] = []
    if isinstance(value, dict):
        errors += [f"{path}.{k} missing" for k in schema.required if k not in value]
        for key, sub in schema.properties.items():
            if key in value:
                errors += schema_errors(value[key], sub, f"{path}.{key}")
    if isinstance(value, list) and schema.items is not None:
        for i, item in enumerate(value):
            errors += schema_errors(item, schema.items, f"{path}[{i}]")
    return errors


def check_failure(check: Check, answer: str) -> str | None:
    """Why ``answer`` fails ``check``; None when it holds."""
    if check.exact is not None:
        ok = answer.strip() == check.exact.strip()
        return None if ok else f"expected exactly {_shown(check.exact)}, got {_shown(answer)}"
    if check.contains is not None:
        ok = check.contains in answer
        return None if ok else f"{_shown(answer)} does not contain {_shown(check.contains)}"
    if check.regex is not None:
        ok = re.search(check.regex, answer) is not None
        return None if ok else f"{_shown(answer)} does not match /{check.regex}/"
    if check.json_schema is not None:
        try:
            parsed = json.loads(answer)
        except ValueError:
            return f"{_shown(answer)} is not JSON"
        errors = schema_errors(parsed, check.json_schema)
        return "; ".join(errors[:3]) if errors else None
    if check.number is not None:
        found = _NUMBER.search(answer)
        if found is None:
            return f"no number in {_shown(answer)}"
        got, want = float(found.group()), check.number
        ok = abs(got - want.value) <= want.tolerance
        return None if ok else f"{got:g} is not {want.value:g} ± {want.tolerance:g}"
    return "empty check"


def score(cases: Sequence[GoldenCase], answers: Mapping[str, str | None]) -> Score:
    """Score a revision's answers (case name → text, None for a failed request)."""
    total = sum(c.weight for c in cases)
    earned, passed, failures = 0.0, 0, []
    for case in cases:
        answer = answers.get(case.name)
        if answer is None:
            failures.append(f"{case.name}: no answer")
            continue
        why = [w for w in (check_failure(c, answer) for c in case.all_checks()) if w]
        if why:
            failures.append(f"{case.name}: {why[0]}")
            continue
        earned += case.weight
        passed += 1
    return Score(
        score=earned / total if total else 0.0,
        cases_passed=passed,
        cases=len(cases),
        failures=tuple(failures),
    )


def gate(canary: Score, stable: Score, *, margin: float, min_score: float | None) -> Verdict:
    """Whether the canary's quality lets the step pass."""
    figures = f"canary {canary.score:.3f} vs stable {stable.score:.3f}"
    if canary.score >= stable.score - margin - 1e-9:  # scores are sums of floats
        return Verdict(passed=True, message=f"quality {figures}: within margin {margin:g}")
    if min_score is not None and canary.score >= min_score:
        return Verdict(passed=True, message=f"quality {figures}: above floor {min_score:g}")
    shown = "; ".join(canary.failures[:3])
    return Verdict(
        passed=False,
        message=f"quality regression: {figures} (margin {margin:g}); failed: {shown}",
    )


def kept_failures(result: Score) -> list[str]:
    """The failures status keeps (the first few; ``cases`` − ``cases_passed`` says how many)."""
    return list(result.failures[:MAX_FAILURES])

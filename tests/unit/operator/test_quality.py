"""The quality gate's pure parts: each check kind against passing and failing answers, weighted
scoring, the margin/floor decision, custom PromQL checks, how quality, checks and latency
combine into one judgment, the golden set's parsing, and the status the planner writes (scores,
history) for a replay that landed."""

from __future__ import annotations

import json

import pytest
import yaml

from tokenfleet.api.deployment import Analysis, Revision, RolloutStatus
from tokenfleet.api.quality import (
    Check,
    ConfigMapKeyRef,
    GoldenCase,
    GoldenSet,
    JSONSchema,
    NumberCheck,
    Quality,
    QualityStatus,
    parse_golden,
)
from tokenfleet.operator.plan import gate
from tokenfleet.operator.policy import analysis, quality, rollout
from tokenfleet.operator.policy.rollout import Outcome

PERSON = JSONSchema(
    type="object",
    required=["name", "age"],
    properties={
        "age": JSONSchema(type="integer"),
        "tags": JSONSchema(items=JSONSchema(type="string")),
    },
)


@pytest.mark.parametrize(
    ("check", "answer", "passes"),
    [
        pytest.param(Check(exact="Paris"), "  Paris\n", True, id="exact-stripped"),
        pytest.param(Check(exact="Paris"), "paris", False, id="exact-case-matters"),
        pytest.param(Check(contains="42"), "the answer is 42.", True, id="contains"),
        pytest.param(Check(contains="42"), "forty-two", False, id="contains-missing"),
        pytest.param(Check(regex=r"^\d{4}-\d\d-\d\d$"), "2026-12-01", True, id="regex"),
        pytest.param(Check(regex=r"^\d{4}-\d\d-\d\d$"), "Dec 1", False, id="regex-no-match"),
        pytest.param(
            Check(json_schema=PERSON), '{"name": "a", "age": 3, "tags": ["x"]}', True, id="json"
        ),
        pytest.param(Check(json_schema=PERSON), '{"name": "a"}', False, id="json-required"),
        pytest.param(Check(json_schema=PERSON), '{"name": "a", "age": "3"}', False, id="json-type"),
        pytest.param(Check(json_schema=PERSON), '{"name":"a","age":true}', False, id="json-bool"),
        pytest.param(
            Check(json_schema=PERSON), '{"name":"a","age":1,"tags":[1]}', False, id="json-items"
        ),
        pytest.param(Check(json_schema=PERSON), "name: a", False, id="json-not-json"),
        pytest.param(
            Check(number=NumberCheck(value=3.14, tolerance=0.01)), "pi is 3.141", True, id="num"
        ),
        pytest.param(
            Check(number=NumberCheck(value=3.14, tolerance=0.01)), "pi is 3.2", False, id="num-off"
        ),
        pytest.param(Check(number=NumberCheck(value=1)), "one", False, id="num-none"),
        pytest.param(Check(number=NumberCheck(value=-2e3)), "= -2000", True, id="num-exp"),
    ],
)
def test_check(check: Check, answer: str, passes: bool) -> None:
    failure = quality.check_failure(check, answer)
    assert (failure is None) == passes, failure
    if not passes:
        assert failure  # says why


CASES = [
    GoldenCase(name="a", prompt="p", reference="yes", weight=3),
    GoldenCase(name="b", prompt="p", checks=[Check(contains="x"), Check(regex="z$")]),
]


@pytest.mark.parametrize(
    ("answers", "score", "passed", "failed"),
    [
        pytest.param({"a": "yes", "b": "xyz"}, 1.0, 2, [], id="all"),
        pytest.param({"a": "yes", "b": "xy"}, 0.75, 1, ["b"], id="second-check-fails"),
        pytest.param({"a": "no", "b": "xz"}, 0.25, 1, ["a"], id="weighted"),
        pytest.param({"a": None, "b": "xz"}, 0.25, 1, ["a"], id="no-answer-fails"),
        pytest.param({}, 0.0, 0, ["a", "b"], id="nothing"),
    ],
)
def test_score(
    answers: dict[str, str | None], score: float, passed: int, failed: list[str]
) -> None:
    result = quality.score(CASES, answers)
    assert (result.score, result.cases_passed, result.cases) == (score, passed, 2)
    assert [f.split(":")[0] for f in result.failures] == failed


def _score(value: float) -> quality.Score:
    return quality.Score(score=value, cases_passed=0, cases=10, failures=("a: wrong",))


@pytest.mark.parametrize(
    ("canary", "stable", "margin", "floor", "passes", "words"),
    [
        pytest.param(1.0, 1.0, 0.0, None, True, "within margin", id="equal"),
        pytest.param(0.96, 1.0, 0.05, None, True, "within margin", id="inside-margin"),
        pytest.param(0.95, 1.0, 0.05, None, True, "within margin", id="at-margin"),
        pytest.param(0.9, 1.0, 0.05, None, False, "quality regression", id="outside-margin"),
        pytest.param(0.9, 1.0, 0.05, 0.85, True, "above floor", id="floor-rescues"),
        pytest.param(0.8, 1.0, 0.05, 0.85, False, "quality regression", id="below-floor"),
        pytest.param(1.0, 0.5, 0.0, None, True, "within margin", id="better-than-stable"),
    ],
)
def test_gate(
    canary: float, stable: float, margin: float, floor: float | None, passes: bool, words: str
) -> None:
    verdict = quality.gate(_score(canary), _score(stable), margin=margin, min_score=floor)
    assert verdict.passed is passes
    assert words in verdict.message
    if not passes:
        assert "a: wrong" in verdict.message  # the failures say what went wrong


@pytest.mark.parametrize(
    ("value", "bounds", "passed"),
    [
        pytest.param(0.5, {"max": 1.0}, True, id="under-max"),
        pytest.param(1.5, {"max": 1.0}, False, id="over-max"),
        pytest.param(0.5, {"min": 1.0}, False, id="under-min"),
        pytest.param(None, {"max": 1.0}, None, id="no-series"),
        pytest.param(float("nan"), {"max": 1.0}, None, id="nan"),
    ],
)
def test_custom_check(value: float | None, bounds: dict[str, float], passed: bool | None) -> None:
    judged = analysis.judge_check(analysis.CheckValue(name="c", canary=value, stable=0.1, **bounds))
    assert judged.passed is passed


PASSED = analysis.Judgment(outcome=Outcome.ANALYSIS_PASSED, message="latency ok")
FAILED = analysis.Judgment(outcome=Outcome.ANALYSIS_FAILED, message="TTFT high")
SHORT = analysis.Judgment(outcome=Outcome.INSUFFICIENT_SAMPLES, message="few")
OK_CHECK = analysis.CheckJudgment(name="c", passed=True, message="c 1")
BAD_CHECK = analysis.CheckJudgment(name="c", passed=False, message="c 9 > max 1")
NO_CHECK = analysis.CheckJudgment(name="c", passed=None, message="c: no value")
Q = analysis.Quality


@pytest.mark.parametrize(
    ("latency", "checks", "q", "outcome"),
    [
        pytest.param(None, (), Q.NOT_CONFIGURED, None, id="nothing-due"),
        pytest.param(None, (), Q.FAILED, Outcome.QUALITY_FAILED, id="quality-fails-undue"),
        pytest.param(PASSED, (), Q.FAILED, Outcome.QUALITY_FAILED, id="quality-beats-latency"),
        pytest.param(FAILED, (), Q.PASSED, Outcome.ANALYSIS_FAILED, id="latency-fails"),
        pytest.param(PASSED, (BAD_CHECK,), Q.PASSED, Outcome.ANALYSIS_FAILED, id="check-fails"),
        pytest.param(SHORT, (BAD_CHECK,), Q.PENDING, Outcome.ANALYSIS_FAILED, id="check-early"),
        pytest.param(PASSED, (NO_CHECK,), Q.PASSED, Outcome.INSUFFICIENT_SAMPLES, id="no-val"),
        pytest.param(PASSED, (), Q.PENDING, Outcome.INSUFFICIENT_SAMPLES, id="replaying"),
        pytest.param(PASSED, (), Q.INVALID, Outcome.INSUFFICIENT_SAMPLES, id="bad-golden-holds"),
        pytest.param(SHORT, (), Q.PASSED, Outcome.INSUFFICIENT_SAMPLES, id="few-samples"),
        pytest.param(PASSED, (OK_CHECK,), Q.PASSED, Outcome.ANALYSIS_PASSED, id="all-pass"),
        pytest.param(PASSED, (), Q.NOT_CONFIGURED, Outcome.ANALYSIS_PASSED, id="latency-only"),
    ],
)
def test_combine(
    latency: analysis.Judgment | None,
    checks: tuple[analysis.CheckJudgment, ...],
    q: analysis.Quality,
    outcome: Outcome | None,
) -> None:
    judged = analysis.combine(latency, checks=checks, quality=q, quality_message="q")
    assert (judged.outcome if judged else None) is outcome


@pytest.mark.parametrize(
    ("tps", "cost", "expected"),
    [
        pytest.param(100.0, 3.6, 10.0, id="3.6-per-hour-at-100-tps"),
        pytest.param(0.0, 3.6, None, id="no-throughput"),
        pytest.param(100.0, None, None, id="no-price"),
    ],
)
def test_cost_per_million(tps: float, cost: float | None, expected: float | None) -> None:
    assert analysis.cost_per_million(tps, cost) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param("cases: []", "at least 1", id="empty"),
        pytest.param("cases: [{name: a, prompt: p}]", "needs reference or checks", id="no-expect"),
        pytest.param(
            "cases: [{name: a, prompt: p, checks: [{exact: x, contains: y}]}]",
            "exactly one kind",
            id="two-kinds",
        ),
        pytest.param(
            "cases: [{name: a, prompt: p, checks: [{regex: '('}]}]", "does not compile", id="regex"
        ),
        pytest.param(
            "cases: [{name: a, prompt: p, reference: x}, {name: a, prompt: q, reference: y}]",
            "unique",
            id="duplicate-names",
        ),
        pytest.param("- a", "expected a mapping", id="not-a-mapping"),
    ],
)
def test_a_bad_golden_set_is_refused_with_its_reason(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_golden(text, loads=yaml.safe_load)


def test_a_golden_set_reads_as_yaml_or_json() -> None:
    raw = {"cases": [{"name": "a", "prompt": "p", "checks": [{"jsonSchema": {"type": "object"}}]}]}
    from_yaml = parse_golden(yaml.safe_dump(raw), loads=yaml.safe_load)
    assert from_yaml == parse_golden(json.dumps(raw), loads=json.loads)
    assert from_yaml.cases[0].checks[0].json_schema == JSONSchema(type="object")


SPEC = Analysis(
    quality=Quality(golden_set=ConfigMapKeyRef(name="g"), margin=0.1), cost_per_replica_hour=3.6
)
LIVE = rollout.State(phase=rollout.Phase.PROGRESSING, stable="s", canary="c")
GOLDEN = GoldenSet(cases=[GoldenCase(name=n, prompt=n, reference=n) for n in ("a", "b")])


def _replay(canary: dict[str, str | None]) -> gate.Replay:
    return gate.Replay(
        stable="s", canary="c", golden=GOLDEN, answers={"s": {"a": "a", "b": "b"}, "c": canary}
    )


@pytest.mark.parametrize(
    ("canary", "verdict", "outcome"),
    [
        pytest.param({"a": "a", "b": "b"}, "Passed", Outcome.ANALYSIS_PASSED, id="equal"),
        pytest.param({"a": "a", "b": "zz"}, "Failed", Outcome.QUALITY_FAILED, id="half-wrong"),
    ],
)
def test_a_landed_replay_decides_and_shows_scores_and_cost(
    canary: dict[str, str | None], verdict: str, outcome: Outcome
) -> None:
    evidence = gate.Evidence(
        latency=PASSED, replay=_replay(canary), throughput={"s": 50.0, "c": 100.0}
    )
    got = gate.evaluate(evidence, before=RolloutStatus(), state=LIVE, spec=SPEC, stamp="T")
    assert got.quality is not None and got.quality.verdict == verdict
    assert got.replayed and got.judgment is not None and got.judgment.outcome is outcome
    rows = {r.revision: r for r in got.scores}
    assert [r.role for r in got.scores] == ["stable", "canary"]
    assert rows["s"].score == 1.0 and rows["c"].cost_per_million_tokens == 10.0
    assert rows["s"].cost_per_million_tokens == 20.0  # half the throughput, twice the cost
    if verdict == "Failed":
        assert rows["c"].failures == ["b: expected exactly 'b', got 'zz'"]


def test_a_pair_with_a_verdict_in_status_is_not_replayed_again() -> None:
    decided = QualityStatus(stable_revision="s", canary_revision="c", verdict="Failed", message="m")
    before = RolloutStatus(quality=decided)
    got = gate.evaluate(
        gate.Evidence(replay=_replay({"a": "a", "b": "b"})),
        before=before,
        state=LIVE,
        spec=SPEC,
        stamp="T",
    )
    assert got.quality == decided and not got.replayed  # a late replay does not overwrite it
    assert got.judgment is not None and got.judgment.outcome is Outcome.QUALITY_FAILED


def test_a_new_canary_starts_pending_and_an_old_replay_is_ignored() -> None:
    old = QualityStatus(stable_revision="s", canary_revision="old", verdict="Failed")
    stale = gate.Replay(stable="s", canary="old", golden=GOLDEN)
    got = gate.evaluate(
        gate.Evidence(latency=PASSED, replay=stale),
        before=RolloutStatus(quality=old),
        state=LIVE,
        spec=SPEC,
        stamp="T",
    )
    assert got.quality == QualityStatus(stable_revision="s", canary_revision="c")
    assert got.judgment is not None and got.judgment.outcome is Outcome.INSUFFICIENT_SAMPLES


def test_an_unreadable_golden_set_holds_the_step() -> None:
    broken = gate.Replay(stable="s", canary="c", error="ConfigMap g: 404 Not Found")
    got = gate.evaluate(
        gate.Evidence(latency=PASSED, replay=broken),
        before=RolloutStatus(),
        state=LIVE,
        spec=SPEC,
        stamp="T",
    )
    assert got.quality is not None and got.quality.verdict == "Invalid"
    assert got.judgment is not None and got.judgment.outcome is Outcome.INSUFFICIENT_SAMPLES
    assert "404" in got.judgment.message


def _decision(why: rollout.Why, state: rollout.State) -> rollout.Decision:
    return rollout.Decision(state=state, weights={}, why=why, message=why.value, notable=True)


def test_history_records_deciding_transitions_newest_last_and_bounded() -> None:
    revisions = [Revision(name="c", digest="sha256:c", signer="k", reason="Verified")]
    rolled = rollout.State(phase=rollout.Phase.ROLLED_BACK, stable="s", canary="c")
    promoted = rollout.State(phase=rollout.Phase.PROMOTED, stable="c")
    notable = [
        _decision(rollout.Why.STEP_PASSED, LIVE),  # not a decision on the revision
        _decision(rollout.Why.QUALITY_REGRESSION, rolled),
        _decision(rollout.Why.PROMOTED, promoted),
    ]
    got = gate.history([], notable, revisions=revisions, stamp="T")
    assert [(h.revision, h.outcome, h.reason, h.digest) for h in got] == [
        ("c", "RolledBack", "QualityRegression", "sha256:c"),
        ("c", "Promoted", "Promoted", "sha256:c"),
    ]
    many = gate.history(got * 6, notable, revisions=revisions, stamp="T")
    assert len(many) == 10 and many[-1].outcome == "Promoted"

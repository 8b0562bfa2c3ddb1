"""Canary analysis as a table (each metric alone over and under its ratio or ceiling, min
samples on either side, missing series) and revision names (stable under re-serialisation,
changed by artifact or engine, unchanged by everything else, fit a label value)."""

from __future__ import annotations

import dataclasses

import pytest

from tokenfleet.api.deployment import ModelDeploymentSpec
from tokenfleet.operator.plan import desired
from tokenfleet.operator.policy import analysis, revisions
from tokenfleet.operator.policy.analysis import Sample, Thresholds
from tokenfleet.operator.policy.rollout import Outcome

STABLE = Sample(requests=500, ttft_p99=0.200, inter_token_p99=0.020, error_rate=0.001)
GOOD = Sample(requests=100, ttft_p99=0.220, inter_token_p99=0.021, error_rate=0.0)
LIMITS = Thresholds(
    min_samples=50, max_ttft_p99_ratio=1.5, max_inter_token_p99_ratio=1.5, max_error_rate=0.02
)


def _replace(sample: Sample, **changes: object) -> Sample:
    return dataclasses.replace(sample, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("canary_sample", "stable_sample", "limits", "expected", "needle"),
    [
        pytest.param(GOOD, STABLE, LIMITS, Outcome.ANALYSIS_PASSED, "within", id="good"),
        pytest.param(
            _replace(GOOD, ttft_p99=0.301),
            STABLE,
            LIMITS,
            Outcome.ANALYSIS_FAILED,
            "TTFT p99 301 ms > 1.5 × stable 200 ms",
            id="ttft-ratio",
        ),
        pytest.param(
            _replace(GOOD, ttft_p99=0.300),
            STABLE,
            LIMITS,
            Outcome.ANALYSIS_PASSED,
            "within",
            id="ttft-at-ratio-passes",
        ),
        pytest.param(
            _replace(GOOD, inter_token_p99=0.031),
            STABLE,
            LIMITS,
            Outcome.ANALYSIS_FAILED,
            "inter-token p99",
            id="itl-ratio",
        ),
        pytest.param(
            _replace(GOOD, error_rate=0.03),
            STABLE,
            LIMITS,
            Outcome.ANALYSIS_FAILED,
            "error rate 3.0% > 2.0%",
            id="error-rate",
        ),
        pytest.param(
            GOOD,
            STABLE,
            Thresholds(max_ttft_p99=0.150),
            Outcome.ANALYSIS_FAILED,
            "ceiling 150 ms",
            id="ttft-absolute-ceiling",
        ),
        pytest.param(
            GOOD,
            STABLE,
            Thresholds(max_inter_token_p99=0.010),
            Outcome.ANALYSIS_FAILED,
            "ceiling 10 ms",
            id="itl-absolute-ceiling",
        ),
        pytest.param(
            _replace(GOOD, requests=49),
            STABLE,
            LIMITS,
            Outcome.INSUFFICIENT_SAMPLES,
            "canary served 49 < 50",
            id="few-canary-requests",
        ),
        pytest.param(
            GOOD,
            _replace(STABLE, requests=3),
            LIMITS,
            Outcome.INSUFFICIENT_SAMPLES,
            "stable served 3",
            id="few-stable-requests",
        ),
        pytest.param(
            _replace(GOOD, requests=0, ttft_p99=9.0),
            STABLE,
            LIMITS,
            Outcome.INSUFFICIENT_SAMPLES,
            "canary",
            id="slow-but-silent-is-not-judged",
        ),
        pytest.param(
            _replace(GOOD, ttft_p99=None),
            STABLE,
            LIMITS,
            Outcome.INSUFFICIENT_SAMPLES,
            "missing",
            id="canary-series-missing",
        ),
        pytest.param(
            _replace(GOOD, ttft_p99=0.9, error_rate=None),
            STABLE,
            LIMITS,
            Outcome.ANALYSIS_FAILED,
            "TTFT p99 900 ms",
            id="breach-fails-even-with-a-series-missing",
        ),
        pytest.param(
            _replace(GOOD, error_rate=None),
            STABLE,
            LIMITS,
            Outcome.INSUFFICIENT_SAMPLES,
            "canary error rate missing",
            id="no-breach-but-error-series-missing",
        ),
        pytest.param(
            GOOD,
            _replace(STABLE, inter_token_p99=None),
            LIMITS,
            Outcome.INSUFFICIENT_SAMPLES,
            "missing",
            id="stable-series-missing",
        ),
    ],
)
def test_judge(
    canary_sample: Sample,
    stable_sample: Sample,
    limits: Thresholds,
    expected: Outcome,
    needle: str,
) -> None:
    judgment = analysis.judge(canary_sample, stable_sample, limits)
    assert judgment.outcome is expected
    assert needle in judgment.message


def test_every_failed_check_is_reported() -> None:
    bad = _replace(GOOD, ttft_p99=1.0, inter_token_p99=1.0, error_rate=0.5)
    judgment = analysis.judge(bad, STABLE, LIMITS)
    assert judgment.outcome is Outcome.ANALYSIS_FAILED
    assert len(judgment.failures) == 3


# --- revisions --------------------------------------------------------------------------------

SPEC = {
    "model": {"name": "llama"},
    "pools": ["chat"],
    "artifact": {
        "uri": "file:///models/llama",
        "digest": "sha256:" + "a" * 64,
        "trust": {"publicKey": {"name": "signing-key"}},
    },
    "engine": {"maxModelLen": 8192},
}


def spec(**top: object) -> ModelDeploymentSpec:
    return ModelDeploymentSpec.model_validate({**SPEC, **top})


def test_revision_name_is_stable_and_ignores_spelling_defaults_out() -> None:
    explicit = spec(
        engine={"maxModelLen": 8192, "enablePrefixCaching": True, "tensorParallelSize": 1}
    )
    assert revisions.revision_of(spec()) == revisions.revision_of(explicit)
    assert len(revisions.revision_of(spec())) == revisions.NAME_LENGTH


def test_the_worker_deployments_use_the_same_revision_name() -> None:
    assert desired.revision_of(spec()) == revisions.revision_of(spec())


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param(
            {"artifact": {**SPEC["artifact"], "digest": "sha256:" + "b" * 64}},  # type: ignore[dict-item]
            id="digest",
        ),
        pytest.param(
            {"artifact": {**SPEC["artifact"], "uri": "file:///models/other"}},  # type: ignore[dict-item]
            id="uri",
        ),
        pytest.param({"engine": {"maxModelLen": 4096}}, id="engine-arg"),
        pytest.param({"engine": {"maxModelLen": 8192, "image": "worker:v2"}}, id="image"),
    ],
)
def test_artifact_or_engine_changes_make_a_new_revision(changed: dict[str, object]) -> None:
    assert revisions.revision_hash(spec(**changed)) != revisions.revision_hash(spec())


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param({"model": {"name": "llama", "aliases": ["chat"]}}, id="aliases"),
        pytest.param({"pools": ["chat", "batch"]}, id="pools"),
        pytest.param({"rollout": {"paused": True}}, id="rollout-controls"),
        pytest.param({"fallback": {"model": "small"}}, id="fallback"),
    ],
)
def test_other_changes_keep_the_revision(changed: dict[str, object]) -> None:
    assert revisions.revision_hash(spec(**changed)) == revisions.revision_hash(spec())


@pytest.mark.parametrize(
    ("message", "problems", "want"),
    [
        pytest.param(
            "no breach so far, but canary error rate missing: cannot pass yet",
            {"tokenfleet-gateway": "job tokenfleet-gateway has no up target (0 of 1 up)"},
            "(error rate: job tokenfleet-gateway has no up target (0 of 1 up))",
            id="gateway-not-scraped",
        ),
        pytest.param(
            "no breach so far, but canary inter-token, stable inter-token missing: cannot pass yet",
            {"vllm": None},
            "(inter-token: inter-token latency needs answers of two or more tokens)",
            id="engines-up-one-token-answers",
        ),
        pytest.param(
            "no breach so far, but canary TTFT, canary error rate missing: cannot pass yet",
            {"vllm": "job vllm has no target", "tokenfleet-gateway": None},
            "(TTFT: job vllm has no target; error rate: no gateway routed",
            id="each-input-its-own-cause",
        ),
    ],
)
def test_a_waiting_analysis_says_why_its_inputs_are_missing(
    message: str, problems: dict[str, str | None], want: str
) -> None:
    waiting = analysis.Judgment(outcome=Outcome.INSUFFICIENT_SAMPLES, message=message)
    assert want in analysis.explained(waiting, problems).message


def test_a_verdict_is_not_explained() -> None:
    failed = analysis.Judgment(outcome=Outcome.ANALYSIS_FAILED, message="error rate 5% > 1%")
    assert analysis.explained(failed, {"vllm": "job vllm has no target"}) == failed

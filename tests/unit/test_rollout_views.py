"""kubectl tokenfleet's views: which fields each control writes (and only those), what status,
history, pools and top show from given objects, and the table layout."""

from __future__ import annotations

from typing import Any

import pytest

from tokenfleet import rollout_views as views

SPEC: dict[str, Any] = {
    "model": {"name": "m"},
    "pools": ["p"],
    "artifact": {
        "uri": "file:///m",
        "digest": "sha256:" + "a" * 64,
        "trust": {"publicKey": {"name": "k"}},
    },
    "rollout": {"steps": [{"weight": 10}, {"weight": 50}], "paused": True},
}
STATUS: dict[str, Any] = {
    "stableRevision": "s1",
    "canaryRevision": "c1",
    "rollout": {
        "phase": "Paused",
        "step": 1,
        "reason": "Paused",
        "lastAnalysis": "canary within thresholds over 60 requests",
        "lastAnalysisAt": "2026-12-01T10:00:00Z",
        "quality": {
            "stableRevision": "s1",
            "canaryRevision": "c1",
            "verdict": "Passed",
            "message": "quality canary 0.950 vs stable 1.000: within margin 0.05",
        },
        "scores": [
            {"revision": "s1", "role": "stable", "score": 1.0, "casesPassed": 20, "cases": 20},
            {
                "revision": "c1",
                "role": "canary",
                "score": 0.95,
                "casesPassed": 19,
                "cases": 20,
                "failures": ["json: not JSON"],
                "tokensPerSecondPerReplica": 120.0,
                "costPerMillionTokens": 5.787,
            },
        ],
        "checks": [{"name": "ttft-median", "canary": 0.1, "stable": 0.2, "passed": True}],
    },
    "revisions": [
        {"name": "s1", "digest": "sha256:" + "b" * 64, "weight": 50, "readyReplicas": 3},
        {"name": "c1", "digest": "sha256:" + "a" * 64, "weight": 50, "readyReplicas": 2},
    ],
    "history": [
        {
            "revision": "s1",
            "digest": "sha256:" + "b" * 64,
            "signer": "key:sha256:1",
            "verdict": "Verified",
            "outcome": "Promoted",
            "reason": "Promoted",
            "at": "2026-12-01T09:00:00Z",
        }
    ],
}


@pytest.mark.parametrize(
    ("command", "fields"),
    [
        pytest.param("pause", {"paused": True}, id="pause"),
        pytest.param("resume", {"paused": False}, id="resume"),
        pytest.param("promote", {"promote": True}, id="promote"),
        pytest.param("abort", {"abort": True}, id="abort"),
        pytest.param("clear", {"paused": False, "promote": False, "abort": False}, id="clear"),
    ],
)
def test_a_control_writes_only_its_spec_rollout_fields(
    command: str, fields: dict[str, bool]
) -> None:
    assert views.control_patch(command) == {"spec": {"rollout": fields}}


def test_rollout_status_shows_phase_step_weights_analysis_and_quality() -> None:
    view = views.rollout_status("m", {"spec": SPEC, "status": STATUS})
    text = views.render(view)
    assert "Phase:         Paused" in text
    assert "Step:          2/2 (50%)" in text
    assert "Controls:      paused (spec.rollout)" in text
    assert "(at 2026-12-01T10:00:00Z)" in text
    assert "Quality:       Passed: quality canary 0.950" in text
    assert "c1        canary  0.950  19/20  120.0             5.7870" in text, text
    assert "json: not JSON" in text and "ttft-median" in text
    assert view.data["weights"] == {"s1": 50, "c1": 50}
    assert view.data["controls"] == {"paused": True, "promote": False, "abort": False}


def test_a_fresh_deployment_shows_dashes_not_errors() -> None:
    text = views.render(views.rollout_status("m", {"spec": SPEC}))
    assert "Phase:         -" in text and "Quality:       not configured" in text


def test_history_lists_the_decided_revisions() -> None:
    view = views.rollout_history("m", {"status": STATUS})
    lines = views.render(view).splitlines()
    assert lines[1].split() == [
        "TIME",
        "REVISION",
        "DIGEST",
        "SIGNER",
        "VERDICT",
        "OUTCOME",
        "REASON",
    ]
    assert lines[2].split()[1:] == [
        "s1",
        "sha256:bbbbbbbbbbbb",
        "key:sha256:1",
        "Verified",
        "Promoted",
        "Promoted",
    ]
    assert view.data["history"][0]["outcome"] == "Promoted"


POOL: dict[str, Any] = {
    "metadata": {"name": "p"},
    "spec": {"zones": {"names": ["a", "b"]}, "warm": {"perZone": 1}, "replicas": {"max": 6}},
    "status": {
        "zones": [
            {"name": "a", "desired": 3, "ready": 3},
            {"name": "b", "desired": 3, "ready": 0, "healthy": False, "message": "lost"},
        ],
        "autoscaling": {"demand": 6, "reason": "QueueAge"},
    },
}


def test_pools_show_each_zone_with_warm_and_the_scaling_reason() -> None:
    view = views.pools([POOL])
    rows = view.tables[0].rows
    assert rows == (
        ("p", "a", "3", "3", "1", "yes", "QueueAge", "-"),
        ("p", "b", "3", "0", "0", "no: lost", "QueueAge", "-"),
    )
    assert view.data["pools"][0]["autoscaling"]["demand"] == 6


def test_pools_show_what_a_previewed_policy_would_do_and_whose_targets_it_is() -> None:
    auto = {"demand": 6, "reason": "QueueAge"}
    tried = {"wouldBeReplicas": 9, "reason": "KvCacheUsage", "policy": "preview"}
    pool = {**POOL, "status": {**POOL["status"], "autoscaling": {**auto, "preview": tried}}}
    assert views.pools([pool]).tables[0].rows[0][-1] == "9 (KvCacheUsage)"
    promoted = {**tried, "policy": "spec"}
    pool = {**POOL, "status": {**POOL["status"], "autoscaling": {**auto, "preview": promoted}}}
    shown = views.pools([pool])
    assert shown.tables[0].rows[0][-1] == "9 (KvCacheUsage) [spec's own; preview active]"
    assert shown.data["pools"][0]["autoscaling"]["preview"]["wouldBeReplicas"] == 9


@pytest.mark.parametrize(
    ("load", "row"),
    [
        pytest.param(
            views.PoolLoad(pool="p", ttft_p99=0.1234, queue_age=1.5, kv_usage=0.42),
            ("p", "123", "1.50", "42.0%"),
            id="figures",
        ),
        pytest.param(
            views.PoolLoad(pool="p", ttft_p99=None, queue_age=None, kv_usage=None),
            ("p", "-", "-", "-"),
            id="no-series",
        ),
    ],
)
def test_top_rows(load: views.PoolLoad, row: tuple[str, ...]) -> None:
    assert views.top([load]).tables[0].rows == (row,)


def test_an_empty_table_says_none() -> None:
    empty = views.View(tables=(views.Table(title="T", columns=("A",), rows=()),), data={})
    assert views.render(empty) == "T:\nA\n(none)"

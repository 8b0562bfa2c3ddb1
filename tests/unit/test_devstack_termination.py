"""How the node agent reads a simulated pod's graceful deletion: which preStop it honours (the
worker image's drain with its bound, a sleep, none) and how much of the grace period is left."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from tokenfleet.devstack import termination

DRAIN = ["python3", "-m", "tokenfleet.worker.drain", "--url", "http://x/metrics"]


def pod(hook: dict[str, Any] | None, deletion: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "vllm"}
    if hook is not None:
        container["lifecycle"] = {"preStop": hook}
    meta: dict[str, Any] = {"name": "p", "namespace": "n", "uid": "u"}
    if deletion:
        meta["deletionTimestamp"] = deletion
    return {"metadata": meta, "spec": {"containers": [container]}}


@pytest.mark.parametrize(
    ("hook", "expected"),
    [
        pytest.param(
            {"exec": {"command": [*DRAIN, "--max-seconds", "30"]}},
            termination.PreStop(drain_seconds=30.0),
            id="drain-with-bound",
        ),
        pytest.param(
            {"exec": {"command": DRAIN}}, termination.PreStop(drain_seconds=600.0), id="default"
        ),
        pytest.param({"sleep": {"seconds": 15}}, termination.PreStop(sleep_seconds=15), id="sleep"),
        pytest.param({"exec": {"command": ["sh", "-c", "x"]}}, termination.PreStop(), id="other"),
        pytest.param(None, termination.PreStop(), id="none"),
    ],
)
def test_pre_stop(hook: dict[str, Any] | None, expected: termination.PreStop) -> None:
    assert termination.pre_stop(pod(hook)) == expected


NOW = datetime.datetime(2026, 12, 1, 12, 0, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("deletion", "left"),
    [
        pytest.param("2026-12-01T12:00:45Z", 45.0, id="ahead"),
        pytest.param("2026-12-01T11:59:00Z", 0.0, id="past"),
        pytest.param(None, 0.0, id="not-deleted"),
    ],
)
def test_remaining_grace(deletion: str | None, left: float) -> None:
    assert termination.remaining_grace(pod(None, deletion), NOW) == left

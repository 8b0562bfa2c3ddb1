"""The preStop drain: reading vLLM's running gauge from metrics text, and when the drain ends
(idle twice in a row, the bound, an engine that stopped answering), on a fake clock."""

from __future__ import annotations

import pytest

from tokenfleet.worker import drain

METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 2
vllm:num_requests_running{model_name="m2"} 1.0
vllm:num_requests_running_total_lookalike 9
vllm:num_requests_waiting{model_name="m"} 4
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(METRICS, 3.0, id="summed-over-series"),
        pytest.param("vllm:num_requests_running 0\n", 0.0, id="unlabelled"),
        pytest.param("vllm:num_requests_waiting 4\n", None, id="absent"),
        pytest.param("", None, id="empty"),
    ],
)
def test_running(text: str, expected: float | None) -> None:
    assert drain.running(text) == expected


def _gauge(n: float) -> str:
    return f"vllm:num_requests_running {n}\n"


@pytest.mark.parametrize(
    ("readings", "max_seconds", "reason", "seconds"),
    [
        pytest.param([_gauge(0), _gauge(0)], 60, "Idle", 1.0, id="idle-at-once"),
        pytest.param(
            [_gauge(2), _gauge(1), _gauge(0), _gauge(0)], 60, "Idle", 3.0, id="streams-finish"
        ),
        pytest.param([_gauge(0), _gauge(1), _gauge(0), _gauge(0)], 60, "Idle", 3.0, id="late"),
        pytest.param([_gauge(5)] * 100, 4, "Deadline", 4.0, id="bound"),
        pytest.param([_gauge(1), None], 60, "EngineGone", 1.0, id="engine-gone"),
    ],
)
def test_drain_ends(
    readings: list[str | None], max_seconds: float, reason: str, seconds: float
) -> None:
    now = [0.0]
    feed = iter(readings)

    def sleep(s: float) -> None:
        now[0] += s

    done = drain.drain(
        read=lambda: next(feed),
        clock=lambda: now[0],
        sleep=sleep,
        max_seconds=max_seconds,
        interval=1.0,
    )
    assert (done.reason, done.seconds) == (reason, seconds)

"""What `tokenfleet bench replica` reports a replica carried at one load level.

Completions are counted in the steady part of the window (its last two thirds): the drain
after the window is not charged to the replica (the old measure divided by the time to the last
completion and read a replica keeping up with 2 req/s of 4 s requests as 1.2 req/s), and an
overloaded replica is not credited with the backlog it finishes afterwards.
"""

from __future__ import annotations

import pytest

from tokenfleet.capacity import replica_bench


def record(
    done: list[float], prompt: float = 1000, completion: float = 200
) -> dict[str, list[float]]:
    return {
        "done": done,
        "prompt": [prompt] * len(done),
        "completion": [completion] * len(done),
        "ttft": [],
        "itl": [],
        "errors": [],
    }


@pytest.mark.parametrize(
    ("done", "requests"),
    [
        # kept up with 2 req/s over a 30 s window, 4 s requests: 2 a second from t=4 to t=34,
        # then the drain; 40 completions in [10, 30] -> 2 req/s
        pytest.param([4 + i / 2 for i in range(61)], 2.0, id="keeps-up-drain-not-charged"),
        # overloaded: it finishes 1 a second whatever is offered, and drains a long backlog
        pytest.param([float(t) for t in range(1, 120)], 1.0, id="overloaded-backlog-not-credited"),
        pytest.param([], 0.0, id="nothing-finished"),
    ],
)
def test_carried_counts_the_steady_part_of_the_window(done: list[float], requests: float) -> None:
    rates = replica_bench.carried(record(done), start=0.0, seconds=30.0)
    assert rates.requests == pytest.approx(requests, rel=0.03)
    assert rates.prompt_tokens == pytest.approx(1000 * requests, rel=0.03)
    assert rates.completion_tokens == pytest.approx(200 * requests, rel=0.03)

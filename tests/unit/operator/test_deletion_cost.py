"""Deletion costs from in-flight load: the least-loaded worker is cheapest to remove, an
unmeasured one is never cheaper than a measured one, and only changed annotations are written."""

from __future__ import annotations

import pytest

from tokenfleet.operator.policy import deletion_cost


@pytest.mark.parametrize(
    ("pods", "running", "expected"),
    [
        pytest.param(["a", "b"], {"a": 3, "b": 0}, {"a": 3, "b": 0}, id="load-is-cost"),
        pytest.param(["a", "b"], {"a": 2.6}, {"a": 3, "b": 3}, id="unknown-gets-the-highest"),
        pytest.param(["a"], {}, {"a": 0}, id="nothing-known"),
        pytest.param([], {"x": 1}, {}, id="no-pods"),
    ],
)
def test_costs(pods: list[str], running: dict[str, float], expected: dict[str, int]) -> None:
    assert deletion_cost.costs(pods, running) == expected


def test_only_changed_annotations_are_written() -> None:
    assert deletion_cost.changed({"a": "3", "b": "1"}, {"a": 3, "b": 0, "c": 2}) == {
        "b": "0",
        "c": "2",
    }

"""Which stacks TOKENFLEET_ENGINE=vllm-cpu may start, and the fix named when it may not (the
pure check the stack runs before it starts anything)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tokenfleet.devstack import real_engine


def everything(_: Path) -> bool:
    return True


def nothing(_: Path) -> bool:
    return False


@pytest.mark.parametrize(
    ("engine", "real_node", "platform", "present", "says"),
    [
        pytest.param("simulator", False, False, nothing, None, id="simulator-needs-nothing"),
        pytest.param("vllm-cpu", True, True, everything, None, id="vllm-cpu-ready"),
        pytest.param("vllm", True, True, everything, "must be one of", id="unknown-engine"),
        pytest.param("vllm-cpu", False, True, everything, "the real node", id="no-real-node"),
        pytest.param("vllm-cpu", True, False, everything, "the platform", id="no-platform"),
        pytest.param("vllm-cpu", True, True, nothing, "make prepared", id="no-model-set"),
    ],
)
def test_the_engine_mode_is_refused_with_its_fix(
    engine: str, real_node: bool, platform: bool, present: Callable[[Path], bool], says: str | None
) -> None:
    problem = real_engine.refusal(
        engine,
        real_node=real_node,
        platform=platform,
        present=present,
    )
    if says is None:
        assert problem is None
    else:
        assert problem is not None and says in problem

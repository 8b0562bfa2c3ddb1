"""bench/routing.py counts only what the SLO counts: a request is goodput when it met its class's
objective *and* finished within the offered window plus the same grace for every router. Before,
``summarize`` divided every good request by the window, so a queued excess drained after the
window counted, and 1, 2 and 4 gateway processes all showed the identical 115.13 req/s."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[3] / "bench"


def routing() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # routing.py imports its sibling _processes
    try:
        spec = importlib.util.spec_from_file_location("bench_routing", BENCH / "routing.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_routing"] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def test_a_request_served_after_the_window_is_not_goodput() -> None:
    r = routing()
    begin, seconds = 1000.0, 10.0
    deadline = begin + seconds + r.GRACE
    on_time = r.Result(cls="batch", ttft=20.0, gaps=[0.02], ok=True, status=200, ended=deadline - 1)
    drained = r.Result(cls="batch", ttft=25.0, gaps=[0.02], ok=True, status=200, ended=deadline + 5)
    interactive = r.Result(
        cls="interactive", ttft=0.5, gaps=[0.02], ok=True, status=200, ended=begin + 3
    )
    got = r.summarize([on_time, drained, interactive], seconds, deadline=deadline)
    # both batch requests met batch's 30 s objective, but only one finished in time
    assert got["goodput"] == 2 / seconds
    assert got["late"] == 1
    assert got["goodput_by_class"] == {"critical": 0.0, "interactive": 0.1, "batch": 0.1}
    # held to 1 s, batch's 20 s wait is not good
    assert got["goodput_1s"] == 1 / seconds


def test_the_grace_is_one_request_served_within_the_interactive_objective() -> None:
    r = routing()
    assert r.GRACE == r.TTFT_SLO + r.OUTPUT_TOKENS * r.ITL_SLO

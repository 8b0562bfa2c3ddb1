"""The engine-internals checklist (tokenfleet.devstack.engine_panels) against its sources.

Matrix: PANELS is every target of the Engine internals dashboard, in order; RULES is every
recorded series of the tokenfleet.engine group plus the gateway's prefix-hit belief, each one a
rule of monitoring/rules.yaml; every panel reads recorded series only; the simulator-silent set
is exactly the families llm-d-inference-sim does not export; ``filled`` sets the variables.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tokenfleet.devstack import dashboards, engine_panels, monitoring

REPO = Path(__file__).resolve().parents[2]
BOARDS = {
    d["uid"]: dashboards.dashboard(d)
    for d in monitoring.load(REPO / "monitoring" / "dashboards.yaml")["dashboards"]
}
GROUPS = monitoring.rule_groups(monitoring.load(REPO / "monitoring" / "rules.yaml"))
RECORDS = {r["record"] for g in GROUPS for r in g["rules"] if "record" in r}


def test_panels_are_the_dashboards_targets_in_order() -> None:
    board = BOARDS[engine_panels.DASHBOARD]
    assert [e for _, e in dashboards.queries(board)] == list(engine_panels.PANELS)


def test_rules_are_the_engine_group_and_the_gateway_belief() -> None:
    (engine,) = [g for g in GROUPS if g["name"] == "tokenfleet.engine"]
    expected = {r["record"] for r in engine["rules"]}
    expected.add("model:tokenfleet_gateway_prefix_hit_blocks:ratio_rate5m")
    assert set(engine_panels.RULES) == expected
    assert len(engine_panels.RULES) == len(expected)


@pytest.mark.parametrize("query", engine_panels.PANELS)
def test_every_panel_reads_a_recorded_series(query: str) -> None:
    series = re.match(r"[a-z_]+:[a-z_:0-9]+", query)
    assert series and series[0] in RECORDS, query


def test_the_simulator_silent_set_is_what_the_simulator_does_not_export() -> None:
    silent = engine_panels.SIMULATOR_SILENT
    assert silent < set(engine_panels.REAL_ENGINE)
    for query in engine_panels.REAL_ENGINE:
        fed = any(
            name in query
            for name in ("prefill_time", "decode_time", "num_requests_running", "gateway_prefix")
        )
        assert (query in silent) != fed, query


@pytest.mark.parametrize(
    ("query", "kwargs", "expected"),
    [
        pytest.param(
            'x{namespace=~"$namespace",model=~"$model"}',
            {},
            'x{namespace=~".*",model=~".*"}',
            id="all",
        ),
        pytest.param(
            'x{namespace=~"$namespace",model=~"$model"}',
            {"namespace": "ns", "model": "tiny"},
            'x{namespace=~"ns",model=~"tiny"}',
            id="chosen",
        ),
    ],
)
def test_filled_sets_the_dashboard_variables(
    query: str, kwargs: dict[str, str], expected: str
) -> None:
    assert engine_panels.filled(query, **kwargs) == expected

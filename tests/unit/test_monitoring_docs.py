"""docs/metrics.md names every metric TokenFleet exports or reads, and every alert it ships.

Matrix: each name of tokenfleet.signals.gateway, .operator and .vllm (aliases included) and
each alert of monitoring/rules.yaml appears in the page; a new metric without a row fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenfleet.devstack import monitoring
from tokenfleet.signals import gateway, operator, vllm

REPO = Path(__file__).resolve().parents[2]
PAGE = (REPO / "docs" / "metrics.md").read_text()


def _names() -> list[str]:
    out: list[str] = []
    for module in (gateway, operator):
        out += [v for k, v in vars(module).items() if k.isupper() and isinstance(v, str)]
    for k, v in vars(vllm).items():
        if k.isupper() and isinstance(v, tuple):
            out += list(v)
    return out


@pytest.mark.parametrize("name", _names())
def test_every_metric_is_documented(name: str) -> None:
    if name.startswith("vllm:gpu_prefix_cache"):  # documented as the alias family
        name = "vllm:gpu_prefix_cache_"
    assert f"`{name}" in PAGE, f"docs/metrics.md has no row for {name}"


ALERTS = [
    r["alert"]
    for g in monitoring.rule_groups(monitoring.load(REPO / "monitoring" / "rules.yaml"))
    for r in g["rules"]
    if "alert" in r
]


@pytest.mark.parametrize("alert", ALERTS)
def test_every_alert_is_documented(alert: str) -> None:
    assert f"| `{alert}` |" in PAGE

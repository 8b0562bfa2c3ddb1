"""The recording rules and alerts of monitoring/rules.yaml, checked and run by promtool.

Matrix: the rendered rule file and the PrometheusRule's groups pass `promtool check rules`; the
synthetic-series cases of monitoring/tests/rules_test.yaml pass `promtool test rules`; the
rendered scrape configuration passes `promtool check config`; every metric a rule reads is one
TokenFleet or vLLM exports (tokenfleet.signals); every alert says how bad and what happened.
promtool is the one tools/build.sh builds beside Prometheus: the test fails, never skips, if
it is missing.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tokenfleet.devstack import monitoring
from tokenfleet.signals import gateway, operator, vllm

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "monitoring"
GROUPS = monitoring.rule_groups(monitoring.load(FOLDER / "rules.yaml"))


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    from support.cluster import BIN_DIR

    binary = BIN_DIR / "promtool"
    assert binary.exists(), f"{binary} is missing: run tools/build.sh (make test does)"
    return subprocess.run(
        [str(binary), *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd
    )


def test_rendered_rule_file_is_valid() -> None:
    done = promtool("check", "rules", str(FOLDER / "rendered" / "rules.yaml"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {sum(len(g['rules']) for g in GROUPS)} rules found" in done.stdout


def test_prometheus_rule_groups_are_valid(tmp_path: Path) -> None:
    (rule,) = yaml.safe_load_all((FOLDER / "rendered" / "prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule"
    path = tmp_path / "groups.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    done = promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def test_rules_behave_on_synthetic_series() -> None:
    done = promtool("test", "rules", "rules_test.yaml", cwd=FOLDER / "tests")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_rendered_scrape_configs_are_a_valid_prometheus_config(tmp_path: Path) -> None:
    (snippet,) = yaml.safe_load_all((FOLDER / "rendered" / "scrape-configs.yaml").read_text())
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump({"global": {"scrape_interval": "30s"}, **snippet}))
    done = promtool("check", "config", "--syntax-only", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def _exported() -> set[str]:
    names: set[str] = {"up"}
    for module in (gateway, operator):
        names |= {v for k, v in vars(module).items() if k.isupper() and isinstance(v, str)}
    for k, v in vars(vllm).items():
        if k.isupper() and isinstance(v, tuple):
            names |= set(v)
    return names


METRIC = re.compile(r"\b(vllm:[a-z_]+|tokenfleet_[a-z_]+|up)\b")


RECORDED = sorted((r["record"] for g in GROUPS for r in g["rules"] if "record" in r), key=len)


def _read(rule: dict[str, Any]) -> set[str]:
    """Exported names a rule reads (series recorded by other rules left out)."""
    expr = rule["expr"]
    for name in reversed(RECORDED):
        expr = expr.replace(name, "")
    found = set(METRIC.findall(expr))
    return {re.sub(r"_(bucket|count|sum)$", "", n) for n in found}


@pytest.mark.parametrize(
    "rule", [r for g in GROUPS for r in g["rules"]], ids=lambda r: r.get("record") or r["alert"]
)
def test_every_metric_a_rule_reads_is_exported(rule: dict[str, Any]) -> None:
    unknown = {
        n
        for n in _read(rule)
        if n not in _exported() and n.removesuffix("_total") + "_total" not in _exported()
    }
    assert not unknown, f"not exported by TokenFleet or vLLM: {sorted(unknown)}"


@pytest.mark.parametrize(
    "alert", [r for g in GROUPS for r in g["rules"] if "alert" in r], ids=lambda r: r["alert"]
)
def test_every_alert_has_a_severity_and_says_what_happened(alert: dict[str, Any]) -> None:
    assert alert["labels"]["severity"] in ("page", "ticket")
    assert alert["annotations"]["summary"] and alert["annotations"]["description"]


def test_required_alerts_exist() -> None:
    alerts = {r["alert"] for g in GROUPS for r in g["rules"] if "alert" in r}
    assert {
        "TokenFleetTTFTBudgetBurnFast",
        "TokenFleetTTFTBudgetBurnSlow",
        "TokenFleetAvailabilityBudgetBurnFast",
        "TokenFleetAvailabilityBudgetBurnSlow",
        "TokenFleetPoolBelowWarmFloor",
        "TokenFleetScalingMetricsMissing",
        "TokenFleetRolloutStuck",
        "TokenFleetQuotaBackendDown",
        "TokenFleetZoneLost",
    } <= alerts

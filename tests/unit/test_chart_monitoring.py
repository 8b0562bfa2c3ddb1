"""The chart's monitoring switch, rendered by helm without a cluster: which Prometheus Operator
objects a release gets, and what NOTES.txt tells whoever installs it.

Matrix: monitoring.enabled auto (the default) / true / false × the monitoring.coreos.com/v1 API
absent / announced as a group-version / as the PodMonitor kind (what `helm install` learns from
a cluster's discovery; `--api-versions` stands in for it here); the local overlay (no
Prometheus Operator); values the schema refuses; monitoring.labels and interval on what is
rendered; NOTES naming the objects made, or warning why autoscaling and canaries would starve
and how to fix it. helm is the one tools/build.sh builds: the test fails, never skips, if it is
missing. tests/integration/test_chart.py covers the same switch against a real API server.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tokenfleet"
LOCAL = CHART / "values-local.yaml"
MONITORS = {"tokenfleet-workers", "tokenfleet-gateway", "tokenfleet-operator"}
#: What `helm install` finds on a cluster running the Prometheus Operator, either way Helm
#: lists it (discovery gives both the group-version and group-version/kind).
WITH_API = ["--api-versions", "monitoring.coreos.com/v1"]
WITH_KIND = ["--api-versions", "monitoring.coreos.com/v1/PodMonitor"]


def helm(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    from support.cluster import BIN_DIR

    binary = BIN_DIR / "helm"
    assert binary.exists(), f"{binary} is missing: run tools/build.sh (make test does)"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "KUBECONFIG": str(home / "no-cluster"),  # nothing here may reach a cluster
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    return subprocess.run(
        [str(binary), *args], capture_output=True, text=True, timeout=120, check=False, env=env
    )


def rendered(tmp_path: Path, *args: str) -> list[dict[str, Any]]:
    done = helm("template", "tokenfleet", str(CHART), "-n", "tf", *args, home=tmp_path)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def notes(tmp_path: Path, *args: str) -> str:
    """NOTES.txt as `helm install` prints it (a client-side dry run: no cluster)."""
    done = helm(
        "install", "tokenfleet", str(CHART), "-n", "tf", "--dry-run=client", *args, home=tmp_path
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\nNOTES:\n", 1)[1]


def monitoring_objects(docs: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Kind → names of what the monitoring switch renders (dashboards by their label)."""
    found: dict[str, set[str]] = {}
    for d in docs:
        labels = d["metadata"].get("labels") or {}
        if d["kind"] in ("PodMonitor", "PrometheusRule") or "grafana_dashboard" in labels:
            found.setdefault(d["kind"], set()).add(d["metadata"]["name"])
    return found


@pytest.mark.parametrize(
    ("args", "on"),
    [
        pytest.param([], False, id="auto-without-the-api"),
        pytest.param(WITH_API, True, id="auto-with-the-group-version"),
        pytest.param(WITH_KIND, True, id="auto-with-the-podmonitor-kind"),
        pytest.param(["--set", "monitoring.enabled=auto", *WITH_API], True, id="auto-said"),
        pytest.param(["--set", "monitoring.enabled=true"], True, id="true-without-the-api"),
        pytest.param(["--set", "monitoring.enabled=false", *WITH_API], False, id="false-with-it"),
        pytest.param(["-f", str(LOCAL)], False, id="local-overlay"),
        pytest.param(["-f", str(LOCAL), *WITH_API], False, id="local-overlay-says-false"),
    ],
)
def test_the_monitoring_objects_follow_the_switch_and_the_api(
    tmp_path: Path, args: list[str], on: bool
) -> None:
    """On: the three PodMonitors, the PrometheusRule and the five dashboards; off: none."""
    found = monitoring_objects(rendered(tmp_path, *args))
    if on:
        assert found["PodMonitor"] == MONITORS
        assert found["PrometheusRule"] == {"tokenfleet"}
        assert len(found["ConfigMap"]) == 5
    else:
        assert found == {}


def test_auto_is_the_default(tmp_path: Path) -> None:
    assert yaml.safe_load((CHART / "values.yaml").read_text())["monitoring"]["enabled"] == "auto"
    fixed = ["--set", "generateSecrets=false", *WITH_API]  # no random Secrets to compare
    assert rendered(tmp_path, *fixed) == rendered(
        tmp_path, "--set", "monitoring.enabled=auto", *fixed
    )


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--set", "monitoring.enabled=maybe"], id="unknown-word"),
        pytest.param(["--set-string", "monitoring.enabled=true"], id="the-string-true"),
    ],
)
def test_the_schema_refuses_anything_but_auto_true_or_false(
    tmp_path: Path, args: list[str]
) -> None:
    done = helm("template", "tokenfleet", str(CHART), *args, home=tmp_path)
    assert done.returncode != 0 and "/monitoring/enabled" in done.stderr, done.stderr


def test_every_podmonitor_endpoint_scrapes_at_the_interval(tmp_path: Path) -> None:
    """monitoring.interval reaches every endpoint (the 60 s canary window needs 4 scrapes; a
    Prometheus's own default is often 30 s)."""
    docs = rendered(tmp_path, *WITH_API, "--set", "monitoring.interval=10s")
    endpoints = [
        e for d in docs if d["kind"] == "PodMonitor" for e in d["spec"]["podMetricsEndpoints"]
    ]
    assert len(endpoints) == 3 and {e["interval"] for e in endpoints} == {"10s"}


def test_notes_name_what_was_made_and_how_prometheus_finds_it(tmp_path: Path) -> None:
    text = notes(tmp_path, "--set", "monitoring.enabled=true")
    for name in sorted(MONITORS):
        assert f"PodMonitor {name}" in text, text
    assert "PrometheusRule tokenfleet" in text, text
    assert "release: <" in text and "monitoring.labels.release" in text, text
    assert "WARNING" not in text, text
    labelled = notes(
        tmp_path, "--set", "monitoring.enabled=true", "--set", "monitoring.labels.release=kps"
    )
    assert "release=kps" in labelled and "monitoring.labels.release=<" not in labelled, labelled


@pytest.mark.parametrize(
    ("args", "why"),
    [
        pytest.param([], "found no monitoring.coreos.com/v1 API", id="auto-without-the-api"),
        pytest.param(["--set", "monitoring.enabled=false"], "monitoring.enabled=false", id="off"),
    ],
)
def test_notes_warn_loudly_when_no_podmonitors_were_made(
    tmp_path: Path, args: list[str], why: str
) -> None:
    """What breaks (autoscaling at its floor, canaries stuck), what it needs (labelled worker
    series), the two ways to get them, and the Prometheus URL that must match."""
    text = notes(tmp_path, *args)
    assert "WARNING: no PodMonitors" in text and why in text, text
    for needed in (
        "autoscaling",
        "canar",
        "namespace, pool, model and revision",
        "monitoring.enabled=true",
        "monitoring/rendered/scrape-configs.yaml",
        "operator.prometheusUrl",
        "http://prometheus-operated.monitoring.svc:9090",
        "MetricsUnavailable",
    ):
        assert needed in text, (needed, text)

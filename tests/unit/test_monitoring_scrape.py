"""The scrape jobs of monitoring/scrape.yaml, rendered for each kind of Prometheus.

Matrix: committed renderings current (like crds/); the relabel rules are written once and read
the pod labels tokenfleet.api.labels names; PodMonitors and plain scrape_configs carry the same
rules; the local stack's config runs the same jobs with only its discovery added, and scrapes
the real node's host-network pods on loopback; a host process's stand-in Pod is selected by
exactly its job; the operator's job names are the shipped ones.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tokenfleet.api import labels
from tokenfleet.devstack import monitoring, prometheus
from tokenfleet.signals import jobs

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "monitoring"
RENDERED = monitoring.render_files(FOLDER)
SOURCE = monitoring.load(FOLDER / "scrape.yaml")


def job(name: str) -> dict[str, Any]:
    return next(j for j in SOURCE["jobs"] if j["job"] == name)


@pytest.mark.parametrize("name", sorted(RENDERED))
def test_committed_rendering_is_current(name: str) -> None:
    assert (FOLDER / name).read_text() == RENDERED[name], f"{name} is stale: run make monitoring"


def test_no_stray_rendered_files() -> None:
    on_disk = {str(p.relative_to(FOLDER)) for p in (FOLDER / "rendered").rglob("*") if p.is_file()}
    chart = FOLDER / monitoring.CHART_FILES
    on_disk |= {f"{monitoring.CHART_FILES}/{p.name}" for p in chart.iterdir() if p.is_file()}
    assert on_disk == set(RENDERED)


def test_check_mode_reports_stale_files(tmp_path: Path) -> None:
    for name in ("scrape.yaml", "rules.yaml", "dashboards.yaml"):
        (tmp_path / name).write_text((FOLDER / name).read_text())
    assert monitoring.main(["--check", str(tmp_path)]) == 1
    assert monitoring.main(["--write", str(tmp_path)]) == 0
    assert monitoring.main(["--check", str(tmp_path)]) == 0


@pytest.mark.parametrize(
    ("key", "meta"),
    [
        pytest.param(labels.POOL, "__meta_kubernetes_pod_label_tokenfleet_io_pool", id="pool"),
        pytest.param(labels.ROLE, "__meta_kubernetes_pod_label_tokenfleet_io_role", id="role"),
        pytest.param(
            labels.TOPOLOGY_ZONE,
            "__meta_kubernetes_pod_label_topology_kubernetes_io_zone",
            id="topology-zone",
        ),
    ],
)
def test_pod_label_meta_names_are_sanitised_as_prometheus_does(key: str, meta: str) -> None:
    assert monitoring.label_meta(key) == meta


@pytest.mark.parametrize(
    ("target", "pod_label"),
    [
        pytest.param("pool", labels.POOL, id="pool"),
        pytest.param("model", labels.MODEL, id="model"),
        pytest.param("revision", labels.REVISION, id="revision"),
        pytest.param("zone", labels.ZONE, id="zone"),
    ],
)
def test_worker_series_get_the_labels_the_operator_puts_on_pods(
    target: str, pod_label: str
) -> None:
    rules = {r["target_label"]: r["source_labels"] for r in job("vllm")["relabelings"]}
    assert rules[target] == [monitoring.label_meta(pod_label)]


def test_every_job_names_the_pod_and_its_namespace() -> None:
    common = {r["target_label"]: r["source_labels"] for r in SOURCE["common_relabelings"]}
    assert common == {
        "namespace": ["__meta_kubernetes_namespace"],
        "pod": ["__meta_kubernetes_pod_name"],
    }


def test_workers_are_selected_by_role_and_the_engine_port() -> None:
    assert job("vllm")["pod_labels"] == {labels.ROLE: labels.ROLE_WORKER}
    assert job("vllm")["port"] == "http"


def _snake(rule: dict[str, Any]) -> dict[str, Any]:
    return {"".join("_" + c.lower() if c.isupper() else c for c in k): v for k, v in rule.items()}


@pytest.mark.parametrize("name", [j["job"] for j in SOURCE["jobs"]])
def test_podmonitor_and_scrape_config_apply_the_same_rules(name: str) -> None:
    monitor = next(
        m
        for m in monitoring.pod_monitors(SOURCE)
        if m["metadata"]["name"] == job(name)["podmonitor"]
    )
    endpoint = monitor["spec"]["podMetricsEndpoints"][0]
    plain = next(c for c in monitoring.scrape_configs(SOURCE) if c["job_name"] == name)
    shared = [r for r in plain["relabel_configs"] if r.get("action") not in ("keep", "drop")]
    assert [_snake(r) for r in endpoint["relabelings"]] == [
        *shared,
        {"target_label": "job", "replacement": name},
    ]
    assert endpoint["honorLabels"] == plain["honor_labels"]
    assert endpoint["port"] == job(name)["port"]
    assert monitor["spec"]["selector"] == {"matchLabels": job(name)["pod_labels"]}
    assert monitor["spec"]["namespaceSelector"] == {"any": True}


def test_local_config_runs_the_shipped_jobs_with_only_discovery_added(tmp_path: Path) -> None:
    local = yaml.safe_load(prometheus.config(kubeconfig=tmp_path / "kubeconfig"))
    shipped = monitoring.scrape_configs(SOURCE)
    assert len(local["scrape_configs"]) == len(shipped)
    for mine, theirs in zip(local["scrape_configs"], shipped, strict=True):
        assert mine["kubernetes_sd_configs"] == [
            {"role": "pod", "kubeconfig_file": str(tmp_path / "kubeconfig")}
        ]
        assert {k: v for k, v in mine.items() if k != "kubernetes_sd_configs"} == {
            k: v for k, v in theirs.items() if k != "kubernetes_sd_configs"
        }


@pytest.mark.parametrize("name", ["tokenfleet-gateway", "tokenfleet-operator"])
def test_host_process_pod_is_selected_by_its_job_only(name: str) -> None:
    pod = prometheus.host_pod(job=name, name="local", port=18080, node="gpu-zone-a-0")
    chosen = [
        j["job"]
        for j in SOURCE["jobs"]
        if all(pod["metadata"]["labels"].get(k) == v for k, v in j["pod_labels"].items())
    ]
    assert chosen == [name]
    (container,) = pod["spec"]["containers"]
    assert container["ports"] == [{"name": job(name)["port"], "containerPort": 18080}]
    assert pod["spec"]["hostNetwork"] is True


def relabel(rules: list[dict[str, Any]], meta: dict[str, str]) -> dict[str, str]:
    """Prometheus' ``replace`` relabelling (the default action), as its docs define it: the
    source labels joined by ``;``, the regex anchored at both ends, ``$1`` substituted, an
    empty result removing the target label."""
    out = dict(meta)
    for rule in rules:
        assert rule.get("action", "replace") == "replace"
        value = ";".join(out.get(s, "") for s in rule["source_labels"])
        match = re.fullmatch(rule.get("regex", "(.*)"), value)
        if match is None:
            continue
        result = match.expand(re.sub(r"\$(\d+)", r"\\\1", rule["replacement"]))
        if result:
            out[rule["target_label"]] = result
        else:
            out.pop(rule["target_label"], None)
    return out


@pytest.mark.parametrize(
    ("node", "ip", "address"),
    [
        pytest.param("real", "192.0.2.7", "127.0.0.1:8080", id="host-network-pod-on-real-node"),
        pytest.param("real", "10.250.0.12", "10.250.0.12:8080", id="bridge-pod-on-real-node"),
        pytest.param("gpu-zone-a-0", "127.1.0.5", "127.1.0.5:8080", id="simulated-node-pod"),
        pytest.param("gpu-zone-a-0", "192.0.2.7", "192.0.2.7:8080", id="other-node-untouched"),
    ],
)
def test_host_network_pods_of_the_real_node_are_scraped_on_loopback(
    node: str, ip: str, address: str
) -> None:
    """Nothing may dial the machine's own address, which a host-network pod's IP on the real
    node is; the same pod's port is reachable on loopback."""
    rules = prometheus.loopback_relabelings(node="real", bridge_prefix="10.250.0.")
    meta = {
        "__address__": f"{ip}:8080",
        "__meta_kubernetes_pod_node_name": node,
        "__meta_kubernetes_pod_ip": ip,
        "__meta_kubernetes_pod_container_port_number": "8080",
    }
    assert relabel(rules, meta)["__address__"] == address


def test_the_local_config_puts_the_loopback_rules_first_in_every_job(tmp_path: Path) -> None:
    rules = prometheus.loopback_relabelings(node="real", bridge_prefix="10.250.0.")
    local = yaml.safe_load(prometheus.config(kubeconfig=tmp_path / "k", loopback=rules))
    for scrape in local["scrape_configs"]:
        assert scrape["relabel_configs"][: len(rules)] == rules


def test_the_operators_job_names_are_the_shipped_jobs() -> None:
    """tokenfleet.signals.jobs names the jobs the operator diagnoses missing signals by."""
    assert set(jobs.ALL) == {j["job"] for j in SOURCE["jobs"]}

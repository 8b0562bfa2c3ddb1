"""The gateway Deployment's rolling update, rendered by helm without a cluster.

On a cluster the gateway surges (one more pod first, none down meanwhile). On the local
platform its pods bind the real node's ports (hostNetwork): a surge pod could never schedule
beside the one it replaces — a `make up` after an upgrade left the new gateway Pending
("didn't have free ports for the requested pod ports") and the old version serving, silently.
values-local.yaml replaces the old pod first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_chart_monitoring import CHART, rendered


def gateway(tmp_path: Path, *args: str) -> dict[str, Any]:
    (deployment,) = [
        d
        for d in rendered(tmp_path, *args)
        if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-gateway")
    ]
    return deployment


def test_a_cluster_gateway_surges(tmp_path: Path) -> None:
    strategy = gateway(tmp_path)["spec"]["strategy"]
    assert strategy == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }


def test_a_host_network_gateway_replaces_its_pod_before_starting_the_next(tmp_path: Path) -> None:
    d = gateway(tmp_path, "-f", str(CHART / "values-local.yaml"))
    spec = d["spec"]["template"]["spec"]
    assert spec.get("hostNetwork") is True
    assert d["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}

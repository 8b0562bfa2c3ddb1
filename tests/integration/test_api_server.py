"""The CRDs on the real API server: examples apply and read back with defaults; the invalid table
is refused with the expected, actionable message; printer columns and short names work."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from support.cluster import Cluster
from support.objects import BASE, INVALID, manifest
from tokenfleet.api.adapter import ModelAdapterSpec
from tokenfleet.api.deployment import ModelDeploymentSpec
from tokenfleet.api.pool import InferencePoolSpec
from tokenfleet.api.route import ModelRouteSpec
from tokenfleet.api.tenant import TenantSpec

SPECS: dict[str, type[BaseModel]] = {
    "InferencePool": InferencePoolSpec,
    "ModelDeployment": ModelDeploymentSpec,
    "Tenant": TenantSpec,
    "ModelAdapter": ModelAdapterSpec,
    "ModelRoute": ModelRouteSpec,
}


def test_crds_are_established_with_short_names(cluster: Cluster) -> None:
    names = cluster.kubectl("api-resources", "--api-group=tokenfleet.io", "-o", "wide").stdout
    for kind, short in (
        ("InferencePool", "tfpool"),
        ("ModelDeployment", "tfmodel"),
        ("Tenant", "tftenant"),
        ("ModelAdapter", "tfadapter"),
        ("ModelRoute", "tfroute"),
    ):
        assert kind in names and short in names


def _example_docs(repo: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every Kubernetes object under examples/; the simulator's scenario files
    (examples/05-simulations, no apiVersion or kind) are run by tests/unit/sim instead."""
    return [
        (path, doc)
        for path in sorted((repo / "examples").rglob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and "apiVersion" in doc and "kind" in doc
    ]


def test_every_example_applies_and_reads_back_with_schema_defaults(
    cluster: Cluster, ns: str, repo: Path
) -> None:
    docs = _example_docs(repo)
    assert len(docs) >= 4  # a pool, a model deployment and two tenants at least
    for path in sorted({p for p, _ in docs}):
        cluster.kubectl("apply", "-n", ns, "-f", str(path))
    for _, doc in docs:
        if doc["apiVersion"] == "v1":  # an example's ConfigMap (a golden set): applied above
            continue
        kind, name = doc["kind"], doc["metadata"]["name"]
        stored = cluster.get(kind.lower(), name, "-n", ns)
        # The API server filled every default the model has, and nothing the model lacks.
        expected = SPECS[kind].model_validate(doc["spec"]).to_wire()  # type: ignore[attr-defined]
        assert stored["spec"] == expected, f"{kind}/{name} defaults drift from tokenfleet.api"


def test_defaults_fill_a_minimal_pool_on_the_server(cluster: Cluster, ns: str) -> None:
    cluster.apply(manifest("InferencePool", "minimal", ns, {}))
    spec = cluster.get("tfpool", "minimal", "-n", ns)["spec"]
    assert spec["replicas"] == {"min": 1, "max": 10}
    assert spec["warm"] == {"perZone": 1}
    assert [c["name"] for c in spec["admission"]["classes"]] == ["critical", "interactive", "batch"]
    assert spec["routing"]["policy"] == "PrefixAware"


@pytest.mark.parametrize(("kind", "spec", "message"), INVALID)
def test_invalid_object_is_refused_with_an_actionable_message(
    cluster: Cluster, ns: str, kind: str, spec: dict[str, Any], message: str
) -> None:
    done = cluster.apply(manifest(kind, "broken", ns, spec), check=False)
    assert done.returncode != 0, f"the API server accepted an invalid {kind}"
    assert message in done.stderr
    assert "Internal error" not in done.stderr
    missing = cluster.kubectl("get", kind.lower(), "broken", "-n", ns, check=False)
    assert missing.returncode != 0  # nothing was stored


@pytest.mark.parametrize("kind", sorted(BASE))
def test_base_objects_are_accepted(cluster: Cluster, ns: str, kind: str) -> None:
    cluster.apply(manifest(kind, "fine", ns, BASE[kind]))


def test_printer_columns_show_in_kubectl_get(cluster: Cluster, ns: str) -> None:
    cluster.apply(manifest("InferencePool", "cols", ns, BASE["InferencePool"]))
    cluster.apply(
        manifest("Tenant", "cols", ns, {**BASE["Tenant"], "quotas": {"tokensPerMinute": 777}})
    )
    cpu = {"accelerator": {"kind": "CPU", "cpu": "4", "memory": "16Gi"}}
    cluster.apply(manifest("InferencePool", "cpu", ns, cpu))
    pools = cluster.kubectl("get", "tfpool", "-n", ns).stdout.splitlines()
    assert pools[0].split()[:4] == ["NAME", "GPU", "MIN", "MAX"]
    assert pools[1].split()[:4] == ["cols", "NVIDIA-H100-80GB-HBM3", "3", "12"]
    # Device, last before Age, defaulted by the API server: a pool written before CPU pools
    # is a GPU pool; a CPU pool has no GPU product (an empty cell)
    assert pools[0].split()[-2:] == ["DEVICE", "AGE"]
    assert pools[1].split()[-2] == "GPU"
    assert pools[2].split()[:3] == ["cpu", "1", "10"] and pools[2].split()[-2] == "CPU"
    tenants = cluster.kubectl("get", "tftenant", "-n", ns).stdout
    assert "777" in tenants and "interactive" in tenants


@pytest.fixture
def operator_paused(operator: subprocess.Popen[bytes]) -> Iterator[None]:
    """The shared operator, if this file runs after it started, writes pool status too."""
    operator.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        operator.send_signal(signal.SIGCONT)


def test_status_subresource_accepts_conditions_and_spec_stays(
    cluster: Cluster, ns: str, operator_paused: None
) -> None:
    cluster.apply(manifest("InferencePool", "st", ns, BASE["InferencePool"]))
    status = {
        "status": {
            "observedGeneration": 1,
            "replicas": 3,
            "readyReplicas": 2,
            "conditions": [{"type": "Degraded", "status": "False", "reason": "AllZonesHealthy"}],
        }
    }
    import json

    cluster.kubectl(
        "patch",
        "tfpool",
        "st",
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )
    stored = cluster.get("tfpool", "st", "-n", ns)
    assert stored["status"]["readyReplicas"] == 2
    line = cluster.kubectl("get", "tfpool", "st", "-n", ns, "--no-headers").stdout.split()
    assert line[4:7] == ["3", "2", "False"]  # Desired, Ready, Degraded columns


def test_explain_reads_well(cluster: Cluster) -> None:
    text = cluster.kubectl("explain", "modeldeployment.spec.artifact.trust").stdout
    assert "exactly one method" in text.lower() or "who may sign" in text.lower()
    assert "publicKey" in text and "sigstore" in text


def test_kubectl_scale_is_refused_and_a_pin_is_a_bounds_patch(cluster: Cluster, ns: str) -> None:
    """No `scale` subresource (docs/autoscaling.md says why): `kubectl scale` is refused by the
    server and changes nothing; the documented pin, min = max, is accepted; a pin that breaks
    the bounds is a 422 that says so."""
    cluster.apply(manifest("InferencePool", "pin", ns, BASE["InferencePool"]))
    before = cluster.get("tfpool", "pin", "-n", ns)["spec"]["replicas"]
    scaled = cluster.kubectl("scale", "tfpool", "pin", "-n", ns, "--replicas=5", check=False)
    assert scaled.returncode != 0
    # The server's words for a missing /scale subresource, on a pool that exists (the docs
    # quote them so that a user is not misled into looking for the pool).
    assert 'inferencepools.tokenfleet.io "pin" not found' in scaled.stderr, scaled.stderr
    assert cluster.get("tfpool", "pin", "-n", ns)["spec"]["replicas"] == before

    pin = '{"spec":{"replicas":{"min":5,"max":5}}}'
    cluster.kubectl("patch", "tfpool", "pin", "-n", ns, "--type", "merge", "-p", pin)
    assert cluster.get("tfpool", "pin", "-n", ns)["spec"]["replicas"] == {"min": 5, "max": 5}
    broken = '{"spec":{"replicas":{"min":9,"max":5}}}'
    refused = cluster.kubectl(
        "patch", "tfpool", "pin", "-n", ns, "--type", "merge", "-p", broken, check=False
    )
    assert refused.returncode != 0
    assert "replicas.min must be less than or equal to replicas.max" in refused.stderr

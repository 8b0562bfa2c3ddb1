"""Pure parts of the local stack: pod → simulator mapping, node manifests, component flags.

Matrix: worker vs other pods × phase × deletion × IP; `vllm serve` argument spellings; node
shapes (zones × nodes per zone) and their loopback pod CIDRs.
"""

from __future__ import annotations

import base64
import ipaddress
from pathlib import Path
from typing import Any

import pytest
import yaml

from tokenfleet.api import labels
from tokenfleet.devstack import controlplane, nodes, pki, simulated


def pod(
    *,
    role: str | None = labels.ROLE_WORKER,
    phase: str = "Running",
    ip: str | None = "127.1.1.4",
    deleting: bool = False,
    args: list[str] | None = None,
    ports: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    pod_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": "w-1",
        "namespace": "ns",
        "uid": "uid-1",
        "labels": {**({labels.ROLE: role} if role else {}), **(pod_labels or {})},
        "annotations": annotations or {},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    container = {"name": "vllm", "args": args if args is not None else ["serve", "/models/m"]}
    if ports is not None:
        container["ports"] = ports
    status: dict[str, Any] = {"phase": phase}
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "spec": {"containers": [container]}, "status": status}


@pytest.mark.parametrize(
    ("the_pod", "wanted"),
    [
        pytest.param(pod(), True, id="running-worker"),
        pytest.param(pod(role=None), False, id="not-a-worker"),
        pytest.param(pod(role="gateway"), False, id="other-role"),
        pytest.param(pod(phase="Pending"), False, id="pending"),
        pytest.param(pod(phase="Succeeded"), False, id="finished"),
        pytest.param(pod(ip=None), False, id="no-ip-yet"),
        pytest.param(pod(deleting=True), False, id="terminating"),
    ],
)
def test_which_pods_get_a_simulator(the_pod: dict[str, Any], wanted: bool) -> None:
    assert (simulated.sim_spec(the_pod) is not None) is wanted


@pytest.mark.parametrize(
    ("args", "model", "served", "extra"),
    [
        pytest.param(["serve", "/m/llama"], "/m/llama", (), (), id="positional-model"),
        pytest.param(["--model", "/m/x"], "/m/x", (), (), id="model-flag"),
        pytest.param(
            ["serve", "/m/x", "--served-model-name", "a", "b", "--max-num-seqs", "8"],
            "/m/x",
            ("a", "b"),
            ("--max-num-seqs", "8"),
            id="names-and-seqs",
        ),
        pytest.param(
            ["serve", "/m/x", "--enable-prefix-caching", "--max-model-len", "4096"],
            "/m/x",
            (),
            ("--enable-kvcache", "--max-model-len", "4096"),
            id="prefix-caching",
        ),
        pytest.param(
            ["serve", "/m/x", "--gpu-memory-utilization", "0.9"],
            "/m/x",
            (),
            (),
            id="engine-only-flags-dropped",
        ),
        pytest.param(
            [
                "/models/artifact",
                "--enable-lora",
                "--max-loras",
                "4",
                "--max-lora-rank",
                "16",
                "--max-cpu-loras",
                "8",
            ],
            "/models/artifact",
            (),
            ("--max-loras", "4", "--max-cpu-loras", "8"),
            id="lora-slots-kept-enable-and-rank-dropped",
        ),
    ],
)
def test_serve_arguments_map_onto_the_simulator(
    args: list[str], model: str, served: tuple[str, ...], extra: tuple[str, ...]
) -> None:
    spec = simulated.sim_spec(pod(args=args))
    assert spec is not None
    assert (spec.model, spec.served_names, spec.extra_args) == (model, served, extra)


def test_annotation_adds_simulator_flags_and_model_label_names_the_model() -> None:
    spec = simulated.sim_spec(
        pod(
            args=[],
            annotations={labels.SIM_ARGS: "--time-to-first-token 50ms --failure-injection-rate 5"},
            pod_labels={labels.MODEL: "chat"},
        )
    )
    assert spec is not None
    assert spec.served_names == ("chat",) and spec.model == "chat"
    assert spec.extra_args == ("--time-to-first-token", "50ms", "--failure-injection-rate", "5")


@pytest.mark.parametrize(
    ("value", "seconds"), [("45", 45.0), ("2.5", 2.5), ("soon", 0.0), ("-3", 0.0), (None, 0.0)]
)
def test_cold_start_annotation_delays_readiness_and_a_typo_does_not_block(
    value: str | None, seconds: float
) -> None:
    spec = simulated.sim_spec(pod(annotations={labels.SIM_COLD_START: value} if value else {}))
    assert spec is not None and spec.cold_start_seconds == seconds


@pytest.mark.parametrize(
    ("ports", "expected"),
    [
        pytest.param(None, 8000, id="default"),
        pytest.param([{"containerPort": 9000}], 9000, id="first"),
        pytest.param(
            [{"name": "grpc", "containerPort": 9}, {"name": "http", "containerPort": 81}],
            81,
            id="named-http",
        ),
    ],
)
def test_port_comes_from_the_container(ports: list[dict[str, Any]] | None, expected: int) -> None:
    spec = simulated.sim_spec(pod(ports=ports))
    assert spec is not None and spec.port == expected


def test_argv_always_forces_the_dummy_tokenizer() -> None:
    spec = simulated.sim_spec(pod(args=["serve", "m", "--served-model-name", "a"]))
    assert spec is not None
    argv = spec.argv("/bin/sim", 4242)
    assert argv[:5] == ["/bin/sim", "--port", "4242", "--model", "m"]
    assert "--force-dummy-tokenizer" in argv  # otherwise the simulator looks the model up online


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param(nodes.NodeShape(), id="default"),
        pytest.param(nodes.NodeShape(zones=("z1",), nodes_per_zone=1), id="one-zone"),
        pytest.param(nodes.NodeShape(nodes_per_zone=4, gpus_per_node=4), id="wide"),
    ],
)
def test_nodes_have_zones_gpus_and_distinct_loopback_cidrs(shape: nodes.NodeShape) -> None:
    made = nodes.manifests(shape)
    assert len(made) == len(shape.zones) * shape.nodes_per_zone
    cidrs = [ipaddress.ip_network(n["spec"]["podCIDR"]) for n in made]
    assert len(set(cidrs)) == len(cidrs)
    assert all(c.subnet_of(ipaddress.ip_network("127.0.0.0/8")) for c in cidrs)
    for node in made:
        node_labels = node["metadata"]["labels"]
        assert node_labels[labels.TOPOLOGY_ZONE] in shape.zones
        assert node_labels[labels.GPU_PRODUCT] == shape.gpu_product
        capacity = node["status"]["capacity"]
        assert capacity[labels.GPU_RESOURCE] == str(shape.gpus_per_node)
        assert "pods" in capacity  # without it the scheduler places nothing


def test_components_start_in_dependency_order_with_loopback_only_flags() -> None:
    ports = controlplane.DEFAULT_PORTS
    made = controlplane.components(Path("/b"), ports, controlplane.Files(root=Path("/s")))
    assert [c.name for c in made] == [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    ]
    apiserver = made[1].argv
    assert "--advertise-address=127.0.0.1" in apiserver
    assert "--endpoint-reconciler-type=none" in apiserver
    assert any("-endpointslice-controller" in a for a in made[2].argv)


def test_the_stack_kubeconfig_verifies_the_api_servers_certificate(tmp_path: Path) -> None:
    ca = tmp_path / "apiserver.crt"
    before = yaml.safe_load(pki.kubeconfig(server="https://127.0.0.1:1", token="t", ca=ca))
    # before the API server's first start there is no certificate to trust yet
    assert before["clusters"][0]["cluster"]["insecure-skip-tls-verify"] is True
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    after = yaml.safe_load(pki.kubeconfig(server="https://127.0.0.1:1", token="t", ca=ca))
    cluster = after["clusters"][0]["cluster"]
    assert "insecure-skip-tls-verify" not in cluster
    assert base64.b64decode(cluster["certificate-authority-data"]) == ca.read_bytes()

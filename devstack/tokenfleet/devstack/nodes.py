"""Simulated GPU nodes: zones, GPU labels and capacity, a loopback pod CIDR each (pure)."""

from __future__ import annotations

import dataclasses
from typing import Any

from tokenfleet.api import labels

DEFAULT_ZONES = ("zone-a", "zone-b", "zone-c")
DEFAULT_GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NodeShape:
    """How many simulated nodes, where, and what each offers."""

    zones: tuple[str, ...] = DEFAULT_ZONES
    nodes_per_zone: int = 2
    gpus_per_node: int = 8
    gpu_product: str = DEFAULT_GPU_PRODUCT
    max_pods: int = 110
    pod_octet: int = 1  # pods get 127.<pod_octet>.<node>.<n>: distinct per stack on one host


def node_name(zone: str, index: int) -> str:
    return f"gpu-{zone}-{index}"


def cidr(shape: NodeShape, node_number: int) -> str:
    return f"127.{shape.pod_octet}.{node_number}.0/24"


def manifests(shape: NodeShape) -> list[dict[str, Any]]:
    """Node objects. Node n gets pod CIDR 127.<pod_octet>.n.0/24, so its pods' IPs are loopback
    addresses this host can listen on (kwok hands them out from the node's podCIDR)."""
    out = []
    for z, zone in enumerate(shape.zones):
        for i in range(shape.nodes_per_zone):
            n = z * shape.nodes_per_zone + i + 1
            name = node_name(zone, i)
            resources = {
                "cpu": "64",
                "memory": "512Gi",
                labels.GPU_RESOURCE: str(shape.gpus_per_node),
                "pods": str(shape.max_pods),  # without it the scheduler places nothing
            }
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": {
                            labels.HOSTNAME: name,
                            labels.TOPOLOGY_ZONE: zone,
                            labels.GPU_PRODUCT: shape.gpu_product,
                            labels.SIMULATED_NODE: "true",
                            "type": "kwok",
                        },
                        "annotations": {"kwok.x-k8s.io/node": "fake"},
                    },
                    "spec": {"podCIDR": cidr(shape, n), "podCIDRs": [cidr(shape, n)]},
                    "status": {"capacity": resources, "allocatable": resources},
                }
            )
    return out

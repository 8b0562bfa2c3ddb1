"""The real node's configuration (pure): the hosts entry added and removed without touching other
lines, the CNI bridge that never routes off the machine, the kubelet and containerd settings
these machines need, and kwok confined to the simulated nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tokenfleet.api import labels
from tokenfleet.devstack import controlplane, realnode
from tokenfleet.devstack.realnode import NodeFiles

FILES = NodeFiles(root=Path("/state/real-node"))
ENTRY = f"127.0.0.1 {realnode.NODE_NAME} {realnode.HOSTS_MARKER}"


@pytest.mark.parametrize(
    ("current", "add", "expected"),
    [
        pytest.param("127.0.0.1 localhost\n", True, f"127.0.0.1 localhost\n{ENTRY}\n", id="add"),
        pytest.param(f"127.0.0.1 localhost\n{ENTRY}\n", True, f"127.0.0.1 localhost\n{ENTRY}\n",
                     id="add-twice-keeps-one"),
        pytest.param(f"127.0.0.1 localhost\n{ENTRY}\n::1 ip6\n", False,
                     "127.0.0.1 localhost\n::1 ip6\n", id="remove-keeps-others"),
        pytest.param("127.0.0.1 localhost\n", False, "127.0.0.1 localhost\n", id="remove-absent"),
    ],
)  # fmt: skip
def test_hosts_text(current: str, add: bool, expected: str) -> None:
    assert realnode.hosts_text(current, add=add) == expected


def test_cni_bridge_stays_on_the_machine() -> None:
    bridge = json.loads(realnode.cni_config(FILES))["plugins"][0]
    assert bridge["isDefaultGateway"] is False and bridge["ipMasq"] is False
    assert bridge["ipam"]["routes"] == [{"dst": realnode.SUBNET}]
    assert bridge["ipam"]["dataDir"].startswith(str(FILES.root))  # no /var/lib/cni state


def test_kubelet_config() -> None:
    ports = realnode.KubeletPorts(api=31000, healthz=31001)
    config = yaml.safe_load(realnode.kubelet_config(FILES, ports=ports, client_ca=Path("/ca")))
    assert config["address"] == "127.0.0.1" and config["readOnlyPort"] == 0
    assert config["failCgroupV1"] is False and config["failSwapOn"] is False
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["imageGCHighThresholdPercent"] == 100  # imported images are never collected
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["containerRuntimeEndpoint"] == f"unix://{FILES.socket}"
    assert config["podLogsDir"].startswith(str(FILES.root))


def test_containerd_config_is_its_own() -> None:
    text = realnode.containerd_config(FILES, cni_bin=Path("/usr/lib/cni"))
    assert "restrict_oom_score_adj = true" in text
    assert "netns_mounts_under_state_dir = true" in text
    assert "SystemdCgroup = false" in text
    for path in (FILES.containerd_root, FILES.containerd_state, FILES.socket, FILES.cni_conf):
        assert f'"{path}"' in text
    assert "/var/lib/containerd" not in text and "/run/containerd" not in text


def test_the_real_node_is_not_simulated() -> None:
    node_labels = realnode.node_labels()
    assert labels.SIMULATED_NODE not in node_labels
    assert node_labels[labels.TOPOLOGY_ZONE] == realnode.ZONE
    argv = realnode.kubelet_argv(Path("/bin"), FILES)
    assert f"--hostname-override={realnode.NODE_NAME}" in argv


def test_kwok_manages_only_simulated_nodes() -> None:
    files = controlplane.Files(root=Path("/s"))
    argv = controlplane.kwok(Path("/bin"), controlplane.DEFAULT_PORTS, files)
    assert f"--manage-nodes-with-label-selector={labels.SIMULATED_NODE}=true" in argv
    assert not any(a.startswith("--manage-all-nodes") for a in argv)


def test_api_server_trusts_the_stack_ca_and_dials_kubelets_by_name() -> None:
    files = controlplane.Files(root=Path("/s"))
    argv = controlplane.apiserver(Path("/bin"), controlplane.DEFAULT_PORTS, files)
    assert f"--client-ca-file={files.ca_cert}" in argv
    assert "--authorization-mode=Node,RBAC" in argv
    assert "--kubelet-preferred-address-types=Hostname" in argv


def test_gpus_are_advertised_as_an_extended_resource() -> None:
    status = realnode.gpu_status()
    assert status["capacity"] == status["allocatable"] == {labels.GPU_RESOURCE: str(realnode.GPUS)}


def test_the_node_root_leaves_room_for_its_unix_sockets() -> None:
    """containerd's and the kubelet's sockets live under the root: 104 bytes at most."""
    from tokenfleet.devstack import realnode_host

    files = NodeFiles(root=realnode_host.ROOT)
    longest = files.kubelet_root / "pod-resources" / "1234567890"
    for path in (files.socket, Path(f"{files.socket}.ttrpc"), longest):
        assert len(str(path)) < 104, path

"""The local platform's one real node: containerd v2 + runc + a kubelet (pure: values in, config
text and argv out; the host work is in realnode_host).

Everything lives under the stack's state directory — containerd's root, state and socket, the
CNI config and IPAM state, the kubelet's root — so nothing collides with a system runtime or
podman. The settings that matter on these machines, each with its reason:

- containerd ``restrict_oom_score_adj``: root here lacks CAP_SYS_RESOURCE; without it every
  sandbox fails with "can't get final child's PID from pipe: EOF".
- a CNI bridge on a private subnet with ``isDefaultGateway: false`` and ``ipMasq: false``: pods
  reach their own subnet (and the host's end of the bridge) and nothing beyond the machine.
- kubelet ``failCgroupV1: false`` (1.36 refuses cgroup v1 otherwise), cgroupfs, ``failSwapOn:
  false``, its API on 127.0.0.1 only, no read-only port, image GC off (the images are imported,
  nothing could pull them again).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from tokenfleet.api import labels

NODE_NAME = "tokenfleet-real-node"
#: Label of the real node (pools and tests select it; kwok and the node agent leave it alone).
REAL_NODE_LABEL = "tokenfleet.io/real-node"
ZONE = "zone-real"
BRIDGE = "tfnode0"
#: The pod network: private, created and removed by the stack, never routed off the machine.
SUBNET = "10.250.0.0/24"
GATEWAY_IP = "10.250.0.1"
SANDBOX_IMAGE = "registry.k8s.io/pause:3.10.2"
#: How many simulated GPUs the real node advertises (an extended resource in its status).
GPUS = 2
GPU_PRODUCT = "TokenFleet-Simulated-GPU"
#: Marks the hosts entry the stack owns (added before the kubelet starts, removed at teardown).
HOSTS_MARKER = "# tokenfleet real node"
#: The chains a kubelet leaves in iptables (canary and firewall), per table.
KUBELET_CHAINS = {
    "filter": ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY"),
    "nat": ("KUBE-KUBELET-CANARY",),
    "mangle": ("KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"),
}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NodeFiles:
    """Where the real node keeps its state: one folder in memory that teardown removes whole,
    and, when ``images`` is set, containerd's image store on disk, kept across runs.

    The store holds imported and unpacked images only (containers, sandboxes and their
    snapshots are removed at teardown): the CPU worker image (a real vLLM, about 6.5 GB) would
    not fit in memory twice, as its archive and its unpacked layers, beside two engines.
    """

    root: Path
    images: Path | None = None

    @property
    def containerd_root(self) -> Path:
        return self.images if self.images is not None else self.root / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.root / "containerd" / "state"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd" / "config.toml"

    @property
    def socket(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    @property
    def cni_conf(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_ipam(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet-config.yaml"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.root / "kubelet.kubeconfig"

    @property
    def kubelet_pki(self) -> Path:
        return self.root / "pki"


def containerd_config(files: NodeFiles, *, cni_bin: Path) -> str:
    """containerd 2.x configuration (version 3): its own paths, runc, our CNI, no NRI."""
    cri = "io.containerd.cri.v1"
    return f"""version = 3
root = "{files.containerd_root}"
state = "{files.containerd_state}"

[grpc]
  address = "{files.socket}"

[ttrpc]
  address = "{files.socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{files.root / "containerd" / "opt"}"

[plugins."io.containerd.nri.v1.nri"]
  disable = true

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."{cri}.images"]
  snapshotter = "overlayfs"
  [plugins."{cri}.images".pinned_images]
    sandbox = "{SANDBOX_IMAGE}"

[plugins."{cri}.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  disable_apparmor = true
  [plugins."{cri}.runtime".cni]
    bin_dirs = ["{cni_bin}"]
    conf_dir = "{files.cni_conf}"
  [plugins."{cri}.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."{cri}.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."{cri}.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
"""


def cni_config(files: NodeFiles) -> str:
    """A bridge network with no default route and no masquerading (pods stay on the machine)."""
    doc = {
        "cniVersion": "1.0.0",
        "name": "tokenfleet-real-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,  # the host side gets GATEWAY_IP: the host reaches pods
                "isDefaultGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(files.cni_ipam),
                    "ranges": [[{"subnet": SUBNET, "gateway": GATEWAY_IP}]],
                    "routes": [{"dst": SUBNET}],
                },
            },
            {"type": "loopback"},
        ],
    }
    return json.dumps(doc, indent=2)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class KubeletPorts:
    """The kubelet's loopback ports (free ones: the API server learns them from the node)."""

    api: int
    healthz: int


def kubelet_config(files: NodeFiles, *, ports: KubeletPorts, client_ca: Path) -> str:
    """KubeletConfiguration (JSON is YAML): see the module docstring for the unusual settings."""
    doc = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1",
        "port": ports.api,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": ports.healthz,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{files.socket}",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "imageGCHighThresholdPercent": 100,  # 100: never collect (imported images cannot be pulled)
        "imageGCLowThresholdPercent": 99,
        # A shared development disk: do not evict pods because other work filled it.
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%"},
        "podLogsDir": str(files.root / "pod-logs"),  # not /var/log/pods
        "resolvConf": "/etc/resolv.conf",
        "serializeImagePulls": False,
        "maxPods": 20,
        "nodeStatusUpdateFrequency": "5s",
    }  # fmt: skip
    return json.dumps(doc, indent=2)


def node_labels() -> dict[str, str]:
    """Set by the kubelet at registration (NodeRestriction admits these prefixes)."""
    return {REAL_NODE_LABEL: "true", labels.TOPOLOGY_ZONE: ZONE, labels.GPU_PRODUCT: GPU_PRODUCT}


def kubelet_argv(bin_dir: Path, files: NodeFiles) -> list[str]:
    node_labels_flag = ",".join(f"{k}={v}" for k, v in node_labels().items())
    return [
        str(bin_dir / "kubelet"),
        f"--config={files.kubelet_config}",
        f"--kubeconfig={files.kubelet_kubeconfig}",
        f"--root-dir={files.kubelet_root}",
        f"--cert-dir={files.kubelet_pki}",
        f"--hostname-override={NODE_NAME}",
        f"--node-labels={node_labels_flag}",
        "--v=1",
    ]


def containerd_argv(bin_dir: Path, files: NodeFiles) -> list[str]:
    return [str(bin_dir / "containerd"), f"--config={files.containerd_config}"]


def gpu_status() -> dict[str, object]:
    """Advertises simulated GPUs as an extended resource (a node-status PATCH, as Kubernetes'
    documentation shows for extended resources; the kubelet keeps it across its updates)."""
    count = str(GPUS)
    return {"capacity": {labels.GPU_RESOURCE: count}, "allocatable": {labels.GPU_RESOURCE: count}}


def hosts_text(current: str, *, add: bool) -> str:
    """/etc/hosts with the node's entry (marked) added or removed; other lines untouched."""
    kept = [line for line in current.splitlines() if not line.endswith(HOSTS_MARKER)]
    if add:
        kept.append(f"127.0.0.1 {NODE_NAME} {HOSTS_MARKER}")
    return "\n".join(kept) + "\n"

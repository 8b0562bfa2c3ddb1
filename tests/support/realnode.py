"""What a real kubelet node could leave on this machine after its stack stops, for the tests
that assert it leaves nothing: the node's own folder lives in /run (realnode_host.ROOT), the
stack's state folder elsewhere, so both are looked at."""

from __future__ import annotations

import subprocess
from pathlib import Path

from support.cluster import process_pids
from tokenfleet.devstack import realnode, realnode_host


def host_leftovers(state: Path) -> list[str]:
    """Processes, mounts, hosts entry, bridge, iptables chains, cgroups and folders of a real
    node, still there; empty when the teardown was complete."""
    folders = (realnode_host.ROOT, state / "real-node")
    left = [f"process {pid}" for folder in folders for pid in process_pids(str(folder))]
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    left += [
        f"mount {m}" for m in mounts if any(m == str(f) or m.startswith(f"{f}/") for f in folders)
    ]
    if realnode.HOSTS_MARKER in Path("/etc/hosts").read_text():
        left.append("hosts entry")
    if Path(f"/sys/class/net/{realnode.BRIDGE}").exists():
        left.append(f"bridge {realnode.BRIDGE}")
    for table, chains in realnode.KUBELET_CHAINS.items():
        rules = subprocess.run(
            ["iptables", "-w", "-t", table, "-S"], capture_output=True, text=True, check=True
        ).stdout
        left += [f"{table}/{c}" for c in chains if f"-N {c}" in rules]
    if list(Path("/sys/fs/cgroup").glob("*/kubepods")):
        left.append("kubepods cgroups")
    left += [f"folder {f}" for f in folders if f.exists()]
    return left

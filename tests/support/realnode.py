"""What a real kubelet node could leave on this machine after its stack stops, for the tests
that assert it leaves nothing: the node's own folder lives in /run (realnode_host.ROOT), the
stack's state folder elsewhere, so both are looked at — everything realnode_host's teardown
removes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from support.cluster import process_pids
from tokenfleet.devstack import realnode, realnode_host


def host_leftovers(state: Path) -> list[str]:
    """Processes, mounts, hosts entry, bridge, iptables chains (IPv4 and IPv6), cgroups,
    container log links and folders of a real node, still there; empty when the teardown was
    complete."""
    folders = (realnode_host.ROOT, state / "real-node")
    left = [f"process {pid}" for folder in folders for pid in process_pids(str(folder))]
    left += [
        f"mount {m}"
        for m in realnode_host.mountpoints()
        if any(m == str(f) or m.startswith(f"{f}/") for f in folders)
    ]
    if realnode.HOSTS_MARKER in Path("/etc/hosts").read_text():
        left.append("hosts entry")
    if Path(f"/sys/class/net/{realnode.BRIDGE}").exists():
        left.append(f"bridge {realnode.BRIDGE}")
    for binary in ("iptables", "ip6tables"):
        if shutil.which(binary) is None:
            continue
        for table, chains in realnode.KUBELET_CHAINS.items():
            rules = subprocess.run(
                [binary, "-w", "-t", table, "-S"], capture_output=True, text=True, check=True
            ).stdout
            left += [f"{binary} {table}/{c}" for c in chains if f"-N {c}" in rules]
    if list(Path("/sys/fs/cgroup").glob("*/kubepods")):
        left.append("kubepods cgroups")
    links = realnode_host.CONTAINER_LOG_LINKS
    if links.is_dir():
        left += [
            f"log link {link}"
            for link in links.iterdir()
            if link.is_symlink() and os.readlink(link).startswith(str(realnode_host.ROOT))
        ]
    left += [f"folder {f}" for f in folders if f.exists()]
    return left


def clean_host() -> None:
    """After a test that left a real node half-way (a killed stack it could not restart): the
    stack's own teardown of the host, which is idempotent and safe after a crash."""
    realnode_host.RealNode(
        state_dir=Path("/nonexistent"), bin_dir=Path("/nonexistent"),
        images_dir=Path("/nonexistent"), logs=Path("/nonexistent"),
    ).teardown_host()  # fmt: skip

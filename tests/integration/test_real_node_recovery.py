"""A real-node stack that dies without its teardown (SIGKILL: no handler runs) leaves the host
dirty — a hosts entry, the CNI bridge, the kubelet's iptables chains, container shims and mounts
under the node's folder; the next stack's start clears all of it before it starts its own node
(the killed stack's shims are gone as soon as it is up, before any stop), and that stack's stop
then leaves nothing. Its own module: the real node is one per machine, so it runs after
test_real_node's stack is gone.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from support.cluster import alive, start_stack, stop_stack, wait_for
from support.realnode import clean_host, host_leftovers
from tokenfleet.devstack import realnode

#: A pod on the real node, so that containers, shims, mounts and a network namespace exist
#: when the stack is killed (the pause image is the one image every real node has).
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "left-behind", "namespace": "default"},
    "spec": {
        "nodeName": realnode.NODE_NAME,
        "containers": [
            {"name": "pause", "image": realnode.SANDBOX_IMAGE, "imagePullPolicy": "Never"}
        ],
    },
}


@pytest.mark.timeout(600)  # two real-node stacks on a shared 2-core machine
def test_a_killed_stack_is_cleaned_up_by_the_next_start(tmp_path: Path) -> None:
    first = start_stack(tmp_path / "first", "--real-node")
    try:
        try:
            assert first.info["realNode"] == realnode.NODE_NAME
            first.kubectl("apply", "-f", "-", stdin=json.dumps(POD))

            def running() -> bool:
                pod = json.loads(first.kubectl("get", "pod", "left-behind", "-o", "json").stdout)
                return bool(pod.get("status", {}).get("phase") == "Running")

            wait_for("a container on the real node", running, timeout=90)
        finally:
            first.process.send_signal(signal.SIGKILL)
            first.process.wait(timeout=30)
        for name, pid in first.children().items():  # PR_SET_PDEATHSIG: they die with it
            wait_for(f"the killed stack's {name} to exit", lambda pid=pid: not alive(pid), 30)
        dirty = host_leftovers(tmp_path / "first")
        # Without these the test would prove nothing: the kill must have left the host dirty.
        assert "hosts entry" in dirty and f"bridge {realnode.BRIDGE}" in dirty, dirty
        shims = [item for item in dirty if item.startswith("process ")]
        assert shims, dirty  # containerd's shims outlive a kill by design

        second = start_stack(tmp_path / "second", "--real-node")
        try:
            assert second.info["realNode"] == realnode.NODE_NAME
            node = second.kubectl("get", "node", realnode.NODE_NAME, "-o", "json").stdout
            ready = [c for c in json.loads(node)["status"]["conditions"] if c["type"] == "Ready"]
            assert ready and ready[0]["status"] == "True"
            still = set(shims) & set(host_leftovers(tmp_path / "first"))
            assert not still, f"the start did not clear the killed stack's processes: {still}"
        finally:
            leftovers = stop_stack(second)
        assert not leftovers, f"processes left behind by the second stack: {leftovers}"
        assert not host_leftovers(tmp_path / "second")
    except BaseException:
        clean_host()  # never leave a dirty host to the tests after this one
        raise

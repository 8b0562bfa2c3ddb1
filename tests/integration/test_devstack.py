"""The local stack's promises to a user: one stack per state directory, ports taken are named,
nothing outlives it (also when it or its parent is killed), and missing tools are explained."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from support.cluster import BIN_DIR, alive, wait_for
from tokenfleet.devstack import controlplane

REPO = Path(__file__).resolve().parents[2]


def devstack(*args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokenfleet.devstack", *args, "--bin-dir", str(BIN_DIR)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=REPO,
    )


def test_up_twice_reports_the_running_stack_and_down_stops_everything(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    first = devstack("up", "--state-dir", state, "--ports", "auto", "--pod-octet", "auto")
    assert first.returncode == 0, first.stderr + first.stdout
    assert "export KUBECONFIG=" in first.stdout and "make down" in first.stdout
    info = json.loads((tmp_path / "state" / "stack.json").read_text())
    try:
        the_printed_path_runs_kubectl_tokenfleet(first.stdout, Path(state), info)
        second = devstack("up", "--state-dir", state, "--ports", "auto")
        assert second.returncode == 0
        assert f"already running (pid {info['pid']})" in second.stdout
        status = devstack("status", "--state-dir", state)
        assert status.returncode == 0 and str(info["pid"]) in status.stdout
    finally:
        down = devstack("down", "--state-dir", state)
    assert down.returncode == 0 and "stopped" in down.stdout
    for name, pid in {"stack": info["pid"], **info["children"]}.items():
        assert wait_for(f"{name} to exit", lambda pid=pid: not alive(pid), timeout=15)
    assert "not running" in devstack("status", "--state-dir", state).stdout
    assert not (Path(state) / "redis-url").exists()  # the URL of the Redis that stopped


def the_printed_path_runs_kubectl_tokenfleet(
    printed: str, state: Path, info: dict[str, Any]
) -> None:
    """`export PATH=<state>/bin:$PATH`, as printed, alone gives kubectl, helm, tokenfleet and
    kubectl-tokenfleet: kubectl finds its plugin there and the plugin answers."""
    path = re.search(r"^  export PATH=(\S+):\$PATH", printed, re.MULTILINE)
    assert path, printed
    assert Path(path.group(1)) == state.resolve() / "bin"
    env = {**os.environ, "KUBECONFIG": info["kubeconfig"], "PATH": f"{path.group(1)}:/usr/bin:/bin"}
    for tool in ("kubectl", "helm", "tokenfleet", "kubectl-tokenfleet"):
        assert shutil.which(tool, path=env["PATH"]) == str(Path(path.group(1)) / tool)
    pools = subprocess.run(
        ["kubectl", "tokenfleet", "pools", "-n", "default", "-o", "json"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert pools.returncode == 0, pools.stderr
    assert "pools" in json.loads(pools.stdout)


def _free_offset() -> int:
    """An offset at which every default port can be bound, so only the port we take is taken.

    Checked by binding, as the stack checks, and kept below the ephemeral range (32768) where
    other programs' outgoing connections come and go.
    """
    for offset in range(1000, 6000, 137):
        ports = controlplane.DEFAULT_PORTS.shifted(offset).named().values()
        if max(ports) >= 32768:
            break
        if all(_bindable(port) for port in ports):
            return offset
    raise AssertionError("no free port range")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_a_taken_port_is_reported_by_component(tmp_path: Path) -> None:
    offset = _free_offset()
    port = controlplane.DEFAULT_PORTS.apiserver + offset
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        done = devstack(
            "run", "--state-dir", str(tmp_path), "--ports", f"offset:{offset}", timeout=30
        )
    assert done.returncode == 1
    assert f"port {port} (apiserver) already in use" in done.stderr
    assert not (tmp_path / "stack.json").exists()


def test_nothing_outlives_a_killed_parent_or_a_killed_stack(tmp_path: Path) -> None:
    """SIGKILL the process that started the stack: the stack tears itself down. Then start one
    more and SIGKILL the stack itself: the kernel kills its children (PR_SET_PDEATHSIG)."""
    parent_script = textwrap.dedent(f"""
        import subprocess, sys, time, pathlib
        state = pathlib.Path({str(tmp_path / "a")!r})
        subprocess.Popen([sys.executable, "-m", "tokenfleet.devstack", "run",
                          "--state-dir", str(state),
                          "--bin-dir", {str(BIN_DIR)!r}, "--ports", "auto", "--pod-octet", "auto",
                          "--die-with-parent"])
        while not (state / "stack.json").exists():
            time.sleep(0.2)
        print("ready", flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_script], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
    info = json.loads((tmp_path / "a" / "stack.json").read_text())
    parent.kill()
    parent.wait()
    for name, pid in {"stack": info["pid"], **info["children"]}.items():
        assert wait_for(
            f"{name} to exit after its parent died", lambda pid=pid: not alive(pid), timeout=30
        )

    stack = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tokenfleet.devstack",
            "run",
            "--state-dir",
            str(tmp_path / "b"),
            "--bin-dir",
            str(BIN_DIR),
            "--ports",
            "auto",
            "--pod-octet",
            "auto",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    info_file = tmp_path / "b" / "stack.json"
    wait_for("the second stack", info_file.exists, timeout=120)
    children = json.loads(info_file.read_text())["children"]
    os.kill(stack.pid, signal.SIGKILL)
    stack.wait()
    for name, pid in children.items():
        assert wait_for(
            f"{name} to exit after the stack was killed", lambda pid=pid: not alive(pid), timeout=15
        )


def test_missing_go_is_explained(tmp_path: Path) -> None:
    bare_path = "/usr/bin:/bin"
    assert shutil.which("go", path=bare_path) is None, "precondition: no Go on the bare PATH"
    env = {**os.environ, "PATH": bare_path, "TOKENFLEET_CACHE": str(tmp_path)}
    for script in ("tools/build.sh", "tools/preflight.sh"):
        done = subprocess.run(
            ["bash", script], env=env, capture_output=True, text=True, cwd=REPO, check=False
        )
        assert done.returncode == 2, script
        assert "Go" in done.stderr and "go.dev" in done.stderr, done.stderr

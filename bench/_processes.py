"""The benchmarks' process helpers: free loopback ports, waiting for a listener, starting a
server whose output goes to a log (its own session, so a whole tree can be signalled), a
process's CPU, the stack's kubectl and a local control plane of their own."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit(f"nothing listens on {port} after {timeout:.0f} s")


def start(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )


#: The binaries tools/build.sh built (kubectl among them).
BIN = Path(os.environ.get("TOKENFLEET_CACHE", Path.home() / ".cache/tokenfleet")) / "bin/current"
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds one process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def kubectl(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    """The stack's kubectl; raises on failure."""
    done = subprocess.run(
        [str(BIN / "kubectl"), *args], input=stdin, capture_output=True, text=True, env=env,
        check=True, timeout=600,
    )  # fmt: skip
    return done.stdout


def devstack_run(
    state: Path, *flags: str, timeout: float = 300
) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """`python -m tokenfleet.devstack run` on free ports, tied to this process: the stack and
    its stack.json once it is up (its log in ``state``/stack.log)."""
    repo = Path(__file__).resolve().parents[1]
    stack = subprocess.Popen(
        [
            sys.executable, "-m", "tokenfleet.devstack", "run", "--state-dir", str(state),
            "--bin-dir", str(BIN), "--ports", "auto", "--pod-octet", "auto", "--die-with-parent",
            *flags,
        ],
        stdout=(state / "stack.log").open("wb"), stderr=subprocess.STDOUT, cwd=repo,
    )  # fmt: skip
    deadline = time.monotonic() + timeout
    while not (state / "stack.json").exists():
        if stack.poll() is not None or time.monotonic() > deadline:
            stack.kill()
            raise SystemExit((state / "stack.log").read_text()[-2000:])
        time.sleep(0.5)
    return stack, json.loads((state / "stack.json").read_text())

"""Child processes that never outlive their parent, with logs in files.

Every child is started with PR_SET_PDEATHSIG=SIGKILL, so if the stack process dies — even by
SIGKILL, or because pytest was interrupted — the kernel kills its children too. Stopping is
SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1
#: Crash-loop back-off, as a kubelet does: 1 s, doubling per restart, at most 30 s.
RESTART_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 30.0


def restart_delay(exits: int) -> float:
    """Seconds to wait before starting a child again after ``exits`` consecutive exits."""
    return min(RESTART_BACKOFF_SECONDS * 2.0 ** max(exits - 1, 0), MAX_BACKOFF_SECONDS)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclasses.dataclass(slots=True, kw_only=True)
class Child:
    """A started process and where its output goes."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 15) -> str:
        """The last lines of its log, for error messages."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def spawn(
    name: str,
    argv: Sequence[str],
    *,
    log: Path,
    env: dict[str, str] | None = None,
    die_with_parent: bool = True,
) -> Child:
    """Start ``argv`` with stdout and stderr appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            preexec_fn=_die_with_parent if die_with_parent else None,  # noqa: PLW1509
        )
    return Child(name=name, popen=popen, log=log)


def stop(children: Sequence[Child], *, grace_seconds: float = 10.0) -> None:
    """SIGTERM every child first (in the order given), then wait for all of them against one
    deadline, and SIGKILL whatever is left: a slow one no longer delays the others."""
    for child in children:
        if child.alive():
            child.popen.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    for child in children:
        try:
            child.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.popen.kill()
            child.popen.wait()


_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A free loopback port below the kernel's ephemeral range.

    Binding port 0 returns an ephemeral port, and any outgoing connection (a scrape, a client)
    may take that same port before the child process binds it seconds later: a kube-apiserver
    then fails with "address already in use". Ports below the range are never given to clients.
    """
    low = _ephemeral_low()
    candidates = list(range(max(1024, low - 12000), low))
    random.SystemRandom().shuffle(candidates)
    for port in candidates:
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket() as s:  # every port below the range is taken: fall back to the kernel
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
        return port

"""Watch every network namespace on this host for TCP connections that touch the machine's own
interface addresses.

The rule of our machines (../shared/reference/real-node.md): traffic goes only to loopback and
to the subnets the platform itself creates. A host-network pod's IP on the real node is the
machine's own address, so a scrape, probe or client that follows pod IPs can break the rule
without anyone noticing. :class:`TcpWatch` samples ``/proc/<pid>/net/tcp`` and ``tcp6`` of one
process per network namespace (the host's, the real node's pods', everything) several times a
second while a journey runs; a socket in any state but LISTEN whose local or remote address is
one of the host's forbidden addresses is recorded with the process that owns it. TIME_WAIT
keeps a closed connection visible for a minute, so even a short-lived dial is seen.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
import os
import subprocess
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: /proc/net/tcp states (include/net/tcp_states.h); LISTEN (0A) is a server, not traffic.
LISTEN = "0A"
STATES = {
    "01": "ESTABLISHED",
    "02": "SYN_SENT",
    "03": "SYN_RECV",
    "04": "FIN_WAIT1",
    "05": "FIN_WAIT2",
    "06": "TIME_WAIT",
    "07": "CLOSE",
    "08": "CLOSE_WAIT",
    "09": "LAST_ACK",
    "0B": "CLOSING",
}


@dataclasses.dataclass(frozen=True, slots=True)
class Connection:
    local: str  # address:port
    remote: str
    state: str
    owner: str  # "pid comm" of the socket's process, when it could be found


def host_addresses() -> set[Address]:
    """Every address on the host's interfaces (``ip -j addr``)."""
    out = subprocess.run(
        ["ip", "-j", "addr"], capture_output=True, text=True, check=True, timeout=10
    ).stdout
    return {ipaddress.ip_address(a["local"]) for link in json.loads(out) for a in link["addr_info"]}


def forbidden(addresses: Iterable[Address], allowed: Iterable[Network]) -> set[Address]:
    """Of the host's addresses, those nothing may dial: not loopback, not in ``allowed``."""
    nets = list(allowed)
    return {
        a
        for a in addresses
        if not a.is_loopback
        and not a.is_link_local
        and not any(a.version == n.version and a in n for n in nets)
    }


def _decode(hex_address: str) -> tuple[Address, int]:
    """``0100007F:1F90`` (little-endian words, as the kernel prints them) → (127.0.0.1, 8080)."""
    raw, port = hex_address.split(":")
    data = bytes.fromhex(raw)
    # each 32-bit word is in host (little-endian) order
    swapped = b"".join(data[i : i + 4][::-1] for i in range(0, len(data), 4))
    return ipaddress.ip_address(swapped), int(port, 16)


def parse(table: str) -> Iterator[tuple[Address, int, Address, int, str, str]]:
    """(local, lport, remote, rport, state, inode) per row of a /proc/net/tcp(6) table."""
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10:
            continue
        (la, lp), (ra, rp) = _decode(fields[1]), _decode(fields[2])
        yield la, lp, ra, rp, fields[3], fields[9]


def _mapped(a: Address) -> Address:
    """An IPv4-mapped IPv6 address as its IPv4 address."""
    if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None:
        return a.ipv4_mapped
    return a


def _namespaces() -> dict[str, int]:
    """Network namespace inode → one pid inside it."""
    found: dict[str, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            found.setdefault(os.readlink(entry / "ns" / "net"), int(entry.name))
    return found


def _owner(inode: str) -> str:
    target = f"socket:[{inode}]"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) == target:
                    comm = (entry / "comm").read_text().strip()
                    return f"{entry.name} {comm}"
    return "?"


class TcpWatch:
    """Samples every network namespace's TCP tables in a thread until stopped."""

    def __init__(self, bad: set[Address], every: float = 0.2) -> None:
        self.bad = bad
        self.every = every
        self.seen: set[Connection] = set()
        self.samples = 0
        self._keys: set[tuple[str, str]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tcp-watch", daemon=True)

    def __enter__(self) -> TcpWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        spaces: dict[str, int] = {}
        rounds = 0
        while not self._stop.is_set():
            if rounds % 10 == 0:  # namespaces come and go with pods
                spaces = _namespaces()
            rounds += 1
            for pid in set(spaces.values()):
                for name in ("tcp", "tcp6"):
                    with contextlib.suppress(OSError):
                        self._check((Path("/proc") / str(pid) / "net" / name).read_text())
            self.samples += 1
            self._stop.wait(self.every)

    def _check(self, table: str) -> None:
        for la, lp, ra, rp, state, inode in parse(table):
            if state == LISTEN:
                continue
            local, remote = _mapped(la), _mapped(ra)
            key = (f"{local}:{lp}", f"{remote}:{rp}")
            if (local in self.bad or remote in self.bad) and key not in self._keys:
                self._keys.add(key)
                self.seen.add(
                    Connection(
                        local=key[0],
                        remote=key[1],
                        state=STATES.get(state, state),
                        # a TIME_WAIT socket has no owner left (inode 0)
                        owner=_owner(inode) if inode != "0" else "?",
                    )
                )

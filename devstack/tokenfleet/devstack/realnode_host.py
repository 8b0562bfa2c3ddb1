"""The real node's host work: start containerd and the kubelet, import the images, advertise
GPUs — and a teardown that leaves nothing behind.

The real node is a machine-wide resource (the kubelet's iptables chains, a hosts entry, the
bridge): a lock in /run makes a second stack on the same machine fail with a clear message
instead of fighting over them. Teardown runs on every stop — also when start-up failed half-way
— and once more before a start, to clear what a SIGKILLed stack left: processes (containers,
shims, containerd, kubelet), mounts under the node's folder (the kubelet's volumes, the
containers' root filesystems, network namespaces), the kubelet's iptables chains, the CNI
bridge, its cgroups, the hosts entry and the whole state folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from tokenfleet.devstack import pki, processes, realnode
from tokenfleet.devstack.realnode import NODE_NAME, NodeFiles
from tokenfleet.kubeapi import ApiError, KubeApi

log = logging.getLogger("tokenfleet.devstack.realnode")

LOCK = Path("/run/tokenfleet/real-node.lock")
#: The node's state (a tmpfs). Not under the stack's state directory: containerd's and the
#: kubelet's unix sockets live in it, and a socket path may not exceed 104 bytes, which a state
#: directory under a test's tmp_path already does. One real node per machine (LOCK), so one
#: fixed short folder.
ROOT = Path("/run/tokenfleet/real-node")
HOSTS = Path("/etc/hosts")
CNI_BIN = Path("/usr/lib/cni")
READY_TIMEOUT_SECONDS = 90.0
CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTAINER_LOG_LINKS = Path("/var/log/containers")
#: Upper bound of the node's in-memory folder: the imported images (~0.8 GB), the unpacked ones
#: pods run, and the pods' emptyDirs. Pages are used only as written.
TMPFS_SIZE = "6g"


class RealNodeError(Exception):
    """The real node cannot start; the message says what to do."""


def image_store(bin_dir: Path) -> Path:
    """containerd's image store on disk, per user and per containerd build (its database's
    format is the build's): ``$TOKENFLEET_CACHE/real-node/containerd-<version>-<key>``."""
    cache = Path(os.environ.get("TOKENFLEET_CACHE", Path.home() / ".cache/tokenfleet"))
    build = (bin_dir / "containerd").resolve().parent.name
    return cache / "real-node" / build


def imported_marks(files: NodeFiles) -> Path:
    """One file per archive imported into the store (beside it, not in containerd's folder)."""
    store = files.containerd_root
    return store.parent / f"{store.name}.imported"


def _qualified(tag: str) -> str:
    """An image reference as containerd lists it (``docker.io/library/`` for short names)."""
    first = tag.split("/", 1)[0]
    if "/" not in tag:
        return f"docker.io/library/{tag}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{tag}"
    return tag


def _run(*argv: str, check: bool = False, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=timeout)
    if check and done.returncode != 0:
        raise RealNodeError(f"{' '.join(argv[:4])} failed: {done.stderr.strip()}")
    return done


class RealNode:
    """One kubelet node on this machine, started and torn down by the stack."""

    def __init__(self, *, state_dir: Path, bin_dir: Path, images_dir: Path, logs: Path) -> None:
        self.files = NodeFiles(root=ROOT, images=image_store(bin_dir))
        self._bin = bin_dir
        self._images = images_dir
        self._logs = logs
        self._lock: IO[str] | None = None
        self._children: list[processes.Child] = []
        self.import_seconds = 0.0

    # ---- start -----------------------------------------------------------------------------

    async def start(self, *, api: KubeApi, server: str, ca: pki.CertPair, api_ca: Path) -> None:
        """Lock → clean leftovers → configure → containerd → images → kubelet → Ready → GPUs."""
        self._take_lock()
        await asyncio.to_thread(self.teardown_host)
        # All of the node's state in memory: teardown is an unmount, not minutes of deleting
        # unpacked images from a slow shared disk (measured: 70 s for two images).
        self.files.root.mkdir(parents=True)
        _run("mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0755", "tokenfleet-real-node",
             str(self.files.root), check=True)  # fmt: skip
        self._write_files(server=server, ca=ca, api_ca=api_ca)
        HOSTS.write_text(realnode.hosts_text(HOSTS.read_text(), add=True))
        _create_bridge()
        env = {"PATH": f"{self._bin}:{os.environ.get('PATH', '/usr/sbin:/usr/bin')}"}
        self._spawn("containerd", realnode.containerd_argv(self._bin, self.files), env)
        await self._wait("containerd's socket", self.files.socket.exists)
        # A run that crashed left its containers in the image store's database: none may come
        # back as a pod the kubelet does not know.
        await asyncio.to_thread(self._kill_containers)
        started = time.monotonic()
        await asyncio.to_thread(self._import_images)
        self.import_seconds = time.monotonic() - started
        self._spawn("kubelet", realnode.kubelet_argv(self._bin, self.files), env)
        await self._wait_ready(api)
        await api.patch_status(f"/api/v1/nodes/{NODE_NAME}", realnode.gpu_status())
        log.info("real node %s Ready (images imported in %.1f s)", NODE_NAME, self.import_seconds)

    def _take_lock(self) -> None:
        if os.geteuid() != 0:
            raise RealNodeError("the real node needs root (kubelet, containerd, iptables)")
        LOCK.parent.mkdir(parents=True, exist_ok=True)
        handle = LOCK.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()
            handle.close()
            raise RealNodeError(
                f"another stack on this machine runs the real node (pid {holder}); stop it, or "
                "start without one (--no-real-node / TOKENFLEET_REAL_NODE=0)"
            ) from None
        handle.truncate(0)
        handle.write(str(os.getpid()))
        handle.flush()
        self._lock = handle

    def _write_files(self, *, server: str, ca: pki.CertPair, api_ca: Path) -> None:
        f = self.files
        for folder in (f.containerd_root, f.containerd_state, f.cni_conf, f.kubelet_root):
            folder.mkdir(parents=True, exist_ok=True)
        f.containerd_config.write_text(realnode.containerd_config(f, cni_bin=CNI_BIN))
        (f.cni_conf / "10-tokenfleet.conflist").write_text(realnode.cni_config(f))
        ports = realnode.KubeletPorts(api=processes.free_port(), healthz=processes.free_port())
        f.kubelet_config.write_text(realnode.kubelet_config(f, ports=ports, client_ca=ca.cert))
        pair = pki.issue_client_cert(
            ca,
            common_name=f"system:node:{NODE_NAME}",
            groups=("system:nodes",),
            out=pki.CertPair(cert=f.kubelet_pki / "client.crt", key=f.kubelet_pki / "client.key"),
        )
        f.kubelet_kubeconfig.write_text(
            pki.client_cert_kubeconfig(
                server=server, ca_file=api_ca, user=f"system:node:{NODE_NAME}", pair=pair
            )
        )
        f.kubelet_kubeconfig.chmod(0o600)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        if not Path(argv[0]).exists():
            raise RealNodeError(f"{argv[0]} is missing: run tools/build.sh (make up does) first")
        log.info("starting %s", name)
        self._children.append(processes.spawn(name, argv, log=self._logs / f"{name}.log", env=env))

    def _ctr(
        self, *args: str, check: bool = False, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        ctr = str(self._bin / "ctr")
        return _run(
            ctr, "--address", str(self.files.socket), "-n", "k8s.io", *args,
            check=check, timeout=timeout,
        )  # fmt: skip

    def _import_images(self) -> None:
        """Every built image (tools/images.sh) into the node's containerd: nothing is pulled.
        The store is kept across runs: an archive already imported (its cache folder is keyed
        by its inputs) whose tag the store still lists is not read again."""
        archives = sorted(self._images.glob("*.tar"))
        if not any(a.name == "pause.tar" for a in archives):
            raise RealNodeError(f"no pause image in {self._images}: run tools/images.sh first")
        listed = set(self._ctr("images", "ls", "-q").stdout.split())
        done = imported_marks(self.files)
        done.mkdir(parents=True, exist_ok=True)
        for archive in archives:
            if archive.name == "base.tar":  # only a build stage; no pod runs it
                continue
            source = archive.resolve()
            mark = done / hashlib.sha256(str(source).encode()).hexdigest()[:16]
            tag_file = archive.with_suffix(".tag")
            tag = _qualified(tag_file.read_text().strip()) if tag_file.exists() else None
            if mark.exists() and tag in listed:
                continue
            # Unpacked on first use only: the images no pod runs cost no snapshot to write.
            self._ctr("images", "import", "--no-unpack", str(source), check=True, timeout=900)
            mark.write_text(f"{source}\n")

    async def _wait(self, what: str, probe: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for child in self._children:
                if not child.alive():
                    raise RealNodeError(f"{child.name} exited during start-up:\n{child.tail()}")
            if probe():
                return
            await asyncio.sleep(0.2)
        raise RealNodeError(f"timed out after {timeout:.0f} s waiting for {what}")

    async def _wait_ready(self, api: KubeApi) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            await self._wait("the kubelet", lambda: True)
            with contextlib.suppress(ApiError):
                node = await api.call("GET", f"/api/v1/nodes/{NODE_NAME}")
                conditions = node.get("status", {}).get("conditions", [])
                if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                    return
            await asyncio.sleep(0.5)
        tail = self._children[-1].tail() if self._children else ""
        raise RealNodeError(
            f"the real node is not Ready after {READY_TIMEOUT_SECONDS:.0f} s:\n{tail}"
        )

    # ---- teardown --------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the kubelet, kill every container, stop containerd, then clean the host."""
        started = time.monotonic()
        kubelets = [c for c in self._children if c.name == "kubelet"]
        processes.stop(kubelets, grace_seconds=10.0)
        if self.files.socket.exists() and any(c.alive() for c in self._children):
            self._kill_containers()
        processes.stop(self._children, grace_seconds=10.0)
        self._children.clear()
        stopped = time.monotonic()
        self.teardown_host()
        log.info(
            "real node stopped in %.1f s (processes), host cleaned in %.1f s",
            stopped - started,
            time.monotonic() - stopped,
        )
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def _kill_containers(self) -> None:
        listed = self._ctr("tasks", "ls", "-q").stdout.split()
        for task in listed:
            self._ctr("tasks", "kill", "-s", "SIGKILL", task)
        for task in listed:
            for _ in range(20):  # a killed task takes a moment to be reaped
                if self._ctr("tasks", "rm", "-f", task).returncode == 0:
                    break
                time.sleep(0.1)
        for container in self._ctr("containers", "ls", "-q").stdout.split():
            self._ctr("containers", "rm", container)

    def teardown_host(self) -> None:
        """Everything outside our processes, idempotent: safe after a crash and on a clean host."""
        _kill_cgroup_processes()
        self._kill_leftover_processes()
        self._unmount_all()
        for binary in ("iptables", "ip6tables"):
            _delete_chains(binary)
        _run("ip", "link", "delete", realnode.BRIDGE)
        _remove_cgroups()
        _remove_log_links(self.files.root)
        with contextlib.suppress(FileNotFoundError):
            HOSTS.write_text(realnode.hosts_text(HOSTS.read_text(), add=False))
        shutil.rmtree(self.files.root, ignore_errors=True)

    def _kill_leftover_processes(self) -> None:
        """Shims (they outlive containerd by design), containers and daemons of this node."""
        marker = str(self.files.root).encode()
        for _ in range(2):
            pids = [pid for pid in _pids() if marker in _cmdline(pid)]
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if not pids:
                return
            time.sleep(0.5)

    def _unmount_all(self) -> None:
        root = str(self.files.root)
        for _ in range(3):  # a lazy unmount of a parent can reveal nothing new; bounded anyway
            mounts = [m for m in mountpoints() if m == root or m.startswith(root + "/")]
            if not mounts:
                return
            for mount in sorted(mounts, key=len, reverse=True):
                _run("umount", "-l", mount)


def _create_bridge() -> None:
    """The CNI bridge with the host's address on it, before any pod: the host can listen on
    GATEWAY_IP at once (an artifact server for pods, say). The bridge plugin adopts it."""
    prefix = realnode.SUBNET.split("/")[1]
    _run("ip", "link", "add", realnode.BRIDGE, "type", "bridge", check=True)
    _run("ip", "addr", "add", f"{realnode.GATEWAY_IP}/{prefix}", "dev", realnode.BRIDGE, check=True)
    _run("ip", "link", "set", realnode.BRIDGE, "up", check=True)


def _pids() -> list[int]:
    return [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and int(p.name) != os.getpid()
    ]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def mountpoints() -> list[str]:
    """Mount points from /proc/self/mountinfo (field 5), with octal escapes decoded."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        out.append(point.encode().decode("unicode_escape"))
    return out


def _delete_chains(binary: str) -> None:
    """The kubelet's chains and the rules that jump to them."""
    if shutil.which(binary) is None:
        return
    for table, chains in realnode.KUBELET_CHAINS.items():
        rules = _run(binary, "-w", "-t", table, "-S").stdout.splitlines()
        for rule in rules:
            parts = rule.split()
            if parts[:1] == ["-A"] and any(f"-j {c}" in rule for c in chains):
                _run(binary, "-w", "-t", table, "-D", *parts[1:])
        for chain in chains:
            _run(binary, "-w", "-t", table, "-F", chain)
            _run(binary, "-w", "-t", table, "-X", chain)


def _kill_cgroup_processes() -> None:
    """Every process of a pod (cgroupfs puts them all under kubepods), even with no shim left."""
    for _ in range(3):
        pids = {
            int(pid)
            for procs in CGROUP_ROOT.glob("pids/kubepods/**/cgroup.procs")
            for pid in procs.read_text().split()
        }
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not pids:
            return
        time.sleep(0.3)


def _remove_cgroups() -> None:
    """The kubelet's kubepods hierarchy in every controller (cgroupfs driver), leaves first."""
    for top in CGROUP_ROOT.glob("*/kubepods"):
        for folder in sorted(
            (p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
        ):
            with contextlib.suppress(OSError):
                folder.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def _remove_log_links(root: Path) -> None:
    """/var/log/containers: the kubelet links its containers' logs there (into our folder)."""
    if not CONTAINER_LOG_LINKS.is_dir():
        return
    for link in CONTAINER_LOG_LINKS.iterdir():
        with contextlib.suppress(OSError):
            if link.is_symlink() and os.readlink(link).startswith(str(root)):
                link.unlink()
    with contextlib.suppress(OSError):
        CONTAINER_LOG_LINKS.rmdir()  # only if empty: it was ours

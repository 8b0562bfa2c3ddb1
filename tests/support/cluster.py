"""A handle on a running local stack for tests: kubectl, namespaces, waiting, process checks."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = (
    Path(os.environ.get("TOKENFLEET_CACHE", Path.home() / ".cache/tokenfleet")) / "bin/current"
)
START_TIMEOUT_SECONDS = 120.0

T = TypeVar("T")


def wait_for(
    what: str, probe: Callable[[], T | None], timeout: float = 60.0, every: float = 0.25
) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def timed(what: str, probe: Callable[[], T | None], timeout: float = 30.0) -> tuple[float, T]:
    """Seconds until ``probe`` turns truthy (polled every 0.1 s), and what it returned."""
    started = time.monotonic()
    found = wait_for(what, probe, timeout=timeout, every=0.1)
    return time.monotonic() - started, found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; only its parent has not reaped it yet.
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            return False
    return True


def process_pids(pattern: str) -> list[int]:
    """Pids whose command line contains ``pattern`` (like pgrep -f, without pgrep itself)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                cmdline = (
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
                if pattern in cmdline and alive(int(entry.name)):
                    out.append(int(entry.name))
    return out


@dataclasses.dataclass(kw_only=True)
class Cluster:
    """A running stack and the tools to drive it as a user would."""

    state_dir: Path
    info: dict[str, Any]
    process: subprocess.Popen[bytes]

    @property
    def kubeconfig(self) -> Path:
        return Path(self.info["kubeconfig"])

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run the stack's own kubectl; raise with its stderr when ``check`` and it fails."""
        done = subprocess.run(
            [str(BIN_DIR / "kubectl"), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
        return done

    def apply(self, *docs: dict[str, Any], check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs), check=check)

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    @property
    def pod_prefix(self) -> str:
        """'127.N.': the loopback range this stack's pod IPs come from."""
        return ".".join(str(self.info["podNetwork"]).split(".")[:2]) + "."

    def children(self) -> dict[str, int]:
        return dict(self.info["children"])


def start_stack(state_dir: Path, *extra: str) -> Cluster:
    """Start `python -m tokenfleet.devstack run` tied to this process; wait until ready."""
    info_file = state_dir / "stack.json"
    state_dir.mkdir(parents=True, exist_ok=True)
    log = (state_dir / "stack.log").open("ab")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tokenfleet.devstack",
            "run",
            "--state-dir",
            str(state_dir),
            "--bin-dir",
            str(BIN_DIR),
            "--ports",
            "auto",
            "--pod-octet",
            "auto",
            "--die-with-parent",
            *extra,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not info_file.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            tail = (state_dir / "stack.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"local stack did not start:\n{tail}")
        time.sleep(0.2)
    return Cluster(state_dir=state_dir, info=json.loads(info_file.read_text()), process=process)


def stop_stack(cluster: Cluster) -> list[str]:
    """SIGTERM the stack; return the names of any of its processes still alive afterwards."""
    cluster.process.send_signal(signal.SIGTERM)
    try:
        cluster.process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        cluster.process.kill()
    time.sleep(0.5)
    leftovers = [name for name, pid in cluster.children().items() if alive(pid)]
    leftovers += [
        f"simulator {pid}"
        for pid in process_pids(str(cluster.state_dir))
        if "llm-d-inference-sim" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    ]
    return leftovers


@contextlib.contextmanager
def namespace(cluster: Cluster, name: str) -> Iterator[str]:
    cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@contextlib.contextmanager
def scraped(cluster: Cluster, *, job: str, port: int) -> Iterator[None]:
    """Make a host process on 127.0.0.1:``port`` a target of the shipped scrape ``job``: the
    local stack's Prometheus finds it through pod discovery, as it finds a real replica."""
    from tokenfleet.devstack import prometheus

    nodes = cluster.get("nodes", "-l", "tokenfleet.io/simulated-node=true")["items"]
    node = sorted(n["metadata"]["name"] for n in nodes)[0]
    cluster.kubectl(
        "apply", "-f", str(REPO / "manifests" / "base" / "namespace" / "namespace.yaml")
    )
    pod = prometheus.host_pod(job=job, name=f"local-{job}-{port}", port=port, node=node)
    cluster.apply(pod)
    # Discovery takes a few seconds (Prometheus batches target updates every 5 s): a test that
    # starts its load at once must not outrun its first scrape.
    up = f'up{{job="{job}",pod="{pod["metadata"]["name"]}"}} == 1'
    wait_for(f"Prometheus to scrape {job} on {port}", lambda: _query(cluster, up), timeout=60)
    try:
        yield
    finally:
        meta = pod["metadata"]
        cluster.kubectl(
            "delete", "pod", meta["name"], "-n", meta["namespace"], "--wait=false", check=False
        )


def _query(cluster: Cluster, promql: str) -> list[Any]:
    url = f"{cluster.info['prometheus']}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as response:
        return list(json.loads(response.read())["data"]["result"])

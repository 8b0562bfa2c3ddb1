"""The operator's rendered worker pod on a real kubelet node (containerd + runc): the worker-
simulator image fetches its artifact over the node's pod bridge, verifies it and turns Ready
through its real exec readiness probe; a tampered artifact leaves a real pod with the verdict in
its termination message; deletion runs the preStop hook, then SIGTERM. And the TokenFleet image
runs both servers as non-root on a read-only root filesystem, stopping on SIGTERM.

Needs root (kubelet, containerd, iptables) and the images of tools/images.sh: the module fails,
never skips, without them. Its own stack (the real node is one per machine), torn down at the
end — the last test checks that nothing is left behind.
"""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.cluster import (
    BIN_DIR,
    Cluster,
    namespace,
    process_pids,
    start_stack,
    stop_stack,
    wait_for,
)
from support.operator import running_operator, service_account_kubeconfig
from tokenfleet.devstack import realnode
from tokenfleet.signing import keys, verify

REPO = Path(__file__).resolve().parents[2]
IMAGES = BIN_DIR.parent.parent / "images" / "current"
MODEL = REPO / "examples" / "04-signed-artifact" / "tiny-model"
PODMAN = ["podman", "--runtime", "runc"]
ULIMITS = ["--ulimit", "nofile=1024:4096", "--ulimit", "nproc=1024:4096"]


def _tag(name: str) -> str:
    return str((IMAGES / f"{name}.tag").read_text().strip())


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    state = tmp_path_factory.mktemp("real-stack")
    running = start_stack(state, "--real-node")
    try:
        assert running.info["realNode"] == realnode.NODE_NAME
        yield running
    finally:
        leftovers = stop_stack(running)
        assert not leftovers, f"processes left behind by the stack: {leftovers}"
        assert not _host_leftovers(state)


def _host_leftovers(state: Path) -> list[str]:
    """What a real node could leave on the machine: none of it may survive the teardown."""
    left = [f"process {pid}" for pid in process_pids(str(state / "real-node"))]
    left += [m for m in Path("/proc/self/mountinfo").read_text().split() if str(state) in m]
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
    if (state / "real-node").exists():
        left.append("state folder")
    return left


@pytest.fixture(scope="module")
def operator(real: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    folder = tmp_path_factory.mktemp("real-op")
    config = service_account_kubeconfig(real, folder / "kubeconfig")
    with running_operator(config, folder / "operator.log"):
        yield
    assert "Traceback" not in (folder / "operator.log").read_text()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A signed model and a tampered copy, served over HTTP on the host's end of the pod bridge
    (the only non-loopback address a pod may dial)."""
    root = tmp_path_factory.mktemp("artifacts")
    private, public = keys.generate(root / "keys")
    shutil.copytree(MODEL, root / "good")
    digest = verify.sign(root / "good", private_key=private, signature=root / "good" / "model.sig")
    shutil.copytree(root / "good", root / "tampered")
    (root / "tampered" / "weights.txt").write_text("not what was signed\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer((realnode.GATEWAY_IP, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://{realnode.GATEWAY_IP}:{server.server_address[1]}"
    yield {"base": base, "digest": digest, "public": public}
    server.shutdown()


@pytest.fixture
def ns(real: Cluster) -> Iterator[str]:
    with namespace(real, f"real-{uuid.uuid4().hex[:6]}") as created:
        yield created


def _deploy(real: Cluster, ns: str, artifacts: dict[str, Any], *, folder: str) -> None:
    real.kubectl(
        "-n", ns, "create", "secret", "generic", "signing-key",
        f"--from-file=public.pem={artifacts['public']}",
    )  # fmt: skip
    pool = {
        "apiVersion": "tokenfleet.io/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": "real", "namespace": ns},
        "spec": {
            "accelerator": {"product": realnode.GPU_PRODUCT},
            "zones": {"names": [realnode.ZONE], "tolerateLoss": 0},
            "warm": {"perZone": 1},
            "replicas": {"min": 1, "max": 1},
        },
    }
    model = {
        "apiVersion": "tokenfleet.io/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": "tiny", "namespace": ns},
        "spec": {
            "model": {"name": "tiny"},
            "pools": ["real"],
            "engine": {"image": _tag("worker-sim")},
            "artifact": {
                "uri": f"{artifacts['base']}/{folder}",
                "digest": artifacts["digest"],
                "trust": {"publicKey": {"name": "signing-key", "key": "public.pem"}},
            },
        },
    }
    real.apply(pool, model)


def _pod(real: Cluster, ns: str) -> dict[str, Any] | None:
    pods = real.get("pods", "-n", ns)["items"]
    return pods[0] if pods else None


def _ready(pod: dict[str, Any] | None) -> bool:
    conditions = (pod or {}).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def test_verified_worker_turns_ready_through_its_real_probe(
    real: Cluster, operator: None, artifacts: dict[str, Any], ns: str
) -> None:
    _deploy(real, ns, artifacts, folder="good")
    pod = wait_for("the worker pod", lambda: _pod(real, ns), timeout=60)
    created = time.monotonic()
    pod = wait_for("the worker Ready", lambda: (p := _pod(real, ns)) and _ready(p) and p, 120)
    ready_seconds = time.monotonic() - created
    status = pod["status"]["containerStatuses"][0]
    assert pod["spec"]["nodeName"] == realnode.NODE_NAME
    assert status["containerID"].startswith("containerd://")  # a real container, not kwok's
    assert status["restartCount"] == 0 and status["ready"] is True
    assert pod["status"]["podIP"].startswith(realnode.GATEWAY_IP.rsplit(".", 1)[0] + ".")
    # The readiness probe is the operator's exec probe, run by the kubelet in the container.
    assert "exec" in pod["spec"]["containers"][0]["readinessProbe"]
    # The engine answers on the pod's bridge IP, as the gateway would call it.
    answer = subprocess.run(
        ["python3", "-c", _COMPLETION, pod["status"]["podIP"]],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert answer.returncode == 0, answer.stderr
    logs = real.kubectl("-n", ns, "logs", pod["metadata"]["name"]).stdout
    assert '"reason":"Verified"' in logs  # the verdict the entrypoint printed before exec
    print(f"pod create -> Ready: {ready_seconds:.1f} s")

    # Graceful deletion: the preStop drain (tokenfleet.worker.drain, issue 17) polls the engine's
    # running requests; an idle worker has none, so it returns at once instead of the old fixed
    # 15 s sleep, and SIGTERM then stops the engine well inside the grace period.
    started = time.monotonic()
    real.kubectl("-n", ns, "delete", "pod", pod["metadata"]["name"], "--wait=true", "--timeout=90s")
    took = time.monotonic() - started
    print(f"pod deletion: {took:.1f} s")
    assert took < 15, f"deletion of an idle worker took {took:.1f} s (drain, then SIGTERM)"


_COMPLETION = """
import json, sys, urllib.request
body = json.dumps({"model": "tiny", "prompt": "ping", "max_tokens": 1}).encode()
r = urllib.request.Request(f"http://{sys.argv[1]}:8000/v1/completions", data=body,
                           headers={"Content-Type": "application/json"})
sys.exit(0 if urllib.request.urlopen(r, timeout=10).status == 200 else 1)
"""


def test_tampered_artifact_leaves_the_verdict_in_the_termination_message(
    real: Cluster, operator: None, artifacts: dict[str, Any], ns: str
) -> None:
    _deploy(real, ns, artifacts, folder="tampered")

    def refused() -> dict[str, Any] | None:
        pod = _pod(real, ns)
        for status in (pod or {}).get("status", {}).get("containerStatuses", []):
            state = status.get("lastState", {}).get("terminated") or status.get("state", {}).get(
                "terminated"
            )
            if state and state.get("message"):
                return dict(state)
        return None

    terminated = wait_for("a refused worker", refused, timeout=120)
    verdict = json.loads(terminated["message"])
    assert terminated["exitCode"] == 3  # EXIT_UNVERIFIED: the engine never started
    assert verdict["verified"] is False
    assert verdict["reason"] in ("DigestMismatch", "SignatureInvalid")
    assert not _ready(_pod(real, ns))


@pytest.mark.parametrize("server", ["operator", "gateway"])
def test_tokenfleet_image_runs_non_root_read_only_and_stops_on_sigterm(
    real: Cluster, server: str, tmp_path: Path
) -> None:
    """Each entrypoint as a container: read-only root (no tmpfs either), default (non-root) user,
    host network to reach the local API server, then SIGTERM."""
    config = service_account_kubeconfig(real, tmp_path / "kubeconfig", component=server)
    config.chmod(0o644)  # readable by the image's user
    name = f"tf-{server}-{uuid.uuid4().hex[:6]}"
    port = 18000 + int(uuid.uuid4().int % 1000)
    health = f"http://127.0.0.1:{port}/healthz"
    args = (
        ["operator", "--liveness", health]
        if server == "operator"
        else ["gateway", "--port", str(port)]
    )
    run = [
        *PODMAN, "run", "-d", "--name", name, "--read-only", "--read-only-tmpfs=false",
        "--network", "host", *ULIMITS, "-v", f"{config}:/kubeconfig:ro", "-e",
        "KUBECONFIG=/kubeconfig", _tag("tokenfleet"), *args,
    ]  # fmt: skip
    subprocess.run(run, check=True, capture_output=True, timeout=60)
    try:
        wait_for(f"{server} serving {health}", lambda: _serving(health), 60)
        pid = int(_podman("inspect", "--format", "{{.State.Pid}}", name))
        uid = Path(f"/proc/{pid}/status").read_text().split("Uid:")[1].split()[0]
        assert uid != "0"
        started = time.monotonic()
        _podman("stop", "--time", "30", name)
        took = time.monotonic() - started
        code = int(_podman("inspect", "--format", "{{.State.ExitCode}}", name))
        assert took < 20, f"{server} ignored SIGTERM ({took:.1f} s)"
        assert code == 0, _logs(name)
        assert "Read-only file system" not in _logs(name)
    finally:
        subprocess.run([*PODMAN, "rm", "-f", name], capture_output=True, check=False)


def _podman(*args: str) -> str:
    return subprocess.run(
        [*PODMAN, *args], check=True, capture_output=True, text=True, timeout=60
    ).stdout.strip()


def _logs(name: str) -> str:
    done = subprocess.run([*PODMAN, "logs", name], capture_output=True, text=True, check=False)
    return done.stdout + done.stderr


def _serving(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False

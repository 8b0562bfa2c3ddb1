"""`tokenfleet usage` with nothing but a kubeconfig, against the real API server and a real,
password-protected redis-server: the chart's own gateway Deployment and Redis Secret (rendered by
the built helm, applied to a test namespace) lead it to the ledger, as on `make up`; a
cluster-internal Redis Service is reached through `kubectl port-forward`; an address it cannot
reach ends in an error naming what to pass; with no gateway in the cluster, the local
platform's `redis-url` beside the kubeconfig is read (make up's host-process Redis). The
password never reaches the output.

And `kubectl tokenfleet` as kubectl runs it: flags after the subcommand, and a reader that
closes the pipe early (quiet, exit 141).

The port-forward case runs a stand-in kubectl (a loopback TCP relay that prints what kubectl
port-forward prints): the stack's simulated nodes (kwok) serve no port-forward for the API
server to relay to. The command line it was given is checked, and that it was stopped after."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from support.cluster import BIN_DIR, REPO, Cluster, alive, wait_for
from support.gateway import free_port, listening, spawn, stop
from support.objects import POOL_SPEC, manifest
from tokenfleet.gateway import usage_ledger

SCRIPTS = Path(sys.executable).parent
CHART = REPO / "charts" / "tokenfleet"
HOUR = datetime.datetime(2026, 11, 30, 9, tzinfo=datetime.UTC)
WINDOW = ("--since", "1h", "--until", "2026-11-30T10:00:00Z", "-o", "json")


def chart_objects(ns: str, *values: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The chart's objects by (kind, name), rendered by the built helm into ``ns``; the gateway
    Deployment without replicas (only the object matters here, not its pods)."""
    rendered = subprocess.run(
        [str(BIN_DIR / "helm"), "template", "tokenfleet", str(CHART), "-n", ns, *values],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(rendered) if d}
    docs["Deployment", "tokenfleet-gateway"]["spec"]["replicas"] = 0
    return docs


def redis_secret_and_gateway(docs: dict[tuple[str, str], Any]) -> tuple[Any, Any]:
    return docs["Secret", "tokenfleet-redis"], docs["Deployment", "tokenfleet-gateway"]


def password_of(secret: dict[str, Any]) -> str:
    return base64.b64decode(secret["data"]["password"]).decode()


@contextlib.contextmanager
def running_redis(port: int, log: Path, password: str | None) -> Iterator[str]:
    """A real redis-server on loopback (with ``--requirepass`` when given); its URL."""
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    argv += ["--appendonly", "no", *(["--requirepass", password] if password else [])]
    process = spawn(argv, log)
    wait_for("redis to listen", lambda: listening(port), timeout=20)
    try:
        yield f"redis://{f':{password}@' if password else ''}127.0.0.1:{port}/0"
    finally:
        stop(process)


def record(url: str) -> None:
    """Two tenants' requests in the closed hour HOUR, written as a gateway writes them."""

    async def write() -> None:
        ledger = usage_ledger.UsageLedger(url, registry=CollectorRegistry())
        now = HOUR + datetime.timedelta(minutes=20)
        for tenant, outcome, prompt in (("apps/chat", "served", 1200), ("apps/eval", "failed", 30)):
            ledger.record(
                tenant=tenant, model="m", pool="default/p", outcome=outcome,
                prompt_tokens=prompt, completion_tokens=7, now=now,
            )  # fmt: skip
        await ledger.close()

    asyncio.run(write())


def usage(
    kubeconfig: Path, *args: str, path: str = "/usr/bin:/bin"
) -> subprocess.CompletedProcess[str]:
    """`tokenfleet usage` as a user runs it: only KUBECONFIG (and PATH, HOME) in its environment."""
    env = {"KUBECONFIG": str(kubeconfig), "PATH": path, "HOME": str(kubeconfig.parent)}
    return subprocess.run(
        [str(SCRIPTS / "tokenfleet"), "usage", *WINDOW, *args],
        env=env, capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip


def rows(done: subprocess.CompletedProcess[str]) -> list[tuple[str, str, int]]:
    assert done.returncode == 0, done.stderr
    return [(r["tenant"], r["outcome"], r["prompt_tokens"]) for r in json.loads(done.stdout)]


EXPECTED = [("apps/chat", "served", 1200), ("apps/eval", "failed", 30)]


def test_the_charts_objects_lead_to_the_ledger_with_the_kubeconfig_alone(
    cluster: Cluster, ns: str, tmp_path: Path
) -> None:
    """make up's case: values-local puts Redis on loopback, the password in the Secret."""
    redis_port = free_port()
    values = ["-f", str(CHART / "values-local.yaml"), "--set", f"redis.port={redis_port}"]
    secret, gateway = redis_secret_and_gateway(chart_objects(ns, *values))
    password = password_of(secret)
    cluster.apply(secret, gateway)
    with running_redis(redis_port, tmp_path / "redis.log", password) as url:
        record(url)
        done = usage(cluster.kubeconfig, "-n", ns)
        assert rows(done) == EXPECTED
        assert password not in done.stdout + done.stderr
        elsewhere = usage(cluster.kubeconfig, "-n", f"{ns}-none")
        assert elsewhere.returncode == 1
        assert "no TokenFleet gateway Deployment" in elsewhere.stderr
        assert f"in namespace {ns}-none" in elsewhere.stderr
        wrong = usage(
            cluster.kubeconfig, "-n", ns, "--redis", f"redis://:nope@127.0.0.1:{redis_port}/0"
        )
        assert wrong.returncode == 1 and "did not answer" in wrong.stderr  # --redis wins
        assert "nope" not in wrong.stderr and password not in wrong.stderr


REFUSED = 'services "tokenfleet-redis" is forbidden'
FAKE_KUBECTL = """\
#!{python}
# kubectl port-forward's stand-in: relays a free loopback port to the real Redis.
import json, os, socket, sys, threading
with open({argv_file!r}, "w") as out:
    json.dump({{"argv": sys.argv[1:], "pid": os.getpid()}}, out)
server = socket.create_server(("127.0.0.1", 0))
print(f"Forwarding from 127.0.0.1:{{server.getsockname()[1]}} -> 6379", flush=True)

def pump(src, dst):
    while data := src.recv(65536):
        dst.sendall(data)
    dst.shutdown(socket.SHUT_WR)

while True:
    client, _ = server.accept()
    print(f"Handling connection for {{server.getsockname()[1]}}", flush=True)
    upstream = socket.create_connection(("127.0.0.1", {target}))
    for a, b in ((client, upstream), (upstream, client)):
        threading.Thread(target=pump, args=(a, b), daemon=True).start()
"""


def test_a_cluster_service_is_reached_through_kubectl_port_forward(
    cluster: Cluster, ns: str, tmp_path: Path
) -> None:
    """A real cluster's case: the chart's default host, tokenfleet-redis.<ns>.svc:6379."""
    secret, gateway = redis_secret_and_gateway(chart_objects(ns))
    password = password_of(secret)
    cluster.apply(secret, gateway)
    redis_port = free_port()
    tools = tmp_path / "tools"
    tools.mkdir()
    argv_file = tmp_path / "kubectl-argv.json"
    kubectl = tools / "kubectl"
    kubectl.write_text(
        FAKE_KUBECTL.format(python=sys.executable, argv_file=str(argv_file), target=redis_port)
    )
    kubectl.chmod(0o755)
    with running_redis(redis_port, tmp_path / "redis.log", password) as url:
        record(url)
        done = usage(cluster.kubeconfig, "-n", ns, path=f"{tools}:/usr/bin:/bin")
        assert rows(done) == EXPECTED
        assert password not in done.stdout + done.stderr
    ran = json.loads(argv_file.read_text())
    assert ran["argv"] == [
        "port-forward", "--namespace", ns, "svc/tokenfleet-redis", ":6379",
        "--address", "127.0.0.1",
    ]  # fmt: skip
    assert wait_for("the port-forward to stop", lambda: not alive(ran["pid"]), timeout=10)
    kubectl.write_text(f"#!/bin/sh\necho 'error: {REFUSED}' >&2\nexit 1\n")
    refused = usage(cluster.kubeconfig, "-n", ns, path=f"{tools}:/usr/bin:/bin")
    assert refused.returncode == 1
    assert f"kubectl port-forward to Service {ns}/tokenfleet-redis failed: error: {REFUSED}" in (
        refused.stderr
    )
    (tmp_path / "nothing").mkdir()
    without = usage(cluster.kubeconfig, "-n", ns, path=str(tmp_path / "nothing"))  # no kubectl
    assert without.returncode == 1
    assert f"Service {ns}/tokenfleet-redis needs kubectl on PATH" in without.stderr
    assert "--redis redis://:PASSWORD@HOST:PORT/0" in without.stderr
    assert f"Secret {ns}/tokenfleet-redis, key password" in without.stderr
    assert password not in without.stderr


def test_an_address_it_cannot_reach_names_what_to_pass(cluster: Cluster, ns: str) -> None:
    """An external Redis (external.urlSecret) this machine cannot reach."""
    url = "redis://:ExternalPassw0rd@redis.corp.invalid:6380/2"
    gateway = chart_objects(
        ns, "--set", "redis.enabled=false", "--set", "redis.external.urlSecret.name=ext-redis"
    )["Deployment", "tokenfleet-gateway"]
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "ext-redis", "namespace": ns},
        "stringData": {"url": url},
    }
    cluster.apply(secret, gateway)
    done = usage(cluster.kubeconfig, "-n", ns)
    assert done.returncode == 1
    assert "redis://:***@redis.corp.invalid:6380/2" in done.stderr
    assert "is no Service of the cluster" in done.stderr
    assert "--redis redis://:PASSWORD@HOST:PORT/2" in done.stderr
    assert f"Secret {ns}/ext-redis, key url" in done.stderr
    assert "ExternalPassw0rd" not in done.stderr


def test_without_a_gateway_in_the_cluster_the_local_platforms_file_is_read(
    cluster: Cluster, ns: str, tmp_path: Path
) -> None:
    """make up without the real node: Redis a host process, its URL beside the kubeconfig."""
    state = tmp_path / "state"
    state.mkdir()
    kubeconfig = state / "kubeconfig"
    shutil.copy(cluster.kubeconfig, kubeconfig)
    with running_redis(free_port(), tmp_path / "redis.log", None) as url:
        record(url)
        (state / "redis-url").write_text(url + "\n")
        assert rows(usage(kubeconfig, "-n", ns)) == EXPECTED


def plugin(cluster: Cluster, *args: str, **run: Any) -> subprocess.CompletedProcess[str]:
    """`kubectl tokenfleet …`, kubectl finding the plugin on PATH."""
    env = {**cluster.env, "PATH": f"{SCRIPTS}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(
        [str(BIN_DIR / "kubectl"), "tokenfleet", *args],
        env=env, text=True, timeout=60, check=False, **run,
    )  # fmt: skip


def test_kubectl_tokenfleet_takes_flags_after_the_subcommand(cluster: Cluster, ns: str) -> None:
    cluster.apply(manifest("InferencePool", "p", ns, POOL_SPEC))
    done = plugin(cluster, "pools", "-n", ns, "-o", "json", capture_output=True)
    assert done.returncode == 0, done.stderr
    assert [pool["name"] for pool in json.loads(done.stdout)["pools"]] == ["p"]


def test_kubectl_tokenfleet_into_a_closed_pipe_is_quiet(cluster: Cluster, ns: str) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = plugin(cluster, "pools", "-n", ns, stdout=write_end, stderr=subprocess.PIPE)
    finally:
        os.close(write_end)
    assert done.stderr == ""
    assert done.returncode == 141

"""One real local control plane per test session (etcd, kube-apiserver, controller-manager,
scheduler, kwok, node agent), started exactly as `make up` starts it; tests isolate themselves
in namespaces. The session fails — never skips — if the stack cannot start."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cluster import Cluster, namespace, scraped, start_stack, stop_stack
from support.gateway import Redis, free_port
from support.operator import running_operator, service_account_kubeconfig


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = start_stack(tmp_path_factory.mktemp("stack"))
    yield running
    leftovers = stop_stack(running)
    assert not leftovers, f"processes left behind by the stack: {leftovers}"


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Redis]:
    """A real redis-server for one module (modules that need a fresh one per test define their
    own)."""
    r = Redis(port=free_port(), log=Path(tmp_path_factory.mktemp("redis")) / "redis.log")
    r.start()
    yield r
    r.kill()


@pytest.fixture
def ns(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"t-{request.node.name[:40].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:5]}"
    name = "".join(ch if ch.isalnum() or ch == "-" else "-" for ch in name)
    with namespace(cluster, name) as created:
        yield created


@pytest.fixture(scope="session")
def repo() -> Path:
    return Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def operator_kubeconfig(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return service_account_kubeconfig(cluster, tmp_path_factory.mktemp("op") / "kubeconfig")


@pytest.fixture(scope="session")
def operator(
    cluster: Cluster, operator_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[subprocess.Popen[bytes]]:
    log = tmp_path_factory.mktemp("oplog") / "operator.log"
    metrics = free_port()  # its /metrics, scraped by the stack's Prometheus as in a cluster
    with (
        running_operator(
            operator_kubeconfig,
            log,
            prometheus=cluster.info["prometheus"],
            env={"TOKENFLEET_METRICS_PORT": str(metrics)},
        ) as process,
        scraped(cluster, job="tokenfleet-operator", port=metrics),
    ):
        yield process
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]

"""One real local control plane per test session (etcd, kube-apiserver, controller-manager,
scheduler, kwok, node agent), started exactly as `make up` starts it; tests isolate themselves
in namespaces. The session fails — never skips — if the stack cannot start."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cluster import Cluster, namespace, start_stack, stop_stack


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = start_stack(tmp_path_factory.mktemp("stack"))
    yield running
    leftovers = stop_stack(running)
    assert not leftovers, f"processes left behind by the stack: {leftovers}"


@pytest.fixture
def ns(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"t-{request.node.name[:40].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:5]}"
    name = "".join(ch if ch.isalnum() or ch == "-" else "-" for ch in name)
    with namespace(cluster, name) as created:
        yield created


@pytest.fixture(scope="session")
def repo() -> Path:
    return Path(__file__).resolve().parents[2]

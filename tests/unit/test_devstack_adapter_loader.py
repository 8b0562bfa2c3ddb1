"""What the node agent runs for a worker pod's ``adapter-loader`` container (the operator's
shape): which pods get one, its port, the trust Secret a kubelet would mount (with and without
items, or a Sigstore identity), and the environment the process gets on a simulated node
(the pod IP to bind, the simulator's private port, a per-pod adapter directory, the key file)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tokenfleet.api import labels
from tokenfleet.devstack import processes, simulated
from tokenfleet.devstack.simulated import AdapterLoaderSpec

KEY_PATH = "/etc/tokenfleet/adapter-trust/public.pem"
TRUST_VOLUME = {
    "name": "adapter-trust",
    "secret": {
        "secretName": "acme-adapters",
        "items": [{"key": "public.pem", "path": "public.pem"}],
    },
}
TRUST_ENV = [{"name": "TOKENFLEET_TRUST_PUBLIC_KEY", "value": KEY_PATH}]
SIGSTORE_ENV = [
    {"name": "TOKENFLEET_TRUST_IDENTITY", "value": "ci@example.com"},
    {"name": "TOKENFLEET_TRUST_ISSUER", "value": "https://accounts.example.com"},
]


def loader_container(
    *, trust_env: list[dict[str, str]], ports: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The sidecar exactly as the operator renders it."""
    return {
        "name": "adapter-loader",
        "image": "ghcr.io/tokenfleet/worker:vllm-v0.33.0",
        "command": ["python3", "-m", "tokenfleet.worker.adapters"],
        "ports": [{"name": "adapters", "containerPort": 8002}] if ports is None else ports,
        "env": [
            {"name": "TOKENFLEET_ADAPTER_PORT", "value": "8002"},
            {"name": "TOKENFLEET_ENGINE_URL", "value": "http://127.0.0.1:8000"},
            {"name": "TOKENFLEET_ADAPTER_DIR", "value": "/models/adapters"},
            *trust_env,
        ],
        "volumeMounts": [
            {"name": "models", "mountPath": "/models"},
            {
                "name": "adapter-trust",
                "mountPath": "/etc/tokenfleet/adapter-trust",
                "readOnly": True,
            },
        ],
    }


def worker(
    *,
    sidecar: dict[str, Any] | None = None,
    volume: dict[str, Any] | None = TRUST_VOLUME,
    phase: str = "Running",
) -> dict[str, Any]:
    engine = {
        "name": "vllm",
        "args": ["/models/artifact", "--enable-lora", "--max-loras", "4"],
        "ports": [{"name": "http", "containerPort": 8000}],
    }
    return {
        "metadata": {
            "name": "w-1", "namespace": "ns", "uid": "uid-1",
            "labels": {labels.ROLE: labels.ROLE_WORKER},
        },
        "spec": {
            "containers": [engine, *([sidecar] if sidecar else [])],
            "volumes": [{"name": "models", "emptyDir": {}}, *([volume] if volume else [])],
        },
        "status": {"phase": phase, "podIP": "127.1.1.4"},
    }  # fmt: skip


BASE_ENV = (
    ("TOKENFLEET_ADAPTER_PORT", "8002"),
    ("TOKENFLEET_ENGINE_URL", "http://127.0.0.1:8000"),
    ("TOKENFLEET_ADAPTER_DIR", "/models/adapters"),
)
KEYED = AdapterLoaderSpec(
    pod_uid="uid-1",
    pod_key="ns/w-1",
    pod_ip="127.1.1.4",
    port=8002,
    env=(*BASE_ENV, ("TOKENFLEET_TRUST_PUBLIC_KEY", KEY_PATH)),
    secret="acme-adapters",
    secret_key="public.pem",
)


@pytest.mark.parametrize(
    ("the_pod", "expected"),
    [
        pytest.param(worker(sidecar=loader_container(trust_env=TRUST_ENV)), KEYED,
                     id="operator-shape-with-key"),
        pytest.param(
            worker(sidecar=loader_container(trust_env=TRUST_ENV),
                   volume={"name": "adapter-trust", "secret": {"secretName": "acme-adapters"}}),
            KEYED, id="secret-without-items"),
        pytest.param(
            worker(sidecar=loader_container(trust_env=SIGSTORE_ENV), volume=None),
            AdapterLoaderSpec(
                pod_uid="uid-1", pod_key="ns/w-1", pod_ip="127.1.1.4", port=8002,
                env=(*BASE_ENV, ("TOKENFLEET_TRUST_IDENTITY", "ci@example.com"),
                     ("TOKENFLEET_TRUST_ISSUER", "https://accounts.example.com")),
            ),
            id="sigstore-identity"),
        pytest.param(
            worker(sidecar=loader_container(trust_env=TRUST_ENV,
                                            ports=[{"name": "adapters", "containerPort": 9002}])),
            dataclasses.replace(KEYED, port=9002), id="its-adapters-port"),
        pytest.param(worker(sidecar=loader_container(trust_env=TRUST_ENV, ports=[])),
                     KEYED, id="no-port-is-8002"),
        pytest.param(worker(sidecar=loader_container(trust_env=TRUST_ENV), volume=None),
                     AdapterLoaderSpec(pod_uid="uid-1", pod_key="ns/w-1", pod_ip="127.1.1.4",
                                       port=8002, env=KEYED.env),
                     id="key-path-with-no-secret-mounted"),
        pytest.param(worker(), None, id="no-sidecar"),
        pytest.param(worker(sidecar=loader_container(trust_env=TRUST_ENV), phase="Pending"), None,
                     id="not-running-no-engine-no-sidecar"),
    ],
)  # fmt: skip
def test_adapter_loader_spec(the_pod: dict[str, Any], expected: AdapterLoaderSpec | None) -> None:
    assert simulated.adapter_loader_spec(the_pod) == expected


def test_process_env_rewrites_what_differs_on_a_simulated_node() -> None:
    env = KEYED.process_env(
        engine_url="http://127.0.0.1:41234",
        adapter_dir=Path("/work/agent/adapter-loaders/uid-1/adapters"),
        public_key=Path("/work/agent/adapter-loaders/uid-1/trust/public.pem"),
    )
    assert env == {
        "TOKENFLEET_ADAPTER_PORT": "8002",
        "TOKENFLEET_ADAPTER_ADDRESS": "127.1.1.4",
        "TOKENFLEET_ENGINE_URL": "http://127.0.0.1:41234",
        "TOKENFLEET_ADAPTER_DIR": "/work/agent/adapter-loaders/uid-1/adapters",
        "TOKENFLEET_TRUST_PUBLIC_KEY": "/work/agent/adapter-loaders/uid-1/trust/public.pem",
    }


def test_process_env_keeps_a_sigstore_identity() -> None:
    spec = dataclasses.replace(
        KEYED, env=(*BASE_ENV, ("TOKENFLEET_TRUST_IDENTITY", "ci@example.com")), secret=""
    )
    env = spec.process_env(engine_url="http://127.0.0.1:1", adapter_dir=Path("/a"), public_key=None)
    assert env["TOKENFLEET_TRUST_IDENTITY"] == "ci@example.com"
    assert "TOKENFLEET_TRUST_PUBLIC_KEY" not in env


@pytest.mark.parametrize(
    ("exits", "seconds"),
    [(0, 1.0), (1, 1.0), (2, 2.0), (3, 4.0), (6, 30.0), (40, 30.0)],
)
def test_restart_back_off_doubles_up_to_30_seconds(exits: int, seconds: float) -> None:
    assert processes.restart_delay(exits) == seconds

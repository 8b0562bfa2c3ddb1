"""Each gateway process's share of the shared quotas: 1 / (replicas × workers), because each
process holds leases (and, with Redis down, fail-open local limits) of its own."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from tokenfleet.gateway.app import create_app
from tokenfleet.gateway.config import Settings
from tokenfleet.gateway.state import STATE


@pytest.mark.parametrize(
    ("replicas", "workers", "share"),
    [
        pytest.param(1, 1, 1.0, id="one-process"),
        pytest.param(3, 1, 1 / 3, id="three-replicas"),
        pytest.param(1, 2, 1 / 2, id="two-workers"),
        pytest.param(3, 2, 1 / 6, id="three-replicas-of-two-workers"),
    ],
)
def test_every_gateway_process_takes_its_share_of_the_quotas(
    replicas: int, workers: int, share: float
) -> None:
    settings = Settings(expected_replicas=replicas, workers=workers)
    app = create_app(settings, metrics_registry=CollectorRegistry())
    assert app[STATE].quotas.share == pytest.approx(share)

"""What the journeys on `make up` share: the watch on the machine's own address."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support import netwatch
from tokenfleet.devstack import realnode


@pytest.fixture(scope="module")
def watch() -> Iterator[netwatch.TcpWatch]:
    """Every TCP connection, in every network namespace, that touches one of this host's
    interface addresses (outside the platform's own pod bridge) for the module's whole run."""
    bad = netwatch.forbidden(
        netwatch.host_addresses(), [netwatch.ipaddress.ip_network(realnode.SUBNET)]
    )
    assert bad, "this host has no interface address to guard"
    with netwatch.TcpWatch(bad) as watching:
        yield watching

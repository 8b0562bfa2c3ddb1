"""Issue 35, finding 9: with Redis down, fail-open limits hold across a replica's processes.

One gateway replica with ``--workers 2`` (the chart's default), its Redis unreachable from the
start, ``--quota-failure open``: each process enforces its share of a tenant's 20 requests a
minute, 20 / (replicas × workers). 60 requests sent at once, each on its own connection (the
kernel spreads SO_REUSEPORT connections over both processes), may be admitted at most 20 times.
Sized per replica but enforced per process, the two processes admitted 40.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cluster import wait_for
from support.gateway import Gateway, Sim, free_port, key_hash, running, start_gateway, start_sim

KEY = "tfk-failopen-" + "0" * 30
LIMIT = 20


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("gw-fail-open")
    sim: Sim = start_sim(tmp, "m", "--max-num-seqs", "64")
    config = {
        "models": [{"name": "m", "endpoints": [sim.url], "maxConcurrency": 64}],
        "pools": [{"name": "default"}],
        "tenants": [
            {
                "name": "team",
                "apiKeyHashes": [key_hash(KEY)],
                "allowedModels": ["*"],
                "quotas": {"requestsPerMinute": LIMIT},
            }
        ],
    }
    dead = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens: Redis is down from the start
    args = ("--workers", "2", "--redis", dead, "--quota-failure", "open")
    try:
        with running(start_gateway(tmp, config, *args)) as g:
            # both workers listening (one ready answers /readyz while the other still starts)
            wait_for("two listening workers", lambda: listeners(g.port) >= 2, timeout=30)
            yield g
    finally:
        sim.kill()


def listeners(port: int) -> int:
    """Sockets listening on 127.0.0.1:``port`` (one per SO_REUSEPORT worker), from /proc."""
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(
        1
        for row in rows
        if row.split()[3] == "0A" and int(row.split()[1].split(":")[1], 16) == port
    )


def ask(gateway: Gateway) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers=headers)
    status = conn.getresponse().status
    conn.close()
    return status


def test_fail_open_limits_hold_across_the_workers(gateway: Gateway) -> None:
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        statuses = list(pool.map(lambda _: ask(gateway), range(3 * LIMIT)))
    admitted = statuses.count(200)
    assert set(statuses) <= {200, 429}, statuses
    assert 0 < admitted <= LIMIT, f"{admitted} of {LIMIT} a minute admitted"
    assert admitted > LIMIT // 2, "both workers admitted their share (connections reached both)"

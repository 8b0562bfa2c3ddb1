"""Issue 35, finding 9: a full response cache must never evict quota state.

The chart's Redis pod, rendered with ``helm template`` (defaults) and every container run for
real as redis-server with its rendered flags (ports moved to free loopback ports, memory capped
at 4 MB to fill it quickly). The gateway's URLs come from its rendered environment: the quota
state goes to TOKENFLEET_REDIS_URL, the response cache to TOKENFLEET_CACHE_REDIS_URL, or to the
quota Redis when the chart gives none (what the gateway does). A tenant's rate bucket (a
60-second TTL, like the quota script's) is written, then cache entries (an hour's TTL) many
times the memory cap: the bucket must still be there, and every cache write must succeed.

Before: one Redis under ``maxmemory-policy volatile-ttl`` held both, and the shortest-lived
keys, the rate buckets, were evicted first.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from support.cluster import BIN_DIR, REPO, wait_for
from support.gateway import free_port, listening
from tokenfleet.gateway.redis_client import RespClient

CHART = REPO / "charts" / "tokenfleet"
MEMORY = "4mb"


def flag_set(argv: list[str], flag: str, value: str) -> list[str]:
    i = argv.index(flag)
    return [*argv[: i + 1], value, *argv[i + 2 :]]


@pytest.fixture
def chart_redis() -> Iterator[dict[str, str]]:
    """The rendered Redis containers running; the gateway's two URLs (password filled in)."""
    rendered = subprocess.run(
        [str(BIN_DIR / "helm"), "template", "tokenfleet", str(CHART), "-n", "tf",
         "--set", "redis.extraArgs={--bind,127.0.0.1}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    password, moved, processes = uuid.uuid4().hex, {}, []
    for container in deployments["tokenfleet-redis"]["spec"]["template"]["spec"]["containers"]:
        argv = [a.replace("$(REDIS_PASSWORD)", password) for a in container["command"]]
        argv += [a.replace("$(REDIS_PASSWORD)", password) for a in container["args"]]
        port = free_port()
        moved[argv[argv.index("--port") + 1]] = str(port)
        argv = flag_set(flag_set(argv, "--port", str(port)), "--maxmemory", MEMORY)
        processes.append(
            subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             cwd="/tmp", env={"PATH": os.environ["PATH"]})
        )  # fmt: skip
        wait_for("redis to listen", lambda port=port: listening(port))
    gateway = deployments["tokenfleet-gateway"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value", "") for e in gateway["env"]}

    def local(url: str) -> str:
        parts = urlsplit(url.replace("$(TOKENFLEET_REDIS_PASSWORD)", password))
        return f"redis://:{password}@127.0.0.1:{moved[str(parts.port)]}{parts.path}"

    quota = env["TOKENFLEET_REDIS_URL"]
    try:
        yield {
            "quota": local(quota),
            "cache": local(env.get("TOKENFLEET_CACHE_REDIS_URL") or quota),
        }
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)


async def fill(urls: dict[str, str]) -> tuple[Any, list[str]]:
    quota, cache = RespClient(urls["quota"], timeout=5), RespClient(urls["cache"], timeout=5)
    failed: list[str] = []
    try:
        await quota.call("SET", "tfq:{team}:tpm", "1000", "EX", 60)  # a tenant's rate bucket
        entry = b"x" * 8192
        for i in range(2000):  # 16 MB of answers into a 4 MB cap
            try:
                await cache.call("SET", f"tfc:answer:{i}", entry, "EX", 3600)
            except Exception as exc:  # the cache may refuse; it must not evict quotas
                failed.append(str(exc))
        return await quota.call("GET", "tfq:{team}:tpm"), failed
    finally:
        await quota.close()
        await cache.close()


def test_a_full_response_cache_never_evicts_quota_state(chart_redis: dict[str, str]) -> None:
    bucket, failed = asyncio.run(fill(chart_redis))
    assert bucket == b"1000", "the tenant's rate bucket was evicted by cache entries"
    assert chart_redis["cache"] != chart_redis["quota"], "the cache has a Redis of its own"
    assert not failed, failed[:3]  # the cache's own Redis evicts its oldest entries instead

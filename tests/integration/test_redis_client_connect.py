"""The gateway's Redis client connecting to a database other than 0: bounded by its timeout
even when the server never answers, and refusing a database that does not exist instead of
writing to database 0 (the module's real redis-server from conftest, and a silent one)."""

from __future__ import annotations

import asyncio
import time

import pytest

from support.gateway import Redis
from tokenfleet.gateway import redis_client


async def test_a_server_that_never_answers_select_fails_within_the_timeout() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1 << 16)  # takes SELECT, answers nothing
        await asyncio.sleep(30)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = redis_client.RespClient(f"redis://127.0.0.1:{port}/1", timeout=0.5)
    started = time.monotonic()
    try:
        with pytest.raises(redis_client.NotSent):
            await client.call("PING")
    finally:
        await client.close()
        server.close()
    assert time.monotonic() - started < 1.5


async def test_a_database_that_does_not_exist_is_an_error_not_database_0(redis: Redis) -> None:
    client = redis_client.RespClient(redis.url.rsplit("/", 1)[0] + "/99", timeout=2)
    try:
        with pytest.raises(redis_client.RespError, match="DB index"):
            await client.call("SET", "k", "v")
    finally:
        await client.close()
    zero = redis_client.RespClient(redis.url.rsplit("/", 1)[0] + "/0", timeout=2)
    try:
        assert await zero.call("GET", "k") is None
    finally:
        await zero.close()


async def test_commands_go_to_the_database_the_url_names(redis: Redis) -> None:
    base = redis.url.rsplit("/", 1)[0]
    three = redis_client.RespClient(base + "/3", timeout=2)
    zero = redis_client.RespClient(base + "/0", timeout=2)
    try:
        await three.call("SET", "where", "three")
        assert await three.call("GET", "where") == b"three"
        assert await zero.call("GET", "where") is None
    finally:
        await three.close()
        await zero.close()

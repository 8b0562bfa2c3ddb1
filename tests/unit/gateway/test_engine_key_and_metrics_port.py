"""The gateway's half of the worker lockdown and of the metrics split (issue #35 findings 1, 8).

Matrix: an engine request (no Authorization of its own) gets the engine key; a remote gateway's
request (its own Authorization) never carries the engine key to that remote; no key configured
sends none. /metrics: with a metrics port it answers there and the public API port has no
/metrics; without one it stays on the API port (host processes in tests).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from tokenfleet.gateway import engine_http
from tokenfleet.gateway.app import create_app
from tokenfleet.gateway.config import Settings


@pytest.fixture
async def engine() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        await request.read()
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/v1/completions", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}/v1/completions", seen
    await runner.cleanup()


@pytest.mark.parametrize(
    ("key", "headers", "sent"),
    [
        pytest.param("engine-key", {}, "Bearer engine-key", id="engine-gets-the-key"),
        pytest.param(
            "engine-key",
            {"Authorization": "Bearer remote-key"},
            "Bearer remote-key",
            id="remote-never-sees-the-engine-key",
        ),
        pytest.param("", {}, None, id="no-key-configured"),
    ],
)
async def test_engine_requests_carry_the_engine_key(
    engine: tuple[str, list[dict[str, str]]], key: str, headers: dict[str, str], sent: str | None
) -> None:
    url, seen = engine
    client = engine_http.Client(connect_seconds=2, engine_key=key)
    try:
        async with client.post(url, b"{}", {"Content-Type": "application/json", **headers}) as ex:
            await ex.read()
    finally:
        await client.close()
    assert seen[-1].get("Authorization") == sent
    assert list(seen[-1]).count("Authorization") <= 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("split", [True, False], ids=["own-port", "api-port"])
async def test_metrics_leave_the_public_port(split: bool) -> None:
    api, side = _free_port(), _free_port()
    settings = Settings(port=api, metrics_port=side if split else 0)
    app = create_app(settings, metrics_registry=CollectorRegistry())
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", api).start()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{api}/metrics") as public:
                assert (public.status == 200) is not split
            if split:
                async with http.get(f"http://127.0.0.1:{side}/metrics") as private:
                    assert private.status == 200
                    assert "tokenfleet" in await private.text()
    finally:
        await runner.cleanup()
        await asyncio.sleep(0)

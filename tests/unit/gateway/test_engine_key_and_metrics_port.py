"""The gateway's half of the worker lockdown and of the metrics split (issue #35 findings 1, 8).

Matrix: an engine request gets the key of its endpoint's namespace — the key the operator writes
into that namespace's pools' Secrets, never the installation's (static mode's endpoints, with no
namespace, get the configured key); a remote's request (its own Authorization, or none) never
carries an engine key; no key configured sends none; engines of two namespaces, each behind its
own key, are both reached; a namespace's key is derived once and never shown in a repr.
/metrics: with a metrics port it answers there and the public API port has no /metrics;
without one it stays on the API port (host processes in tests).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from tokenfleet.gateway import engine_http
from tokenfleet.gateway.app import create_app
from tokenfleet.gateway.config import Settings
from tokenfleet.gateway.engine_keys import EngineKeys
from tokenfleet.operator.plan import desired

KEY = "engine-key"


def pool_secret_key(namespace: str, installation_key: str = KEY) -> str:
    """What the operator writes into a pool's engine-key Secret in ``namespace``."""
    owner = desired.Owner(kind="InferencePool", name="p", uid="u")
    secret = desired.engine_key_secret(
        namespace=namespace, pool_name="p", owner=owner, installation_key=installation_key
    )
    return base64.b64decode(secret["data"]["key"]).decode()


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
    ("key", "namespace", "headers", "sent"),
    [
        pytest.param(KEY, "team-a", {}, "pool-secret:team-a", id="engine-gets-its-namespaces-key"),
        pytest.param(KEY, "", {}, f"Bearer {KEY}", id="static-endpoint-gets-the-configured-key"),
        pytest.param(
            KEY,
            None,
            {"Authorization": "Bearer remote-key"},
            "Bearer remote-key",
            id="remote-never-sees-an-engine-key",
        ),
        pytest.param(KEY, None, {}, None, id="remote-without-a-key-gets-none"),
        pytest.param("", "team-a", {}, None, id="no-key-configured"),
    ],
)
async def test_engine_requests_carry_their_namespaces_key(
    engine: tuple[str, list[dict[str, str]]],
    key: str,
    namespace: str | None,
    headers: dict[str, str],
    sent: str | None,
) -> None:
    url, seen = engine
    if sent and sent.startswith("pool-secret:"):
        sent = f"Bearer {pool_secret_key(sent.partition(':')[2])}"
        assert sent != f"Bearer {KEY}"
    client = engine_http.Client(connect_seconds=2, engine_keys=EngineKeys(key))
    try:
        async with client.post(
            url,
            b"{}",
            {"Content-Type": "application/json", **headers},
            engine_namespace=namespace,
        ) as ex:
            await ex.read()
    finally:
        await client.close()
    assert seen[-1].get("Authorization") == sent
    assert list(seen[-1]).count("Authorization") <= 1


@pytest.fixture
async def keyed_engines() -> AsyncIterator[dict[str, str]]:
    """An engine in each of team-a and team-b, serving (like vLLM --api-key) behind the key
    the operator wrote into its pool's Secret: 401 without it. Namespace → URL."""
    runners, urls = [], {}
    for namespace in ("team-a", "team-b"):
        want = f"Bearer {pool_secret_key(namespace)}"

        async def answer(request: web.Request, want: str = want) -> web.Response:
            await request.read()
            ok = request.headers.get("Authorization") == want
            return web.json_response({}, status=200 if ok else 401)

        app = web.Application()
        app.router.add_post("/v1/completions", answer)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        runners.append(runner)
        urls[namespace] = f"http://127.0.0.1:{port}/v1/completions"
    yield urls
    for runner in runners:
        await runner.cleanup()


async def test_the_gateway_reaches_every_namespaces_engines(keyed_engines: dict[str, str]) -> None:
    """With per-namespace keys (issue 35, finding 1), the gateway, holding the installation's
    key only, still reaches every namespace's engines: it sends each the key the operator
    derived for its namespace, and another namespace's key is refused."""
    client = engine_http.Client(connect_seconds=2, engine_keys=EngineKeys(KEY))
    statuses = {}
    try:
        for endpoint_ns, url in keyed_engines.items():
            for key_ns in keyed_engines:
                async with client.post(url, b"{}", {}, engine_namespace=key_ns) as ex:
                    await ex.read()
                    statuses[endpoint_ns, key_ns] = ex.status
    finally:
        await client.close()
    assert statuses == {
        ("team-a", "team-a"): 200,
        ("team-a", "team-b"): 401,
        ("team-b", "team-a"): 401,
        ("team-b", "team-b"): 200,
    }


def test_a_namespaces_key_is_derived_once_and_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    from tokenfleet.api import engine_key

    calls: list[str] = []
    real = engine_key.derive

    def counting(installation_key: str, namespace: str) -> str:
        calls.append(namespace)
        return real(installation_key, namespace)

    monkeypatch.setattr(engine_key, "derive", counting)
    keys = EngineKeys(KEY)
    first = keys.header_line("team-a")
    assert keys.header_line("team-a") == first and keys.headers("team-a") == {
        "Authorization": first.decode().removeprefix("Authorization: ").rstrip()
    }
    assert calls == ["team-a"]
    assert KEY not in repr(keys) and pool_secret_key("team-a") not in repr(keys)


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


async def test_the_adapter_sidecars_get_their_namespaces_key() -> None:
    """The sidecar requires its pool's key, as its engine does: the gateway's listings (and
    loads, through the same headers) carry the key of the sidecar's namespace."""
    from tokenfleet.gateway import adapter_slots
    from tokenfleet.gateway.adapter_catalog import Loader
    from tokenfleet.gateway.metrics import AdapterMetrics

    seen: list[str | None] = []

    async def listing(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.json_response({"adapters": []})

    app = web.Application()
    app.router.add_get("/v1/adapters", listing)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    slots = adapter_slots.AdapterSlots(
        AdapterMetrics.create(CollectorRegistry()), engine_keys=EngineKeys(KEY)
    )
    loader = Loader(url=f"http://127.0.0.1:{port}", pod="w")
    async with aiohttp.ClientSession() as session:
        task = asyncio.create_task(
            adapter_slots.refresh_forever(
                slots, session, lambda: {"http://w:8000": (loader, "team-a")}, interval=0.05
            )
        )
        try:
            async with asyncio.timeout(5):
                while not seen:
                    await asyncio.sleep(0.01)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    await runner.cleanup()
    assert seen[0] == f"Bearer {pool_secret_key('team-a')}"

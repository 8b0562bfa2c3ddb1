"""A plain OpenAI-compatible provider for the local platform: the ``provider`` remote of
examples/09-model-routes, standing in for a hosted API a route spills to.

It checks ``Authorization: Bearer <key>`` against one key (401 with OpenAI's error body
otherwise, as a hosted API answers a wrong key) and forwards ``/v1/chat/completions``,
``/v1/completions`` and ``/v1/models`` to one engine (an llm-d-inference-sim), streaming its
answer byte for byte. A client that leaves cancels the handler, which closes the upstream
request, so the engine stops generating as it would for a direct client. The key is never
forwarded or logged.

    python -m tokenfleet.devstack.provider --port 8091 --upstream http://127.0.0.1:PORT \\
        --key-file .tokenfleet/remote-keys/provider-key/api-key
"""

from __future__ import annotations

import argparse
import hmac
import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from aiohttp import web

#: What is forwarded; anything else is 404, as a provider without that API would answer.
PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/models")
#: Request headers the engine needs; the client's Authorization is never among them.
FORWARDED_REQUEST = ("Content-Type", "Accept")
#: Response headers passed back; framing (length, chunking) is this server's own.
FORWARDED_RESPONSE = ("Content-Type", "Cache-Control", "X-Request-Id")
#: Connect fast or fail (a loopback engine); between two chunks at most this long (a slow
#: engine's first token under load), so a hung engine cannot hold a client for ever.
TIMEOUT = aiohttp.ClientTimeout(total=None, connect=5, sock_read=120)
MAX_BODY_BYTES = 8 * 1024 * 1024  # the gateway's own limit is 4 MiB: never the narrower one

KEY = web.AppKey("key", bytes)
UPSTREAM = web.AppKey("upstream", str)
SESSION = web.AppKey("session", aiohttp.ClientSession)

log = logging.getLogger("tokenfleet.devstack.provider")


def invalid_key() -> web.Response:
    """401 as OpenAI answers a missing or wrong key (the SDKs raise AuthenticationError)."""
    error = {
        "message": "Incorrect API key provided.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
    return web.json_response({"error": error}, status=401)


def authorized(header: str, key: bytes) -> bool:
    """Whether an Authorization header carries the key (compared in constant time)."""
    scheme, _, token = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key)


async def forward(request: web.Request) -> web.StreamResponse:
    """Check the key, then relay the request to the engine and its answer back, streamed."""
    if not authorized(request.headers.get("Authorization", ""), request.app[KEY]):
        return invalid_key()
    body = await request.read()
    headers = {h: request.headers[h] for h in FORWARDED_REQUEST if h in request.headers}
    headers["Accept-Encoding"] = "identity"  # the bytes as the engine wrote them
    url = request.app[UPSTREAM] + request.rel_url.path_qs
    session = request.app[SESSION]
    async with session.request(
        request.method, url, data=body or None, headers=headers, timeout=TIMEOUT
    ) as upstream:
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        response.headers.update(
            {h: upstream.headers[h] for h in FORWARDED_RESPONSE if h in upstream.headers}
        )
        await response.prepare(request)
        try:
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            upstream.close()  # the client left between two chunks: stop the engine's work
            raise
        await response.write_eof()
        return response


async def healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok")


def app(*, upstream: str, key: str) -> web.Application:
    """The provider: ``key`` is the one bearer token it accepts, ``upstream`` the engine."""
    if not key:
        raise ValueError("the provider needs a non-empty key")
    application = web.Application(client_max_size=MAX_BODY_BYTES)
    application[KEY] = key.encode()
    application[UPSTREAM] = upstream.rstrip("/")

    async def session(application: web.Application) -> AsyncIterator[None]:
        async with aiohttp.ClientSession(auto_decompress=False) as client:
            application[SESSION] = client
            yield

    application.cleanup_ctx.append(session)
    application.router.add_get("/healthz", healthz)
    for path in PATHS:
        application.router.add_route("GET" if path == "/v1/models" else "POST", path, forward)
    return application


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tokenfleet.devstack.provider")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8091)
    parser.add_argument("--upstream", required=True, help="the engine, e.g. http://127.0.0.1:8000")
    parser.add_argument("--key-file", type=Path, required=True, help="the one key it accepts")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    key = args.key_file.read_text().strip()
    if not key:
        parser.error(f"{args.key_file} is empty: the provider needs a non-empty key")
    log.info("provider on %s:%d, forwarding to %s", args.host, args.port, args.upstream)
    # handler_cancellation: a client that disconnects cancels its handler (and so the engine's
    # request) at once, not only at the next chunk written.
    web.run_app(
        app(upstream=args.upstream, key=key),
        host=args.host,
        port=args.port,
        handler_cancellation=True,
        print=None,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

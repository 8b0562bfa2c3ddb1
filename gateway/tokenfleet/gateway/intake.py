"""A request's edge: who sends it (the API key), what it sends (the body, read within limits and
parsed), and how a refusal goes back (OpenAI's error shape, the one rendering of a Rejected)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import orjson
from aiohttp import web

from tokenfleet.gateway import keys
from tokenfleet.gateway.catalog import Catalog, Tenant
from tokenfleet.gateway.config import Settings
from tokenfleet.gateway.policy import bodies
from tokenfleet.gateway.policy.rejections import FINAL, Reason, Rejected


def reject(rejected: Rejected, extra: Mapping[str, str] | None = None) -> web.Response:
    """A refusal in OpenAI's error shape, with Retry-After when the reason carries one, and
    ``x-should-retry: false`` when retrying cannot help (``rejections.FINAL``)."""
    headers = dict(extra or {})
    if rejected.retry_after is not None:
        headers["Retry-After"] = str(max(1, round(rejected.retry_after)))
    if rejected.reason in FINAL:
        headers["x-should-retry"] = "false"
    return web.Response(
        body=orjson.dumps(rejected.body()),
        status=rejected.status,
        content_type="application/json",
        headers=headers,
    )


def authenticate(catalog: Catalog, header: str | None) -> Tenant | Rejected:
    """The tenant whose API key the ``Authorization`` header carries."""
    if not header or not header.startswith("Bearer ") or len(header) < 8:
        return Rejected(
            reason=Reason.MISSING_API_KEY,
            message="missing API key: send 'Authorization: Bearer <key>'",
        )
    tenant = catalog.tenants_by_key_hash.get(keys.hash_key(header[7:].strip()))
    if tenant is None:
        return Rejected(reason=Reason.INVALID_API_KEY, message="invalid API key")
    return tenant


async def read_body(request: web.Request, settings: Settings) -> bytes | Rejected:
    """The body's bytes, within the size limit and the time allowed to send them."""
    too_big = Rejected(
        reason=Reason.BODY_TOO_LARGE,
        message=f"request body larger than {settings.max_body_bytes} bytes",
    )
    if request.content_length is not None and request.content_length > settings.max_body_bytes:
        return too_big
    try:
        async with asyncio.timeout(settings.body_timeout_seconds):
            return await request.read()
    except web.HTTPRequestEntityTooLarge:
        return too_big
    except TimeoutError:
        return Rejected(reason=Reason.BODY_TIMEOUT, message="the request body arrived too slowly")


async def parse_body(
    request: web.Request, settings: Settings, kind: bodies.Kind
) -> bodies.Parsed | Rejected:
    """The body read, decoded and checked as a request of ``kind``."""
    body = await read_body(request, settings)
    if isinstance(body, Rejected):
        return body
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError:
        return Rejected(reason=Reason.MALFORMED_JSON, message="the request body is not valid JSON")
    return bodies.parse(decoded, kind)

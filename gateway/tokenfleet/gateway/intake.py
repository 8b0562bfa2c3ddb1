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
from tokenfleet.gateway.policy import bodies, intake_cost
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
    """The body read, decoded and checked as a request of ``kind`` (no memory allowance: the
    request paths use :class:`Bodies`)."""
    body = await read_body(request, settings)
    if isinstance(body, Rejected):
        return body
    return decode(body, kind, settings.body_limits)


def decode(body: bytes, kind: bodies.Kind, limits: intake_cost.Limits) -> bodies.Parsed | Rejected:
    """Bytes checked for their number of values (before any object is built), decoded, checked."""
    too_complex = intake_cost.too_complex(intake_cost.values(body), limits)
    if too_complex is not None:
        return too_complex
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError:
        return Rejected(reason=Reason.MALFORMED_JSON, message="the request body is not valid JSON")
    return bodies.parse(decoded, kind)


class Bodies:
    """Request bodies read and parsed within the process's memory allowance
    (:mod:`~tokenfleet.gateway.policy.intake_cost`): each request holds its body's estimated
    cost from before the read until :meth:`release`."""

    def __init__(self, settings: Settings) -> None:
        self._settings, self._limits = settings, settings.body_limits
        self._state = intake_cost.InFlight()
        self._held: dict[int, tuple[str, int]] = {}  # id(holder) → (tenant, cost)

    @property
    def in_flight(self) -> int:
        """Estimated bytes all held bodies cost (tests, metrics)."""
        return self._state.total

    async def parse(
        self, request: web.Request, kind: bodies.Kind, *, tenant: str, holder: object
    ) -> bodies.Parsed | Rejected:
        """The body of ``tenant``'s request, its cost held for ``holder`` (release it)."""
        declared = request.content_length
        if declared is None or declared > self._settings.max_body_bytes:
            declared = self._settings.max_body_bytes  # the most it may be: read_body's limit
        taken = self._take(tenant, intake_cost.before_reading(declared, self._limits), holder)
        if taken is not None:
            return taken
        body = await read_body(request, self._settings)
        if isinstance(body, Rejected):
            return body
        self.release(holder)  # the real cost is at most what was held: it always fits again
        cost = intake_cost.estimate(len(body), intake_cost.values(body))
        taken = self._take(tenant, cost, holder)
        return taken or decode(body, kind, self._limits)

    def _take(self, tenant: str, cost: int, holder: object) -> Rejected | None:
        state = intake_cost.take(self._state, tenant=tenant, cost=cost, limits=self._limits)
        if isinstance(state, Rejected):
            return state
        self._state = state
        self._held[id(holder)] = (tenant, cost)
        return None

    def release(self, holder: object) -> None:
        """What ``holder``'s body held, given back (nothing if it held nothing)."""
        held = self._held.pop(id(holder), None)
        if held is not None:
            self._state = intake_cost.give_back(self._state, tenant=held[0], cost=held[1])

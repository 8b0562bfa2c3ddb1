"""One request's context: who it is (its identity), what it has consumed (its meter), what
the stages decided about it (its trace: :mod:`.events`), and its settlement once under way —
the one thing the stages of its passage share.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from typing import NamedTuple

from aiohttp import web

from tokenfleet.gateway import proxy
from tokenfleet.gateway.policy import bodies
from tokenfleet.gateway.policy.rejections import Rejected
from tokenfleet.gateway.stages import events
from tokenfleet.gateway.targets import Target

_ID_PREFIX = os.urandom(6).hex()
_ID_COUNTER = itertools.count(1)


def _new_request_id() -> str:
    """Unique per process and restart; cheaper than uuid4 on the hot path."""
    return f"{_ID_PREFIX}{next(_ID_COUNTER):010x}"


def request_id(asked: str) -> str:
    """The client's X-Request-Id if it is printable ASCII (it goes on to engines, remotes and
    logs, and HTTP headers are not UTF-8), up to 64 characters; else a new one."""
    asked = asked[:64]
    return asked if asked and asked.isascii() and asked.isprintable() else _new_request_id()


class Identity(NamedTuple):
    """What a request is, read once from its first line and headers."""

    id: str
    started: float  # monotonic seconds
    kind: bodies.Kind
    path: str
    pinned: str | None  # the revision the client pinned (X-TokenFleet-Revision), if any


class Answered(NamedTuple):
    """What a target made of a request once it started: an upstream outcome or a refusal."""

    target: Target
    outcome: proxy.Outcome | Rejected
    remote: str = ""  # spilled: the remote that answered (remote/<name>), a metric's model
    degraded: bool = False  # admission lowered its max_tokens under load


class Passage:
    """One request's way through the gateway: its identity, its meter (what it has consumed
    so far, kept current while it is relayed), its trace, and its settlement once under way."""

    __slots__ = ("identity", "meter", "settling", "trace")

    def __init__(self, identity: Identity) -> None:
        self.identity = identity
        self.meter = proxy.Meter()
        self.trace = events.Trace(identity.id)
        self.settling: asyncio.Future[None] | None = None  # step 8, once it started

    @classmethod
    def begin(cls, request: web.Request, kind: bodies.Kind) -> Passage:
        headers = request.headers
        return cls(
            Identity(
                id=request_id(headers.get(events.ID_HEADER, "")),
                started=time.monotonic(),
                kind=kind,
                path=request.path,
                pinned=headers.get(events.REVISION_HEADER),
            )
        )

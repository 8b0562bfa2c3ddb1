"""What the gateway makes of adapter-loader answers (pure): a load's outcome, a listing merged
into what the gateway believes a replica holds, and placement reasons as metric labels.

The engine's own ``vllm:lora_requests_info`` (scraped with its load every second) names the
adapters with requests running or waiting there — any gateway's: :func:`busy` reads it, and
placement never evicts them (an unload under a running request would fail it).

The loader (docs/adapters.md) answers a load with 200 (the engine has it), 422 (the worker's
own verification refused the files: the engine never heard of them) or 502 (the engine refused
or is down). A 422 is about the artifact on that worker, so the gateway does not ask that
worker again for the same digest for :data:`REFUSED_COOLDOWN_SECONDS`; a 502 is the worker's
failure and is not remembered (the next request may try again).

Other gateways load and evict on the same replicas. Every few seconds each replica's listing
(``GET /v1/adapters``) is merged into this gateway's view: adapters it does not list are gone
(another gateway evicted them) unless this gateway loaded them since the listing was asked for;
adapters it lists that the view lacks were loaded by someone else, and count as the least
recently used (this gateway has no use of them to remember).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Collection
from typing import Any

import orjson

from tokenfleet.gateway.policy.adapters import Why
from tokenfleet.signals import vllm

_LABEL = re.compile(r'(\w+)="([^"]*)"')
#: The info gauge's labels that list adapter names (comma-separated).
_BUSY_LABELS = ("running_lora_adapters", "waiting_lora_adapters")

#: A worker whose verification refused an adapter's digest is not asked again for it this long
#: (seconds): its files or trust will not change by themselves in less, and each refused load
#: costs a fetch and a digest walk there.
REFUSED_COOLDOWN_SECONDS = 60.0


class Result(enum.StrEnum):
    """A load's outcome: the ``outcome`` label of the loads counter."""

    LOADED = "loaded"
    REFUSED = "refused"
    FAILED = "failed"
    TIMEOUT = "timeout"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    result: Result
    reason: str = ""
    """Refused: the worker's verdict reason (``DigestMismatch``, ...); failed: what broke."""


def _json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def judge(status: int, body: bytes) -> Outcome:
    """The outcome of a loader's answer to ``POST /v1/adapters/load``."""
    payload = _json(body)
    if status == 200:
        return Outcome(result=Result.LOADED)
    if status == 422:
        verdict = payload.get("verdict") if isinstance(payload, dict) else None
        reason = verdict.get("reason") if isinstance(verdict, dict) else None
        return Outcome(result=Result.REFUSED, reason=str(reason or "refused by the worker"))
    error = payload.get("error") if isinstance(payload, dict) else None
    detail = error if isinstance(error, str) else body[:200].decode(errors="replace").strip()
    return Outcome(result=Result.FAILED, reason=f"adapter-loader answered {status}: {detail}")


def listed(body: bytes) -> dict[str, str] | None:
    """``GET /v1/adapters``'s adapters as name → digest; None when the answer is not one."""
    payload = _json(body)
    items = payload.get("adapters") if isinstance(payload, dict) else None
    if not isinstance(items, list):
        return None
    return {
        str(a["name"]): str(a.get("digest", ""))
        for a in items
        if isinstance(a, dict) and isinstance(a.get("name"), str)
    }


def merged(
    *, known: tuple[str, ...], listing: Collection[str], keep: Collection[str]
) -> tuple[str, ...]:
    """A replica's adapters, least recently used first, after a listing: ``known`` in order
    where the listing (or ``keep``: loading, or loaded since the listing was asked for) still
    has them, after the listed ones this gateway did not know."""
    strangers = tuple(sorted(n for n in listing if n not in known))
    return strangers + tuple(n for n in known if n in listing or n in keep)


#: Placement reasons as the requests counter's ``placement`` label: where the adapter was.
PLACEMENT = {
    Why.LOADED: "hit",
    Why.OVER_BOUND: "hit",
    Why.LOADING: "waited",
    Why.FREE_SLOT: "loaded",
    Why.EVICT: "loaded",
    Why.GROW: "spilled",
    Why.NO_SLOT: "no_slot",
}


def busy(text: str) -> frozenset[str] | None:
    """Adapters with requests running or waiting on an engine, from its /metrics page: the
    newest ``vllm:lora_requests_info`` sample (its value is the observation's time); None when
    the page has none (no LoRA, or another engine) or when several differ at the newest time
    (an engine that stamps whole seconds): then nobody knows which is current."""
    newest, at = None, float("-inf")
    for name in vllm.LORA_REQUESTS_INFO:
        opening, start = name + "{", 0
        while (i := text.find(opening, start)) >= 0:
            start = i + len(opening)
            if i and text[i - 1] != "\n":
                continue
            end = text.find("\n", i)
            line = text[i : end if end >= 0 else len(text)]
            close = line.rfind("}")
            try:
                value = float(line[close + 1 :])
            except ValueError:
                continue
            labels = line[len(opening) : close]
            if value > at:
                newest, at = labels, value
            elif value == at and labels != newest:
                newest = None  # a tie between different states: ambiguous
    if newest is None:
        return None
    found = dict(_LABEL.findall(newest))
    return frozenset(n for key in _BUSY_LABELS for n in found.get(key, "").split(",") if n)

"""The response cache's decisions (pure): what may be cached, and under which key.

A cached answer is only right when the engine would give the same answer again, so only
deterministic requests qualify::

    chat/completion ─▶ one choice ─▶ greedy/seeded ─▶ no tools ─▶ no logprobs ─▶ revision known
      │ KIND             │ CHOICES      │ SAMPLED         │ TOOLS      │ LOGPROBS      │ REVISION_
                                                                                       UNDECIDED

The key is a sha256 over the canonical request (sorted keys, without the fields that do not
change the output), the model's canonical name, the exact revision (a hash of the artifact and
the engine settings, so a rollout changes every key), the tokens the request may generate, and
the caller's scope — the tenant, or its shared cache group, as for ``cache_salt``: one
tenant's answers are never served to another.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from collections.abc import Collection, Mapping
from typing import Any

import orjson

#: Bumped when the key's material changes shape, so old entries are simply never read again.
KEY_VERSION = 1
#: Redis key prefix (``tf:`` as the quota and budget keys).
KEY_PREFIX = "tf:rc:"
#: Request fields that do not change the generated answer: how it is delivered (stream,
#: stream_options), who asks (user, metadata, store: the gateway's scope says that), the salt
#: the gateway overwrites anyway, and the name used (an alias: the canonical name is keyed).
IGNORED_FIELDS = frozenset(
    {"stream", "stream_options", "user", "metadata", "store", "cache_salt", "model"}
)
CACHED_KINDS = frozenset({"chat", "completion"})
TOOL_FIELDS = ("tools", "tool_choice", "functions", "function_call")
LOGPROB_FIELDS = ("logprobs", "top_logprobs", "prompt_logprobs")
#: Finish reasons of a complete answer: the model stopped, or reached max_tokens (which the
#: key includes). Anything else (tool_calls, abort, content_filter, error) is not stored.
COMPLETE_FINISHES = frozenset({"stop", "length"})


class Why(enum.StrEnum):
    """Why a request is (not) cached, or an answer (not) stored: a metric label."""

    CACHEABLE = "cacheable"
    KIND = "kind"  # embeddings and the Responses API are not cached
    CHOICES = "choices"  # n or best_of above 1: several samples are never deterministic
    SAMPLED = "sampled"  # temperature above 0 (or unset: 1) without a fixed seed
    TOOLS = "tools"  # a tool call may have side effects the caller expects to happen
    LOGPROBS = "logprobs"  # logprob values vary with batching even when the text does not
    REVISION_UNDECIDED = "revision_undecided"  # a canary split (drawn per request), or none
    TOO_LARGE = "too_large"  # above the deployment's maxEntryBytes
    INCOMPLETE = "incomplete"  # not a whole answer that stopped or reached max_tokens
    FALLBACK = "fallback"  # another model answered: never stored as this model's answer
    DEGRADED = "degraded"  # max_tokens was lowered under load: not what the key promises


def cacheable(kind: str, body: Mapping[str, Any]) -> Why:
    """Whether the engine would answer ``body`` the same way again (CACHEABLE), or why not."""
    if kind not in CACHED_KINDS:
        return Why.KIND
    if body.get("n", 1) != 1 or body.get("best_of", 1) != 1:
        return Why.CHOICES
    seeded = isinstance(body.get("seed"), int) and not isinstance(body.get("seed"), bool)
    temperature = body.get("temperature", 1)  # OpenAI's default: sampled
    greedy = isinstance(temperature, int | float) and not isinstance(temperature, bool)
    if not seeded and not (greedy and temperature == 0):
        return Why.SAMPLED
    if any(body.get(f) is not None for f in TOOL_FIELDS):
        return Why.TOOLS
    if any(body.get(f) not in (None, False, 0) for f in LOGPROB_FIELDS):
        return Why.LOGPROBS
    return Why.CACHEABLE


def revision(
    weights: Mapping[str, int], *, available: Collection[str], pinned: str | None
) -> str | None:
    """The revision that will serve the request, if it is determined before routing draws
    one; None during a canary split (or when nothing is ready).

    Mirrors :func:`tokenfleet.gateway.policy.routing.choose_revision` without the draw: a pin,
    else the one weighted revision with ready endpoints, else the only ready revision. A split
    is not cached: a hit would bypass the draw and skew the canary's analysis."""
    if pinned:
        return pinned if pinned in available else None
    live = [r for r, w in weights.items() if w > 0 and r in available]
    if len(live) == 1:
        return live[0]
    if not live and len(available) == 1:
        return next(iter(available))
    return None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """Whether a request is looked up, and the revision its key names."""

    why: Why
    revision: str = ""  # meaningful only when ``why`` is CACHEABLE


def verdict(
    kind: str,
    body: Mapping[str, Any],
    *,
    weights: Mapping[str, int],
    available: Collection[str],
    pinned: str | None,
) -> Verdict:
    """:func:`cacheable`, then :func:`revision`: a request is looked up only when both agree."""
    why = cacheable(kind, body)
    if why is not Why.CACHEABLE:
        return Verdict(why=why)
    chosen = revision(weights, available=available, pinned=pinned)
    if chosen is None:
        return Verdict(why=Why.REVISION_UNDECIDED)
    return Verdict(why=why, revision=chosen)


def scope(*, tenant: str, group: str = "", caller: str = "") -> str:
    """Whose answers a request may reuse: its tenant's, or its shared cache group's — split by
    a ``cache_salt`` the caller sent, as the prefix cache is (another gateway spilling its
    tenants here is one tenant: their salts keep their answers apart)."""
    own = f"group:{group}" if group else f"tenant:{tenant}"
    return f"{own}\x00caller:{caller}" if caller else own


def key(
    *,
    kind: str,
    model: str,
    revision: str,
    scope: str,
    max_tokens: int,
    body: Mapping[str, Any],
) -> str:
    """The Redis key of a request's answer: sha256 over its canonical form and identity."""
    material = {
        "v": KEY_VERSION,
        "kind": kind,
        "model": model,
        "revision": revision,
        "scope": scope,
        "max_tokens": max_tokens,  # effective: the tenant's cap and the context window applied
        "request": {k: v for k, v in body.items() if k not in IGNORED_FIELDS},
    }
    digest = hashlib.sha256(orjson.dumps(material, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return KEY_PREFIX + digest


#: A stream's events are kept only up to this many times ``maxEntryBytes``: SSE framing and
#: per-chunk JSON run about 30-40 bytes per generated token around 4 bytes of text, so a stream
#: past this bound would assemble to an answer above the bound too.
STREAM_CAPTURE_FACTOR = 48


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Served:
    """How a miss was answered, as the decision to store it reads it."""

    status: int
    failed: bool  # an error after the first byte (deadline, a broken stream)
    payload: bytes | None  # the whole answer's JSON (a stream's assembled); None if not whole
    oversize: bool = False  # a stream longer than its capture bound
    fallback: bool = False  # another model answered
    degraded: bool = False  # admission lowered max_tokens under load
    other_revision: bool = False  # another revision than the key's answered


def storable(served: Served, *, max_entry_bytes: int) -> Why:
    """Whether a miss's answer is a complete answer of this model, as its key describes it,
    worth keeping (CACHEABLE), or why not."""
    if served.fallback:
        return Why.FALLBACK
    if served.degraded:
        return Why.DEGRADED
    if served.other_revision:  # the catalog changed in between: not the key's revision's answer
        return Why.REVISION_UNDECIDED
    if served.status != 200 or served.failed:
        return Why.INCOMPLETE
    payload = served.payload
    if served.oversize or (payload is not None and len(payload) > max_entry_bytes):
        return Why.TOO_LARGE
    if payload is None:
        return Why.INCOMPLETE
    try:
        answer = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return Why.INCOMPLETE
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if not isinstance(choices, list) or not choices or "error" in answer:
        return Why.INCOMPLETE
    finished = all(
        isinstance(c, dict) and c.get("finish_reason") in COMPLETE_FINISHES for c in choices
    )
    return Why.CACHEABLE if finished else Why.INCOMPLETE

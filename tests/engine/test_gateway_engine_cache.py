"""The prefix cache behind TokenFleet's gateway, read from the real engine's own counters.

Matrix: ``cache_salt`` — one long prompt (at least 3 blocks of 128 tokens) sent by tenant a,
again by a, by b, by evals-1 and evals-2 (one shared cache group): the engine reports hits, in
whole blocks, only for a's second request and for the group's second; the gateway's prefix
blocks (256 characters) against the engine's (128 tokens), and its belief about hits (its
prefix-block counters) against the engine's hits, over prompts that share a document opening
of several lengths (the ratio is printed).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from engine import lane
from engine.lane import KEYS, PATHS, send
from support.gateway import Gateway, gateway_metric
from support.vllm_engine import Engine
from tokenfleet.gateway.policy import prefix
from tokenfleet.signals import gateway as names
from tokenfleet.signals import vllm

pytestmark = lane.TIMEOUT

BLOCK_TOKENS = 128


def tokens_of(engine: Engine, messages: list[dict[str, str]]) -> int:
    """The prompt's length in tokens as the engine counts it (chat template included)."""
    status, raw = engine.post("/tokenize", {"model": engine.name, "messages": messages})
    assert status == 200, raw[:300]
    count: int = json.loads(raw)["count"]
    return count


def cache(engine: Engine) -> tuple[float, float]:
    """(prefix-cache queries, hits) of the engine so far, in tokens."""
    return engine.sample(vllm.PREFIX_CACHE_QUERIES[0]), engine.sample(vllm.PREFIX_CACHE_HITS[0])


def belief(gateway: Gateway, model: str) -> tuple[float, float]:
    """(prefix blocks routed, blocks the chosen endpoint was believed to hold) so far."""
    return (
        gateway_metric(gateway, names.PREFIX_BLOCKS, model=model),
        gateway_metric(gateway, names.PREFIX_HIT_BLOCKS, model=model),
    )


def ask(engine: Engine, gateway: Gateway, who: str, messages: list[dict[str, str]]) -> None:
    """One sampled request (temperature 1: the response cache lets it through to the engine)."""
    payload: dict[str, Any] = {"model": engine.name, "messages": messages, "max_tokens": 1}
    status, raw = send(gateway.port, PATHS["chat"], {**payload, "temperature": 1.0}, key=KEYS[who])
    assert status == 200, raw[:300]


def document(chars: int) -> str:
    """Text of about ``chars`` characters no earlier request began with."""
    words = f"{uuid.uuid4().hex} " + " ".join(
        f"clause {i} of the tenancy agreement applies" for i in range(chars // 40 + 1)
    )
    return words[:chars]


def test_cache_salt_gives_prefix_hits_only_within_a_tenant_or_its_cache_group(
    engine: Engine, gateway: Gateway
) -> None:
    messages = [{"role": "user", "content": document(2400)}]
    tokens = tokens_of(engine, messages)
    assert 3 * BLOCK_TOKENS < tokens < 1000, tokens
    whole_blocks = (tokens - 1) // BLOCK_TOKENS * BLOCK_TOKENS  # the last token is recomputed
    seen = []
    for who in ("a", "a", "b", "evals-1", "evals-2"):
        before = cache(engine)
        ask(engine, gateway, who, messages)
        queries, hits = (after - was for after, was in zip(cache(engine), before, strict=True))
        assert queries == tokens
        seen.append((who, hits))
    assert seen == [
        ("a", 0),
        ("a", whole_blocks),  # its own earlier request
        ("b", 0),  # another tenant: another salt
        ("evals-1", 0),  # a cache group is not a's tenant either
        ("evals-2", whole_blocks),  # the group's earlier request
    ]


@pytest.mark.parametrize("shared", [200, 600, 1200, 2400], ids=lambda n: f"shared-{n}-chars")
def test_the_gateways_prefix_belief_against_the_engines_hits(
    engine: Engine, gateway: Gateway, shared: int
) -> None:
    """Two requests of tenant b open with the same ``shared`` characters and differ after.
    The gateway believes the second's endpoint holds its shared 256-character blocks; the
    engine hits whole 128-token blocks of it (after its chat template's opening tokens)."""
    opening = document(shared)
    first = [{"role": "user", "content": opening + " First question: " + document(300)}]
    second = [{"role": "user", "content": opening + " Second question: " + document(300)}]
    ask(engine, gateway, "b", first)
    routed, held = belief(gateway, engine.name)
    queries, hits = cache(engine)
    ask(engine, gateway, "b", second)
    routed, held = (
        now - was for now, was in zip(belief(gateway, engine.name), (routed, held), strict=True)
    )
    queries, hits = (now - was for now, was in zip(cache(engine), (queries, hits), strict=True))
    text = second[0]["content"]
    chars_per_token = len(text) / tokens_of(engine, second)
    believed, engine_hit = held / routed, hits / queries
    print(
        f"shared {shared} chars: gateway believes {held:.0f}/{routed:.0f} blocks "
        f"({believed:.2f}), engine hit {hits:.0f}/{queries:.0f} tokens ({engine_hit:.2f}); "
        f"{chars_per_token:.2f} chars/token: an engine block is "
        f"{BLOCK_TOKENS * chars_per_token / prefix.BLOCK_CHARS:.1f} gateway blocks"
    )
    assert routed == len(text) // prefix.BLOCK_CHARS  # the gateway hashed every whole block
    assert held == shared // prefix.BLOCK_CHARS  # ...and believes the shared ones held
    assert hits % BLOCK_TOKENS == 0 and hits <= queries * (shared / len(text)) + BLOCK_TOKENS

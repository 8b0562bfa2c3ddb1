"""Prefix affinity (pure): hash a prompt's opening in blocks; remember who served which blocks.

vLLM reuses KV-cache blocks for a prompt whose opening matches an earlier one *with the same
cache_salt*. The gateway cannot see the engines' caches, so it keeps its own approximate map:
a chain of block hashes per request (each hash covers the whole prefix up to its block, like
vLLM's own block hashes), and for each hash the endpoints that recently received it. The chain
is seeded with the model and the salt, so tenants never share entries unless their salts do, and
one index in bounded memory serves every model.

The index is the one mutable structure in the routing core: it is owned by one gateway process,
touched only from its event loop, and evicts least-recently-used hashes beyond ``capacity``.
No clock, no I/O.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
from collections.abc import Mapping, Sequence

#: Characters per block: ~64 tokens at ~4 characters per token. vLLM's blocks are 16 tokens on
#: GPUs: coarser blocks cost four times fewer hashes and lose little, since a shared prefix that
#: matters (a system prompt, a document) spans many blocks. On the CPU backend they are 128
#: tokens, 1.4-1.7 of these: there the index believes up to one engine block more than vLLM
#: can reuse (docs/gateway.md, Prefix index).
BLOCK_CHARS = 256
#: Blocks hashed at most (the request parser keeps 8 KiB of prompt text).
MAX_BLOCKS = 32
#: Blocks that name a prefix for rendezvous hashing (~1 KiB of text): long enough to mean a
#: shared system prompt or document, short enough that a request reaches it.
KEY_BLOCKS = 4
#: Endpoints remembered per block: enough for a hot prefix spread by the bounded-load rule.
HOLDERS_PER_BLOCK = 8


def block_hashes(
    text: str,
    *,
    model: str,
    salt: str,
    block_chars: int = BLOCK_CHARS,
    max_blocks: int = MAX_BLOCKS,
) -> tuple[bytes, ...]:
    """Chained hashes of the prompt's full blocks (a partial last block is never cached)."""
    blocks = min(len(text) // block_chars, max_blocks)
    h = hashlib.blake2b(f"{model}\x1f{salt}".encode(), digest_size=8).digest()
    out = []
    for i in range(blocks):
        chunk = text[i * block_chars : (i + 1) * block_chars].encode()
        h = hashlib.blake2b(h + chunk, digest_size=8).digest()
        out.append(h)
    return tuple(out)


@dataclasses.dataclass(frozen=True, slots=True)
class Match:
    """How many leading blocks of a request each endpoint is believed to hold."""

    blocks: Mapping[str, int]  # endpoint URL → leading blocks held
    total: int  # blocks in the request
    key: bytes = b""
    """The hash of the leading :data:`KEY_BLOCKS` blocks (fewer if the prompt is shorter): what
    rendezvous hashing places, identical in every gateway process."""

    def fraction(self, url: str) -> float:
        """The share of the request's blocks ``url`` holds (0 when nothing to match)."""
        return self.blocks.get(url, 0) / self.total if self.total else 0.0


NO_MATCH = Match(blocks={}, total=0)


class PrefixIndex:
    """Block hash → endpoints that recently received it, least recently used evicted first."""

    def __init__(self, capacity: int = 200_000, holders: int = HOLDERS_PER_BLOCK) -> None:
        """``capacity`` hashes (~100 bytes each with their holders: 20 MB at the default)."""
        self._capacity = capacity
        self._holders = holders
        self._entries: collections.OrderedDict[bytes, list[str]] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def match(self, hashes: Sequence[bytes]) -> Match:
        """Leading blocks each endpoint holds; stops at the first block nobody holds."""
        held: dict[str, int] = {}
        alive: set[str] | None = None
        for depth, h in enumerate(hashes, start=1):
            holders = self._entries.get(h)
            if not holders:
                break
            alive = set(holders) if alive is None else alive.intersection(holders)
            if not alive:
                break
            # in the holders' order, not the set's: set order follows the per-process string
            # hash, and routing breaks ties in this order, so a seed would not replay
            for url in holders:
                if url in alive:
                    held[url] = depth
        key = hashes[min(len(hashes), KEY_BLOCKS) - 1] if hashes else b""
        return Match(blocks=held, total=len(hashes), key=key)

    def record(self, hashes: Sequence[bytes], url: str) -> None:
        """``url`` now holds every block of the request (it prefilled them)."""
        entries = self._entries
        for h in hashes:
            holders = entries.get(h)
            if holders is None:
                entries[h] = [url]
            else:
                entries.move_to_end(h)
                if url in holders:
                    holders.remove(url)
                holders.append(url)  # most recent last
                if len(holders) > self._holders:
                    del holders[0]
        while len(entries) > self._capacity:
            entries.popitem(last=False)

    def forget(self, url: str) -> None:
        """Drop an endpoint (it restarted or left: its cache is gone). O(entries): rare."""
        for h in [h for h, holders in self._entries.items() if url in holders]:
            holders = self._entries[h]
            holders.remove(url)
            if not holders:
                del self._entries[h]

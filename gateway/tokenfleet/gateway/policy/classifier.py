"""Cheap prompt classifiers for ModelRoute rules (pure): a prompt's text → P(hard) in [0, 1].

The seam is :class:`Classifier`; any object with ``score(text) -> float`` serves. The one
implementation, :class:`HashedNgrams`, is a logistic model over hashed word unigrams and bigrams:

    text[:2048] ─lower─▶ UTF-8 ─ASCII punctuation→space─▶ words ─crc32─▶ unigram buckets
                                                              └─ crc32(w1 + w2) ─▶ bigram buckets
    P(hard) = σ(bias + Σ weight[bucket] / √(number of buckets))

A bucket is a word's (or a word pair's) crc32: 2^32 buckets, so collisions are negligible, and
the weights are sparse (only the n-grams training saw), so no table of 2^32 is ever built.
crc32 (zlib) is stable across processes and machines, unlike Python's salted ``hash()``, so
weights trained anywhere score the same everywhere. Every per-word step is a C-level ``map``:
a bigram's hash continues the first word's crc32 over the second word, so no pair string is
built (the price: the pair "note book" shares the bucket of the word "notebook", which is
harmless). That keeps a 2,000-character prompt under a tenth of a millisecond in plain Python
(bench/classifier.py has the figures). Dividing by √buckets keeps a long prompt's evidence from
swamping the bias by its length alone.

Weights travel as a compact JSON document (:func:`parse`, :func:`document`), what the route's
ConfigMap holds; ``tokenfleet route train-classifier`` writes it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import zlib
from collections.abc import Mapping
from itertools import repeat
from typing import Any, Protocol

from tokenfleet.api import classifier_weights

FORMAT, VERSION = classifier_weights.FORMAT, classifier_weights.VERSION
#: Characters scored: how a request asks shows in its first 2,048 characters (about 350 words);
#: the cost is linear in what is read (about 75 µs per 1,000 characters on a loaded core,
#: bench/classifier.py), so this bounds it per request, and a route's length rules see the rest.
MAX_CHARS = 2048
BUCKETS = classifier_weights.BUCKETS
#: σ saturates long before this; the clamp only keeps math.exp from overflowing.
_LOGIT_LIMIT = 50.0
#: Every ASCII byte that is not a letter or digit becomes a word separator; non-ASCII bytes
#: (UTF-8 letters of other scripts) stay inside words.
_SEPARATORS = bytes(c if (c >= 0x80 or chr(c).isalnum()) else 0x20 for c in range(256))


class Classifier(Protocol):
    """Scores a prompt: the probability, 0 to 1, that it needs the larger model."""

    def score(self, text: str) -> float: ...


def buckets(text: str) -> list[int]:
    """The hashed unigram and bigram buckets of ``text``, unigrams first, in text order."""
    words = text[:MAX_CHARS].lower().encode("utf-8", "replace").translate(_SEPARATORS).split()
    unigrams = list(map(zlib.crc32, words))
    # crc32(w1 + w2) without building it: zlib continues crc32(w1) over w2.
    bigrams = map(zlib.crc32, words[1:], unigrams[:-1])
    return [*unigrams, *bigrams]


def sigmoid(logit: float) -> float:
    clamped = min(_LOGIT_LIMIT, max(-_LOGIT_LIMIT, logit))
    return 1.0 / (1.0 + math.exp(-clamped))


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HashedNgrams:
    """A logistic model over hashed word n-grams. ``weights`` is sparse: absent buckets are 0."""

    bias: float
    weights: dict[int, float]

    def logit(self, found: list[int]) -> float:
        """The model's log-odds for a prompt's buckets (what training differentiates)."""
        if not found:
            return self.bias
        total: float = sum(map(self.weights.get, found, repeat(0.0)))
        return self.bias + total / math.sqrt(len(found))

    def score(self, text: str) -> float:
        """P(hard) for ``text``."""
        return sigmoid(self.logit(buckets(text)))


def parse(text: str) -> HashedNgrams:
    """The model in a weights document (:mod:`tokenfleet.api.classifier_weights`); ValueError
    says what is wrong with it."""
    bias, weights = classifier_weights.parse(text)
    return HashedNgrams(bias=bias, weights=weights)


def document(model: HashedNgrams, *, about: Mapping[str, Any] | None = None) -> str:
    """The weights document of ``model``: one line of JSON, buckets sorted, so that the same
    training writes the same bytes. ``about`` (how it was trained, its held-out figures) is kept
    beside the weights for a human; :func:`parse` ignores it."""
    doc: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "bias": model.bias,
        **({"about": dict(about)} if about else {}),
        "weights": {str(k): model.weights[k] for k in sorted(model.weights)},
    }
    return json.dumps(doc, separators=(",", ":"))

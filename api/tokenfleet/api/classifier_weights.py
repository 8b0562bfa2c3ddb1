"""A ModelRoute classifier's weights document: the contract between the trainer (``tokenfleet
route train-classifier``), the ConfigMap that carries it, the gateway that scores with it and
the operator that reports whether it loads (pure).

One home for the format, so the operator's ClassifierInvalid and the gateway's "no score" can
never disagree about a document.
"""

from __future__ import annotations

import json
import math

#: The document's format name and version: a reader refuses any other.
FORMAT = "tokenfleet.io/hashed-ngram-logistic"
VERSION = 1
#: A bucket is a crc32.
BUCKETS = 1 << 32


def _bad(message: str) -> ValueError:
    return ValueError(f"classifier weights: {message}")


def parse(text: str) -> tuple[float, dict[int, float]]:
    """The (bias, sparse weights by bucket) of a weights document; ValueError says what is
    wrong with it."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise _bad(f"not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise _bad("the document must be a JSON object")
    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise _bad(f"format must be {FORMAT!r} version {VERSION} (retrain with this gateway)")
    bias, weights = doc.get("bias"), doc.get("weights")
    if not isinstance(bias, int | float) or isinstance(bias, bool):
        raise _bad("bias must be a number")
    if not isinstance(weights, dict):
        raise _bad('weights must be an object of "bucket": weight')
    try:
        sparse = {int(k): float(v) for k, v in weights.items()}
    except (TypeError, ValueError) as exc:
        raise _bad("weights must map bucket numbers (as strings) to numbers") from exc
    if any(not 0 <= k < BUCKETS for k in sparse):
        raise _bad("a weight's bucket is not a crc32 (0 .. 2^32 - 1)")
    if not all(math.isfinite(v) for v in (*sparse.values(), float(bias))):
        raise _bad("weights and bias must be finite")
    return float(bias), sparse

"""What ``tokenfleet bench replica`` sends: prompts and output lengths from a workload.

Three sources, each an endless, seeded stream of ``(prompt, max_tokens)``:

- ``Fixed``: one size (``--input-words``, ``--output-tokens``);
- ``Spec``: token distributions and shared prefixes in the simulator's YAML format
  (``inputTokens``, ``outputTokens``, ``sharedPrefix`` — a scenario stream), so the replica is
  measured on the same traffic the fleet is simulated with;
- ``Trace``: a recorded JSONL trace, one request per line (``input_tokens``, ``output_tokens``
  and optionally ``prompt`` and ``prefix``), replayed in order and repeated.

Prompt length is in tokens. Without a tokenizer a word stands for a token (the server's usage
reports the true counts, which is what the profile records); with ``--tokenizer`` (a
Hugging Face ``tokenizer.json``, through the optional ``tokenizers`` package) prompts are sized
to the model's own tokens.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import yaml
from pydantic import Field

from tokenfleet.api.base import Model
from tokenfleet.sim.scenario import SharedPrefix, Tokens

Progress = Callable[[float], None]


class WorkloadError(ValueError):
    """A workload file that cannot be used, with the reason."""


class Counter(Protocol):
    def __call__(self, text: str) -> int: ...


def words(text: str) -> int:
    return len(text.split())


def tokenizer_counter(path: Path) -> Counter:
    """Token counts from a Hugging Face ``tokenizer.json`` (optional ``tokenizers`` package)."""
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise WorkloadError(
            "--tokenizer needs the tokenizers package: pip install 'tokenfleet[tokenizer]'"
        ) from exc
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises its own Exception subclasses
        raise WorkloadError(f"{path}: not a tokenizer.json ({exc})") from exc

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    return count


def filler(tokens: int, count: Counter, salt: str) -> str:
    """Text of ``tokens`` tokens as ``count`` measures it (words first, then trimmed)."""
    text = " ".join(f"{salt}{i}" for i in range(max(tokens, 0)))
    if count is words or tokens <= 0:
        return text
    # a word may be several tokens: the most words whose text still fits (binary search)
    parts = text.split()
    low, high = 1, len(parts)
    while low < high:
        mid = (low + high + 1) // 2
        if count(" ".join(parts[:mid])) <= tokens:
            low = mid
        else:
            high = mid - 1
    return " ".join(parts[:low])


class Source(Protocol):
    def requests(self, rng: random.Random) -> Iterator[tuple[str, int]]: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Fixed:
    input_tokens: int
    output_tokens: int
    count: Counter = words

    def requests(self, rng: random.Random) -> Iterator[tuple[str, int]]:
        prompt = filler(self.input_tokens, self.count, "w")
        while True:
            yield prompt, self.output_tokens


class SpecFile(Model):
    """A workload spec: the request-shape part of a simulator stream."""

    input_tokens: Tokens = Field(description="Prompt tokens.")
    output_tokens: Tokens = Field(description="Generated tokens.")
    shared_prefix: SharedPrefix = Field(
        default_factory=SharedPrefix, description="Common prefixes."
    )


def _draw(rng: random.Random, t: Tokens) -> int:
    if t.dist == "exponential":
        value = math.ceil(rng.expovariate(1 / t.mean))
    elif t.dist == "fixed" or t.sigma() == 0.0:
        value = round(t.mean)
    else:
        value = round(rng.lognormvariate(t.mu(), t.sigma()))
    return max(1, min(t.max, value))


@dataclasses.dataclass(frozen=True, slots=True)
class Spec:
    spec: SpecFile
    count: Counter = words

    def requests(self, rng: random.Random) -> Iterator[tuple[str, int]]:
        shared = self.spec.shared_prefix
        prefixes = [filler(shared.tokens, self.count, f"p{g}x") for g in range(shared.groups)]
        for n in itertools.count():
            size = _draw(rng, self.spec.input_tokens)
            head = ""
            if shared.share and rng.random() < shared.share:
                head = rng.choice(prefixes) + " "
                size = max(1, size - shared.tokens)
            yield head + filler(size, self.count, f"r{n}x"), _draw(rng, self.spec.output_tokens)


@dataclasses.dataclass(frozen=True, slots=True)
class Trace:
    rows: tuple[dict[str, Any], ...]
    count: Counter = words

    def requests(self, rng: random.Random) -> Iterator[tuple[str, int]]:
        for n, row in enumerate(itertools.cycle(self.rows)):
            prompt = row.get("prompt")
            if not isinstance(prompt, str):
                head = ""
                if row.get("prefix") is not None:
                    head = filler(
                        int(row.get("prefix_tokens", 256)), self.count, f"p{row['prefix']}x"
                    )
                prompt = (head + " " if head else "") + filler(
                    int(row["input_tokens"]), self.count, f"r{n}x"
                )
            yield prompt, int(row["output_tokens"])


def load_spec(path: Path, count: Counter) -> Spec:
    try:
        return Spec(SpecFile.model_validate(yaml.safe_load(path.read_text())), count)
    except (OSError, yaml.YAMLError, ValueError) as exc:
        raise WorkloadError(f"{path}: {exc}") from exc


def load_trace(path: Path, count: Counter) -> Trace:
    rows = []
    try:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if (
                not isinstance(row, dict)
                or "output_tokens" not in row
                or ("input_tokens" not in row and "prompt" not in row)
            ):
                raise WorkloadError(
                    f"{path}:{number}: each line needs output_tokens and input_tokens or prompt"
                )
            rows.append(row)
    except (OSError, json.JSONDecodeError) as exc:
        raise WorkloadError(f"{path}: {exc}") from exc
    if not rows:
        raise WorkloadError(f"{path}: no requests in the trace")
    return Trace(tuple(rows), count)


def progress_bar(label: str, seconds: float, width: int = 24) -> Progress:
    """A one-line bar that redraws in place."""

    def show(elapsed: float) -> None:
        filled = int(width * min(1.0, elapsed / seconds)) if seconds > 0 else width
        print(
            f"\r{label} [{'#' * filled:<{width}}] {elapsed:4.0f}/{seconds:g} s", end="", flush=True
        )

    return show

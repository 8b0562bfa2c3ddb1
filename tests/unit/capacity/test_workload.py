"""What bench replica sends: fixed sizes, a YAML spec's distributions and shared prefixes, a
JSONL trace, and prompts sized by a real tokenizer."""

from __future__ import annotations

import itertools
import random
import statistics
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from tokenfleet.capacity import workload


def take(source: workload.Source, n: int, seed: int = 1) -> list[tuple[str, int]]:
    return list(itertools.islice(source.requests(random.Random(seed)), n))


def test_fixed_sizes_are_words_for_tokens() -> None:
    [(prompt, out)] = take(workload.Fixed(50, 7), 1)
    assert len(prompt.split()) == 50 and out == 7


def test_a_spec_draws_its_distributions_and_shares_prefixes(tmp_path: Path) -> None:
    spec = tmp_path / "w.yaml"
    spec.write_text(
        "inputTokens: {mean: 400, p99: 1600}\n"
        "outputTokens: {mean: 50, dist: exponential}\n"
        "sharedPrefix: {share: 0.5, groups: 3, tokens: 100}\n"
    )
    got = take(workload.load_spec(spec, workload.words), 4000)
    sizes = [len(p.split()) for p, _ in got]
    assert statistics.mean(sizes) == pytest.approx(400, rel=0.08)
    assert statistics.mean(o for _, o in got) == pytest.approx(50, rel=0.08)
    heads = [p.split()[0] for p, _ in got if p.startswith("p")]
    assert len(heads) / len(got) == pytest.approx(0.5, abs=0.03)
    assert set(heads) == {"p0x0", "p1x0", "p2x0"}  # three prefixes, reused
    assert take(workload.load_spec(spec, workload.words), 20) == got[:20]  # seeded


def test_a_trace_replays_in_order_and_repeats(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"input_tokens": 3, "output_tokens": 9}\n\n'
        '{"prompt": "exact words here", "output_tokens": 2}\n'
        '{"input_tokens": 2, "output_tokens": 1, "prefix": 4, "prefix_tokens": 5}\n'
    )
    got = take(workload.load_trace(trace, workload.words), 4)
    assert [o for _, o in got] == [9, 2, 1, 9]
    assert got[1][0] == "exact words here"
    assert got[2][0].split()[0] == "p4x0" and len(got[2][0].split()) == 7
    assert len(got[0][0].split()) == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"input_tokens": 3}\n', "needs output_tokens"),
        ("not json\n", "Expecting value"),
        ("\n", "no requests"),
    ],
)
def test_a_bad_trace_says_which_line_and_why(tmp_path: Path, text: str, message: str) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(text)
    with pytest.raises(workload.WorkloadError, match=message):
        workload.load_trace(trace, workload.words)


def test_a_tokenizer_sizes_prompts_in_its_own_tokens(tmp_path: Path) -> None:
    # every digit is its own token here, so "w123" is 4 tokens: words would overshoot 4x
    tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)]
    )
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    count = workload.tokenizer_counter(path)
    [(prompt, _)] = take(workload.Fixed(300, 1, count), 1)
    assert 280 <= count(prompt) <= 300
    with pytest.raises(workload.WorkloadError, match=r"not a tokenizer\.json"):
        workload.tokenizer_counter(tmp_path / "missing.json")

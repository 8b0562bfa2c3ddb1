"""The usage ledger's layout (tokenfleet.accounting.usage_layout): fields written for an entry
read back as the same entry, sums per label set, unknown fields skipped, hour keys of a window."""

from __future__ import annotations

import datetime

import pytest

from tokenfleet.accounting import usage_layout

UTC = datetime.UTC


def _entry(**overrides: object) -> usage_layout.Entry:
    base: dict[str, object] = {
        "tenant": "ns/a",
        "model": "m",
        "pool": "ns/p",
        "outcome": "served",
        "requests": 1,
        "prompt_tokens": 10,
        "cached_prompt_tokens": 4,
        "completion_tokens": 5,
    }
    return usage_layout.Entry(**{**base, **overrides})  # type: ignore[arg-type]


def _hash(*entries: usage_layout.Entry) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in entries:
        for field, value in usage_layout.fields(e):
            out[field] = out.get(field, 0) + value
    return out


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        pytest.param([_entry()], [_entry()], id="one-entry-round-trips"),
        pytest.param(
            [_entry(), _entry(prompt_tokens=1, cached_prompt_tokens=0, completion_tokens=0)],
            [_entry(requests=2, prompt_tokens=11)],
            id="same-labels-sum",
        ),
        pytest.param(
            [_entry(outcome="cancelled", completion_tokens=0), _entry(tenant="ns/b")],
            [_entry(outcome="cancelled", completion_tokens=0), _entry(tenant="ns/b")],
            id="labels-kept-apart-and-sorted",
        ),
    ],
)
def test_fields_read_back(
    written: list[usage_layout.Entry], expected: list[usage_layout.Entry]
) -> None:
    assert usage_layout.entries([_hash(*written)]) == expected


def test_zero_counts_are_not_written_and_foreign_fields_are_skipped() -> None:
    fields = dict(usage_layout.fields(_entry(cached_prompt_tokens=0)))
    assert not any(f.endswith("cached_prompt_tokens") for f in fields)
    assert usage_layout.entries([{"something-else": 3, **fields}]) == [
        _entry(cached_prompt_tokens=0)
    ]


def test_hour_keys_cover_the_window() -> None:
    since = datetime.datetime(2026, 12, 1, 22, 30, tzinfo=UTC)
    until = datetime.datetime(2026, 12, 2, 0, 5, tzinfo=UTC)
    assert usage_layout.hour_keys(since, until) == [
        "tf:u:h:2026120122",
        "tf:u:h:2026120123",
        "tf:u:h:2026120200",
    ]

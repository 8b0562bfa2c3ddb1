"""Adapter-loader answers (``policy.adapter_loads``): a load's outcome from the loader's status
and body; a listing parsed; a listing merged into a replica's LRU view; every placement reason
has a metric label.

Also the engine's ``vllm:lora_requests_info`` read for busy adapters (newest sample wins).

Matrix: 200 / 422 with and without a verdict / 502 / other; listings well-formed or not; merge
with adapters gone, kept (loading or loaded since the listing), and loaded by strangers.
"""

from __future__ import annotations

import pytest

from tokenfleet.gateway.policy.adapter_loads import (
    PLACEMENT,
    Outcome,
    Result,
    busy,
    judge,
    listed,
    merged,
)
from tokenfleet.gateway.policy.adapters import Why


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        pytest.param(200, b'{"name":"a","verdict":{}}', Outcome(result=Result.LOADED), id="ok"),
        pytest.param(
            422,
            b'{"verdict":{"reason":"DigestMismatch","verified":false}}',
            Outcome(result=Result.REFUSED, reason="DigestMismatch"),
            id="refused with its reason",
        ),
        pytest.param(
            422,
            b"not json",
            Outcome(result=Result.REFUSED, reason="refused by the worker"),
            id="refused without a verdict",
        ),
        pytest.param(
            502,
            b'{"error":"engine unreachable"}',
            Outcome(result=Result.FAILED, reason="adapter-loader answered 502: engine unreachable"),
            id="the engine failed",
        ),
        pytest.param(
            500,
            b"boom",
            Outcome(result=Result.FAILED, reason="adapter-loader answered 500: boom"),
            id="anything else fails",
        ),
    ],
)
def test_judge(status: int, body: bytes, expected: Outcome) -> None:
    assert judge(status, body) == expected


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            b'{"adapters":[{"name":"a","digest":"d1","loadedAt":"x"},{"name":"b"}]}',
            {"a": "d1", "b": ""},
            id="listing",
        ),
        pytest.param(b'{"adapters":[]}', {}, id="empty"),
        pytest.param(b'{"adapters":[{"digest":"d"}, 3]}', {}, id="nameless entries skipped"),
        pytest.param(b"[]", None, id="not an object"),
        pytest.param(b"<html>", None, id="not json"),
    ],
)
def test_listed(body: bytes, expected: dict[str, str] | None) -> None:
    assert listed(body) == expected


@pytest.mark.parametrize(
    ("known", "listing", "keep", "expected"),
    [
        pytest.param(("a", "b"), {"a", "b"}, set(), ("a", "b"), id="unchanged: order kept"),
        pytest.param(("a", "b"), {"b"}, set(), ("b",), id="another gateway evicted a"),
        pytest.param(("a", "b"), {"b"}, {"a"}, ("a", "b"), id="loaded since: kept"),
        pytest.param(("a",), {"a", "z", "y"}, set(), ("y", "z", "a"), id="strangers are LRU"),
        pytest.param((), set(), set(), (), id="nothing"),
    ],
)
def test_merged(
    known: tuple[str, ...], listing: set[str], keep: set[str], expected: tuple[str, ...]
) -> None:
    assert merged(known=known, listing=listing, keep=keep) == expected


INFO = "vllm:lora_requests_info"


@pytest.mark.parametrize(
    ("page", "expected"),
    [
        pytest.param(
            f"# HELP {INFO} Running stats on lora requests.\n# TYPE {INFO} gauge\n"
            f'{INFO}{{max_lora="2",running_lora_adapters="a,b",waiting_lora_adapters="c"}} 1.7e9\n'
            "vllm:num_requests_waiting 0\n",
            {"a", "b", "c"},
            id="running and waiting",
        ),
        pytest.param(
            f'{INFO}{{max_lora="2",running_lora_adapters="old",waiting_lora_adapters=""}} 100\n'
            f'{INFO}{{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""}} 200\n',
            set(),
            id="the newest sample: nothing now",
        ),
        pytest.param(
            f'{INFO}{{max_lora="2",running_lora_adapters="b",waiting_lora_adapters=""}} 200\n'
            f'{INFO}{{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""}} 200\n',
            None,
            id="two states in the same second: unknown",
        ),
        pytest.param("vllm:num_requests_waiting 0\n", None, id="no LoRA on this engine"),
        pytest.param(f'{INFO}{{max_lora="2"}} garbage\n', None, id="unreadable value"),
    ],
)
def test_busy(page: str, expected: set[str] | None) -> None:
    assert busy(page) == expected


def test_every_placement_reason_has_a_label() -> None:
    assert set(PLACEMENT) == set(Why)
    assert {PLACEMENT[Why.LOADED], PLACEMENT[Why.EVICT], PLACEMENT[Why.GROW]} == {
        "hit",
        "loaded",
        "spilled",
    }

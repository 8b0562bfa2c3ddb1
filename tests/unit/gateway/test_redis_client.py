"""RESP2 encoding and parsing for the quota script's replies, including replies split anywhere."""

from __future__ import annotations

from typing import Any

import pytest

from tokenfleet.gateway import redis_client


def test_encode_is_a_bulk_string_array() -> None:
    assert (
        redis_client.encode("EVALSHA", b"ab", 2)
        == b"*3\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n2\r\n"
    )


@pytest.mark.parametrize(
    ("wire", "value"),
    [
        pytest.param(b"+OK\r\n", b"OK", id="simple"),
        pytest.param(b":-42\r\n", -42, id="integer"),
        pytest.param(b"$5\r\nhello\r\n", b"hello", id="bulk"),
        pytest.param(b"$0\r\n\r\n", b"", id="empty-bulk"),
        pytest.param(b"$-1\r\n", None, id="null-bulk"),
        pytest.param(b"*3\r\n:1\r\n:0\r\n$0\r\n\r\n", [1, 0, b""], id="quota-ok"),
        pytest.param(
            b"*3\r\n:0\r\n:1500\r\n$19\r\nrequests_per_minute\r\n",
            [0, 1500, b"requests_per_minute"],
            id="quota-refused",
        ),
        pytest.param(b"*2\r\n*1\r\n:1\r\n*0\r\n", [[1], []], id="nested"),
    ],
)
def test_parse(wire: bytes, value: Any) -> None:
    assert redis_client.parse(wire, 0) == (value, len(wire))
    for cut in range(1, len(wire)):  # any prefix is incomplete, never a wrong value
        with pytest.raises(redis_client._Incomplete):
            redis_client.parse(wire[:cut], 0)


def test_error_replies_become_values_to_raise() -> None:
    value, end = redis_client.parse(b"-NOSCRIPT No matching script\r\n", 0)
    assert (
        isinstance(value, redis_client.RespError)
        and str(value).startswith("NOSCRIPT")
        and end == 30
    )


def test_protocol_resolves_pipelined_replies_in_order_across_chunks() -> None:
    import asyncio

    async def scenario() -> list[Any]:
        protocol = redis_client._Protocol()
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in range(3)]
        protocol.pending.extend((0.0, f) for f in futures)
        wire = b":1\r\n$3\r\nabc\r\n*1\r\n:7\r\n"
        for i in range(0, len(wire), 3):  # delivered in 3-byte pieces
            protocol.data_received(wire[i : i + 3])
        return [f.result() for f in futures]

    assert asyncio.run(scenario()) == [1, b"abc", [7]]

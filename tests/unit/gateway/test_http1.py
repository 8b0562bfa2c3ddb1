"""The engine client's HTTP/1.1 response parser: every framing an engine uses, cut anywhere."""

from __future__ import annotations

import pytest

from tokenfleet.gateway.policy.http1 import ParseError, ResponseParser

SSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b'f\r\ndata: {"a":1}\n\n\r\n'
    b'f\r\ndata: {"b":2}\n\n\r\n'
    b"e\r\ndata: [DONE]\n\n\r\n"
    b"0\r\n\r\n"
)
JSON = b'HTTP/1.1 200 OK\r\ncontent-length: 11\r\nX-Thing: a: b\r\n\r\n{"ok":true}'


def _parse(raw: bytes, cuts: list[int]) -> tuple[ResponseParser, bytes, list[bytes]]:
    parser, pieces, at = ResponseParser(), [], 0
    for cut in [*cuts, len(raw)]:
        pieces += parser.feed(raw[at:cut])
        at = cut
    return parser, b"".join(pieces), pieces


@pytest.mark.parametrize(
    ("raw", "body", "status", "keep_alive"),
    [
        (SSE, b'data: {"a":1}\n\ndata: {"b":2}\n\ndata: [DONE]\n\n', 200, True),
        (JSON, b'{"ok":true}', 200, True),
        (b"HTTP/1.1 204 No Content\r\n\r\n", b"", 204, True),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", b"", 200, False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", b"hi", 200, False),
        (
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi",
            b"hi",
            200,
            True,
        ),
        (  # an interim 100 Continue, then the answer
            b"HTTP/1.1 100 Continue\r\n\r\n"
            b"HTTP/1.1 400 Bad Request\r\nContent-Length: 3\r\n\r\nbad",
            b"bad",
            400,
            True,
        ),
        (  # a chunk extension and a trailer: both skipped
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3;name=value\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n",
            b"abc",
            200,
            True,
        ),
    ],
)
def test_every_cut_of_an_answer_parses_to_the_same_head_and_body(
    raw: bytes, body: bytes, status: int, keep_alive: bool
) -> None:
    for cuts in ([], *([i] for i in range(1, len(raw))), list(range(1, len(raw)))):
        parser, got, _ = _parse(raw, cuts)
        assert parser.done, cuts
        assert parser.head is not None and parser.head.status == status
        assert parser.head.keep_alive is keep_alive
        assert got == body, cuts


def test_headers_are_lower_cased_and_keep_colons_in_values() -> None:
    parser, _, _ = _parse(JSON, [])
    assert parser.head is not None
    assert parser.head.headers == {"content-length": "11", "x-thing": "a: b"}


def test_a_stream_read_a_chunk_at_a_time_gives_each_event_as_one_piece() -> None:
    """What makes the relay cheap: an engine writes one event per chunk, and one read
    usually brings one chunk, so the relay gets one piece per event, never a copy of a buffer."""
    head_end = SSE.index(b"\r\n\r\n") + 4
    cuts = [head_end]
    at = head_end
    while True:
        nxt = SSE.find(b"\n\n\r\n", at)
        if nxt < 0:
            break
        at = nxt + 4
        cuts.append(at)
    parser, _, pieces = _parse(SSE, cuts)
    assert pieces == [b'data: {"a":1}\n\n', b'data: {"b":2}\n\n', b"data: [DONE]\n\n"]
    assert parser.done


def test_a_body_without_length_or_chunks_runs_until_the_connection_closes() -> None:
    parser = ResponseParser()
    assert parser.feed(b"HTTP/1.1 200 OK\r\n\r\npart one, ") == [b"part one, "]
    assert parser.feed(b"part two") == [b"part two"]
    assert not parser.done and parser.until_close
    parser.closed()
    assert parser.done


def test_a_chunked_body_cut_off_is_not_done_when_the_connection_closes() -> None:
    parser = ResponseParser()
    parser.feed(SSE[: SSE.index(b"e\r\ndata: [DONE]")])
    parser.closed()
    assert not parser.done


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 OK\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "without a colon"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n", "not a number"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "not hexadecimal"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-2\r\n", "not hexadecimal"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\n", "not hexadecimal"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5_0\r\n", "not hexadecimal"),
        ("HTTP/1.1 200 OK\r\nContent-Length: ²\r\n\r\n".encode(), "not a number"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY",
            "does not end with CRLF",
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nab", "after the end"),
        (b"HTTP/1.1 200 OK\r\n" + b"X: " + b"y" * 70_000, "exceeds 64 KiB"),
    ],
)
def test_what_is_not_an_answer_is_refused_with_a_reason(raw: bytes, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        ResponseParser().feed(raw)

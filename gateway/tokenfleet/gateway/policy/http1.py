"""An HTTP/1.1 response parser for answers from engines: the status line and headers, then the
body by ``Content-Length``, chunked transfer coding or until the connection closes.

The gateway's engine client (:mod:`tokenfleet.gateway.engine_http`) feeds it the bytes each
socket read brings and relays the body pieces it returns as they come, without a task switch
per piece: an SSE stream's event usually arrives as one chunk, and its piece is that event.

Pure: no I/O; everything arrives through :meth:`ResponseParser.feed`.
"""

from __future__ import annotations

import dataclasses
import enum

MAX_HEAD_BYTES = 64 * 1024  # an engine's status line and headers are a few hundred bytes
_CRLF = b"\r\n"
_HEAD_END = b"\r\n\r\n"


class ParseError(ValueError):
    """The bytes are not an HTTP/1.x response the parser can follow."""


@dataclasses.dataclass(frozen=True, slots=True)
class Head:
    status: int
    headers: dict[str, str]  # names lower-cased; a repeated header keeps its last value
    keep_alive: bool  # the connection can carry another request once this answer is read


class _Body(enum.Enum):
    HEAD = 0
    LENGTH = 1
    CHUNK_SIZE = 2
    CHUNK_DATA = 3
    CHUNK_END = 4
    TRAILERS = 5
    UNTIL_CLOSE = 6
    DONE = 7


def parse_head(block: bytes) -> Head:
    """The status line and headers, ``block`` ending before the blank line."""
    lines = block.split(_CRLF)
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise ParseError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise ParseError(f"a header line without a colon: {line[:80]!r}")
        headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    connection = headers.get("connection", "").lower()
    if parts[0] == b"HTTP/1.0":
        keep_alive = "keep-alive" in connection
    else:
        keep_alive = "close" not in connection
    return Head(status=int(parts[1]), headers=headers, keep_alive=keep_alive)


def _hex(digits: bytes) -> int | None:
    """A chunk size: hexadecimal digits only (``int`` alone would take "+5", "0x5", "5_0")."""
    if not digits or not digits.isalnum() or b"x" in digits or b"X" in digits:
        return None
    try:
        return int(digits, 16)
    except ValueError:  # letters beyond f
        return None


def _one_chunk(data: bytes) -> bytes | None:
    """The data of ``data`` if it is exactly one whole, non-empty chunk (what one read of an
    engine's stream usually brings: one event); None for anything else."""
    cut = data.find(_CRLF, 0, 10)
    if cut <= 0:
        return None
    size = _hex(data[:cut])
    if size is None:
        return None
    end = cut + 2 + size
    if size == 0 or len(data) != end + 2 or data[end:] != _CRLF:
        return None
    return data[cut + 2 : end]


class ResponseParser:
    """One response. :attr:`head` is set once the headers are in, :attr:`done` once the body
    ended; :meth:`feed` returns the body pieces the bytes completed."""

    __slots__ = ("_left", "_rest", "_state", "done", "head", "until_close")

    def __init__(self) -> None:
        self.head: Head | None = None
        self.done = False
        self.until_close = False  # the body ends with the connection (no length, no chunks)
        self._state = _Body.HEAD
        self._rest = b""  # bytes of an incomplete head, chunk-size line or chunk end
        self._left = 0  # body bytes still to come (LENGTH) or of the current chunk

    def feed(self, data: bytes) -> list[bytes]:
        if self._state is _Body.CHUNK_SIZE and not self._rest:  # a stream's usual read
            whole = _one_chunk(data)
            if whole is not None:
                return [whole]
        buf = self._rest + data if self._rest else data
        self._rest = b""
        pos, end, out = 0, len(buf), []
        while pos < end:
            state = self._state
            if state is _Body.CHUNK_DATA or state is _Body.LENGTH:
                take = min(self._left, end - pos)
                out.append(buf if take == end else buf[pos : pos + take])
                pos += take
                self._left -= take
                if self._left == 0:
                    self._state = _Body.CHUNK_END if state is _Body.CHUNK_DATA else _Body.DONE
            elif state is _Body.UNTIL_CLOSE:
                out.append(buf if pos == 0 else buf[pos:])
                pos = end
            elif state is _Body.DONE:  # bytes after the answer's end: not HTTP/1.1 keep-alive
                raise ParseError("bytes after the end of the response")
            else:
                moved = self._framing(buf, pos)
                if moved < 0:  # an incomplete line: wait for the rest
                    break
                pos = moved
        self.done = self._state is _Body.DONE
        if pos < end:
            self._rest = buf[pos:]
        return out

    def _framing(self, buf: bytes, pos: int) -> int:
        """Read the head, a chunk-size line, a chunk's CRLF or a trailer line at ``pos``:
        where the next byte is, or -1 while the line is incomplete."""
        state = self._state
        if state is _Body.CHUNK_END:
            if len(buf) - pos < 2:
                return -1
            if buf[pos : pos + 2] != _CRLF:
                raise ParseError("a chunk's data does not end with CRLF")
            self._state = _Body.CHUNK_SIZE
            return pos + 2
        cut = buf.find(_HEAD_END if state is _Body.HEAD else _CRLF, pos)
        if cut < 0:
            if len(buf) - pos > MAX_HEAD_BYTES:
                raise ParseError("a response line or head exceeds 64 KiB")
            return -1
        if state is _Body.CHUNK_SIZE:
            digits = buf[pos:cut].split(b";", 1)[0].strip()
            size = _hex(digits)
            if size is None:
                raise ParseError(f"a chunk size that is not hexadecimal: {digits[:20]!r}")
            self._left = size
            self._state = _Body.CHUNK_DATA if self._left else _Body.TRAILERS
            return cut + 2
        if state is _Body.TRAILERS:  # the blank line ends the answer; trailer lines are skipped
            if cut == pos:
                self._state = _Body.DONE
            return cut + 2
        head = parse_head(buf[pos:cut])
        if not 100 <= head.status < 200:  # an interim answer (100 Continue): the real one follows
            self.head = head
            self._state = self._body_of(head)
        return cut + 4

    def _body_of(self, head: Head) -> _Body:
        if head.status in (204, 304):
            return _Body.DONE
        if "chunked" in head.headers.get("transfer-encoding", "").lower():
            return _Body.CHUNK_SIZE
        length = head.headers.get("content-length")
        if length is not None:
            if not (length.isascii() and length.isdigit()):  # "²".isdigit() is True
                raise ParseError(f"a Content-Length that is not a number: {length[:20]!r}")
            self._left = int(length)
            return _Body.LENGTH if self._left else _Body.DONE
        self.until_close = True
        return _Body.UNTIL_CLOSE

    def closed(self) -> None:
        """The connection closed: a body that runs until the close has ended with it."""
        if self._state is _Body.UNTIL_CLOSE:
            self._state = _Body.DONE
            self.done = True

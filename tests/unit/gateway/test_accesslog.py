"""The batched access log: lines written off the request path, whole, in order, one per record."""

from __future__ import annotations

import asyncio
import json
import os

from tokenfleet.gateway import accesslog


def test_records_are_written_as_json_lines_in_order_by_the_writer_thread() -> None:
    read, write = os.pipe()
    log = accesslog.AccessLog(fd=write)

    async def serve() -> None:
        async with log.running():
            for i in range(500):
                log.write({"request_id": f"r{i}", "route": "/v1/chat/completions"})
            await asyncio.sleep(accesslog.FLUSH_SECONDS * 3)  # the periodic flush, not the last
            assert os.read(read, 1 << 20).count(b"\n") == 500
            log.write({"request_id": "last"})  # written by the final flush on the way out

    asyncio.run(serve())
    os.close(write)
    tail = os.read(read, 1 << 20)
    os.close(read)
    assert [json.loads(line) for line in tail.splitlines()] == [{"request_id": "last"}]


def test_a_stuck_log_drops_lines_instead_of_growing_without_bound() -> None:
    log = accesslog.AccessLog(fd=-1)
    for _ in range(accesslog.MAX_PENDING + 7):
        log.write({"a": 1})
    assert log.dropped == 7

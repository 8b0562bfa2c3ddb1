"""preStop drain: wait until the engine's in-flight generations have finished, up to a bound.

Run as the worker container's preStop hook (``python -m tokenfleet.worker.drain``). By the time
it runs the pod is terminating, so gateways have stopped sending it new requests (they skip
pods with a deletionTimestamp); this polls the engine's own ``vllm:num_requests_running`` on
localhost until it reads 0 on two polls in a row (a request admitted just before the pod was
marked terminating may not be counted on the first), then returns so the kubelet sends
SIGTERM. It gives up at ``--max-seconds`` (the grace period minus a margin for SIGTERM), and
treats an engine that does not answer as drained: a dead engine has nothing left to finish.

Standard library only: the worker image copies just worker-image/tokenfleet.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable

#: vLLM's gauge of sequences being generated (the only name: no deprecated alias exists).
RUNNING = "vllm:num_requests_running"


def running(metrics_text: str) -> float | None:
    """The sum of ``vllm:num_requests_running`` over its series; None when absent."""
    values = [
        float(line.rsplit(None, 1)[-1])
        for line in metrics_text.splitlines()
        if line.startswith(RUNNING) and line[len(RUNNING) : len(RUNNING) + 1] in ("{", " ")
    ]
    return sum(values) if values else None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Drained:
    """How the drain ended: ``reason`` is Idle, Deadline or EngineGone."""

    reason: str
    seconds: float
    last_running: float | None


def drain(
    *,
    read: Callable[[], str | None],
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    max_seconds: float,
    interval: float = 0.5,
) -> Drained:
    """Poll ``read`` (the metrics text, None when unreachable) until idle twice or the bound."""
    start = clock()
    idle_polls, last = 0, None
    while True:
        text = read()
        if text is None:
            return Drained(reason="EngineGone", seconds=clock() - start, last_running=last)
        last = running(text)
        idle_polls = idle_polls + 1 if not last else 0
        if idle_polls >= 2:
            return Drained(reason="Idle", seconds=clock() - start, last_running=last)
        if clock() - start >= max_seconds:
            return Drained(reason="Deadline", seconds=clock() - start, last_running=last)
        sleep(interval)


def reader(url: str, timeout: float = 2.0) -> Callable[[], str | None]:
    """A ``read`` for :func:`drain`: the metrics page's text, None when it does not answer."""

    def read() -> str | None:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310
                return str(response.read().decode("utf-8", "replace"))
        except (urllib.error.URLError, OSError, ValueError):
            return None

    return read


def main(argv: list[str] | None = None) -> int:
    """Drain, print one line saying how it ended (kubelet logs preStop output), exit 0."""
    p = argparse.ArgumentParser(prog="python -m tokenfleet.worker.drain")
    p.add_argument("--url", default="http://127.0.0.1:8000/metrics")
    p.add_argument("--max-seconds", type=float, default=600.0)
    p.add_argument("--interval", type=float, default=0.5)
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    if not args.url.startswith(("http://", "https://")):
        p.error("--url must be http(s)")
    done = drain(
        read=reader(args.url),
        clock=time.monotonic,
        sleep=time.sleep,
        max_seconds=args.max_seconds,
        interval=args.interval,
    )
    print(
        f"drain: {done.reason} after {done.seconds:.1f} s (running={done.last_running})",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

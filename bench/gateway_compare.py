"""Two gateway checkouts side by side in one run: CPU per request and per streamed token.

A refactor of the request path must not make it dearer. This runs ``bench/gateway_overhead.py``'s
loads (the non-streamed 32-connection load and the 64-stream load) against the gateway of this
checkout and of another one (its own venv: ``<checkout>/.venv/bin/python``), alternating the two
round by round with a fresh gateway each time, so that both meet the same machine, the same
Redis and the same backends. It prints each round and the means.

    git worktree add /tmp/before main && (cd /tmp/before && python3 -m venv .venv &&
        .venv/bin/pip install -q -e '.[dev]' && .venv/bin/python tools/build_native.py)
    .venv/bin/python bench/gateway_compare.py --before /tmp/before [--rounds 3] [--quick]
    .venv/bin/python bench/gateway_compare.py --before /tmp/before --calls

``--calls`` counts instead of timing: each gateway runs under cProfile, once for 200 and once
for 1,200 non-streamed requests (and 20 / 120 streams), and the difference divided by 1,000
(100) is the Python function calls per request (per stream) — a figure the machine's load does
not move, where CPU time on a shared machine does.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from _processes import free_port, start, wait_port
from gateway_overhead import KEY, Proxy, load, start_backends, stop


def start_gateway(
    python: str, tmp: Path, backend: int, redis_url: str, name: str, *, profile: Path | None = None
) -> Proxy:
    """``python -m tokenfleet.gateway`` in static mode (the default configuration: access log
    on, Redis quotas), as gateway_overhead starts it, with the given interpreter."""
    port = free_port()
    digest = "sha256:" + hashlib.sha256(KEY.encode()).hexdigest()
    config = tmp / f"{name}-{port}.json"
    config.write_text(
        json.dumps(
            {
                "models": [
                    {
                        "name": "m",
                        "endpoints": [f"http://127.0.0.1:{backend}"],
                        "maxConcurrency": 256,
                    }
                ],
                "tenants": [
                    {
                        "name": "bench",
                        "apiKeyHashes": [digest],
                        "allowedModels": ["*"],
                        "quotas": {
                            "requestsPerMinute": 10**8,
                            "tokensPerMinute": 10**10,
                            "maxConcurrent": 10**6,
                        },
                    }
                ],
            }
        )
    )
    profiled = ["-m", "cProfile", "-o", str(profile)] if profile else []
    argv = [python, *profiled, "-m", "tokenfleet.gateway", "--config", str(config)]
    argv += ["--port", str(port)]
    p = start(
        [*argv, "--redis", redis_url],
        tmp / f"{name}-{port}.log",
        {"TOKENFLEET_SALT_SECRET": "bench"},
    )
    wait_port(port)
    return Proxy(name, f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {KEY}"}, p.pid, p)


def calls(python: str, tmp: Path, backend: int, redis_url: str, name: str, *, stream: bool) -> int:
    """Python function calls the gateway made for 1,000 requests (100 streams): two profiled
    runs, so that start-up and shutdown cancel out."""
    import pstats

    counted = []
    for total in (200, 1200) if not stream else (20, 120):
        out = tmp / f"{name}-{total}-{int(stream)}.prof"
        proxy = start_gateway(python, tmp, backend, redis_url, name, profile=out)
        got = asyncio.run(load(proxy, connections=16, total=total, stream=stream))
        stop(proxy.process)
        assert got["errors"] == 0, got
        counted.append(pstats.Stats(str(out)).total_calls)  # type: ignore[attr-defined]
    return counted[1] - counted[0]


def count_calls(pythons: dict[str, str], tmp: Path, ports: tuple[int, int], redis_url: str) -> int:
    print(f"\n{'':8} {'calls/request':>14} {'calls/stream':>13}   (Python calls, cProfile)")
    for name, python in pythons.items():
        per_request = calls(python, tmp, ports[0], redis_url, name, stream=False) / 1000
        per_stream = calls(python, tmp, ports[1], redis_url, name, stream=True) / 100
        print(f"{name:8} {per_request:14.0f} {per_stream:13.0f}", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", type=Path, required=True, help="the other checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    parser.add_argument("--calls", action="store_true", help="count Python calls per request")
    args = parser.parse_args()
    scale = 0.2 if args.quick else 1.0
    pythons = {
        "before": str(args.before.resolve() / ".venv/bin/python"),
        "after": sys.executable,
    }
    tmp = Path(tempfile.mkdtemp(prefix="tf-gw-compare-"))
    redis_port = free_port()
    redis = start(
        [shutil.which("redis-server") or "redis-server", "--port", str(redis_port), "--save", ""],
        tmp / "redis.log",
    )
    fast, fast_port, streaming, stream_port = start_backends(tmp)
    wait_port(redis_port)
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    if args.calls:
        try:
            return count_calls(pythons, tmp, (fast_port, stream_port), redis_url)
        finally:
            for p in (redis, fast, streaming):
                stop(p)
    per_request: dict[str, list[float]] = {name: [] for name in pythons}
    per_token: dict[str, list[float]] = {name: [] for name in pythons}
    try:
        for i in range(args.rounds):
            order = list(pythons) if i % 2 == 0 else list(reversed(pythons))
            for name in order:
                proxy = start_gateway(pythons[name], tmp, fast_port, redis_url, name)
                asyncio.run(load(proxy, connections=4, total=50, stream=False))  # warm up
                many = asyncio.run(
                    load(proxy, connections=32, total=int(4000 * scale), stream=False)
                )
                stop(proxy.process)
                proxy = start_gateway(pythons[name], tmp, stream_port, redis_url, name)
                asyncio.run(load(proxy, connections=4, total=50, stream=True))  # warm up
                streamed = asyncio.run(
                    load(proxy, connections=64, total=int(256 * scale), stream=True)
                )
                stop(proxy.process)
                errors = many["errors"] + streamed["errors"]
                per_request[name].append(1000 * many["cpu"] / max(1, many["ok"]))
                per_token[name].append(1e6 * streamed["cpu"] / max(1, streamed["chunks"]))
                print(
                    f"  round {i + 1} {name:7} {per_request[name][-1]:.3f} CPU ms/req  "
                    f"{per_token[name][-1]:.1f} CPU us/token  errors {errors}",
                    flush=True,
                )
    finally:
        for p in (redis, fast, streaming):
            stop(p)
    print(f"\n{'':8} {'CPU ms/req':>11} {'CPU us/token':>13}   ({args.rounds} rounds, mean)")
    for name in pythons:
        print(
            f"{name:8} {statistics.mean(per_request[name]):11.3f} "
            f"{statistics.mean(per_token[name]):13.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

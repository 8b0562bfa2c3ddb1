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
not move, where CPU time on a shared machine does. ``--instructions`` counts the instructions
the gateway process executes the same way, under valgrind's callgrind (100 / 600 requests, 20 /
120 streams; about ten minutes): CPU work per request and per stream, without the noise.
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
import time
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
    argv = [python, "-m", "tokenfleet.gateway", "--config", str(config), "--port", str(port)]
    if profile is not None and profile.suffix == ".prof":  # Python calls
        argv[1:1] = ["-m", "cProfile", "-o", str(profile)]
    elif profile is not None:  # instructions
        argv[:0] = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={profile}"]
    p = start(
        [*argv, "--redis", redis_url],
        tmp / f"{name}-{port}.log",
        {"TOKENFLEET_SALT_SECRET": "bench"},
    )
    wait_port(port, timeout=600)  # valgrind starts a Python a hundred times slower
    return Proxy(name, f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {KEY}"}, p.pid, p)


def counted(path: Path) -> int:
    """What one profiled run counted: Python calls (cProfile), or instructions (callgrind)."""
    if path.suffix == ".prof":
        import pstats

        return int(pstats.Stats(str(path)).total_calls)  # type: ignore[attr-defined]
    for line in path.read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise SystemExit(f"callgrind wrote no totals to {path}")


def count(
    python: str, tmp: Path, backend: int, redis_url: str, name: str, *, stream: bool, unit: str
) -> float:
    """Calls or instructions of the gateway per request (per stream): two profiled runs of
    different sizes, so that start-up and shutdown cancel out."""
    sizes = {"prof": (200, 1200), "cg": (100, 600)}[unit]
    totals = []
    for total in sizes if not stream else (20, 120):
        out = tmp / f"{name}-{total}-{int(stream)}-{time.time_ns()}.{unit}"
        proxy = start_gateway(python, tmp, backend, redis_url, name, profile=out)
        asyncio.run(load(proxy, connections=8, total=10, stream=stream))  # warm up
        got = asyncio.run(load(proxy, connections=8, total=total, stream=stream))
        stop(proxy.process)
        assert got["errors"] == 0, got
        totals.append(counted(out))
    return (totals[1] - totals[0]) / (100 if stream else sizes[1] - sizes[0])


def count_all(
    pythons: dict[str, str], tmp: Path, ports: tuple[int, int], redis_url: str, *, unit: str
) -> int:
    what = "Python calls, cProfile" if unit == "prof" else "million instructions, callgrind"
    print(f"\n{'':8} {'per request':>12} {'per stream':>11}   ({what}; a stream is 64 tokens)")
    scale = 1 if unit == "prof" else 1e6
    for name, python in pythons.items():
        one = count(python, tmp, ports[0], redis_url, name, stream=False, unit=unit) / scale
        streamed = count(python, tmp, ports[1], redis_url, name, stream=True, unit=unit) / scale
        digits = 0 if unit == "prof" else 3
        print(f"{name:8} {one:12.{digits}f} {streamed:11.{digits}f}", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", type=Path, required=True, help="the other checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    parser.add_argument("--calls", action="store_true", help="count Python calls per request")
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions per request (valgrind)"
    )
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
    if args.calls or args.instructions:
        try:
            unit = "prof" if args.calls else "cg"
            return count_all(pythons, tmp, (fast_port, stream_port), redis_url, unit=unit)
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

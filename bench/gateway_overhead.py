"""Gateway overhead side by side, on loopback, against one fast vLLM-compatible backend.

Compares: direct to the backend, TokenFleet's gateway (static mode, default configuration:
auth + Redis quotas + admission + prefix routing, access log on, written to a file as every
proxy's log is), the same gateway asked for a ModelRoute's public name (``tokenfleet+route``:
examples/09-model-routes' classifier scores every prompt, then its rules choose the model),
LiteLLM proxy and vllm-router (both from PyPI, in bench/.venv-peers). Reports:

  non-streamed: CPU ms per request of the proxy process tree, added p50/p99 at 1 and 32 connections
  streamed:     CPU us per relayed token, added TTFT p99, inter-token p99 (64 streams, 5 ms/token)

CPU is read from /proc for the proxy's processes only, so the load generator and the backend
(which share the 2 cores) do not count. Latency figures include that contention for everyone.

    .venv/bin/python bench/gateway_overhead.py [--quick]
    .venv/bin/python bench/gateway_overhead.py --route-rounds 5   # routed vs direct name only

``--route-rounds N`` runs only the two TokenFleet cases, the non-streamed 32-connection load,
alternating N times (a fresh gateway each), and prints each round's CPU ms per request and the
mean difference: the classifier and the rule table cost tens of microseconds, less than one
run's noise on a shared machine, so only alternating rounds can show it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from _processes import free_port, start, wait_port

REPO = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("TOKENFLEET_CACHE", Path.home() / ".cache/tokenfleet")) / "bin/current"
PEERS = REPO / "bench" / ".venv-peers" / "bin"
TICKS = os.sysconf("SC_CLK_TCK")
KEY = "tfk-bench-" + "0" * 32
WORDS = " ".join(f"w{i}" for i in range(64))  # echo mode: 64 words back, one per chunk


def tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def cpu_seconds(pid: int) -> float:
    total = 0.0
    for p in tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICKS
        except OSError:
            pass
    return total


@dataclasses.dataclass
class Proxy:
    name: str
    base: str  # http://127.0.0.1:port
    headers: dict[str, str]
    pid: int | None  # None: direct
    process: subprocess.Popen[bytes] | None = None
    model: str = "m"  # what requests ask for (a route's public name for tokenfleet+route)


def stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None and process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


async def load(proxy: Proxy, *, connections: int, total: int, stream: bool) -> dict[str, Any]:
    body = {
        "model": proxy.model,
        "messages": [{"role": "user", "content": WORDS if stream else "hello"}],
        "max_tokens": 100 if stream else 8,
        "stream": stream,
    }
    latencies: list[float] = []
    ttfts: list[float] = []
    gaps: list[float] = []
    chunks = errors = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(total):
        queue.put_nowait(i)
    connector = aiohttp.TCPConnector(limit=connections, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal chunks, errors
            while not queue.empty():
                queue.get_nowait()
                start_at = time.perf_counter()
                try:
                    async with session.post(
                        proxy.base + "/v1/chat/completions", json=body, headers=proxy.headers
                    ) as r:
                        if r.status != 200:
                            errors += 1
                            await r.read()
                            continue
                        if not stream:
                            await r.read()
                        else:
                            last = None
                            buffer = b""
                            async for piece in r.content.iter_any():
                                now = time.perf_counter()
                                buffer += piece
                                events = buffer.count(b"\n\n")
                                if events:
                                    buffer = buffer[buffer.rfind(b"\n\n") + 2 :]
                                    if last is None:
                                        ttfts.append(now - start_at)
                                    else:
                                        gaps.append(now - last)
                                    last = now
                                    chunks += events
                except aiohttp.ClientError:
                    errors += 1
                    continue
                latencies.append(time.perf_counter() - start_at)

        cpu0 = cpu_seconds(proxy.pid) if proxy.pid else 0.0
        await asyncio.gather(*(worker() for _ in range(connections)))
        cpu = (cpu_seconds(proxy.pid) - cpu0) if proxy.pid else 0.0

    def pct(values: list[float], q: float) -> float:
        return (
            statistics.quantiles(values, n=100)[q - 1] * 1000 if len(values) >= 2 else float("nan")
        )

    return {
        "p50": pct(latencies, 50),
        "p99": pct(latencies, 99),
        "cpu": cpu,
        "ok": len(latencies),
        "errors": errors,
        "chunks": chunks,
        "ttft_p99": pct(ttfts, 99),
        "itl_p99": pct(gaps, 99),
    }


def start_backends(tmp: Path) -> tuple[subprocess.Popen[bytes], int, subprocess.Popen[bytes], int]:
    sim = str(BIN / "llm-d-inference-sim")
    fast_port, stream_port = free_port(), free_port()
    fast = start(
        [
            sim,
            "--port",
            str(fast_port),
            "--model",
            "m",
            "--force-dummy-tokenizer",
            "--max-num-seqs",
            "256",
        ],
        tmp / "fast.log",
        {"POD_IP": "127.0.0.1"},
    )
    streaming = start(
        [
            sim,
            "--port",
            str(stream_port),
            "--model",
            "m",
            "--force-dummy-tokenizer",
            "--max-num-seqs",
            "256",
            "--mode",
            "echo",
            "--inter-token-latency",
            "5ms",
        ],
        tmp / "stream.log",
        {"POD_IP": "127.0.0.1"},
    )
    wait_port(fast_port)
    wait_port(stream_port)
    return fast, fast_port, streaming, stream_port


#: The route of the tokenfleet+route case: the classifier's rule first, so every request is
#: scored (the worst case for a route), then a length rule, then the default; all lead to m.
ROUTE = {
    "name": "auto",
    "classifier": {"configMap": "classifier"},
    "rules": [
        {"name": "hard", "match": {"classifierAbove": 0.8}, "targets": [{"model": "m"}]},
        {
            "name": "short",
            "match": {"maxPromptTokens": 499, "tools": False},
            "targets": [{"model": "m"}],
        },
    ],
    "defaultTargets": [{"model": "m"}],
}


def route_config() -> dict[str, Any]:
    """The static file's routes and configMaps for the tokenfleet+route case."""
    import yaml

    cm = yaml.safe_load((REPO / "examples/09-model-routes/classifier-configmap.yaml").read_text())
    return {"routes": [ROUTE], "configMaps": {"classifier": cm["data"]}}


def start_tokenfleet(tmp: Path, backend: int, redis_url: str, *, routed: bool = False) -> Proxy:
    port = free_port()
    digest = "sha256:" + hashlib.sha256(KEY.encode()).hexdigest()
    config = tmp / f"tf-{port}.json"
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
                **(route_config() if routed else {}),
            }
        )
    )
    p = start(
        [
            sys.executable,
            "-m",
            "tokenfleet.gateway",
            "--config",
            str(config),
            "--port",
            str(port),
            "--redis",
            redis_url,
        ],  # the default configuration: the access log on (to the log file, like the peers')
        tmp / f"tokenfleet-{port}.log",
        {"TOKENFLEET_SALT_SECRET": "bench"},
    )
    wait_port(port)
    name, model = ("tokenfleet+route", "auto") if routed else ("tokenfleet", "m")
    return Proxy(
        name, f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {KEY}"}, p.pid, p, model
    )


def start_litellm(tmp: Path, backend: int) -> Proxy | None:
    if not (PEERS / "litellm").exists():
        return None
    port = free_port()
    config = tmp / f"litellm-{port}.yaml"
    config.write_text(
        "model_list:\n  - model_name: m\n    litellm_params:\n      model: openai/m\n"
        f"      api_base: http://127.0.0.1:{backend}/v1\n      api_key: unused\n"
        "general_settings:\n  master_key: sk-bench\nlitellm_settings:\n  drop_params: true\n"
    )
    p = start(
        [
            str(PEERS / "litellm"),
            "--config",
            str(config),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--num_workers",
            "1",
        ],
        tmp / f"litellm-{port}.log",
    )
    wait_port(port, timeout=180)
    return Proxy(
        "litellm", f"http://127.0.0.1:{port}", {"Authorization": "Bearer sk-bench"}, p.pid, p
    )


def start_vllm_router(tmp: Path, backend: int) -> Proxy | None:
    if not (PEERS / "vllm-router").exists():
        return None
    port = free_port()
    p = start(
        [
            str(PEERS / "vllm-router"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--worker-urls",
            f"http://127.0.0.1:{backend}",
            "--policy",
            "round_robin",
        ],
        tmp / f"vllm-router-{port}.log",
    )
    wait_port(port, timeout=60)
    return Proxy("vllm-router", f"http://127.0.0.1:{port}", {}, p.pid, p)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    parser.add_argument(
        "--route-rounds", type=int, default=0, help="only routed vs direct name, N rounds"
    )
    args = parser.parse_args()
    if args.route_rounds:
        return route_rounds(args.route_rounds, scale=0.2 if args.quick else 1.0)
    scale = 0.2 if args.quick else 1.0
    tmp = Path(tempfile.mkdtemp(prefix="tf-gw-bench-"))
    redis_port = free_port()
    redis = start(
        [shutil.which("redis-server") or "redis-server", "--port", str(redis_port), "--save", ""],
        tmp / "redis.log",
    )
    fast, fast_port, streaming, stream_port = start_backends(tmp)
    wait_port(redis_port)
    results: dict[str, dict[str, Any]] = {}
    starters: list[tuple[str, Callable[[int], Proxy | None]]] = [
        ("direct", lambda port: Proxy("direct", f"http://127.0.0.1:{port}", {}, None)),
        (
            "tokenfleet",
            lambda port: start_tokenfleet(tmp, port, f"redis://127.0.0.1:{redis_port}/0"),
        ),
        (
            "tokenfleet+route",
            lambda port: start_tokenfleet(
                tmp, port, f"redis://127.0.0.1:{redis_port}/0", routed=True
            ),
        ),
        ("litellm", lambda port: start_litellm(tmp, port)),
        ("vllm-router", lambda port: start_vllm_router(tmp, port)),
    ]
    try:
        for name, starter in starters:
            row: dict[str, Any] = {}
            for label, backend, kw in (
                ("one", fast_port, {"connections": 1, "total": int(1000 * scale), "stream": False}),
                (
                    "many",
                    fast_port,
                    {"connections": 32, "total": int(4000 * scale), "stream": False},
                ),
                (
                    "stream",
                    stream_port,
                    {"connections": 64, "total": int(256 * scale), "stream": True},
                ),
            ):
                proxy = starter(backend)
                if proxy is None:
                    print(f"  {name}: not installed (bench/.venv-peers); skipped", flush=True)
                    break
                asyncio.run(load(proxy, connections=4, total=50, stream=kw["stream"]))  # warm up
                print(f"  {name}: {label} ...", flush=True)
                row[label] = asyncio.run(load(proxy, **kw))
                stop(proxy.process)
            results[name] = row
    finally:
        for p in (redis, fast, streaming):
            stop(p)
    report(results)
    return 0


def route_rounds(rounds: int, *, scale: float) -> int:
    """CPU ms per request of the gateway asked for the model by its name, then through the
    tokenfleet+route route, alternating ``rounds`` times."""
    tmp = Path(tempfile.mkdtemp(prefix="tf-gw-route-"))
    redis_port = free_port()
    redis = start(
        [shutil.which("redis-server") or "redis-server", "--port", str(redis_port), "--save", ""],
        tmp / "redis.log",
    )
    fast, fast_port, streaming, _ = start_backends(tmp)
    wait_port(redis_port)
    cpu: dict[bool, list[float]] = {False: [], True: []}
    try:
        for i in range(rounds):
            for routed in (False, True) if i % 2 == 0 else (True, False):
                proxy = start_tokenfleet(
                    tmp, fast_port, f"redis://127.0.0.1:{redis_port}/0", routed=routed
                )
                asyncio.run(load(proxy, connections=4, total=50, stream=False))  # warm up
                got = asyncio.run(
                    load(proxy, connections=32, total=int(4000 * scale), stream=False)
                )
                stop(proxy.process)
                assert got["errors"] == 0, got
                cpu[routed].append(1000 * got["cpu"] / got["ok"])
                print(
                    f"  round {i + 1} {proxy.name:16} {cpu[routed][-1]:.3f} CPU ms/req", flush=True
                )
    finally:
        for p in (redis, fast, streaming):
            stop(p)
    direct, routed_ = statistics.mean(cpu[False]), statistics.mean(cpu[True])
    diffs = [r - d for r, d in zip(cpu[True], cpu[False], strict=True)]
    print(
        f"\nby name {direct:.3f}, routed {routed_:.3f} CPU ms/req; routed − by name: mean "
        f"{1000 * statistics.mean(diffs):+.0f} µs, per round {', '.join(f'{1000 * d:+.0f}' for d in diffs)} µs"
    )
    return 0


def report(results: dict[str, dict[str, Any]]) -> None:
    base = results["direct"]
    print("\nnon-streamed (8 tokens), backend answers at once")
    print(
        f"{'':16} {'CPU ms/req':>10} {'p50 @1':>8} {'added':>7} {'p99 @1':>8} {'p50 @32':>8} {'added':>7} "
        f"{'p99 @32':>8} {'errors':>6}"
    )
    for name, row in results.items():
        if "many" not in row:
            continue
        one, many = row["one"], row["many"]
        cpu = "-" if name == "direct" else f"{1000 * many['cpu'] / max(1, many['ok']):.3f}"
        print(
            f"{name:16} {cpu:>10} {one['p50']:8.2f} {one['p50'] - base['one']['p50']:7.2f} {one['p99']:8.2f} "
            f"{many['p50']:8.2f} {many['p50'] - base['many']['p50']:7.2f} {many['p99']:8.2f} "
            f"{one['errors'] + many['errors']:>6}"
        )
    print(
        "\nstreamed: 64 concurrent streams, 64 tokens each, one token every 5 ms (ms unless noted)"
    )
    print(
        f"{'':16} {'CPU us/token':>12} {'TTFT p99':>9} {'added':>7} {'ITL p99':>8} {'vs direct':>9} "
        f"{'tokens':>7} {'errors':>6}"
    )
    for name, row in results.items():
        if "stream" not in row:
            continue
        s = row["stream"]
        cpu = "-" if name == "direct" else f"{1e6 * s['cpu'] / max(1, s['chunks']):.1f}"
        print(
            f"{name:16} {cpu:>12} {s['ttft_p99']:9.2f} {s['ttft_p99'] - base['stream']['ttft_p99']:7.2f} "
            f"{s['itl_p99']:8.2f} {s['itl_p99'] - base['stream']['itl_p99']:9.2f} {s['chunks']:7d} {s['errors']:6d}"
        )


if __name__ == "__main__":
    raise SystemExit(main())

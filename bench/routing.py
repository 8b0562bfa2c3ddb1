"""Routing quality side by side: the same workload, the same kind of simulated replicas.

N llm-d-inference-sim replicas with KV-cache simulation (--enable-kvcache, a bounded cache)
and a per-token prefill cost, so a prefix-cache hit shortens TTFT and a miss costs real time;
a load factor makes a busy replica slower. Each router gets fresh replicas (cold caches):

  round-robin   TokenFleet's gateway, routing.policy RoundRobin
  least-load    TokenFleet's gateway, routing.policy LeastLoad
  tokenfleet    TokenFleet's gateway, routing.policy PrefixAware (prefix + load + bounded load)
  vllm-router   vllm-router --policy cache_aware (PyPI, bench/.venv-peers)

Workloads (open loop, Poisson arrivals, streamed): ``shared`` — every prompt is one of D long
documents plus a unique question (RAG / system-prompt traffic); ``unique`` — same lengths, no
shared prefix (affinity must cost nothing). Reported per router: goodput (requests/s meeting
both the TTFT and the mean inter-token SLO), TTFT p50/p90/p99, output tokens/s, prefix hit
ratio (cached prompt tokens / prompt tokens, from the engines' usage reports).

    .venv/bin/python bench/routing.py [--quick] [--replicas 4] [--rate 16] [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from _processes import free_port, start, wait_port

REPO = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("TOKENFLEET_CACHE", Path.home() / ".cache/tokenfleet")) / "bin/current"
PEERS = Path(os.environ.get("TOKENFLEET_PEERS_BIN", REPO / "bench" / ".venv-peers" / "bin"))
KEY = "tfk-bench-" + "0" * 32

#: Engine model: 0.4 ms per uncached prompt token (a 1,000-token miss ≈ 0.4 s), 10 ms per output
#: token, up to 3x slower at full batch, 8 sequences at once, 16-token blocks, 320-block cache
#: (≈ 5 of the 1,000-token documents: the 16 documents fit the fleet, not one replica).
SIM_ARGS = [
    "--enable-kvcache",
    "--kv-cache-size",
    "320",
    "--block-size",
    "16",
    "--prefill-time-per-token",
    "400us",
    "--inter-token-latency",
    "10ms",
    "--time-factor-under-load",
    "3",
    "--max-num-seqs",
    "8",
]
TTFT_SLO = 0.5  # seconds
ITL_SLO = 0.05  # seconds, mean per request
DOCUMENTS = 16
DOC_WORDS = 1000
OUTPUT_TOKENS = 16


def stop(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def start_sims(tmp: Path, n: int) -> tuple[list[str], list[subprocess.Popen[bytes]]]:
    urls, procs = [], []
    for _ in range(n):
        port = free_port()
        argv = [str(BIN / "llm-d-inference-sim"), "--port", str(port), "--model", "m"]
        argv += ["--force-dummy-tokenizer", *SIM_ARGS]
        procs.append(start(argv, tmp / f"sim-{port}.log", env={"POD_IP": "127.0.0.1"}))
        urls.append(f"http://127.0.0.1:{port}")
    for u in urls:
        wait_port(int(u.rsplit(":", 1)[1]))
    return urls, procs


def start_tokenfleet(
    tmp: Path, urls: list[str], policy: str, routing: dict[str, Any]
) -> tuple[str, subprocess.Popen[bytes]]:
    import yaml

    port = free_port()
    classes = [{"name": "standard", "priority": 100, "maxQueueDepth": 4096, "maxQueueAgeMs": 60000}]
    config = {
        "models": [{"name": "m", "endpoints": urls, "maxConcurrency": 8}],
        "pools": [
            {
                "name": "default",
                "routing": {"policy": policy, **routing},
                "admission": {"classes": classes},
            }
        ],
        "tenants": [
            {
                "name": "bench",
                "apiKeyHashes": ["sha256:" + hashlib.sha256(KEY.encode()).hexdigest()],
                "allowedModels": ["*"],
                "priorityClass": "standard",
            }
        ],
    }
    path = tmp / f"gateway-{port}.yaml"
    path.write_text(yaml.safe_dump(config))
    argv = [sys.executable, "-m", "tokenfleet.gateway", "--port", str(port), "--config", str(path)]
    argv += ["--no-access-log", "--seed", "1", "--scrape-interval", "0.5"]
    p = start(argv, tmp / f"gateway-{port}.log", env={"TOKENFLEET_SALT_SECRET": "bench"})
    wait_port(port)
    return f"http://127.0.0.1:{port}", p


def start_vllm_router(tmp: Path, urls: list[str]) -> tuple[str, subprocess.Popen[bytes]] | None:
    if not (PEERS / "vllm-router").exists():
        return None
    port = free_port()
    argv = [str(PEERS / "vllm-router"), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--worker-urls", *urls, "--policy", "cache_aware"]
    p = start(argv, tmp / f"vllm-router-{port}.log")
    wait_port(port)
    return f"http://127.0.0.1:{port}", p


@dataclasses.dataclass
class Result:
    ttft: float | None = None
    gaps: list[float] = dataclasses.field(default_factory=list)
    tokens: int = 0
    prompt: int = 0
    cached: int = 0
    ok: bool = False
    status: int = 0


async def one(session: aiohttp.ClientSession, url: str, prompt: str) -> Result:
    r = Result()
    body = {
        "model": "m",
        "prompt": prompt,
        "max_tokens": OUTPUT_TOKENS,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.monotonic()
    last = start
    try:
        async with session.post(
            url + "/v1/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}
        ) as resp:
            r.status = resp.status
            if resp.status != 200:
                if os.environ.get("BENCH_DEBUG"):
                    print(resp.status, (await resp.read())[:200], file=sys.stderr)
                return r
            seen = []
            async for line in resp.content:
                if len(seen) < 4:
                    seen.append(line[:150])
                if not line.startswith(b"data: {"):
                    continue
                now = time.monotonic()
                event = json.loads(line[6:])
                if event.get("usage"):
                    usage = event["usage"]
                    r.prompt = usage.get("prompt_tokens") or 0
                    r.cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
                if not event.get("choices"):
                    continue
                if r.ttft is None:
                    r.ttft = now - start
                else:
                    r.gaps.append(now - last)
                last = now
                r.tokens += 1
            r.ok = r.ttft is not None
            if not r.ok and os.environ.get("BENCH_DEBUG"):
                print("no tokens", resp.status, seen[:6], file=sys.stderr)
    except (aiohttp.ClientError, TimeoutError) as exc:
        if os.environ.get("BENCH_DEBUG"):
            print("failed", repr(exc)[:200], file=sys.stderr)
    return r


def prompts(kind: str, n: int, rng: random.Random) -> list[str]:
    docs = [" ".join(f"d{d}w{i}" for i in range(DOC_WORDS)) for d in range(DOCUMENTS)]
    out = []
    for i in range(n):
        if kind == "shared":
            out.append(f"{docs[rng.randrange(DOCUMENTS)]} question {i}")
        else:
            out.append(" ".join(f"u{i}w{j}" for j in range(DOC_WORDS)) + f" question {i}")
    return out


async def drive(url: str, kind: str, *, rate: float, seconds: float) -> dict[str, float]:
    rng = random.Random(42)  # the same arrivals and prompts for every router
    n = int(rate * seconds)
    texts = prompts(kind, n, rng)
    gaps = [rng.expovariate(rate) for _ in range(n)]
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = []
        begin = time.monotonic()
        for text, gap in zip(texts, gaps, strict=True):
            await asyncio.sleep(gap)
            tasks.append(asyncio.create_task(one(session, url, text)))
        results = await asyncio.gather(*tasks)
        elapsed = time.monotonic() - begin
    return summarize(results, elapsed)


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


def summarize(results: list[Result], elapsed: float) -> dict[str, float]:
    done = [r for r in results if r.ok]
    ttfts = [r.ttft for r in done if r.ttft is not None]
    good = [
        r
        for r in done
        if r.ttft is not None
        and r.ttft <= TTFT_SLO
        and (statistics.fmean(r.gaps) if r.gaps else 0.0) <= ITL_SLO
    ]
    prompt = sum(r.prompt for r in done)
    return {
        "goodput": len(good) / elapsed,
        "ok": len(done) / max(1, len(results)),
        "ttft_p50": pct(ttfts, 50),
        "ttft_p90": pct(ttfts, 90),
        "ttft_p99": pct(ttfts, 99),
        "tokens_s": sum(r.tokens for r in done) / elapsed,
        "hit_ratio": sum(r.cached for r in done) / prompt if prompt else 0.0,
    }


ROUTERS = ("round-robin", "least-load", "tokenfleet", "vllm-router")


def run_one(tmp: Path, router: str, kind: str, args: argparse.Namespace) -> dict[str, float] | None:
    urls, sims = start_sims(tmp, args.replicas)
    proc = None
    try:
        if router == "vllm-router":
            started = start_vllm_router(tmp, urls)
            if started is None:
                return None
            front, proc = started
        else:
            policy = {"round-robin": "RoundRobin", "least-load": "LeastLoad"}.get(
                router, "PrefixAware"
            )
            front, proc = start_tokenfleet(tmp, urls, policy, json.loads(args.routing))
        time.sleep(1.0)  # first scrape, router health checks
        return asyncio.run(drive(front, kind, rate=args.rate, seconds=args.seconds))
    finally:
        if proc is not None:
            stop(proc)
        for s in sims:
            stop(s)


def table(kind: str, rows: dict[str, dict[str, float] | None]) -> str:
    head = (
        f"\n{kind} prefix workload\n"
        "| router | goodput req/s | TTFT p50 | TTFT p90 | TTFT p99 | output tok/s | prefix hit | ok |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for name, r in rows.items():
        if r is None:
            lines.append(f"| {name} | (not installed: make bench/.venv-peers/.installed) |||||||")
            continue
        lines.append(
            f"| {name} | {r['goodput']:.2f} | {r['ttft_p50'] * 1000:.0f} ms | "
            f"{r['ttft_p90'] * 1000:.0f} ms | {r['ttft_p99'] * 1000:.0f} ms | "
            f"{r['tokens_s']:.0f} | {r['hit_ratio']:.0%} | {r['ok']:.0%} |"
        )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--rate", type=float, default=16.0, help="requests per second (Poisson)")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--quick", action="store_true", help="8 s per run")
    # BENCH_DEBUG=1 in the environment prints every failed request's status or first events.
    p.add_argument("--workloads", default="shared,unique")
    p.add_argument("--routers", default=",".join(ROUTERS))
    p.add_argument(
        "--routing", default="{}", help='extra spec.routing JSON, e.g. {"boundedLoad": 2}'
    )
    args = p.parse_args()
    if args.quick:
        args.seconds = 8.0
    print(
        f"{args.replicas} simulated replicas; {args.rate:g} req/s for {args.seconds:g} s; "
        f"{DOCUMENTS} documents x {DOC_WORDS} tokens; SLO TTFT <= {TTFT_SLO * 1000:.0f} ms, "
        f"mean ITL <= {ITL_SLO * 1000:.0f} ms; sim {' '.join(SIM_ARGS)}"
    )
    with tempfile.TemporaryDirectory(prefix="tf-bench-routing-") as d:
        for kind in args.workloads.split(","):
            rows = {r: run_one(Path(d), r, kind, args) for r in args.routers.split(",")}
            print(table(kind, rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

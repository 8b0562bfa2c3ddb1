"""The response cache on a repetitive workload: hit latency against miss latency, and what it
saves (engine requests and generated tokens), through the real gateway, Redis and a simulator.

The workload draws each request's prompt from a fixed set with a Zipf-like skew (seeded), as
repeated evaluation runs, retries and popular canned questions do; every request is greedy
(temperature 0), so every one is cacheable. The simulator answers with vLLM-like timing (TTFT
and inter-token latency set below). Non-streamed requests report end-to-end latency; streamed
ones time to first token (first content chunk).

    .venv/bin/python bench/response_cache.py [--requests 400] [--prompts 50] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import asyncio
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

BIN = Path(os.environ.get("TOKENFLEET_CACHE", Path.home() / ".cache/tokenfleet")) / "bin/current"
KEY = "tfk-bench-" + "0" * 32
TTFT_MS, ITL_MS, MAX_TOKENS = 80, 8, 48  # a small model on a busy GPU, about


def start_stack(tmp: Path) -> tuple[list[subprocess.Popen[bytes]], str]:
    """Redis, one simulator, one gateway with the cache on for model m: (processes, URL)."""
    redis_port, sim_port, gw_port = free_port(), free_port(), free_port()
    procs = [start(["redis-server", "--port", str(redis_port), "--save", ""], tmp / "redis.log")]
    sim = [str(BIN / "llm-d-inference-sim"), "--port", str(sim_port), "--model", "m"]
    sim += ["--force-dummy-tokenizer", "--max-num-seqs", "64"]
    sim += ["--time-to-first-token", f"{TTFT_MS}ms", "--inter-token-latency", f"{ITL_MS}ms"]
    procs.append(start(sim, tmp / "sim.log", {"POD_IP": "127.0.0.1"}))
    config = {
        "models": [
            {
                "name": "m",
                "endpoints": [f"http://127.0.0.1:{sim_port}"],
                "revision": "r1",
                "responseCache": {"enabled": True, "ttlSeconds": 600},
            }
        ],
        "tenants": [
            {
                "name": "bench",
                "apiKeyHashes": ["sha256:" + hashlib.sha256(KEY.encode()).hexdigest()],
                "allowedModels": ["*"],
            }
        ],
    }
    (tmp / "gateway.json").write_text(json.dumps(config))
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    argv = [sys.executable, "-m", "tokenfleet.gateway", "--port", str(gw_port)]
    argv += ["--config", str(tmp / "gateway.json"), "--redis", redis_url]
    procs.append(start(argv, tmp / "gateway.log", {"TOKENFLEET_SALT_SECRET": "bench"}))
    for port in (redis_port, sim_port, gw_port):
        wait_port(port)
    return procs, f"http://127.0.0.1:{gw_port}"


def workload(*, requests: int, prompts: int, seed: int) -> list[int]:
    """Prompt indices, Zipf-like (weight 1/rank): a few prompts are asked again and again."""
    rng = random.Random(seed)
    return rng.choices(range(prompts), weights=[1 / (r + 1) for r in range(prompts)], k=requests)


async def one(
    session: aiohttp.ClientSession, url: str, prompt: str, *, stream: bool
) -> tuple[str, float, int]:
    """(hit | miss, seconds to the answer or its first content chunk, completion tokens)."""
    body: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    started = time.monotonic()
    async with session.post(url + "/v1/chat/completions", json=body) as r:
        cache = r.headers.get("X-TokenFleet-Cache", "")
        if not stream:
            answer = await r.json()
            return cache, time.monotonic() - started, answer["usage"]["completion_tokens"]
        first, tokens = 0.0, 0
        async for line in r.content:
            if not line.startswith(b"data: {"):
                continue
            event = json.loads(line[6:])
            if not first and any(c.get("delta", {}).get("content") for c in event["choices"]):
                first = time.monotonic() - started
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
        return cache, first, tokens


async def run(url: str, order: list[int], *, stream: bool, concurrency: int) -> dict[str, Any]:
    """The workload through the gateway; latency by hit and miss, and what the hits saved."""
    seen: dict[str, list[float]] = {"hit": [], "miss": []}
    generated: dict[int, int] = {}  # prompt → completion tokens of its miss
    saved, todo = 0, list(order)
    headers = {"Authorization": f"Bearer {KEY}"}
    async with aiohttp.ClientSession(headers=headers) as session:

        async def worker() -> None:
            nonlocal saved
            while todo:
                i = todo.pop(0)
                tag = "stream" if stream else "whole"
                cache, seconds, tokens = await one(session, url, f"{tag} q{i}", stream=stream)
                seen[cache].append(seconds)
                if cache == "miss":
                    generated[i] = tokens
                else:
                    saved += generated.get(i, 0)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {"seen": seen, "saved_tokens": saved, "generated_tokens": sum(generated.values())}


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1] if len(xs) > 1 else xs[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--prompts", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    order = workload(requests=args.requests, prompts=args.prompts, seed=7)
    with tempfile.TemporaryDirectory() as tmp:
        procs, url = start_stack(Path(tmp))
        try:
            print(
                f"{args.requests} greedy requests over {args.prompts} prompts (Zipf-like), "
                f"{args.concurrency} at a time; simulator TTFT {TTFT_MS} ms, "
                f"ITL {ITL_MS} ms, max_tokens {MAX_TOKENS}"
            )
            print(
                f"{'mode':<9}{'hits':>6}{'misses':>8}{'miss p50':>10}{'miss p99':>10}"
                f"{'hit p50':>10}{'hit p99':>10}{'engine reqs saved':>19}{'tokens saved':>14}"
            )
            for stream in (False, True):
                r = asyncio.run(run(url, order, stream=stream, concurrency=args.concurrency))
                hits, misses = r["seen"]["hit"], r["seen"]["miss"]
                total = r["saved_tokens"] + r["generated_tokens"]
                ms = [1000 * pct(xs, q) for xs in (misses, hits) for q in (50, 99)]
                print(
                    f"{'stream' if stream else 'whole':<9}{len(hits):>6}{len(misses):>8}"
                    + "".join(f"{m:>8.1f}ms" for m in ms)
                    + f"{len(hits) / len(order):>18.0%} {r['saved_tokens']:>7}"
                    f" ({r['saved_tokens'] / max(1, total):.0%})"
                )
            print("latency: whole = end to end; stream = time to the first content chunk")
        finally:
            for p in procs:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

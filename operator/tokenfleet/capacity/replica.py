"""``tokenfleet bench replica``: measure one OpenAI-compatible endpoint across a rate sweep.

Poisson arrivals (seeded) at each offered rate, streamed completions with a fixed prompt and
output length, and per level: throughput, TTFT p99, inter-token p99, prefill and decode
tokens/s. Writes a capacity profile (the JSON `tokenfleet plan` reads) and a PNG of latency and
throughput against load with the knee — the best level that meets the SLO — marked.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path

import aiohttp
import orjson

from tokenfleet.capacity import planning


def _p99(values: list[float]) -> float:
    if len(values) < 2:
        return values[0] if values else float("inf")
    return statistics.quantiles(values, n=100)[98]


async def _one(
    session: aiohttp.ClientSession, url: str, body: bytes, record: dict[str, list[float]]
) -> None:
    start = time.monotonic()
    last: float | None = None
    prompt = completion = 0
    try:
        async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
            if r.status != 200:
                record["errors"].append(1.0)
                return
            async for line in r.content:
                if not line.startswith(b"data: {"):
                    continue
                now = time.monotonic()
                event = orjson.loads(line[6:])
                usage = event.get("usage")
                if usage:
                    prompt, completion = (
                        usage.get("prompt_tokens", 0),
                        usage.get("completion_tokens", 0),
                    )
                if not event.get("choices"):
                    continue
                if last is None:
                    record["ttft"].append(now - start)
                else:
                    record["itl"].append(now - last)
                last = now
    except aiohttp.ClientError:
        record["errors"].append(1.0)
        return
    record["done"].append(time.monotonic())
    record["prompt"].append(float(prompt))
    record["completion"].append(float(completion))


async def measure(
    *,
    url: str,
    model: str,
    rate: float,
    seconds: float,
    input_words: int,
    output_tokens: int,
    seed: int,
) -> planning.ProfilePoint:
    """One load level: Poisson arrivals at ``rate`` for ``seconds``, then drain."""
    body = orjson.dumps(
        {
            "model": model,
            "prompt": " ".join(f"w{i}" for i in range(input_words)),
            "max_tokens": output_tokens,
            "stream": True,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        }
    )
    record: dict[str, list[float]] = {
        k: [] for k in ("ttft", "itl", "done", "prompt", "completion", "errors")
    }
    rng = random.Random(seed)
    tasks = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        start = time.monotonic()
        next_at = start
        while next_at - start < seconds:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            tasks.append(asyncio.create_task(_one(session, url + "/v1/completions", body, record)))
            next_at += rng.expovariate(rate)
        await asyncio.gather(*tasks)
    elapsed = max(record["done"], default=start + seconds) - start
    done = len(record["done"])
    return planning.ProfilePoint(
        offered_rps=rate,
        throughput_rps=done / elapsed if elapsed > 0 else 0.0,
        ttft_p99_seconds=_p99(record["ttft"]),
        inter_token_p99_seconds=_p99(record["itl"]),
        prefill_tokens_per_second=sum(record["prompt"]) / elapsed if elapsed > 0 else 0.0,
        decode_tokens_per_second=sum(record["completion"]) / elapsed if elapsed > 0 else 0.0,
    )


def plot(profile: planning.Profile, slo: planning.Slo, path: Path) -> None:
    """Latency and throughput against offered load, the knee marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    offered = [p.offered_rps for p in profile.points]
    fig, latency = plt.subplots(figsize=(8, 4.5))
    latency.plot(offered, [p.ttft_p99_seconds for p in profile.points], "o-", label="TTFT p99 (s)")
    latency.plot(
        offered,
        [p.inter_token_p99_seconds for p in profile.points],
        "s-",
        label="inter-token p99 (s)",
    )
    latency.axhline(slo.ttft_p99_seconds, color="grey", linestyle="--", label="TTFT SLO")
    latency.set_xlabel("offered load (requests/s)")
    latency.set_ylabel("latency (s)")
    throughput = latency.twinx()
    throughput.plot(
        offered,
        [p.throughput_rps for p in profile.points],
        "^-",
        color="green",
        label="throughput (req/s)",
    )
    throughput.set_ylabel("throughput (requests/s)")
    knee = planning.usable_point(profile, slo)
    if knee is not None:
        latency.axvline(
            knee.offered_rps, color="red", label=f"knee: {knee.throughput_rps:.1f} req/s within SLO"
        )
    lines = latency.get_legend_handles_labels()
    more = throughput.get_legend_handles_labels()
    latency.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left", fontsize=8)
    latency.set_title(f"{profile.model}: one replica under load")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tokenfleet bench replica", description=__doc__)
    parser.add_argument("--url", required=True, help="base URL, e.g. http://10.0.0.5:8000")
    parser.add_argument("--model", required=True)
    parser.add_argument("--rates", default="1,2,4,8,16", help="offered requests/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=20.0, help="per load level")
    parser.add_argument("--input-words", type=int, default=200)
    parser.add_argument("--output-tokens", type=int, default=100)
    parser.add_argument("--slo-ttft", type=float, default=1.0, help="p99 TTFT, seconds")
    parser.add_argument(
        "--slo-itl", type=float, default=0.05, help="p99 inter-token latency, seconds"
    )
    parser.add_argument(
        "--max-num-seqs", type=int, default=256, help="the engine's setting, recorded"
    )
    parser.add_argument("--accelerator", default="")
    parser.add_argument("--out", type=Path, default=Path("replica-profile.json"))
    parser.add_argument("--plot", type=Path, default=Path("replica-profile.png"))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    rates = [float(r) for r in args.rates.split(",")]
    points: list[planning.ProfilePoint] = []
    for i, rate in enumerate(rates, 1):
        print(f"[{i}/{len(rates)}] {rate:g} req/s for {args.seconds:g} s ...", end="", flush=True)
        point = asyncio.run(
            measure(
                url=args.url.rstrip("/"),
                model=args.model,
                rate=rate,
                seconds=args.seconds,
                input_words=args.input_words,
                output_tokens=args.output_tokens,
                seed=args.seed + i,
            )
        )
        points.append(point)
        print(
            f" {point.throughput_rps:.2f} req/s, TTFT p99 {point.ttft_p99_seconds:.3f} s, "
            f"inter-token p99 {point.inter_token_p99_seconds * 1000:.1f} ms",
            flush=True,
        )
    profile = planning.Profile(
        model=args.model,
        accelerator=args.accelerator,
        points=points,
        max_num_seqs=args.max_num_seqs,
    )
    slo = planning.Slo(ttft_p99_seconds=args.slo_ttft, inter_token_p99_seconds=args.slo_itl)
    args.out.write_text(orjson.dumps(profile.to_wire(), option=orjson.OPT_INDENT_2).decode())
    plot(profile, slo, args.plot)
    knee = planning.usable_point(profile, slo)
    verdict = f"knee at {knee.throughput_rps:.2f} req/s" if knee else "no level meets the SLO"
    print(f"{verdict}; profile {args.out}, plot {args.plot}")
    return 0 if knee else 1

"""``tokenfleet bench replica``: measure one OpenAI-compatible endpoint across a load sweep.

Each level is an offered rate (seeded Poisson or constant arrivals) or a concurrency (closed
loop). Requests come from a workload: fixed sizes (``--input-words``/``--output-tokens``), a
YAML spec of token distributions and shared prefixes (``--workload``, the simulator's format),
or a recorded JSONL trace (``--trace``). Per level: throughput, TTFT p99, inter-token p99,
prefill and decode tokens/s (counted by the server's usage). Writes a capacity profile (the JSON
`tokenfleet plan` reads) and a PNG of latency and throughput against load, knee marked.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import statistics
import sys
import time
from pathlib import Path

import aiohttp
import orjson

from tokenfleet.capacity import planning, workload


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


async def _tick(progress: workload.Progress, start: float, seconds: float) -> None:
    while True:
        progress(min(seconds, time.monotonic() - start))
        await asyncio.sleep(0.5)


async def measure(
    *,
    url: str,
    model: str,
    source: workload.Source,
    seconds: float,
    rate: float | None = None,
    concurrency: int | None = None,
    arrivals: str = "poisson",
    seed: int,
    progress: workload.Progress | None = None,
) -> planning.ProfilePoint:
    """One load level — ``rate`` requests/s (open loop) or ``concurrency`` streams (closed
    loop) — for ``seconds``, then drain."""
    record: dict[str, list[float]] = {
        k: [] for k in ("ttft", "itl", "done", "prompt", "completion", "errors")
    }
    rng = random.Random(seed)
    requests = source.requests(random.Random(seed + 1))

    def body() -> bytes:
        prompt, max_tokens = next(requests)
        return orjson.dumps(
            {
                "model": model,
                "prompt": prompt,
                "max_tokens": max_tokens,
                "stream": True,
                "ignore_eos": True,
                "stream_options": {"include_usage": True},
            }
        )

    endpoint = url + "/v1/completions"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        start = time.monotonic()
        ticker = asyncio.create_task(_tick(progress, start, seconds)) if progress else None
        if concurrency:

            async def stream() -> None:
                while time.monotonic() - start < seconds:
                    await _one(session, endpoint, body(), record)

            await asyncio.gather(*(stream() for _ in range(concurrency)))
        else:
            assert rate
            tasks = []
            next_at = start
            while next_at - start < seconds:
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                tasks.append(asyncio.create_task(_one(session, endpoint, body(), record)))
                next_at += rng.expovariate(rate) if arrivals == "poisson" else 1 / rate
            await asyncio.gather(*tasks)
        if ticker is not None:
            ticker.cancel()
    rates = carried(record, start=start, seconds=seconds)
    done = len(record["done"])
    failed = len(record["errors"])
    return planning.ProfilePoint(
        offered_rps=rate if rate else rates.requests,
        throughput_rps=rates.requests,
        ttft_p99_seconds=_p99(record["ttft"]),
        inter_token_p99_seconds=_p99(record["itl"]),
        prefill_tokens_per_second=rates.prompt_tokens,
        decode_tokens_per_second=rates.completion_tokens,
        error_rate=failed / (done + failed) if done + failed else 0.0,
    )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Rates:
    requests: float
    prompt_tokens: float
    completion_tokens: float


#: The share of a level spent warming up: completions before it are not counted, because the
#: replica is still filling (a request takes seconds) and would read as slower than it is.
WARM_UP_SHARE = 1 / 3


def carried(record: dict[str, list[float]], *, start: float, seconds: float) -> Rates:
    """What the replica carried in steady state: completions (and their tokens) in the last
    two thirds of the level's window, per second. Counting every completion over the time to
    the last one would charge the drain to the replica (40 % low with multi-second requests);
    counting them over the window alone would credit an overloaded replica with the backlog it
    drains afterwards."""
    begin, end = start + seconds * WARM_UP_SHARE, start + seconds
    span = end - begin
    inside = [i for i, t in enumerate(record["done"]) if begin <= t < end]
    if span <= 0:
        return Rates(requests=0.0, prompt_tokens=0.0, completion_tokens=0.0)
    return Rates(
        requests=len(inside) / span,
        prompt_tokens=sum(record["prompt"][i] for i in inside) / span,
        completion_tokens=sum(record["completion"][i] for i in inside) / span,
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


def _source(args: argparse.Namespace) -> workload.Source:
    count = workload.tokenizer_counter(args.tokenizer) if args.tokenizer else workload.words
    if args.trace:
        return workload.load_trace(args.trace, count)
    if args.workload:
        return workload.load_spec(args.workload, count)
    return workload.Fixed(args.input_words, args.output_tokens, count)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tokenfleet bench replica", description=__doc__)
    parser.add_argument("--url", required=True, help="base URL, e.g. http://10.0.0.5:8000")
    parser.add_argument("--model", required=True)
    levels = parser.add_mutually_exclusive_group()
    levels.add_argument("--rates", help="offered requests/s, comma-separated (default 1,2,4,8,16)")
    levels.add_argument("--concurrency", help="closed-loop streams, comma-separated")
    parser.add_argument("--arrivals", choices=("poisson", "constant"), default="poisson")
    parser.add_argument("--seconds", type=float, default=20.0, help="per load level")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--workload", type=Path, help="YAML: inputTokens, outputTokens, sharedPrefix"
    )
    source.add_argument("--trace", type=Path, help="JSONL: input_tokens/prompt, output_tokens")
    parser.add_argument("--tokenizer", type=Path, help="tokenizer.json to size prompts in tokens")
    parser.add_argument("--input-words", type=int, default=200)
    parser.add_argument("--output-tokens", type=int, default=100)
    parser.add_argument("--slo-ttft", type=float, default=1.0, help="p99 TTFT, seconds")
    parser.add_argument(
        "--slo-itl", type=float, default=0.05, help="p99 inter-token latency, seconds"
    )
    parser.add_argument(
        "--max-num-seqs", type=int, default=256, help="the engine's setting, recorded"
    )
    parser.add_argument(
        "--kv-cache-bytes", type=float, default=0, help="the engine's KV-cache memory, recorded"
    )
    parser.add_argument(
        "--kv-bytes-per-token", type=float, default=0, help="the model's KV bytes per token"
    )
    parser.add_argument("--accelerator", default="")
    parser.add_argument("--out", type=Path, default=Path("replica-profile.json"))
    parser.add_argument("--plot", type=Path, default=Path("replica-profile.png"))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        requests = _source(args)
    except workload.WorkloadError as exc:
        print(f"tokenfleet bench replica: {exc}", file=sys.stderr)
        return 2
    closed = args.concurrency is not None
    try:
        loads = [float(x) for x in (args.concurrency or args.rates or "1,2,4,8,16").split(",")]
    except ValueError:
        print("tokenfleet bench replica: levels must be numbers, e.g. 1,2,4", file=sys.stderr)
        return 2
    points: list[planning.ProfilePoint] = []
    for i, level in enumerate(loads, 1):
        label = f"[{i}/{len(loads)}] " + (f"{int(level)} streams" if closed else f"{level:g} req/s")
        point = asyncio.run(
            measure(
                url=args.url.rstrip("/"),
                model=args.model,
                source=requests,
                seconds=args.seconds,
                rate=None if closed else level,
                concurrency=int(level) if closed else None,
                arrivals=args.arrivals,
                seed=args.seed + i,
                progress=workload.progress_bar(label, args.seconds),
            )
        )
        points.append(point)
        print(
            f"  {point.throughput_rps:.2f} req/s, TTFT p99 {point.ttft_p99_seconds:.3f} s, "
            f"inter-token p99 {point.inter_token_p99_seconds * 1000:.1f} ms",
            flush=True,
        )
    profile = planning.Profile(
        model=args.model,
        accelerator=args.accelerator,
        points=points,
        max_num_seqs=args.max_num_seqs,
        kv_cache_bytes=args.kv_cache_bytes,
        kv_bytes_per_token=args.kv_bytes_per_token,
    )
    slo = planning.Slo(ttft_p99_seconds=args.slo_ttft, inter_token_p99_seconds=args.slo_itl)
    args.out.write_text(orjson.dumps(profile.to_wire(), option=orjson.OPT_INDENT_2).decode())
    plot(profile, slo, args.plot)
    knee = planning.usable_point(profile, slo)
    verdict = f"knee at {knee.throughput_rps:.2f} req/s" if knee else "no level meets the SLO"
    print(f"{verdict}; profile {args.out}, plot {args.plot}")
    return 0 if knee else 1

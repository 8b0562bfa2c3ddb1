"""Routing and admission side by side: the same seeded arrivals on fresh simulated replicas.

N llm-d-inference-sim replicas with KV-cache simulation (--enable-kvcache, a bounded cache)
and a per-token prefill cost, so a prefix-cache hit shortens TTFT and a miss costs real time;
a load factor makes a busy replica slower. Each router gets fresh replicas (cold caches):

  round-robin   TokenFleet's gateway, routing.policy RoundRobin
  least-load    TokenFleet's gateway, routing.policy LeastLoad
  tokenfleet    TokenFleet's gateway, routing.policy PrefixAware (prefix + load + bounded load)
  vllm-router   vllm-router --policy cache_aware (PyPI, bench/.venv-peers)

Every TokenFleet gateway runs with its **default** pool settings (admission classes critical,
interactive, batch with their default objectives); the tenants' traffic is 10 % critical,
60 % interactive and 30 % batch, one tenant per class, sharing one prefix-cache group (as all
traffic does behind vllm-router). Workloads (open loop, Poisson arrivals, streamed):
``shared`` — every prompt is one of D long documents plus a unique question (RAG /
system-prompt traffic); ``unique`` — same lengths, no shared prefix (affinity must cost
nothing). Rates sweep a share of each workload's capacity (``--loads``). Reported per router and
rate: goodput (requests/s served within their class's TTFT objective — 1 s for critical and
interactive, 30 s for batch — and the mean inter-token SLO), the same with 1 s for every class,
the admitted critical and interactive requests within SLO, TTFT p50/p90/p99 of the 1 s classes,
batch's TTFT p50, prefix hit ratio (cached prompt tokens / prompt tokens, from the engines'
usage reports), requests refused per class with the slowest refusal, and failed requests;
``--png`` plots goodput against offered load, one line per router. ``--processes 1,2,4`` also
runs TokenFleet with that many gateway processes on one port (SO_REUSEPORT) on the shared
workload and reports the hit ratio and the engines' peak running + waiting requests against
their slots. ``BENCH_DEBUG=1`` prints failed requests and TokenFleet's routing reasons.

    .venv/bin/python bench/routing.py [--seconds 15] [--loads 0.3,0.5,0.8,1,1.2,1.3] [--png F]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
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

#: Engine model (the fleet of issue 15): 150 µs per uncached prompt token (a 2,000-token miss ≈
#: 0.3 s), 20 ms per output token, up to 2x slower at full batch, 16 sequences at once, 16-token
#: blocks, a 1,000-block cache (about half of the 16 documents of 2,000 tokens per replica: the
#: documents fit the fleet, not one replica).
SIM_ARGS = [
    "--enable-kvcache",
    "--kv-cache-size",
    "1000",
    "--block-size",
    "16",
    "--prefill-time-per-token",
    "150us",
    "--inter-token-latency",
    "20ms",
    "--time-factor-under-load",
    "2",
    "--max-num-seqs",
    "16",
    "--max-model-len",
    "8192",
]
SEQS = 16
TTFT_SLO = 1.0  # seconds: the default interactive objective
#: Each class's TTFT objective as the default pools state it: critical and interactive 1 s, batch
#: its 30 s queue age. "goodput" counts a request good within its class's objective,
#: "goodput at 1 s" holds every class to 1 s (batch waits by design, so it mostly is not).
OBJECTIVE = {"critical": TTFT_SLO, "interactive": TTFT_SLO, "batch": 30.0}
ITL_SLO = 0.05  # seconds, mean per request
DOCUMENTS = 16
DOC_WORDS = 2000
OUTPUT_TOKENS = 32
#: Goodput counts a request only if it also *finished* within the offered window extended by
#: GRACE, the same for every router: what one request arriving at the window's last instant needs
#: when served within the 1 s objective at the inter-token SLO. A queued excess drained after the
#: window is not goodput (the earlier figures divided everything eventually served by the window,
#: so an overloaded router that drained its queue later looked as good as capacity).
GRACE = TTFT_SLO + OUTPUT_TOKENS * ITL_SLO
#: Requests/s the 4-replica fleet serves per workload (the highest offered rate at which the best
#: router still serves about everything within SLO, measured with this script: see
#: docs/gateway.md); ``--loads`` are shares of these, scaled by ``--replicas``/4.
CAPACITY = {"shared": 96.0, "unique": 32.0}
#: The tenants' classes and their shares of the traffic.
MIX = (("critical", 0.1), ("interactive", 0.6), ("batch", 0.3))


def key_of(cls: str) -> str:
    return f"tfk-bench-{cls[:4]}" + "0" * 28


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
    tmp: Path, urls: list[str], policy: str, routing: dict[str, Any], *, processes: int = 1
) -> tuple[str, subprocess.Popen[bytes]]:
    import yaml

    port = free_port()
    config = {
        "models": [{"name": "m", "endpoints": urls, "maxConcurrency": SEQS}],
        # default pool settings: only the routing policy is chosen
        "pools": [{"name": "default", "routing": {"policy": policy, **routing}}],
        "tenants": [
            {
                "name": f"bench-{cls}",
                "apiKeyHashes": ["sha256:" + hashlib.sha256(key_of(cls).encode()).hexdigest()],
                "allowedModels": ["*"],
                "priorityClass": cls,
                # one application's three classes: they share the prefix cache, as every
                # request does behind vllm-router (isolated tenants would each prefill the
                # documents: that is isolation's price, not routing's)
                "cacheIsolation": {"mode": "SharedGroup", "group": "bench"},
            }
            for cls, _ in MIX
        ],
    }
    path = tmp / f"gateway-{port}.yaml"
    path.write_text(yaml.safe_dump(config))
    argv = [sys.executable, "-m", "tokenfleet.gateway", "--port", str(port), "--config", str(path)]
    argv += ["--no-access-log", "--seed", "1", "--scrape-interval", "0.5"]
    argv += ["--workers", str(processes)]
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
    cls: str = ""
    ttft: float | None = None
    gaps: list[float] = dataclasses.field(default_factory=list)
    tokens: int = 0
    prompt: int = 0
    cached: int = 0
    ok: bool = False
    status: int = 0
    seconds: float = 0.0  # until the answer (or the refusal) ended
    ended: float = 0.0  # time.monotonic() when it ended

    def good(self, deadline: float, ttft_slo: float | None = None) -> bool:
        """Within its class's objective (or ``ttft_slo``) and the mean inter-token SLO, and
        finished by ``deadline`` (the offered window's end plus GRACE)."""
        slo = OBJECTIVE[self.cls] if ttft_slo is None else ttft_slo
        itl = statistics.fmean(self.gaps) if self.gaps else 0.0
        return (
            self.ok
            and self.ttft is not None
            and self.ttft <= slo
            and itl <= ITL_SLO
            and self.ended <= deadline
        )


async def one(session: aiohttp.ClientSession, url: str, prompt: str, cls: str) -> Result:
    r = Result(cls=cls)
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
            url + "/v1/completions", json=body, headers={"Authorization": f"Bearer {key_of(cls)}"}
        ) as resp:
            r.status = resp.status
            if resp.status != 200:
                text = await resp.read()
                if os.environ.get("BENCH_DEBUG") and resp.status not in (429, 503):
                    print("status", resp.status, text[:200], file=sys.stderr)
                r.seconds = time.monotonic() - start
                r.ended = time.monotonic()
                return r
            async for line in resp.content:
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
    except (aiohttp.ClientError, TimeoutError) as exc:
        if os.environ.get("BENCH_DEBUG"):
            print("failed", repr(exc)[:200], file=sys.stderr)
    r.ended = time.monotonic()
    r.seconds = r.ended - start
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


def classes(n: int, rng: random.Random) -> list[str]:
    names, weights = zip(*MIX, strict=True)
    return rng.choices(names, weights=weights, k=n)


async def drive(url: str, kind: str, *, rate: float, seconds: float) -> dict[str, Any]:
    rng = random.Random(42)  # the same arrivals, prompts and classes for every router
    n = int(rate * seconds)
    texts = prompts(kind, n, rng)
    gaps = [rng.expovariate(rate) for _ in range(n)]
    who = classes(n, rng)
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = []
        begin = time.monotonic()
        due = begin
        for text, gap, cls in zip(texts, gaps, who, strict=True):
            due += gap  # an absolute schedule: a slow loop must not thin the offered load
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            tasks.append(asyncio.create_task(one(session, url, text, cls)))
        results = await asyncio.gather(*tasks)
    return summarize(results, seconds, deadline=begin + seconds + GRACE)


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


def summarize(results: list[Result], seconds: float, *, deadline: float) -> dict[str, Any]:
    """Goodput per second of offered window: only requests good within their objective *and*
    finished by ``deadline``; per class too."""
    done = [r for r in results if r.ok]
    # TTFT percentiles of the classes with a 1 s objective; batch's waits are by design
    ttfts = [r.ttft for r in done if r.ttft is not None and r.cls != "batch"]
    batch = [r.ttft for r in done if r.ttft is not None and r.cls == "batch"]
    refused = [r for r in results if r.status in (429, 503)]
    prompt = sum(r.prompt for r in done)
    by_cls = {c: [r for r in results if r.cls == c] for c, _ in MIX}
    return {
        "goodput": sum(r.good(deadline) for r in results) / seconds,
        "goodput_1s": sum(r.good(deadline, TTFT_SLO) for r in results) / seconds,
        "goodput_by_class": {
            c: sum(r.good(deadline) for r in rs) / seconds for c, rs in by_cls.items()
        },
        "late": sum(1 for r in results if r.ok and r.ended > deadline),
        "slo": sum(r.good(deadline) for r in results) / max(1, len(results)),
        "slo_by_class": {
            c: sum(r.good(deadline) for r in rs)
            / max(1, sum(1 for r in rs if r.status not in (429, 503)))
            for c, rs in by_cls.items()
        },
        "ttft_p50": pct(ttfts, 50),
        "ttft_p90": pct(ttfts, 90),
        "ttft_p99": pct(ttfts, 99),
        "batch_p50": pct(batch, 50),
        "hit_ratio": sum(r.cached for r in done) / prompt if prompt else 0.0,
        "shed": collections.Counter(r.cls for r in refused),
        "refusal_max": max((r.seconds for r in refused), default=0.0),
        "failed": sum(1 for r in results if not r.ok and r.status not in (429, 503)),
        "offered": len(results),
    }


ROUTERS = ("round-robin", "least-load", "tokenfleet", "vllm-router")
POLICY = {"round-robin": "RoundRobin", "least-load": "LeastLoad", "tokenfleet": "PrefixAware"}


async def peak_in_engines(urls: list[str], stop_at: float) -> int:
    """The most requests the engines held at once (running + waiting), sampled every 0.2 s."""
    peak = 0
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < stop_at:
            total = 0
            for u in urls:
                try:
                    async with session.get(u + "/metrics") as r:
                        for line in (await r.text()).splitlines():
                            if line.startswith(
                                ("vllm:num_requests_running", "vllm:num_requests_waiting")
                            ):
                                total += int(float(line.rsplit(" ", 1)[1]))
                except aiohttp.ClientError:
                    pass
            peak = max(peak, total)
            await asyncio.sleep(0.2)
    return peak


async def decisions(front: str) -> dict[str, float]:
    """TokenFleet's routing decisions by reason (tokenfleet_gateway_routing_decisions_total)."""
    out: dict[str, float] = collections.Counter()
    async with aiohttp.ClientSession() as session, session.get(front + "/metrics") as r:
        for line in (await r.text()).splitlines():
            if line.startswith("tokenfleet_gateway_routing_decisions_total{"):
                why = line.split('reason="', 1)[1].split('"', 1)[0]
                out[why] += float(line.rsplit(" ", 1)[1])
    return dict(out)


def run_one(
    tmp: Path, router: str, kind: str, rate: float, args: argparse.Namespace, *, processes: int = 1
) -> dict[str, Any] | None:
    urls, sims = start_sims(tmp, args.replicas)
    proc = None
    try:
        if router == "vllm-router":
            started = start_vllm_router(tmp, urls)
            if started is None:
                return None
            front, proc = started
        else:
            routing = json.loads(args.routing)
            front, proc = start_tokenfleet(tmp, urls, POLICY[router], routing, processes=processes)
        time.sleep(1.0)  # first scrape, router health checks

        async def both() -> dict[str, Any]:
            watch = asyncio.create_task(peak_in_engines(urls, time.monotonic() + args.seconds))
            got = await drive(front, kind, rate=rate, seconds=args.seconds)
            got["engine_peak"] = await watch
            got["why"] = await decisions(front) if router != "vllm-router" else {}
            return got

        got = asyncio.run(both())
        if os.environ.get("BENCH_DEBUG"):
            print(router, "decisions", got["why"], file=sys.stderr)
        return got
    finally:
        if proc is not None:
            stop(proc)
        for s in sims:
            stop(s)


def row(name: str, load: float, rate: float, r: dict[str, Any] | None) -> str:
    if r is None:
        return f"| {name} | {load:.0%} | {rate:.1f} | (not installed: make bench/.venv-peers/.installed) ||||||||"
    shed = "/".join(str(r["shed"].get(c, 0)) for c, _ in MIX)
    slo = r["slo_by_class"]
    by = "/".join(f"{r['goodput_by_class'][c]:.1f}" for c, _ in MIX)
    return (
        f"| {name} | {load:.0%} | {rate:.1f} | {r['goodput']:.1f} ({r['slo']:.0%}) | {by} | "
        f"{r['goodput_1s']:.1f} | {r['late']} | {slo['critical']:.0%} / {slo['interactive']:.0%} | "
        f"{r['ttft_p50'] * 1000:.0f} / {r['ttft_p90'] * 1000:.0f} / "
        f"{r['ttft_p99'] * 1000:.0f} ms | {r['batch_p50']:.2f} s | {r['hit_ratio']:.2f} | "
        f"{shed} ({r['refusal_max'] * 1000:.0f} ms) | {r['failed']} |"
    )


HEAD = (
    "| router | load | offered req/s | goodput req/s (share of offered) "
    "| goodput crit/inter/batch | goodput at 1 s | served after the window "
    "| within SLO, admitted critical / interactive | TTFT p50 / p90 / p99 critical+interactive "
    "| batch TTFT p50 | prefix hit | refused crit/inter/batch (slowest) | failed |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def plot(path: str, curves: dict[str, dict[str, list[tuple[float, float]]]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: pip install '.[fleet]' for --png)")
        return
    fig, axes = plt.subplots(1, len(curves), figsize=(6 * len(curves), 4), squeeze=False)
    for ax, (kind, lines) in zip(axes[0], curves.items(), strict=True):
        for name, points in lines.items():
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=name)
        top = max((x for pts in lines.values() for x, _ in pts), default=1.0)
        ax.plot([0, top], [0, top], ":", color="grey", label="offered")
        ax.set(title=f"{kind} prefixes", xlabel="offered req/s", ylabel="goodput req/s")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")


def sweep(tmp: Path, args: argparse.Namespace) -> None:
    curves: dict[str, dict[str, list[tuple[float, float]]]] = {}
    scale = args.replicas / 4
    for kind in args.workloads.split(","):
        print(f"\n{kind} prefix workload (capacity ≈ {CAPACITY[kind] * scale:g} req/s)\n{HEAD}")
        for load in [float(x) for x in args.loads.split(",")]:
            rate = CAPACITY[kind] * scale * load
            for name in args.routers.split(","):  # side by side at each rate
                r = run_one(tmp, name, kind, rate, args)
                print(row(name, load, rate, r), flush=True)
                if r is not None:
                    curves.setdefault(kind, {}).setdefault(name, []).append((rate, r["goodput"]))
    if args.png and curves:
        plot(args.png, curves)


def processes(tmp: Path, args: argparse.Namespace) -> None:
    rate = CAPACITY["shared"] * args.replicas / 4 * args.processes_load
    slots = args.replicas * SEQS
    print(
        f"\nTokenFleet with N gateway processes on one port, shared workload at "
        f"{args.processes_load:.0%} ({rate:.1f} req/s); the engines have {slots} slots\n"
        "| processes | goodput req/s | goodput crit/inter/batch | goodput at 1 s "
        "| served after the window | SLO (all) | prefix hit | engines' peak running+waiting |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    for n in [int(x) for x in args.processes.split(",")]:
        r = run_one(tmp, "tokenfleet", "shared", rate, args, processes=n)
        assert r is not None
        print(
            f"| {n} | {r['goodput']:.2f} | "
            + "/".join(f"{r['goodput_by_class'][c]:.1f}" for c, _ in MIX)
            + f" | {r['goodput_1s']:.2f} | {r['late']} | {r['slo']:.0%} | {r['hit_ratio']:.2f} | "
            f"{r['engine_peak']} |",
            flush=True,
        )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--seconds", type=float, default=15.0, help="per run (one router, one rate)")
    p.add_argument("--loads", default="0.3,0.5,0.8,1,1.2,1.3", help="shares of capacity")
    p.add_argument("--workloads", default="shared,unique")
    p.add_argument("--routers", default=",".join(ROUTERS))
    p.add_argument("--png", default="", help="plot goodput against offered load to this file")
    p.add_argument("--processes", default="1,2,4", help="gateway processes to compare ('': none)")
    p.add_argument("--processes-load", type=float, default=1.2)
    p.add_argument(
        "--routing", default="{}", help='extra spec.routing JSON, e.g. {"boundedLoad": 2}'
    )
    # BENCH_DEBUG=1 in the environment prints every failed request's error.
    args = p.parse_args()
    print(
        f"{args.replicas} simulated replicas; {args.seconds:g} s per run; {DOCUMENTS} documents "
        f"x {DOC_WORDS} tokens; {OUTPUT_TOKENS} output tokens; SLO TTFT <= "
        f"{TTFT_SLO * 1000:.0f} ms, mean ITL <= {ITL_SLO * 1000:.0f} ms; classes "
        f"{', '.join(f'{c} {s:.0%}' for c, s in MIX)}; sim {' '.join(SIM_ARGS)}"
    )
    with tempfile.TemporaryDirectory(prefix="tf-bench-routing-") as d:
        if args.loads:
            sweep(Path(d), args)
        if args.processes:
            processes(Path(d), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

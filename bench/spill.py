"""The spill journey: a steady stream of chat-auto requests while the local pool is lost, the
remote region is lost too, and both come back — where each request went, what failed, and what
each target's answers cost in time to first token.

All real processes on loopback: the local gateway (static mode, examples/09's chat-auto with
its two remotes), its two simulators (chat-small, chat-large); `region-b`, a second gateway
with two simulators of its own; `provider`, a simulator behind the devstack's plain
OpenAI-compatible front (it checks a bearer key); Redis for the spend budgets. Every
simulator has the same timing, so the differences are the hops. Load: streamed requests at a
fixed rate (open loop), each request's target read from ``X-TokenFleet-Target``.

The script: healthy until t=8 s; the local simulators killed at 8 s (every request should go on
through region-b); region-b's simulators killed at 16 s (its gateway refuses: the provider is
next); region-b back at 22 s (traffic returns to it once its ejection passes); the local pool
back at 50 s (on the same ports); the run ends at 58 s. The baseline is the same gateway with the same route and no remotes — what a one-pool
router does: every request in the outage fails.

    .venv/bin/python bench/spill.py [--rate 6] [--seconds 58] [--logs DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from _processes import free_port, start, wait_port

REPO = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("TOKENFLEET_CACHE", Path.home() / ".cache/tokenfleet")) / "bin/current"
KEY, REGION_KEY, PROVIDER_KEY = (
    "tfk-bench-" + "0" * 30,
    "tfk-region-" + "1" * 30,
    "sk-" + "2" * 30,
)
TTFT_MS, ITL_MS, MAX_TOKENS = 40, 5, 16
EVENTS = {8.0: "local lost", 16.0: "region-b lost", 22.0: "region-b back", 50.0: "local back"}
LOCAL_BACK, REGION_BACK = 50.0, 22.0


def key_hash(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


class Sims:
    """Simulator processes by name, each restartable on its port."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.procs, self.ports = tmp, {}, {}  # type: ignore[var-annotated]

    def start(self, name: str, model: str) -> str:
        port = self.ports.setdefault(name, free_port())
        argv = [str(BIN / "llm-d-inference-sim"), "--port", str(port), "--model", model]
        argv += ["--force-dummy-tokenizer", "--max-num-seqs", "64"]
        argv += ["--time-to-first-token", f"{TTFT_MS}ms", "--inter-token-latency", f"{ITL_MS}ms"]
        self.procs[name] = start(argv, self.tmp / f"{name}.log", {"POD_IP": "127.0.0.1"})
        wait_port(port)
        return f"http://127.0.0.1:{port}"

    def kill(self, *names: str) -> None:
        for name in names:
            self.procs[name].kill()
            self.procs[name].wait()


def gateway(tmp: Path, name: str, config: dict[str, Any], env: dict[str, str]) -> tuple[Any, str]:
    port = free_port()
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    argv = [sys.executable, "-m", "tokenfleet.gateway", "--port", str(port), "--config", str(path)]
    proc = start(argv, tmp / f"{name}.log", {"TOKENFLEET_SALT_SECRET": "bench", **env})
    wait_port(port)
    return proc, f"http://127.0.0.1:{port}"


def route(remotes: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(
        (REPO / "examples/09-model-routes/route.yaml").read_text()
    )["spec"]
    return {**spec, "remotes": remotes}


def start_all(tmp: Path, *, with_remotes: bool) -> tuple[list[Any], Sims, str, str]:
    """(processes, simulators, the local gateway's URL, Redis URL)."""
    sims, procs = Sims(tmp), []
    redis_port = free_port()
    procs.append(
        start(["redis-server", "--port", str(redis_port), "--save", ""], tmp / "redis.log")
    )
    wait_port(redis_port)
    cm = yaml.safe_load((REPO / "examples/09-model-routes/classifier-configmap.yaml").read_text())
    configmaps = {cm["metadata"]["name"]: cm["data"]}
    region = {
        "models": [
            {"name": m, "endpoints": [sims.start(f"b-{m}", m)]}
            for m in ("chat-small", "chat-large")
        ],
        "tenants": [
            {"name": "region-a", "apiKeyHashes": [key_hash(REGION_KEY)], "allowedModels": ["*"]}
        ],
        "routes": [route([])],
        "configMaps": configmaps,
    }
    proc, region_url = gateway(tmp, "region-b", region, {})
    procs.append(proc)
    (tmp / "provider-key").write_text(PROVIDER_KEY)
    provider_port = free_port()
    argv = [sys.executable, "-m", "tokenfleet.devstack.provider", "--port", str(provider_port)]
    argv += [
        "--upstream",
        sims.start("provider", "provider-large"),
        "--key-file",
        str(tmp / "provider-key"),
    ]
    procs.append(start(argv, tmp / "provider.log"))
    wait_port(provider_port)
    keys = tmp / "keys"
    bound = {
        "region-b-key": region_url + "/v1",
        "provider-key": f"http://127.0.0.1:{provider_port}/v1",
    }
    for name, value in (("region-b-key", REGION_KEY), ("provider-key", PROVIDER_KEY)):
        (keys / name).mkdir(parents=True, exist_ok=True)
        (keys / name / "api-key").write_text(value)
        (keys / name / "base-url").write_text(bound[name])
    remotes = [
        {
            "name": "region-b",
            "kind": "Gateway",
            "baseUrl": region_url + "/v1",
            "apiKeySecret": {"name": "region-b-key"},
        },
        {
            "name": "provider",
            "kind": "OpenAI",
            "baseUrl": f"http://127.0.0.1:{provider_port}/v1",
            "model": "provider-large",
            "apiKeySecret": {"name": "provider-key"},
            "price": {"inputPerMillionTokens": 0.5, "outputPerMillionTokens": 1.5},
            "budget": {"amount": 10.0},
        },
    ]
    local = {
        "models": [
            {"name": m, "endpoints": [sims.start(f"a-{m}", m)]}
            for m in ("chat-small", "chat-large")
        ],
        "tenants": [
            {"name": "acme", "apiKeyHashes": [key_hash(KEY)], "allowedModels": ["chat-auto"]}
        ],
        "routes": [route(remotes if with_remotes else [])],
        "configMaps": configmaps,
    }
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    proc, url = gateway(
        tmp,
        "local",
        {**local},
        {"TOKENFLEET_REMOTE_KEYS_DIR": str(keys), "TOKENFLEET_REDIS_URL": redis_url},
    )
    procs.append(proc)
    return procs, sims, url, redis_url


async def one(
    session: aiohttp.ClientSession, url: str, sent_at: float, out: list[dict[str, Any]]
) -> None:
    body = {
        "model": "chat-auto",
        "messages": [{"role": "user", "content": "What is the capital of Japan?"}],
        "max_tokens": MAX_TOKENS,
        "stream": True,
    }
    start_t = time.monotonic()
    row: dict[str, Any] = {"t": sent_at, "target": "error", "ttft": None, "status": 0}
    try:
        async with session.post(
            url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}
        ) as r:
            row["status"] = r.status
            if r.status == 200:
                async for line in r.content:
                    if row["ttft"] is None and b'"content"' in line:
                        row["ttft"] = time.monotonic() - start_t
                row["target"] = r.headers.get("X-TokenFleet-Target", "local")
            else:
                await r.read()
    except aiohttp.ClientError as exc:
        row["status"] = type(exc).__name__
    out.append(row)


async def drive(url: str, sims: Sims, *, rate: float, seconds: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    actions = {
        8.0: lambda: sims.kill("a-chat-small", "a-chat-large"),
        16.0: lambda: sims.kill("b-chat-small", "b-chat-large"),
        22.0: lambda: [sims.start(f"b-{m}", m) for m in ("chat-small", "chat-large")],
        50.0: lambda: [sims.start(f"a-{m}", m) for m in ("chat-small", "chat-large")],
    }
    pending = sorted(actions)
    tasks = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        t0 = time.monotonic()
        for i in range(int(rate * seconds)):
            due = i / rate
            while pending and pending[0] <= due:
                at = pending.pop(0)
                await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))  # at its time, not before
                await asyncio.to_thread(actions[at])
                print(f"  t={at:4.1f}s  {EVENTS[at]}", flush=True)
            await asyncio.sleep(max(0.0, t0 + due - time.monotonic()))
            tasks.append(asyncio.create_task(one(session, url, due, rows)))
        await asyncio.gather(*tasks)
    return rows


def phases(rows: list[dict[str, Any]], seconds: float) -> list[tuple[str, list[dict[str, Any]]]]:
    bounds = [0.0, *EVENTS, seconds]
    names = ["healthy", *EVENTS.values()]
    return [
        (n, [r for r in rows if a <= r["t"] < b])
        for n, a, b in zip(names, bounds, bounds[1:], strict=False)
    ]


def report(label: str, rows: list[dict[str, Any]], seconds: float) -> None:
    print(f"\n{label}: {len(rows)} requests")
    print(f"  {'phase':<15} {'local':>6} {'region-b':>9} {'provider':>9} {'failed':>7}")
    for name, part in phases(rows, seconds):
        c = collections.Counter(r["target"] for r in part)
        print(
            f"  {name:<15} {c['local']:>6} {c['remote/region-b']:>9} {c['remote/provider']:>9}"
            f" {c['error']:>7}"
        )
    for target in ("local", "remote/region-b", "remote/provider"):
        ttfts = sorted(r["ttft"] for r in rows if r["target"] == target and r["ttft"] is not None)
        if ttfts:
            p99 = ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))]
            print(
                f"  TTFT {target:<16} p50 {statistics.median(ttfts) * 1000:6.1f} ms  p99 {p99 * 1000:6.1f} ms"
            )
    for name, at, where in (
        ("region-b", REGION_BACK, "remote/region-b"),
        ("the local pool", LOCAL_BACK, "local"),
    ):
        back = sorted((r for r in rows if r["t"] >= at), key=lambda r: r["t"])
        first = next((r["t"] for r in back if r["target"] == where), None)
        if first is not None:
            print(f"  first request served by {name} again: {first - at:.1f} s after it came back")
    failures = collections.Counter(str(r["status"]) for r in rows if r["target"] == "error")
    if failures:
        print(f"  failures by status: {dict(failures)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=6.0, help="requests per second")
    parser.add_argument("--seconds", type=float, default=58.0)
    parser.add_argument("--logs", type=Path, help="keep the processes' logs here")
    args = parser.parse_args()
    print(
        f"spill journey: {args.rate:g} req/s streamed, {MAX_TOKENS} tokens, simulators "
        f"TTFT {TTFT_MS} ms / ITL {ITL_MS} ms"
    )
    for label, with_remotes in (
        ("TokenFleet chat-auto with remotes", True),
        ("baseline: the same route, no remotes", False),
    ):
        with tempfile.TemporaryDirectory(prefix="tf-bench-spill-") as d:
            where = (
                Path(d)
                if args.logs is None
                else args.logs / ("remotes" if with_remotes else "baseline")
            )
            where.mkdir(parents=True, exist_ok=True)
            procs, sims, url, _ = start_all(where, with_remotes=with_remotes)
            try:
                print(f"\n{label}:")
                rows = asyncio.run(drive(url, sims, rate=args.rate, seconds=args.seconds))
                report(label, rows, args.seconds)
            finally:
                for p in [*procs, *sims.procs.values()]:
                    if p.poll() is None:
                        os.killpg(p.pid, signal.SIGKILL)
                        p.wait()
    print("\ncommand: .venv/bin/python bench/spill.py " + " ".join(sys.argv[1:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

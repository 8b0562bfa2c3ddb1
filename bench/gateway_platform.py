"""Gateway overhead in Kubernetes mode: the full local platform of ``make up`` running.

The same loads as bench/gateway_overhead.py, sent to the gateway the platform serves on
http://127.0.0.1:8080 (the chart's pod on the real kubelet node: Kubernetes discovery, the
access log on, Redis quotas, the dev tenant, every worker of example 02's pool scraped each
second) and, for the baseline, straight to one of the pool's simulated vLLM workers. CPU is the
gateway pod's process tree (all its workers), read from /proc; the workers here take ~15 ms to
answer (example 02's engine latencies), so latency figures are relative to that.

    make up && .venv/bin/python bench/gateway_platform.py [--quick]

Without a running platform it says so and exits 0 (``make bench`` runs it after the others).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gateway_overhead import Proxy, cpu_seconds, load

REPO = Path(__file__).resolve().parents[1]
STATE = REPO / ".tokenfleet"
MODEL = "llama-3.1-8b-instruct"  # example 02's model, which make up applies
KUBECTL = Path(os.environ.get("TOKENFLEET_CACHE", Path.home() / ".cache/tokenfleet")) / (
    "bin/current/kubectl"
)


def gateway_pids(port: int) -> list[int]:
    """The processes serving ``port`` as a TokenFleet gateway (a pod's, or a host process)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        gateway = b"tokenfleet.gateway" in argv or (
            b"tokenfleet.cli" in argv and b"gateway" in argv
        )
        if gateway and any(a in (f"--port={port}".encode(), str(port).encode()) for a in argv):
            found.append(int(entry.name))
    return found


def worker_url() -> str:
    """One ready worker of the pool serving MODEL, as its pod IP and port."""
    env = {**os.environ, "KUBECONFIG": str(STATE / "kubeconfig")}
    pods = json.loads(
        subprocess.run(
            [str(KUBECTL), "get", "pods", "-A", "-l", "tokenfleet.io/role=worker", "-o", "json"],
            env=env,
            capture_output=True,
            check=True,
            timeout=30,
        ).stdout
    )["items"]
    for pod in pods:
        ready = any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in pod["status"].get("conditions", [])
        )
        if ready and pod["metadata"]["labels"].get("tokenfleet.io/model") == MODEL:
            port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
            return f"http://{pod['status']['podIP']}:{port}"
    raise SystemExit(f"no ready worker serves {MODEL}")


def cpu_of(pids: list[int]) -> float:
    """CPU seconds of the trees of ``pids`` (cpu_seconds counts a process's children too:
    each tree is counted once, from its root)."""
    roots = [pid for pid in pids if _parent(pid) not in pids]
    return sum(cpu_seconds(pid) for pid in roots)


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


async def measured(proxy: Proxy, pids: list[int], **kw: Any) -> dict[str, Any]:
    """load(), with the CPU of ``pids``' trees over it."""
    before = cpu_of(pids)
    result = await load(proxy, **kw)
    result["cpu"] = cpu_of(pids) - before
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    args = parser.parse_args()
    info_file, key_file = STATE / "stack.json", STATE / "dev-api-key"
    if not info_file.exists() or not key_file.exists():
        print("gateway_platform: SKIPPED — no local platform running (run `make up` first)")
        return 0
    port = int(json.loads(info_file.read_text())["ports"]["gateway"])
    pids = gateway_pids(port)
    if not pids:
        print(f"gateway_platform: SKIPPED — no gateway process serves port {port}")
        return 0
    key = key_file.read_text().strip()
    scale = 0.2 if args.quick else 1.0
    gateway = Proxy(
        "tokenfleet (K8s)", f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {key}"}, None
    )
    gateway.model = MODEL
    direct = Proxy("direct (1 worker)", worker_url(), {}, None)
    direct.model = MODEL
    print(f"gateway processes {pids}; direct worker {direct.base}", flush=True)
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for proxy, tracked in ((direct, []), (gateway, pids)):
        asyncio.run(load(proxy, connections=4, total=40, stream=False))  # warm up
        rows[proxy.name] = {}
        for label, kw in (
            ("one", {"connections": 1, "total": int(500 * scale), "stream": False}),
            ("many", {"connections": 32, "total": int(3000 * scale), "stream": False}),
            ("stream", {"connections": 64, "total": int(256 * scale), "stream": True}),
        ):
            print(f"  {proxy.name}: {label} ...", flush=True)
            rows[proxy.name][label] = asyncio.run(measured(proxy, tracked, **kw))
    report(rows, direct.name)
    return 0


def report(rows: dict[str, dict[str, dict[str, Any]]], base_name: str) -> None:
    base = rows[base_name]
    print("\nKubernetes mode (make up): non-streamed, max_tokens 8 (ms unless noted)")
    print(
        f"{'':18} {'CPU ms/req':>10} {'p50 @1':>8} {'added':>7} {'p50 @32':>8} {'added':>7} "
        f"{'CPU us/token':>12} {'ITL p99':>8} {'vs direct':>9} {'errors':>6}"
    )
    for name, row in rows.items():
        one, many, stream = row["one"], row["many"], row["stream"]
        gateway = name != base_name
        cpu_req = f"{1000 * many['cpu'] / max(1, many['ok']):.3f}" if gateway else "-"
        cpu_tok = f"{1e6 * stream['cpu'] / max(1, stream['chunks']):.1f}" if gateway else "-"
        errors = one["errors"] + many["errors"] + stream["errors"]
        print(
            f"{name:18} {cpu_req:>10} {one['p50']:8.2f} {one['p50'] - base['one']['p50']:7.2f} "
            f"{many['p50']:8.2f} {many['p50'] - base['many']['p50']:7.2f} {cpu_tok:>12} "
            f"{stream['itl_p99']:8.2f} {stream['itl_p99'] - base['stream']['itl_p99']:9.2f} "
            f"{errors:>6}"
        )


if __name__ == "__main__":
    sys.exit(main())

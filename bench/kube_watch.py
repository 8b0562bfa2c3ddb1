"""The gateway's watch loop against a real API server, side by side with the clients a user
would reach for: the official `kubernetes` package's `watch.Watch().stream` and `kubectl get -w`.

The gateway learns every worker pod, tenant and key from watches (tokenfleet.kubeapi): since its
connection settings come from the official package's loaders (issue 14: exec plugins, client
certificates, verified TLS), this checks the watch loop itself stayed lean. All three watchers
run at once, each in its own process, on the same events: N ConfigMaps of about the size of a
worker pod's JSON (~4 KB) created, labelled, then deleted (3 N events), TLS verified against the
local API server's CA. Per watcher: CPU per event (its own process, user + system) and how long
after the last write it saw the last event.

    .venv/bin/python bench/kube_watch.py [--objects 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("TOKENFLEET_CACHE", Path.home() / ".cache/tokenfleet")) / "bin/current"
TICKS = os.sysconf("SC_CLK_TCK")
NAMESPACE = "watch-bench"
SELECTOR = "bench=watch"
#: About a worker pod's JSON as the API server sends it (labels, spec, status): ~4 KB.
PAYLOAD = "x" * 3500


# ---- watchers (each runs as `bench/kube_watch.py --watcher NAME --events N`) -----------------


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _report(events: int, cpu: float, last_event_at: float) -> None:
    print(json.dumps({"events": events, "cpu": cpu, "last": last_event_at}), flush=True)


async def _tokenfleet(expected: int) -> None:
    import aiohttp

    from tokenfleet.kubeapi import KubeApi

    async with aiohttp.ClientSession() as session:
        api = KubeApi.from_kubeconfig(None, session)
        path = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
        seen, cpu0 = 0, 0.0
        async for kind, _obj in api.list_watch(path, selector=SELECTOR):
            if kind == "SYNCED" and seen == 0:
                cpu0 = _cpu()
                print("ready", flush=True)
            elif kind in ("ADDED", "MODIFIED", "DELETED") and cpu0:
                seen += 1
                if seen == expected:
                    return _report(seen, _cpu() - cpu0, time.time())


def _official(expected: int) -> None:
    import kubernetes

    kubernetes.config.load_kube_config()
    core = kubernetes.client.CoreV1Api()
    listed = core.list_namespaced_config_map(NAMESPACE, label_selector=SELECTOR)
    version = listed.metadata.resource_version
    cpu0 = _cpu()
    print("ready", flush=True)
    stream = kubernetes.watch.Watch().stream(
        core.list_namespaced_config_map,
        NAMESPACE,
        label_selector=SELECTOR,
        resource_version=version,
        timeout_seconds=600,
    )
    for seen, _event in enumerate(stream, start=1):
        if seen == expected:
            return _report(seen, _cpu() - cpu0, time.time())


# ---- the run -------------------------------------------------------------------------------


def kubectl(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        [str(BIN / "kubectl"), *args], input=stdin, capture_output=True, text=True, env=env,
        check=True, timeout=600,
    ).stdout  # fmt: skip


def cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def objects(n: int) -> str:
    items = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i:05d}", "labels": {"bench": "watch"}},
            "data": {"payload": PAYLOAD},
        }
        for i in range(n)
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def start_stack(state: Path) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    stack = subprocess.Popen(
        [
            sys.executable, "-m", "tokenfleet.devstack", "run", "--state-dir", str(state),
            "--bin-dir", str(BIN), "--ports", "auto", "--pod-octet", "auto", "--no-real-node",
            "--die-with-parent",
        ],
        stdout=(state / "stack.log").open("wb"), stderr=subprocess.STDOUT, cwd=REPO,
    )  # fmt: skip
    while not (state / "stack.json").exists():
        if stack.poll() is not None:
            raise SystemExit((state / "stack.log").read_text()[-2000:])
        time.sleep(0.5)
    return stack, json.loads((state / "stack.json").read_text())


def run(n: int, env: dict[str, str]) -> dict[str, dict[str, float]]:
    expected = 3 * n
    me = [sys.executable, str(Path(__file__).resolve())]
    watchers = {
        name: subprocess.Popen(
            [*me, "--watcher", name, "--events", str(expected)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name in ("tokenfleet", "official")
    }
    watch = subprocess.Popen(
        [
            str(BIN / "kubectl"), "get", "configmaps", "-n", NAMESPACE, "-l", SELECTOR,
            "--watch-only", "-o", "jsonpath={.metadata.name}{\"\\n\"}",
        ],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    for process in watchers.values():
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    time.sleep(2)  # kubectl lists then watches: let it settle (its start-up is not counted)
    kubectl_cpu0 = cpu_of(watch.pid)
    print(f"writing {n} ConfigMaps, labelling them, deleting them ({expected} events) ...")
    started = time.time()
    kubectl(env, "create", "-n", NAMESPACE, "-f", "-", stdin=objects(n))
    kubectl(env, "label", "configmaps", "-n", NAMESPACE, "-l", SELECTOR, "round=2")
    kubectl(env, "delete", "configmaps", "-n", NAMESPACE, "-l", SELECTOR, "--wait=false")
    written = time.time()
    results: dict[str, dict[str, float]] = {}
    assert watch.stdout is not None
    for seen, _line in enumerate(watch.stdout, start=1):
        if seen == expected:
            results["kubectl get -w (Go)"] = {
                "events": seen, "cpu": cpu_of(watch.pid) - kubectl_cpu0, "last": time.time()
            }  # fmt: skip
            break
    watch.kill()
    for name, process in watchers.items():
        out, _ = process.communicate(timeout=300)
        label = {"tokenfleet": "TokenFleet kubeapi (aiohttp)", "official": "kubernetes package"}
        results[label[name]] = json.loads(out.strip().splitlines()[-1])
    for figures in results.values():
        figures["lag"] = figures["last"] - written
    print(f"(writes took {written - started:.1f} s)")
    return results


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--watcher", choices=["tokenfleet", "official"], help=argparse.SUPPRESS)
    parser.add_argument("--events", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.watcher == "tokenfleet":
        asyncio.run(_tokenfleet(args.events))
        return 0
    if args.watcher == "official":
        _official(args.events)
        return 0
    state = Path(tempfile.mkdtemp(prefix="tf-watch-bench-"))
    print(f"starting a control plane in {state} ...", flush=True)
    stack, info = start_stack(state)
    try:
        env = {**os.environ, "KUBECONFIG": info["kubeconfig"]}
        kubectl(env, "create", "namespace", NAMESPACE)
        results = run(args.objects, env)
    finally:
        stack.terminate()
        stack.wait(timeout=60)
    # Behind: from the last write command's return to the watcher's last event (0 when the
    # event came before the command returned: the watcher kept up).
    print(f"\n{'watcher':<32} {'events':>7} {'CPU µs/event':>13} {'behind the writes':>18}")
    for name, r in sorted(results.items(), key=lambda item: item[1]["cpu"]):
        per_event = 1e6 * r["cpu"] / r["events"]
        print(f"{name:<32} {int(r['events']):>7} {per_event:>13.0f} {max(r['lag'], 0):>16.2f} s")
    print(f"\ncommand: .venv/bin/python bench/kube_watch.py --objects {args.objects}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

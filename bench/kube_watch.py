"""The gateway's watch loop against a real API server, side by side with the clients a user
would reach for: the official `kubernetes` package's `watch.Watch().stream` and `kubectl get -w`.

The gateway learns every worker pod, tenant and key from watches (tokenfleet.kubeapi): since its
connection settings come from the official package's loaders (issue 14: exec plugins, client
certificates, verified TLS), this checks the watch loop itself stayed lean. All three watchers
run at once, each in its own process, TLS verified against the local API server's CA, and start
the same way: each lists, watches, and reports ready once it has seen a sentinel object created
after they all started. Then N ConfigMaps of about a worker pod's JSON (~4 KB) are created,
labelled and deleted (3 N events), and the sentinel deleted: each watcher counts what it saw
until the sentinel's deletion. Per watcher: the events it saw and its own process's CPU (user +
system) per event.

    .venv/bin/python bench/kube_watch.py [--objects 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _processes import BIN, cpu_seconds, devstack_run, kubectl

NAMESPACE = "watch-bench"
SELECTOR = "bench=watch"
SENTINEL = "sentinel"
#: About a worker pod's JSON as the API server sends it (labels, spec, status): ~4 KB.
PAYLOAD = "x" * 3500
#: Longest wait for any watcher's line: a bench must end by itself.
DEADLINE_SECONDS = 300.0
WATCHERS = {"tokenfleet": "TokenFleet kubeapi (aiohttp)", "official": "kubernetes package"}


# ---- the Python watchers (each runs as `bench/kube_watch.py --watcher NAME`) ----------------
# Protocol on stdout: "ready" once the sentinel's ADDED arrived (CPU counted from there), then
# one JSON line {"events", "cpu"} at the sentinel's DELETED.


class Counter:
    def __init__(self) -> None:
        self.events, self.cpu0 = 0, 0.0

    def see(self, kind: str, name: str) -> bool:
        """Count one event; True once the sentinel is deleted (the run is over)."""
        if name == SENTINEL:
            if kind == "ADDED":
                self.cpu0 = _cpu()
                print("ready", flush=True)
                return False
            if kind == "DELETED":
                print(json.dumps({"events": self.events, "cpu": _cpu() - self.cpu0}), flush=True)
                return True
        if self.cpu0:
            self.events += 1
        return False


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _tokenfleet() -> None:
    import aiohttp

    from tokenfleet.kubeapi import KubeApi

    counter = Counter()
    async with aiohttp.ClientSession() as session:
        api = KubeApi.from_kubeconfig(None, session)
        path = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
        async for kind, obj in api.list_watch(path, selector=SELECTOR):
            if kind != "SYNCED" and counter.see(kind, obj["metadata"]["name"]):
                return


def _official() -> None:
    import kubernetes

    kubernetes.config.load_kube_config()
    core = kubernetes.client.CoreV1Api()
    counter = Counter()
    stream = kubernetes.watch.Watch().stream(
        core.list_namespaced_config_map, NAMESPACE, label_selector=SELECTOR, timeout_seconds=600
    )
    for event in stream:
        if counter.see(event["type"], event["object"].metadata.name):
            return


# ---- the run -------------------------------------------------------------------------------


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


class Lines:
    """A process's stdout lines, read by a thread, taken with a deadline (the bench never
    hangs on a watcher that stopped talking)."""

    def __init__(self, process: subprocess.Popen[str], who: str) -> None:
        self.who, self._lines = who, queue.Queue[str]()
        assert process.stdout is not None
        stdout = process.stdout
        threading.Thread(target=lambda: [self._lines.put(x) for x in stdout], daemon=True).start()

    def next(self, deadline: float) -> str:
        try:
            return self._lines.get(timeout=max(0.0, deadline - time.monotonic())).strip()
        except queue.Empty:
            raise SystemExit(f"{self.who}: no line within {DEADLINE_SECONDS:.0f} s") from None


def run(n: int, env: dict[str, str]) -> dict[str, tuple[int, float]]:
    """Watcher label -> (events seen between the sentinel's creation and deletion, CPU s)."""
    me = [sys.executable, str(Path(__file__).resolve())]
    started: dict[str, subprocess.Popen[str]] = {
        name: subprocess.Popen([*me, "--watcher", name], stdout=subprocess.PIPE, text=True, env=env)
        for name in WATCHERS
    }
    # kubectl prints one "TYPE name" line per event (its own formatting is part of its cost).
    started["kubectl"] = subprocess.Popen(
        [
            str(BIN / "kubectl"), "get", "configmaps", "-n", NAMESPACE, "-l", SELECTOR, "--watch",
            "--output-watch-events", "-o", 'jsonpath={.type} {.object.metadata.name}{"\\n"}',
        ],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    lines = {name: Lines(process, name) for name, process in started.items()}
    try:
        # A watcher that starts late still sees the sentinel (its first list holds it as ADDED),
        # so every watcher is ready, whenever it started, before the first write.
        sentinel = {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": SENTINEL, "labels": {"bench": "watch"}}}  # fmt: skip
        kubectl(env, "create", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(sentinel))
        deadline = time.monotonic() + DEADLINE_SECONDS
        for name in WATCHERS:
            while lines[name].next(deadline) != "ready":
                pass
        while lines["kubectl"].next(deadline) != f"ADDED {SENTINEL}":
            pass
        kubectl_cpu0 = cpu_seconds(started["kubectl"].pid)
        print(f"writing {n} ConfigMaps, labelling them, deleting them ({3 * n} events) ...")
        began = time.monotonic()
        others = f"--field-selector=metadata.name!={SENTINEL}"
        kubectl(env, "create", "-n", NAMESPACE, "-f", "-", stdin=objects(n))
        kubectl(env, "label", "configmaps", "-n", NAMESPACE, "-l", SELECTOR, others, "round=2")
        kubectl(
            env, "delete", "configmaps", "-n", NAMESPACE, "-l", SELECTOR, others, "--wait=false"
        )
        kubectl(env, "delete", "configmap", "-n", NAMESPACE, SENTINEL, "--wait=false")
        print(f"(writes took {time.monotonic() - began:.1f} s)")
        kubectl_events = 0
        while lines["kubectl"].next(deadline) != f"DELETED {SENTINEL}":
            kubectl_events += 1
        results = {
            "kubectl get -w (Go)": (
                kubectl_events, cpu_seconds(started["kubectl"].pid) - kubectl_cpu0
            )
        }  # fmt: skip
        for name, label in WATCHERS.items():
            figures = json.loads(lines[name].next(deadline))
            results[label] = (int(figures["events"]), float(figures["cpu"]))
        return results
    finally:
        for process in started.values():
            process.kill()
            process.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--watcher", choices=list(WATCHERS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.watcher == "tokenfleet":
        asyncio.run(_tokenfleet())
        return 0
    if args.watcher == "official":
        _official()
        return 0
    state = Path(tempfile.mkdtemp(prefix="tf-watch-bench-"))
    print(f"starting a control plane in {state} ...", flush=True)
    stack, info = devstack_run(state, "--no-real-node")
    try:
        env = {**os.environ, "KUBECONFIG": info["kubeconfig"]}
        kubectl(env, "create", "namespace", NAMESPACE)
        results = run(args.objects, env)
    finally:
        stack.terminate()
        stack.wait(timeout=60)
    print(f"\n{'watcher':<32} {'events seen':>12} {'CPU µs/event':>13}   (of {3 * args.objects})")
    for name, (events, cpu) in sorted(results.items(), key=lambda item: item[1][1]):
        print(f"{name:<32} {events:>12} {1e6 * cpu / max(events, 1):>13.0f}")
    print(f"\ncommand: .venv/bin/python bench/kube_watch.py --objects {args.objects}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

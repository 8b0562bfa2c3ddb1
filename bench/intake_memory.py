"""Peak memory of a gateway process while N clients send worst-case bodies at once (issue 35).

One gateway process (static config, one worker), one simulated engine that takes 60 s to
answer and one slot, so every admitted request waits in the gateway's queue holding its parsed
body. Each client sends one body of about 4 MiB from one tenant:

- ``dense``: a normal chat with a pass-through field of tiny JSON values
  (``"metadata": [{}, {}, ...]``), the worst case for parsed size (~24× the bytes);
- ``messages``: 4 MiB of tiny chat messages, the case the issue names.

Prints the gateway's peak RSS (VmHWM) and the statuses the clients got within 20 s.
``--source DIR``: run the gateway from another checkout (e.g. a worktree of the old code) to
compare: ``git worktree add --detach /tmp/base <commit>; python bench/intake_memory.py --source
/tmp/base``.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import hashlib
import http.client
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from _processes import BIN, free_port, start, wait_port

KEY = "tfk-bench-" + "0" * 30
ROOTS = ("api", "libraries", "gateway", "devstack", "cli")


def body(kind: str, size: int) -> bytes:
    head = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"x":['
    if kind == "dense":
        return head + b"{}," * ((size - len(head)) // 3) + b"{}]}"
    unit = b'{"role":"user","content":""},'
    return b'{"model":"m","max_tokens":4,"messages":[' + unit * (size // len(unit)) + b"{}]}"


def send(port: int, payload: bytes) -> int | str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=payload,
            headers={
                "Authorization": f"Bearer {KEY}",
                "Content-Type": "application/json",
                "X-TokenFleet-Deadline-Ms": "120000",
            },
        )
        return conn.getresponse().status
    except TimeoutError:
        return "waiting"
    finally:
        conn.close()


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--kind", choices=("dense", "messages"), default="dense")
    p.add_argument("--size", type=int, default=4 * 1024 * 1024 - 1024)
    p.add_argument("--source", type=Path, help="another checkout's code for the gateway")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tf-intake-bench-"))
    sim_port, gw_port = free_port(), free_port()
    sim = start(
        [str(BIN / "llm-d-inference-sim"), "--port", str(sim_port), "--model", "m",
         "--force-dummy-tokenizer", "--max-num-seqs", "1", "--time-to-first-token", "60s"],
        tmp / "sim.log",
    )  # fmt: skip
    config = {
        "models": [{"name": "m", "endpoints": [f"http://127.0.0.1:{sim_port}"],
                    "maxConcurrency": 1}],
        "pools": [{"name": "default"}],
        "tenants": [{"name": "t", "allowedModels": ["*"],
                     "apiKeyHashes": ["sha256:" + hashlib.sha256(KEY.encode()).hexdigest()]}],
    }  # fmt: skip
    (tmp / "gw.yaml").write_text(yaml.safe_dump(config))
    env = {"TOKENFLEET_SALT_SECRET": "bench"}
    if args.source:
        env["PYTHONPATH"] = os.pathsep.join(str(args.source / r) for r in ROOTS)
    gateway = start(
        [sys.executable, "-m", "tokenfleet.gateway", "--port", str(gw_port), "--config",
         str(tmp / "gw.yaml"), "--no-access-log", "--scrape-interval", "0"],
        tmp / "gateway.log", env=env,
    )  # fmt: skip
    try:
        wait_port(sim_port)
        wait_port(gw_port)
        time.sleep(1.0)
        before = peak_rss_mib(gateway.pid)
        payload = body(args.kind, args.size)
        with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
            statuses = list(pool.map(lambda _: send(gw_port, payload), range(args.clients)))
        peak = peak_rss_mib(gateway.pid)
        print(
            json.dumps(
                {
                    "source": str(args.source or "this checkout"),
                    "kind": args.kind,
                    "clients": args.clients,
                    "body_bytes": len(payload),
                    "rss_at_start_mib": round(before, 1),
                    "peak_rss_mib": round(peak, 1),
                    "statuses": dict(collections.Counter(map(str, statuses))),
                }
            )
        )
    finally:
        gateway.kill()
        sim.kill()


if __name__ == "__main__":
    main()

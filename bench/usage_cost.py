"""A ``tokenfleet usage --cost`` sample: six hours of settled usage through the real ledger.

Starts a redis-server on a free loopback port, records six hours of three tenants' requests
through :class:`tokenfleet.gateway.usage_ledger.UsageLedger` (seeded, so the figures repeat;
served, cancelled and failed lines), then runs ``tokenfleet usage`` and ``tokenfleet usage
--cost`` with a priced pool (1.20 per GPU-hour, 1 GPU per replica, benched at 400 prompt and 30
output tokens per second: a small GPU) of 1 ready GPU, and draws the PNG.

    .venv/bin/python bench/usage_cost.py [--png docs/images/usage-cost.png]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from prometheus_client import CollectorRegistry

from tokenfleet.gateway.usage_ledger import UsageLedger

UNTIL = datetime.datetime(2026, 11, 30, 18, 0, tzinfo=datetime.UTC)
# tenant → (requests per hour, mean prompt tokens, mean completion tokens)
TENANTS = {
    "search/search-team": (9000, 1200, 180),
    "evals/nightly-evals": (1500, 6000, 600),
    "apps/chatbot": (4000, 800, 300),
}


async def record(url: str, rng: random.Random) -> None:
    ledger = UsageLedger(url, registry=CollectorRegistry())
    for hour in range(6):
        at = UNTIL - datetime.timedelta(hours=6 - hour) + datetime.timedelta(minutes=30)
        for tenant, (rate, prompt, completion) in TENANTS.items():
            # The evening peak: search doubles in the last two hours, evals start at hour 3.
            n = rate * (2 if tenant.startswith("search") and hour >= 4 else 1)
            n = n if not tenant.startswith("evals") or hour >= 3 else 0
            for outcome, share in (("served", 0.95), ("cancelled", 0.04), ("failed", 0.01)):
                k = int(n * share / 100)  # a hundredth of the rate keeps the run to seconds
                for _ in range(k):
                    p = int(rng.expovariate(1 / prompt))
                    c = int(rng.expovariate(1 / completion) * (0.3 if outcome != "served" else 1))
                    await ledger.record(
                        tenant=tenant,
                        model="llama-3.1-8b-instruct",
                        pool="prod/l4",
                        outcome=outcome,
                        prompt_tokens=p,
                        cached_prompt_tokens=p // 4,
                        completion_tokens=c,
                        now=at,
                    )
    await ledger.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--png", type=Path, default=Path("docs/images/usage-cost.png"))
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        redis = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--dir",
                tmp,
            ],
            stdout=subprocess.DEVNULL,
        )
        try:
            time.sleep(0.5)
            url = f"redis://127.0.0.1:{port}/0"
            asyncio.run(record(url, random.Random(7)))
            window = ["--redis", url, "--since", "6h", "--until", UNTIL.isoformat()]
            cli = [sys.executable, "-m", "tokenfleet.cli", "usage", *window]
            print("$ tokenfleet usage --since 6h")
            subprocess.run(cli, check=True)
            print(
                "\n$ tokenfleet usage --since 6h --cost --price prod/l4=1.2:1:400:30 "
                "--ready-gpus prod/l4=1"
            )
            subprocess.run(
                [
                    *cli,
                    "--cost",
                    "--price",
                    "prod/l4=1.2:1:400:30",
                    "--ready-gpus",
                    "prod/l4=1",
                    "--plot",
                    str(args.png),
                ],
                check=True,
            )
        finally:
            redis.kill()
            redis.wait()
    print(f"\nwrote {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

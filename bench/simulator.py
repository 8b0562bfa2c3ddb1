"""The fleet simulator's speed: 10 minutes of 10K RPS (6M requests) on one core.

Target (issue #7): simulated in <= 2 minutes of one core. Every request goes through the
product's admission and routing cores, every 5 s the operator's scaling and placement cores run.
Runs the full scenario on the compiled cores (``make native``) and, for comparison, a slice of it
interpreted (TOKENFLEET_NATIVE=0), each in its own process, one after the other.

    .venv/bin/python bench/simulator.py [--interpreted-seconds 60] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SCENARIO = Path(__file__).parent.parent / "examples/05-simulations/steady-10k.yaml"
TARGET_CPU_SECONDS = 120.0
TARGET_REQUESTS = 6_000_000


def run(compiled: bool, duration: float | None, out: Path) -> dict[str, float]:
    argv = [sys.executable, "-m", "tokenfleet.sim", str(SCENARIO), "--scaler", "tokenfleet"]
    argv += ["--quiet", "--out", str(out)]
    if duration:
        argv += ["--duration", str(duration)]
    env = {**os.environ, "TOKENFLEET_NATIVE": "1" if compiled else "0"}
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    result = json.loads((out / "results.json").read_text())[0]
    if result["compiled"] is not compiled:
        sys.exit("the compiled cores are not built for these sources: run `make native`")
    return result  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interpreted-seconds", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=Path(".tokenfleet/bench/simulator"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"simulator speed: {SCENARIO.name}, tokenfleet scaler, one process at a time ...")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, compiled, duration in (
            ("compiled (mypyc)", True, None),
            ("interpreted", False, args.interpreted_seconds),
        ):
            print(f"  {label} ...", flush=True)
            rows.append((label, run(compiled, duration, Path(tmp) / label.split()[0])))
    print()
    print(
        f"{'cores':18} {'simulated':>10} {'requests':>11} {'CPU s':>7} {'requests/s':>11} "
        f"{'6M requests':>12}"
    )
    for label, r in rows:
        speed = r["requests"] / r["cpuSeconds"]
        print(
            f"{label:18} {r['simulatedSeconds']:>9.0f}s "
            f"{r['requests']:>11,} {r['cpuSeconds']:>7.1f} {speed:>11,.0f} "
            f"{TARGET_REQUESTS / speed:>10.0f} s"
        )
    print(
        f"{'target (#7)':18} {600:>9}s {TARGET_REQUESTS:>11,} {'':>7} "
        f"{TARGET_REQUESTS / TARGET_CPU_SECONDS:>11,.0f} {TARGET_CPU_SECONDS:>10.0f} s"
    )
    keys = ("requests", "simulatedSeconds", "cpuSeconds", "wallSeconds", "compiled")
    summary = {label: {k: r[k] for k in keys} for label, r in rows}
    (args.out / "speed.json").write_text(json.dumps(summary, indent=1, default=str))
    print(f"\nfigures {args.out / 'speed.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

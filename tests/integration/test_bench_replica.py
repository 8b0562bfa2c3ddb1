"""`tokenfleet bench replica` against real simulators: the knee moves with --max-num-seqs, and
the profile it writes sizes a fleet with `tokenfleet plan` (measure, then plan)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from support.gateway import start_sim
from tokenfleet.capacity import planning

TOKENFLEET = str(Path(sys.executable).parent / "tokenfleet")


def sweep(tmp: Path, seqs: int) -> planning.Profile:
    sim = start_sim(
        tmp,
        "m",
        "--max-num-seqs",
        str(seqs),
        "--time-to-first-token",
        "50ms",
        "--inter-token-latency",
        "10ms",
    )
    try:
        out, png = tmp / f"profile-{seqs}.json", tmp / f"profile-{seqs}.png"
        done = subprocess.run(
            [
                TOKENFLEET,
                "bench",
                "replica",
                "--url",
                sim.url,
                "--model",
                "m",
                "--rates",
                "2,4,8,16",
                "--seconds",
                "4",
                "--input-words",
                "20",
                "--output-tokens",
                "20",
                "--slo-ttft",
                "0.5",
                "--max-num-seqs",
                str(seqs),
                "--out",
                str(out),
                "--plot",
                str(png),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert "[4/4] 16 req/s" in done.stdout, done.stdout + done.stderr  # progress is shown
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        return planning.Profile.model_validate(json.loads(out.read_text()))
    finally:
        sim.kill()


def test_the_knee_moves_with_max_num_seqs_and_the_profile_plans_a_fleet(tmp_path: Path) -> None:
    slo = planning.Slo(ttft_p99_seconds=0.5)
    narrow, wide = sweep(tmp_path, 1), sweep(tmp_path, 4)
    knee_narrow, knee_wide = planning.usable_point(narrow, slo), planning.usable_point(wide, slo)
    assert knee_wide is not None
    assert knee_narrow is None or knee_wide.throughput_rps > knee_narrow.throughput_rps * 1.5
    assert max(p.throughput_rps for p in wide.points) > 2 * max(
        p.throughput_rps for p in narrow.points
    )

    workload = {
        "peakRps": 100,
        "inputTokens": {"mean": 20},
        "outputTokens": {"mean": 20},
        "outputTokensPerSecond": 100,
        "slo": {"ttftP99Seconds": 0.5},
    }
    (tmp_path / "w.yaml").write_text(yaml.safe_dump(workload))
    done = subprocess.run(
        [
            TOKENFLEET,
            "plan",
            "--workload",
            str(tmp_path / "w.yaml"),
            "--profile",
            str(tmp_path / "profile-4.json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "<- binds" in done.stdout and "kind: InferencePool" in done.stdout

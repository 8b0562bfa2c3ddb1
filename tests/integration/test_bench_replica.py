"""`tokenfleet bench replica` against real simulators: the knee moves with --max-num-seqs, and
the profile it writes sizes a fleet with `tokenfleet plan` (measure, then plan)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
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

    # ...and calibrates the fleet simulator's replicas (measure, then rehearse)
    scenario = Path(__file__).parents[2] / "examples/05-simulations/long-context-tenant.yaml"
    done = subprocess.run(
        [
            TOKENFLEET,
            "simulate",
            str(scenario),
            "--profile",
            str(tmp_path / "profile-4.json"),
            "--duration",
            "5",
            "--quiet",
            "--out",
            str(tmp_path / "sim"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "sim" / "timeline.png").exists()


def run_bench(tmp: Path, url: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp / "profile.json"
    done = subprocess.run(
        [
            TOKENFLEET,
            "bench",
            "replica",
            "--url",
            url,
            "--model",
            "m",
            "--seconds",
            "3",
            "--out",
            str(out),
            "--plot",
            str(tmp / "p.png"),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done, out


def test_a_concurrency_sweep_replays_a_workload_spec_and_a_trace(tmp_path: Path) -> None:
    sim = start_sim(tmp_path, "m", "--max-num-seqs", "2", "--inter-token-latency", "5ms")
    try:
        spec = tmp_path / "w.yaml"
        spec.write_text(
            "inputTokens: {mean: 60, p99: 200}\noutputTokens: {mean: 12}\n"
            "sharedPrefix: {share: 0.5, groups: 2, tokens: 30}\n"
        )
        done, out = run_bench(tmp_path, sim.url, "--workload", str(spec), "--concurrency", "1,4")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "[2/2] 4 streams [" in done.stdout  # the progress bar
        one, four = planning.Profile.model_validate(json.loads(out.read_text())).points
        # closed loop: the offered load is what was carried; 4 streams queue on 2 sequences
        assert four.throughput_rps > one.throughput_rps * 1.5
        assert four.ttft_p99_seconds > one.ttft_p99_seconds
        assert one.prefill_tokens_per_second / one.throughput_rps == pytest.approx(60, rel=0.35)

        trace = tmp_path / "t.jsonl"
        trace.write_text(
            '{"input_tokens": 10, "output_tokens": 3}\n{"prompt": "hi", "output_tokens": 5}\n'
        )
        done, out = run_bench(tmp_path, sim.url, "--trace", str(trace), "--rates", "4")
        assert done.returncode == 0, done.stdout + done.stderr
        [point] = planning.Profile.model_validate(json.loads(out.read_text())).points
        tokens_per_request = point.decode_tokens_per_second / point.throughput_rps
        assert tokens_per_request == pytest.approx(4, rel=0.25)  # 3 and 5, alternately

        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"input_tokens": 1}\n')
        done, _ = run_bench(tmp_path, sim.url, "--trace", str(bad))
        assert done.returncode == 2 and "needs output_tokens" in done.stderr
    finally:
        sim.kill()

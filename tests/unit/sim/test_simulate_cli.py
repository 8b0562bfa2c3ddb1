"""``tokenfleet simulate``: every example scenario runs and reports; bad scenarios are refused
with a message a person can act on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenfleet.cli import main as tokenfleet

EXAMPLES = sorted((Path(__file__).parents[3] / "examples" / "05-simulations").glob("*.yaml"))


def test_the_examples_are_all_here() -> None:
    names = {p.stem for p in EXAMPLES}
    assert {
        "steady-10k",
        "doubling-during-zone-loss",
        "long-context-tenant",
        "batch-with-chat-shared-pool",
        "batch-with-chat-separate-pools",
    } <= names


@pytest.mark.parametrize("scenario", EXAMPLES, ids=lambda p: p.stem)
def test_each_example_runs_and_reports(
    scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = tokenfleet(
        ["simulate", str(scenario), "--duration", "8", "--quiet", "--out", str(tmp_path)]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "GPU-h" in out and "within SLO" in out
    results = json.loads((tmp_path / "results.json").read_text())
    assert results and all(r["requests"] > 0 and r["gpuHours"] > 0 for r in results)
    assert (tmp_path / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_several_scalers_print_side_by_side_with_the_oracle_ratio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = next(p for p in EXAMPLES if p.stem == "doubling-during-zone-loss")
    argv = ["simulate", str(scenario), "--duration", "5", "--quiet", "--out", str(tmp_path)]
    for s in ("tokenfleet", "hpa-cpu", "oracle"):
        argv += ["--scaler", s]
    assert tokenfleet(argv) == 0
    table = capsys.readouterr().out.split("\n\n")[1].splitlines()
    assert [line.split()[0] for line in table[1:]] == ["tokenfleet", "hpa-cpu", "oracle"]
    assert "x oracle" in table[0]
    assert table[3].split()[-4] == "1.00"  # the oracle against itself


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: x\ndurationSeconds: -1\npools: []\nstreams: []\n", "durationSeconds"),
        (
            "name: x\ndurationSeconds: 5\npools: [{name: a}]\nstreams: [{name: s, class: c, "
            "pool: b, rate: [{at: 0, rps: 1}], inputTokens: {mean: 1}, outputTokens: {mean: 1}}]",
            "pool 'b' is not one of ['a']",
        ),
        ("name: [unclosed", "while parsing"),
    ],
)
def test_a_bad_scenario_is_refused_with_a_clear_message(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    assert tokenfleet(["simulate", str(bad), "--quiet", "--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err

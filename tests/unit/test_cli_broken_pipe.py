"""`tokenfleet … | head` and `kubectl tokenfleet … | head`: when the reader closes the pipe,
both entry points stop quietly — nothing on stderr (no traceback, no "Exception ignored") and
exit status 141, as for a process ended by SIGPIPE (what kubectl itself reports, and what a
shell's pipefail sees).

Matrix: each entry point × (the console script with the reader gone before the first write;
a command whose output overflows the pipe mid-print; a reader that reads a little, then
leaves). argparse's own --help already swallows a closed pipe: that stays quiet, exit 0. The
plugin printing a real view into a closed pipe is in tests/integration/test_usage_discovery.py
(it needs the API server)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tokenfleet import cli

SCRIPTS = Path(sys.executable).parent


def with_closed_stdout(argv: list[str]) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` with stdout a pipe whose reader has already gone (as after `| head -1`)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            argv,
            stdout=write_end,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        pytest.param(["tokenfleet"], 141, id="tokenfleet-usage-text"),
        pytest.param(["tokenfleet", "--help"], 141, id="tokenfleet-help"),
        pytest.param(["tokenfleet", "usage", "--help"], 0, id="tokenfleet-usage-argparse-help"),
        pytest.param(["kubectl-tokenfleet", "--help"], 0, id="plugin-argparse-help"),
    ],
)
def test_a_console_script_ends_quietly_when_its_reader_is_gone(argv: list[str], code: int) -> None:
    done = with_closed_stdout([str(SCRIPTS / argv[0]), *argv[1:]])
    assert done.stderr.decode() == ""
    assert done.returncode == code


#: Each entry point's main with its command replaced by one printing 3.3 MB: the pipe's 64 KiB
#: fill, so a print fails mid-way (not only the flush at exit).
NOISY = {
    "tokenfleet": """
import sys
from tokenfleet import cli
from tokenfleet.devstack import usage_report

def noisy(argv: list[str]) -> int:
    for _ in range(20000):
        print("row " * 40)
    return 0

usage_report.main = noisy
sys.exit(cli.main(["usage"]))
""",
    "kubectl-tokenfleet": """
import sys
from tokenfleet import kubectl_plugin

def noisy(args: object) -> int:
    for _ in range(20000):
        print("row " * 40)
    return 0

kubectl_plugin.run = noisy
sys.exit(kubectl_plugin.main(["pools"]))
""",
}


@pytest.mark.parametrize("entry", list(NOISY))
def test_output_larger_than_the_pipe_ends_quietly(entry: str) -> None:
    done = with_closed_stdout([sys.executable, "-c", NOISY[entry]])
    assert done.stderr.decode() == ""
    assert done.returncode == cli.SIGPIPE_EXIT == 141


@pytest.mark.parametrize("entry", list(NOISY))
def test_a_reader_that_reads_a_little_then_leaves(entry: str) -> None:
    """`… | head -c 20`: the reader takes some of the output, then closes."""
    process = subprocess.Popen(
        [sys.executable, "-c", NOISY[entry]], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.read(20) == b"row row row row row "
    process.stdout.close()
    assert process.wait(timeout=60) == 141
    assert process.stderr.read().decode() == ""

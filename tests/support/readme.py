"""Run an example's README as a user would: its ``sh`` blocks, in order, through bash, from the
repository root, on the platform `make up` leaves.

The only rewrites are where the test's platform differs from a user's: its state folder (a
user's is ``.tokenfleet/``) and its ports (a user's gateway is on 127.0.0.1:8080, Prometheus on
127.0.0.1:9090), because the test cannot take a developer's ports or state. Everything else —
commands, files, flags, the order — is the README's. A block that leaves a job running in the
background (``… &``, a traffic loop) keeps it until :meth:`Readme.stop`, which ends every
process the blocks started.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MARK = "__tokenfleet_readme_var__ "
FENCE = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(readme: Path) -> list[str]:
    """The README's ``sh`` blocks, in order."""
    return [m.group(1) for m in FENCE.finditer(readme.read_text())]


def shown(readme: Path, after: str) -> str:
    """The first fenced block after the line containing ``after``: output the README shows."""
    text = readme.read_text()
    rest = text[text.index(after) :]
    return rest.split("```", 2)[1].split("\n", 1)[1]


@dataclasses.dataclass(slots=True, kw_only=True)
class Platform:
    """What `make up` printed, for the test's platform."""

    state: Path  # the state folder (a user's .tokenfleet/)
    gateway: str  # http://127.0.0.1:PORT
    prometheus: str

    def env(self) -> dict[str, str]:
        """The environment after the two lines `make up` prints (KUBECONFIG, PATH)."""
        return {
            **os.environ,
            "KUBECONFIG": str(self.state / "kubeconfig"),
            "PATH": f"{self.state / 'bin'}:{os.environ['PATH']}",
        }

    @classmethod
    def of(cls, state: Path) -> Platform:
        """The platform a stack in ``state`` announced (its stack.json)."""
        info = json.loads((state / "stack.json").read_text())
        return cls(
            state=state,
            gateway=f"http://127.0.0.1:{info['ports']['gateway']}",
            prometheus=info["prometheus"],
        )

    def localize(self, text: str) -> str:
        """A README's text with the test platform's state folder and ports."""
        text = text.replace("$PWD/.tokenfleet", str(self.state))
        text = re.sub(r"(?<![\w/])\.tokenfleet/", f"{self.state}/", text)
        text = text.replace("http://127.0.0.1:8080", self.gateway)
        return text.replace("http://127.0.0.1:9090", self.prometheus)


@dataclasses.dataclass(slots=True)
class Readme:
    """One example's README, run block by block in one bash session's worth of state: each
    block runs in its own bash, so exported variables are carried by ``carry`` (names whose
    values a later block uses, read back after each block)."""

    path: Path
    platform: Platform
    logs: Path  # each block's stdout and stderr
    carry: tuple[str, ...] = ()
    _groups: list[int] = dataclasses.field(default_factory=list)
    _vars: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def blocks(self) -> list[str]:
        return blocks(self.path)

    def run(self, index: int, *, timeout: float = 300) -> str:
        """Run block ``index`` (0-based); fail with its output unless it exits 0. Output goes
        to files, not pipes: a job the block leaves in the background keeps its descriptors,
        and the block is done when bash exits, not when they close."""
        script = self.platform.localize(self.blocks[index])
        dump = "".join(f'\nprintf "{MARK}%s=%s\\n" {n} "${{{n}:-}}"' for n in self.carry)
        out_file, err_file = self.logs / f"block-{index}.out", self.logs / f"block-{index}.err"
        with out_file.open("w") as out, err_file.open("w") as err:
            proc = subprocess.Popen(
                ["bash", "-c", "set -euo pipefail\n" + script + dump],
                cwd=REPO,
                env={**self.platform.env(), **self._vars},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,  # background jobs stay in this group: stop() ends them
            )
            self._groups.append(proc.pid)
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.stop()
                raise
        printed, errors = out_file.read_text(), err_file.read_text()
        assert code == 0, (
            f"{self.path.parent.name} block {index} exited {code}:\n{printed}\n{errors}"
        )
        for line in printed.splitlines():
            if line.startswith(MARK):
                name, _, value = line.removeprefix(MARK).partition("=")
                self._vars[name] = value
        return "\n".join(line for line in printed.splitlines() if not line.startswith(MARK))

    def stop(self) -> None:
        """End every process a block left running (traffic loops and the like)."""
        for group in self._groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGTERM)


def kubectl(platform: Platform, *args: str) -> Any:
    """kubectl as the printed PATH and KUBECONFIG give it; JSON decoded when asked for."""
    done = subprocess.run(
        ["kubectl", *args], capture_output=True, text=True, env=platform.env(), check=True
    )
    return json.loads(done.stdout) if "json" in args else done.stdout


def devstack(bin_dir: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m tokenfleet.devstack`` as ``make up`` and ``make down`` run it."""
    return subprocess.run(
        [sys.executable, "-m", "tokenfleet.devstack", *args, "--bin-dir", str(bin_dir)],
        capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO,
    )  # fmt: skip


@contextlib.contextmanager
def made_up(
    state: Path, bin_dir: Path, *up_flags: str, timeout: float
) -> Iterator[tuple[Platform, str]]:
    """A platform as `make up` starts it in ``state`` (test ports and pod octet; ``up_flags``
    besides), with what `up` printed, and `make down` after; or, when
    ``TOKENFLEET_E2E_PLATFORM`` names a running one's state folder, that one (left running)."""
    reuse = os.environ.get("TOKENFLEET_E2E_PLATFORM")
    if reuse:
        yield Platform.of(Path(reuse).resolve()), ""
        return
    flags = ("--state-dir", str(state), "--ports", "auto", "--pod-octet", "auto", *up_flags)
    up = devstack(bin_dir, "up", *flags, timeout=timeout)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield Platform.of(state), up.stdout
    finally:
        down = devstack(bin_dir, "down", "--state-dir", str(state), timeout=timeout)
        assert down.returncode == 0, down.stdout + down.stderr

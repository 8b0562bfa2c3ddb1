"""What `make up` leaves for the user's shell under the state directory: `bin/` with kubectl and
helm (the stack's builds) and the tokenfleet and kubectl-tokenfleet console scripts, so the
one printed `export PATH=<state>/bin:$PATH` gives all four; `redis-url` (mode 0600) only when
Redis runs as a host process, for `tokenfleet usage`; both kept current by a second `up`, and
`down` taking the URL of the Redis it stopped away. Matrix: links fresh, stale and with a
missing target; host-process and chart modes; the printed text."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from tokenfleet.devstack import __main__ as devstack
from tokenfleet.devstack import ledger_discovery

SCRIPTS = Path(sysconfig.get_path("scripts"))


def fake_bin(tmp_path: Path, *names: str) -> Path:
    """A stack binary directory holding executables that say who they are."""
    folder = tmp_path / "cache-bin"
    folder.mkdir(exist_ok=True)
    for name in names:
        tool = folder / name
        tool.write_text(f"#!/bin/sh\necho {name} from the stack\n")
        tool.chmod(0o755)
    return folder


def info(*, children: list[str], redis_port: int = 26379, tmp_path: Path) -> dict[str, Any]:
    return {
        "pid": 4242,
        "kubeconfig": str(tmp_path / "state" / "kubeconfig"),
        "ports": {"redis": redis_port, "gateway": 8080},
        "children": {name: 1000 + i for i, name in enumerate(children)},
        "startSeconds": 1.0,
        "prometheus": "http://127.0.0.1:9090",
    }


def test_the_four_tools_and_where_they_come_from(tmp_path: Path) -> None:
    links = devstack.tool_links(bin_dir=tmp_path / "b", scripts_dir=tmp_path / "s")
    assert links == {
        "kubectl": tmp_path / "b" / "kubectl",
        "helm": tmp_path / "b" / "helm",
        "tokenfleet": tmp_path / "s" / "tokenfleet",
        "kubectl-tokenfleet": tmp_path / "s" / "kubectl-tokenfleet",
    }


def test_the_printed_path_finds_all_four(tmp_path: Path) -> None:
    """Only <state>/bin on PATH (and /usr/bin for sh): each tool resolves there and runs."""
    state = tmp_path / "state"
    bin_dir = fake_bin(tmp_path, "kubectl", "helm", "etcd")
    devstack.publish(state, info(children=[], tmp_path=tmp_path), bin_dir=bin_dir)
    text = devstack.usage_text(state, info(children=[], tmp_path=tmp_path))
    assert f"export PATH={state / 'bin'}:$PATH" in text
    env = {"PATH": f"{state / 'bin'}:/usr/bin:/bin"}
    where = "for t in kubectl helm tokenfleet kubectl-tokenfleet etcd; do command -v $t; done"
    found = subprocess.run(
        ["sh", "-c", where], env=env, capture_output=True, text=True, check=False
    ).stdout.split()
    assert found == [
        str(state / "bin" / n) for n in ("kubectl", "helm", "tokenfleet", "kubectl-tokenfleet")
    ]
    assert (
        subprocess.run(
            ["kubectl", "version"], env=env, capture_output=True, text=True, check=True
        ).stdout
        == "kubectl from the stack\n"
    )
    plugin = subprocess.run(
        ["kubectl-tokenfleet", "--help"], env=env, capture_output=True, text=True, check=False
    )
    assert plugin.returncode == 0 and "rollout" in plugin.stdout
    cli = subprocess.run(["tokenfleet"], env=env, capture_output=True, text=True, check=False)
    assert "usage: tokenfleet COMMAND" in cli.stdout


def test_a_second_up_replaces_stale_links_and_drops_missing_ones(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "bin").mkdir(parents=True)
    (state / "bin" / "kubectl").symlink_to(tmp_path / "gone" / "kubectl")  # an old cache
    (state / "bin" / "helm").symlink_to(tmp_path / "gone" / "helm")
    bin_dir = fake_bin(tmp_path, "kubectl")  # helm not built
    missing = devstack.publish(state, info(children=[], tmp_path=tmp_path), bin_dir=bin_dir)
    assert missing == ["helm"]
    assert (state / "bin" / "kubectl").resolve() == bin_dir / "kubectl"
    assert not (state / "bin" / "helm").is_symlink()
    assert (state / "bin" / "tokenfleet").resolve() == (SCRIPTS / "tokenfleet").resolve()


@pytest.mark.parametrize(
    ("children", "url"),
    [
        pytest.param(
            ["redis", "tokenfleet-gateway"], "redis://127.0.0.1:26379/0", id="host-processes"
        ),
        pytest.param(["region-b-gateway"], None, id="chart-on-the-real-node"),
    ],
)
def test_the_local_ledger_url(tmp_path: Path, children: list[str], url: str | None) -> None:
    assert devstack.local_ledger_url(info(children=children, tmp_path=tmp_path)) == url


def test_redis_url_is_written_private_beside_the_kubeconfig_and_withdrawn(tmp_path: Path) -> None:
    state = tmp_path / "state"
    bin_dir = fake_bin(tmp_path, "kubectl", "helm")
    host = info(children=["redis"], redis_port=31999, tmp_path=tmp_path)
    devstack.publish(state, host, bin_dir=bin_dir)
    written = state / ledger_discovery.LOCAL_URL_FILE
    assert written.parent == Path(host["kubeconfig"]).parent
    assert written.read_text() == "redis://127.0.0.1:31999/0\n"
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    devstack.publish(state, info(children=[], tmp_path=tmp_path), bin_dir=bin_dir)  # chart mode
    assert not written.exists()
    devstack.publish(state, host, bin_dir=bin_dir)
    devstack.withdraw(state)
    assert not written.exists()
    assert (state / "bin" / "kubectl").is_symlink()  # the tools stay (make clean removes them)


def test_down_withdraws_the_url_when_nothing_runs(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / ledger_discovery.LOCAL_URL_FILE).write_text("redis://127.0.0.1:1/0\n")
    done = subprocess.run(
        [sys.executable, "-m", "tokenfleet.devstack", "down", "--state-dir", str(state)],
        capture_output=True, text=True, check=False, env={**os.environ},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not (state / ledger_discovery.LOCAL_URL_FILE).exists()


def test_the_usage_text_points_at_the_ledger_command(tmp_path: Path) -> None:
    text = devstack.usage_text(tmp_path / "state", info(children=["redis"], tmp_path=tmp_path))
    assert "tokenfleet usage --since 1h" in text
    assert "kubectl tokenfleet pools" in text

"""Flags where users put them: `kubectl tokenfleet`'s kubectl flags (-n, --kubeconfig,
--context, -o) before or after the subcommand, the later one winning when both are given; the
same for the local platform's flags (`tokenfleet dev` / `python -m tokenfleet.devstack`), each
command keeping its own defaults."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from tokenfleet import kubectl_plugin
from tokenfleet.devstack import __main__ as devstack
from tokenfleet.gateway import key_secrets


def plugin_args(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> argparse.Namespace:
    """What `kubectl tokenfleet ARGV` hands to its run step (parsed through main)."""
    seen: list[argparse.Namespace] = []

    def run(args: argparse.Namespace) -> int:
        seen.append(args)
        return 0

    monkeypatch.setattr(kubectl_plugin, "run", run)
    assert kubectl_plugin.main(argv) == 0
    return seen[0]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(
            ["rollout", "status", "chat", "-n", "prod"],
            {"namespace": "prod", "action": "status", "name": "chat"},
            id="namespace-after-the-subcommand",
        ),
        pytest.param(
            ["-n", "prod", "rollout", "status", "chat"],
            {"namespace": "prod", "action": "status", "name": "chat"},
            id="namespace-before-the-subcommand",
        ),
        pytest.param(
            ["rollout", "-n", "prod", "history", "chat"],
            {"namespace": "prod", "action": "history"},
            id="namespace-between-the-subcommand-and-its-arguments",
        ),
        pytest.param(
            ["-n", "first", "rollout", "status", "chat", "--namespace", "second"],
            {"namespace": "second"},
            id="both-positions-the-later-wins",
        ),
        pytest.param(
            ["rollout", "status", "chat"],
            {"namespace": "", "kubeconfig": None, "context": None, "output": "table"},
            id="defaults-when-given-nowhere",
        ),
        pytest.param(
            ["rollout", "status", "chat", "--kubeconfig", "/k", "--context", "c", "-o", "json"],
            {"kubeconfig": "/k", "context": "c", "output": "json"},
            id="kubeconfig-context-output-after",
        ),
        pytest.param(
            ["--kubeconfig", "/k", "--context", "c", "-o", "yaml", "pools"],
            {"kubeconfig": "/k", "context": "c", "output": "yaml", "command": "pools"},
            id="kubeconfig-context-output-before",
        ),
        pytest.param(
            ["pools", "-o", "json", "-n", "prod"],
            {"output": "json", "namespace": "prod", "command": "pools"},
            id="pools-flags-after",
        ),
        pytest.param(
            ["top", "-n", "prod", "--prometheus", "http://p:9090"],
            {"namespace": "prod", "prometheus": "http://p:9090", "command": "top"},
            id="top-flags-mixed-with-its-own",
        ),
    ],
)
def test_kubectl_flags_are_accepted_before_or_after_the_subcommand(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], expected: dict[str, Any]
) -> None:
    args = plugin_args(monkeypatch, argv)
    assert {key: getattr(args, key) for key in expected} == expected


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["rollout", "status", "chat", "-o", "xml"], id="bad-output-after"),
        pytest.param(["-o", "xml", "pools"], id="bad-output-before"),
        pytest.param(["rollout", "status", "chat", "--nope"], id="unknown-flag"),
    ],
)
def test_a_bad_flag_is_refused_in_either_position(
    monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    monkeypatch.setattr(kubectl_plugin, "run", lambda args: 0)
    with pytest.raises(SystemExit) as refused:
        kubectl_plugin.main(argv)
    assert refused.value.code == 2


def devstack_args(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> argparse.Namespace:
    """What `python -m tokenfleet.devstack ARGV` hands to its command."""
    seen: list[argparse.Namespace] = []

    def command(args: argparse.Namespace) -> int:
        seen.append(args)
        return 0

    for name in ("cmd_up", "cmd_run", "cmd_down", "cmd_status"):
        monkeypatch.setattr(devstack, name, command)
    monkeypatch.delenv("TOKENFLEET_REAL_NODE", raising=False)
    monkeypatch.delenv("TOKENFLEET_PORTS", raising=False)
    assert devstack.main(argv) == 0
    return seen[0]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(
            ["down", "--state-dir", "/s"],
            {"command": "down", "state_dir": Path("/s")},
            id="state-dir-after",
        ),
        pytest.param(
            ["--state-dir", "/s", "down"],
            {"command": "down", "state_dir": Path("/s")},
            id="state-dir-before",
        ),
        pytest.param(
            ["--state-dir", "/a", "status", "--state-dir", "/b"],
            {"state_dir": Path("/b")},
            id="both-positions-the-later-wins",
        ),
        pytest.param(
            ["up"],
            {
                "state_dir": Path(".tokenfleet"),
                "operator": True,
                "platform": True,
                "ports": "default",
            },
            id="up-defaults",
        ),
        pytest.param(
            ["run"],
            {"operator": False, "platform": False, "real_node": False, "nodes_per_zone": 2},
            id="run-defaults",
        ),
        pytest.param(
            ["--no-platform", "--ports", "auto", "up", "--nodes-per-zone", "3"],
            {"platform": False, "operator": True, "ports": "auto", "nodes_per_zone": 3},
            id="up-flags-on-both-sides",
        ),
    ],
)
def test_devstack_flags_are_accepted_before_or_after_the_command(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], expected: dict[str, Any]
) -> None:
    args = devstack_args(monkeypatch, argv)
    assert {key: getattr(args, key) for key in expected} == expected


def test_devstack_still_checks_ports_given_before_the_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(SystemExit) as refused:
        devstack_args(monkeypatch, ["--ports", "sometimes", "down"])
    assert refused.value.code == 2


@pytest.mark.parametrize(
    ("argv", "namespace"),
    [
        pytest.param(["create-key", "acme"], "default", id="default"),
        pytest.param(["create-key", "acme", "-n", "team"], "team", id="after"),
        pytest.param(["-n", "team", "create-key", "acme"], "team", id="before"),
        pytest.param(["-n", "a", "create-key", "acme", "--namespace", "b"], "b", id="after-wins"),
    ],
)
def test_tenant_namespace_is_accepted_before_or_after_the_subcommand(
    argv: list[str], namespace: str
) -> None:
    args = key_secrets.parse(argv)
    assert (args.name, args.namespace) == ("acme", namespace)

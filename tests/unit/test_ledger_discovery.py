"""Where `tokenfleet usage` looks for the ledger, without a cluster: its flags; --redis (or
$TOKENFLEET_REDIS_URL) winning over everything; the local platform's `redis-url` beside the
kubeconfig (--kubeconfig, or the first of $KUBECONFIG) when the cluster gives no answer; and the
error naming what was tried and what to pass when nothing is found. The cluster paths (the
gateway's Deployment and Secret, direct or port-forwarded) are in
tests/integration/test_usage_discovery.py."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from tokenfleet.devstack import ledger_discovery, usage_report


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(
            ["--since", "1h", "--namespace", "tf", "--kubeconfig", "/k", "--context", "c"],
            {"since": "1h", "namespace": "tf", "kubeconfig": "/k", "context": "c"},
            id="cluster-flags",
        ),
        pytest.param(["-n", "tf"], {"namespace": "tf"}, id="short-namespace"),
        pytest.param(
            [],
            {"namespace": "tokenfleet-system", "kubeconfig": None, "context": None, "redis": ""},
            id="defaults",
        ),
    ],
)
def test_usage_takes_where_to_find_the_ledger(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], expected: dict[str, Any]
) -> None:
    monkeypatch.delenv("TOKENFLEET_REDIS_URL", raising=False)
    args = usage_report.parse_args(argv)
    assert {key: getattr(args, key) for key in expected} == expected


def found(where: ledger_discovery.Where) -> str:
    async def look() -> str:
        async with ledger_discovery.ledger_url(where) as url:
            return url

    return asyncio.run(look())


def test_an_explicit_url_wins_over_the_local_file(tmp_path: Path) -> None:
    (tmp_path / "redis-url").write_text("redis://127.0.0.1:1/0\n")
    where = ledger_discovery.Where(redis="redis://given:6379/0", kubeconfig=str(tmp_path / "k"))
    assert found(where) == "redis://given:6379/0"


@pytest.mark.parametrize("how", ["flag", "environment", "environment-list"])
def test_the_local_platforms_file_beside_the_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """No cluster answers (this kubeconfig does not exist): the file `make up` wrote is read."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "redis-url").write_text("redis://127.0.0.1:26379/0\n")
    config = str(state / "kubeconfig")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    if how == "environment":
        monkeypatch.setenv("KUBECONFIG", config)
    if how == "environment-list":
        monkeypatch.setenv("KUBECONFIG", os.pathsep.join([config, str(tmp_path / "other")]))
    where = ledger_discovery.Where(kubeconfig=config if how == "flag" else None)
    assert found(where) == "redis://127.0.0.1:26379/0"


def test_nothing_found_says_what_was_tried_and_what_to_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    config = tmp_path / "kubeconfig"
    with pytest.raises(ledger_discovery.NotFound) as nothing:
        found(ledger_discovery.Where(kubeconfig=str(config)))
    said = str(nothing.value)
    assert "no usable kubeconfig" in said
    assert f"no {tmp_path / 'redis-url'}" in said
    assert "Pass --redis URL or set TOKENFLEET_REDIS_URL" in said


KUBECONFIG_REFUSED = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:%d"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


def test_a_stopped_api_server_is_told_apart_from_a_bad_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After `make down`: the kubeconfig is fine, nothing listens at its server (port 1)."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG_REFUSED % 1)
    with pytest.raises(ledger_discovery.NotFound) as nothing:
        found(ledger_discovery.Where(kubeconfig=str(config)))
    said = str(nothing.value)
    assert "the API server did not answer (" in said and "Connect call failed" in said
    assert "kubeconfig (" not in said and "SSLContext" not in said


def test_the_command_reports_it_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TOKENFLEET_REDIS_URL", raising=False)
    code = usage_report.main(["--kubeconfig", str(tmp_path / "kubeconfig")])
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no ledger found: ") and err.count("\n") == 1

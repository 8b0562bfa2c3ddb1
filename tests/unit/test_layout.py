"""Source-root layout: operator/ and gateway/ are roots of one namespace package, not packages."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("root", ["operator", "gateway"])
def test_source_roots_are_not_packages(root: str) -> None:
    assert not (REPO / root / "__init__.py").exists(), f"{root}/__init__.py would shadow a name"
    assert not (REPO / root / "tokenfleet" / "__init__.py").exists(), "tokenfleet must stay PEP 420"


def test_import_operator_is_still_the_standard_library() -> None:
    import operator

    assert operator.add(2, 3) == 5
    assert "site-packages" not in str(operator.__file__)
    assert not str(operator.__file__).startswith(str(REPO))


def test_one_namespace_package_spans_both_roots() -> None:
    import tokenfleet

    paths = {Path(p).resolve() for p in tokenfleet.__path__}
    assert paths == {REPO / "operator" / "tokenfleet", REPO / "gateway" / "tokenfleet"}
    assert importlib.import_module("tokenfleet.operator").__file__
    assert importlib.import_module("tokenfleet.gateway").__file__


def test_cli_lists_its_commands_and_rejects_unknown_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tokenfleet import cli

    assert cli.main(["--help"]) == 0
    assert "operator" in capsys.readouterr().out
    assert cli.main(["frobnicate"]) == 2
    assert "unknown command" in capsys.readouterr().err

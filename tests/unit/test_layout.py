"""Source-root layout: one root per role, each a portion of one PEP 420 namespace package.

Covers: the roots pyproject packages are exactly the folders on disk that hold ``tokenfleet/``;
each root holds only ``tokenfleet/`` and its README (the worker image's root also its
Dockerfile); no root and no ``tokenfleet/`` is a regular package; ``import operator`` is still
the standard library; and the CLI dispatcher answers.
"""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
HATCH = PYPROJECT["tool"]["hatch"]["build"]
ROOTS = HATCH["targets"]["wheel"]["sources"]
#: What a root may hold beside tokenfleet/ and README.md.
EXTRA = {"worker-image": {"Dockerfile", "Dockerfile.dockerignore"}}


def test_the_roots_pyproject_packages_are_the_folders_on_disk() -> None:
    # A source root is a top-level folder whose tokenfleet/ holds Python (charts/tokenfleet is
    # the Helm chart, not a root).
    on_disk = {p.relative_to(REPO).parts[0] for p in REPO.glob("*/tokenfleet/**/*.py")}
    assert set(ROOTS) == on_disk
    assert HATCH["dev-mode-dirs"] == ROOTS, "an editable install would drop a root"
    assert HATCH["targets"]["wheel"]["only-include"] == [f"{r}/tokenfleet" for r in ROOTS]
    assert PYPROJECT["tool"]["mypy"]["mypy_path"] == ROOTS
    makefile = (REPO / "Makefile").read_text()
    assert f"ROOTS  := {' '.join(ROOTS)}\n" in makefile


@pytest.mark.parametrize("root", ROOTS)
def test_each_root_holds_only_its_namespace_portion_and_a_readme(root: str) -> None:
    names = {p.name for p in (REPO / root).iterdir() if p.name != "__pycache__"}
    assert names == {"tokenfleet", "README.md"} | EXTRA.get(root, set())


@pytest.mark.parametrize("root", ROOTS)
def test_source_roots_are_not_packages(root: str) -> None:
    assert not (REPO / root / "__init__.py").exists(), f"{root}/__init__.py would shadow a name"
    assert not (REPO / root / "tokenfleet" / "__init__.py").exists(), "tokenfleet must stay PEP 420"


def test_import_operator_is_still_the_standard_library() -> None:
    import operator

    assert operator.add(2, 3) == 5
    assert "site-packages" not in str(operator.__file__)
    assert not str(operator.__file__).startswith(str(REPO))


def test_one_namespace_package_spans_every_root() -> None:
    import tokenfleet

    paths = {Path(p).resolve() for p in tokenfleet.__path__}
    assert paths == {REPO / root / "tokenfleet" for root in ROOTS}
    for package in (
        "api",
        "signals",
        "operator",
        "gateway",
        "signing",
        "worker",
        "sim",
        "capacity",
        "devstack",
        "cli",
    ):
        assert importlib.import_module(f"tokenfleet.{package}").__file__


def test_cli_lists_its_commands_and_rejects_unknown_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tokenfleet import cli

    assert cli.main(["--help"]) == 0
    assert "operator" in capsys.readouterr().out
    assert cli.main(["frobnicate"]) == 2
    assert "unknown command" in capsys.readouterr().err


def test_test_modules_have_unique_basenames() -> None:
    """pytest imports test modules by basename (rootdir, no __init__.py): two files of one
    name in different folders stop the whole run at collection."""
    names = [p.name for p in (REPO / "tests").rglob("test_*.py")]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []

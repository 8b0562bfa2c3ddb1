"""The compiled cores (tokenfleet.native): in use after ``make native``, and a build is used only
for the exact sources it was compiled from (an edited file runs interpreted, never stale)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import tokenfleet.gateway.policy.routing
import tokenfleet.sim.engine
from tokenfleet import native


@pytest.fixture
def fresh_lookup() -> Iterator[None]:
    native._fresh_build.cache_clear()
    yield
    native._fresh_build.cache_clear()


def test_the_compiled_cores_are_in_use() -> None:
    modules = [tokenfleet.gateway.policy.routing, tokenfleet.sim.engine]
    if native.disabled():  # TOKENFLEET_NATIVE=0: the switch must hold
        assert not native.active()
        assert all(str(m.__file__).endswith(".py") for m in modules)
        return
    assert native.active(), "no compiled build for these sources: run `make native`"
    build = native.build_dir()
    assert all(Path(str(m.__file__)).is_relative_to(build) for m in modules)


def test_a_build_of_other_sources_is_never_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_lookup: None
) -> None:
    monkeypatch.setenv("TOKENFLEET_CACHE", str(tmp_path))
    monkeypatch.delenv("TOKENFLEET_NATIVE", raising=False)
    other = tmp_path / "native" / f"{native.key()[:-4]}0000"
    (other / "tokenfleet" / "sim").mkdir(parents=True)
    (other / native.DONE).write_text("an older build\n")
    assert native.search_path("tokenfleet.sim") == []

    half = native.build_dir()  # the right key, but the build never finished
    (half / "tokenfleet" / "sim").mkdir(parents=True)
    native._fresh_build.cache_clear()
    assert native.search_path("tokenfleet.sim") == []


def test_editing_a_compiled_source_changes_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copies = {}
    for module in native.MODULES:
        copies[module] = tmp_path / f"{module}.py"
        shutil.copy(native.source(module), copies[module])
    monkeypatch.setattr(native, "source", copies.__getitem__)
    before = native.key()
    routing = copies["tokenfleet.gateway.policy.routing"]
    routing.write_text(routing.read_text() + "\n# an edit\n")
    assert native.key() != before


def test_the_switch_turns_the_build_off(
    monkeypatch: pytest.MonkeyPatch, fresh_lookup: None
) -> None:
    monkeypatch.setenv("TOKENFLEET_NATIVE", "0")
    assert native.search_path("tokenfleet.sim") == []


def test_a_damaged_build_falls_back_to_the_sources_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_lookup: None
) -> None:
    monkeypatch.setenv("TOKENFLEET_CACHE", str(tmp_path))
    monkeypatch.delenv("TOKENFLEET_NATIVE", raising=False)
    monkeypatch.delitem(sys.modules, f"{native.GROUP}__mypyc", raising=False)
    build = native.build_dir()
    build.mkdir(parents=True)
    (build / f"{native.GROUP}__mypyc{EXTENSION_SUFFIXES[0]}").write_bytes(b"not a library")
    (build / native.DONE).write_text(build.name + "\n")
    with pytest.warns(RuntimeWarning, match="do not load"):
        assert native.search_path("tokenfleet.sim") == []
    assert f"{native.GROUP}__mypyc" not in sys.modules

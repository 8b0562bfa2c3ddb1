"""The Go binary sets share one version of every shared module (tools/align_go_sets.py).

A cold `make up` compiles each module version once; a bump that leaves two sets on two versions of
a shared module compiles it twice. This fails then, naming the module and the fix.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("align_go_sets", REPO / "tools/align_go_sets.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["align_go_sets"] = module
    spec.loader.exec_module(module)
    return module


align = _load()


def test_every_shared_module_has_one_version_per_line() -> None:
    split = align.split_modules(align.read_all())
    assert not split, "run `python tools/align_go_sets.py` (then make binaries):\n" + "\n".join(
        split
    )


def test_every_set_is_aligned_and_builds_something() -> None:
    every = align.SETS + align.OWN_LINE
    assert sorted(every) == sorted(p.parent.name for p in (REPO / "tools").glob("*/go.mod")), (
        "a new binary set must be placed on a line in tools/align_go_sets.py"
    )
    for name in every:  # tidy drops every requirement of a module that names no tool
        text = (REPO / "tools" / name / "go.mod").read_text()
        assert (
            "\ntool " in text or "tool (" in text or (REPO / "tools" / name / "tools.go").exists()
        )


@pytest.mark.parametrize(
    ("lower", "higher"),
    [
        ("v1.2.3", "v1.10.0"),
        ("v1.36.12-0.20260120151049-f2248ac996af", "v1.36.12"),  # pseudo-version before release
        ("v1.36.11", "v1.36.12-0.20260120151049-f2248ac996af"),  # ... and after its base
        ("v0.0.0-20250910181357-589584f1c912", "v0.0.0-20260317180543-43fb72c5454a"),
        ("v1.0.0-rc.1", "v1.0.0-rc.2"),
        ("v1.0.0-rc.9", "v1.0.0-rc.10"),  # numeric identifiers compare as numbers
        ("v2.0.0+incompatible", "v2.1.0+incompatible"),
    ],
)
def test_versions_order_like_go(lower: str, higher: str) -> None:
    assert align.version_key(lower) < align.version_key(higher)


def test_requirements_read_blocks_single_lines_and_pinning_replaces() -> None:
    go_mod = """module x

go 1.26.0

require example.com/single v1.0.0

require (
\texample.com/a v1.2.0 // indirect
\tk8s.io/api v0.0.0
)

replace (
\tk8s.io/api => k8s.io/api v0.36.3
\texample.com/fork => example.com/other v9.0.0
)
"""
    assert align.requirements(go_mod) == {
        "example.com/single": "v1.0.0",
        "example.com/a": "v1.2.0",
        "k8s.io/api": "v0.36.3",
    }
    assert align.replaced(go_mod) == {"k8s.io/api"}


def test_kubernetes_libraries_follow_the_release_and_the_rest_go_to_the_highest() -> None:
    reqs = {
        "k8s": {"k8s.io/client-go": "v0.36.3", "google.golang.org/grpc": "v1.79.3"},
        "kwok": {"k8s.io/client-go": "v0.36.1", "google.golang.org/grpc": "v1.81.1"},
        "helm": {"k8s.io/client-go": "v0.37.2", "google.golang.org/grpc": "v1.83.2"},
        "prometheus": {"k8s.io/client-go": "v0.37.1", "sigs.k8s.io/only-here": "v1.0.0"},
        "containerd": {"k8s.io/client-go": "v0.37.2", "k8s.io/cri-api": "v0.37.0"},
        "etcd": {"k8s.io/cri-api": "v0.36.3"},
    }
    assert align.targets(reqs) == {
        "k8s": {"google.golang.org/grpc": "v1.83.2"},
        "kwok": {"k8s.io/client-go": "v0.36.3", "google.golang.org/grpc": "v1.83.2"},
        # pinned down to the release, not up to the newest client
        "helm": {"k8s.io/client-go": "v0.36.3"},
        "prometheus": {"k8s.io/client-go": "v0.36.3"},
        # the exemption keeps containerd's CRI API; the release's sets are not raised to it
        "containerd": {"k8s.io/client-go": "v0.36.3"},
        "etcd": {},
    }


def test_going_down_is_a_replace_line() -> None:
    # a requirement can only raise a version (minimal version selection): -require would be a no-op
    assert align.edit_flag("k8s.io/client-go", "v0.36.3", current="v0.37.2", pinned=False) == (
        "-replace=k8s.io/client-go=k8s.io/client-go@v0.36.3"
    )
    assert align.edit_flag(
        "google.golang.org/grpc", "v1.83.2", current="v1.79.3", pinned=False
    ) == ("-require=google.golang.org/grpc@v1.83.2")
    assert align.edit_flag("k8s.io/api", "v0.36.3", current="v0.36.1", pinned=True).startswith(
        "-replace="
    )

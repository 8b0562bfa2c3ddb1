"""Align the Go binary sets on one version of each shared module: a cold build compiles it once.

tools/build.sh builds seven wrapper modules (tools/<set>/go.mod) side by side with one Go build
cache. A package is compiled once for every version of its module in use: before alignment the
sets compiled k8s.io/client-go at six versions and grpc at four, about 30,400 Go files in all for
16,700 distinct ones. Go's cache keys a compiled package by its sources and its dependencies' keys
(not by -tags or -ldflags), so one version per module lets every set reuse what another compiled.

Kubernetes' own libraries (k8s.io/*, sigs.k8s.io/*) follow the release of k8s.io/kubernetes (the
kubernetes set pins its staging modules to it): the sets that require a newer client (helm,
Prometheus, containerd) are pinned down to that release with replace lines, since a requirement
can only raise a version. That halves what a cold build compiles of client-go and k8s.io/api (the
largest modules after Kubernetes itself); test_chart, test_prometheus and test_real_node prove the
pinned binaries work. The one exemption is a module whose newer API a set needs (containerd v2.4
uses CRI signals that k8s.io/cri-api has from v0.37): it keeps its own version, listed below.
Every other shared module goes to the highest version any set requires — never lower.

    python tools/align_go_sets.py           # edit go.mod files, then `go mod tidy` each set
    python tools/align_go_sets.py --check   # exit 1 when a shared module has two versions

tests/unit/test_go_sets.py runs the check, so a version bump that splits a module again fails.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
#: The sets on Kubernetes' own release line already (their requirements are at or below it).
KUBERNETES_LINE = ("k8s", "kwok", "sim", "etcd")
#: The sets tracking a newer Kubernetes client, pinned down to the release.
NEWER_CLIENT_LINE = ("helm", "prometheus", "containerd")
#: (set, module) pairs that keep a newer Kubernetes library: the set uses API the release lacks.
NEEDS_NEWER = frozenset({("containerd", "k8s.io/cri-api"), ("containerd", "k8s.io/cri-streaming")})
SETS = KUBERNETES_LINE + NEWER_CLIENT_LINE
#: Sets that keep their own versions, outside the alignment: Jaeger v1.75.0 is an OpenTelemetry
#: Collector build; aligning it would move 93 of its modules (the Collector's core, OTel, gRPC,
#: k8s.io client) off the versions that release is built and tested with, for a set built once.
OWN_LINE = ("jaeger",)
REQUIRE = re.compile(r"^(?:require\s+)?([A-Za-z0-9._~/-]+)\s+(v[0-9][^\s]*)(?:\s*//.*)?$")
#: ``path => path version`` (the kubernetes set pins its staging modules this way).
REPLACE = re.compile(r"^(?:replace\s+)?([A-Za-z0-9._~/-]+)\s+=>\s+\1\s+(v[0-9][^\s]*)")


def _directives(go_mod: str, keyword: str) -> list[str]:
    lines, in_block = [], False
    for raw in go_mod.splitlines():
        line = raw.strip()
        if line == f"{keyword} (":
            in_block = True
        elif in_block and line == ")":
            in_block = False
        elif in_block or line.startswith(f"{keyword} "):
            lines.append(line)
    return lines


def requirements(go_mod: str) -> dict[str, str]:
    """Module path → the version the build uses: required, or pinned by a replace line."""
    found = {
        m.group(1): m.group(2)
        for line in _directives(go_mod, "require")
        if (m := REQUIRE.match(line))
    }
    for line in _directives(go_mod, "replace"):
        if m := REPLACE.match(line):
            found[m.group(1)] = m.group(2)
    return found


def replaced(go_mod: str) -> set[str]:
    return {m.group(1) for line in _directives(go_mod, "replace") if (m := REPLACE.match(line))}


def _identifiers(pre: str) -> list[tuple[int, int | str]]:
    return [(0, int(p)) if p.isdigit() else (1, p) for p in pre.split(".")]


def version_key(version: str) -> tuple[object, ...]:
    """A sort key for Go module versions (semver, pseudo-versions, +incompatible)."""
    core, _, pre = version.removeprefix("v").split("+")[0].partition("-")
    numbers = tuple(int(x) for x in core.split("."))
    # a release sorts after its pre-releases (and after pseudo-versions based on them)
    return (numbers, 1, ()) if not pre else (numbers, 0, tuple(_identifiers(pre)))


def _is_kubernetes_library(path: str) -> bool:
    return path.startswith(("k8s.io/", "sigs.k8s.io/"))


def _wanted(name: str, path: str, reqs: Mapping[str, Mapping[str, str]]) -> str:
    """The version set ``name`` should use of module ``path``."""
    if _is_kubernetes_library(path) and (name, path) not in NEEDS_NEWER:
        # the release's version; for a library Kubernetes does not use, the line's highest
        line = [p for p in KUBERNETES_LINE if path in reqs.get(p, {})]
        peers = line or [p for p in reqs if (p, path) not in NEEDS_NEWER]
    else:
        peers = [p for p in reqs if (p, path) not in NEEDS_NEWER or p == name]
    versions = [reqs[p][path] for p in peers if path in reqs[p]]
    return max(versions, key=version_key)


def targets(reqs: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    """Set → {module → the version it should use}, for modules shared with another set."""
    out: dict[str, dict[str, str]] = {name: {} for name in reqs}
    for name, mine in reqs.items():
        for path, version in mine.items():
            best = _wanted(name, path, reqs)
            if best != version:
                out[name][path] = best
    return out


def read_all() -> dict[str, dict[str, str]]:
    return {name: requirements((TOOLS / name / "go.mod").read_text()) for name in SETS}


def split_modules(reqs: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Shared modules required at more than one version where the lines say one: for humans."""
    return [
        f"{name}: {path} {reqs[name][path]} (another set has {want})"
        for name, wanted in targets(reqs).items()
        for path, want in sorted(wanted.items())
    ]


def edit_flag(path: str, version: str, *, current: str, pinned: bool) -> str:
    """The `go mod edit` flag that moves ``path`` to ``version``.

    A requirement only raises a version (minimal version selection), so going down, or moving a
    module a replace line already pins, takes a replace line.
    """
    if pinned or version_key(version) < version_key(current):
        return f"-replace={path}={path}@{version}"
    return f"-require={path}@{version}"


def align() -> None:
    for round_ in range(1, 8):
        wanted = targets(read_all())
        if not any(wanted.values()):
            print(f"aligned after {round_ - 1} round(s)")
            return
        for name, mods in wanted.items():
            if not mods:
                continue
            print(f"round {round_}: {name}: {len(mods)} module(s) moved", file=sys.stderr)
            pinned = replaced((TOOLS / name / "go.mod").read_text())
            current = read_all()[name]
            edits = [
                edit_flag(p, v, current=current[p], pinned=p in pinned)
                for p, v in sorted(mods.items())
            ]
            subprocess.run(["go", "mod", "edit", *edits], cwd=TOOLS / name, check=True)
            subprocess.run(["go", "mod", "tidy"], cwd=TOOLS / name, check=True)
    raise SystemExit("still split after 7 rounds: " + "; ".join(split_modules(read_all())))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report split modules, edit nothing")
    args = parser.parse_args()
    if args.check:
        split = split_modules(read_all())
        for line in split:
            print(line)
        return 1 if split else 0
    align()
    return 0


if __name__ == "__main__":
    sys.exit(main())

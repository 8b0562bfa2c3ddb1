"""Compile the hot paths (tokenfleet.native.MODULES) with mypyc into the per-user cache.

    python tools/build_native.py          build unless a build for these sources exists
    python tools/build_native.py --print  print the build directory and exit

A build is keyed by the Python ABI and the sources' hash (tokenfleet.native.key), so a checkout
reuses it until one of the compiled files changes; a stale build is never loaded. It takes about
a minute on two cores: mypy's analysis, then gcc.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import tokenfleet
from tokenfleet import native

REPO = Path(__file__).resolve().parents[1]


def build(out: Path) -> None:
    # Imported here: only a build needs them (mypy is a dev dependency).
    from mypyc.build import mypycify
    from setuptools import setup  # type: ignore[import-untyped]

    files = [str(native.source(m)) for m in native.MODULES]
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=out.parent))
    try:
        # mypy resolves the project's source roots from MYPYPATH; setuptools must not see
        # the repo's pyproject.toml (it is hatchling's), so the build runs in its own folder.
        os.environ["MYPYPATH"] = os.pathsep.join(str(Path(p).parent) for p in tokenfleet.__path__)
        cwd = Path.cwd()
        os.chdir(work)
        try:
            extensions = mypycify(
                ["--config-file", str(REPO / "pyproject.toml"), *files],
                opt_level="3",
                group_name=native.GROUP,
                target_dir=str(work / "c"),
            )
            setup(
                name="tokenfleet-native",
                ext_modules=extensions,
                script_args=[
                    "--quiet",
                    "build_ext",
                    "--build-lib",
                    str(work / "lib"),
                    "--build-temp",
                    str(work / "obj"),
                    "--parallel",
                    str(os.cpu_count() or 1),
                ],
            )
        finally:
            os.chdir(cwd)
        if native.key() != out.name:
            raise SystemExit("the compiled sources changed during the build: run it again")
        (work / "lib" / native.DONE).write_text(out.name + "\n")
        if out.exists():  # another build finished first: same sources, same result
            return
        (work / "lib").rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print", action="store_true", help="print the build directory")
    args = parser.parse_args()
    out = native.build_dir()
    if args.print:
        print(out)
        return 0
    if (out / native.DONE).is_file():
        print(f"compiled cores: up to date ({out.name})")
        return 0
    print(f"compiling the routing, admission and simulator cores with mypyc into {out} ...")
    started = time.monotonic()
    build(out)
    print(f"compiled cores: built in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

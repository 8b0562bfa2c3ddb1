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
wheelhouse() { # lock-file → directory
  local dir=$cache/wheels/$(sha256sum "$1" | cut -c1-12)
  if [ ! -f "$dir/.complete" ]; then
    rm -rf "$dir" && mkdir -p "$dir"
    "${PYTHON:-python3}" -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
      --only-binary :all: --python-version 3.11 --implementation cp --platform manylinux2014_x86_64 \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_34_x86_64 -d "$dir" -r "$1" >&2
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
includes=python3,python3-venv,ca-certificates,redis-server
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

echo "$images/current"

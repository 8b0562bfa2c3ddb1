#!/usr/bin/env bash
# Builds the local stack's binaries from Go modules into a per-user cache keyed by version, and
# skips any set that is already there. Prints the bin directory of each set on stdout (last line:
# one directory holding links to all binaries). Progress goes to stderr.
#
#   tools/build.sh            build what is missing, print the links directory
#   tools/build.sh sim ...    only the named sets (tools/images.sh asks for the simulator's)
#   TOKENFLEET_CACHE=DIR      cache root (default ~/.cache/tokenfleet)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${TOKENFLEET_CACHE:-$HOME/.cache/tokenfleet}

command -v go >/dev/null || {
  echo "error: Go is not installed. Install Go >= 1.26 (https://go.dev/doc/install, or 'apt-get install golang-1.26' where available) and run again." >&2
  exit 2
}

# The version a wrapper module requires of a module (go.mod may use a single line or a block).
modver() {
  (cd "$here/$1" && go list -m -f '{{.Version}}' "$2")
}

# Cache key: the main requirement's version plus a hash of the wrapper's files (go.mod, go.sum and
# any local stand-in module), so that a changed pin or replace line rebuilds instead of reusing a
# stale binary.
key() {
  local files
  files=$(cd "$here/$1" && find . -type f | LC_ALL=C sort)
  echo "$1-$(modver "$1" "$2")-$(cd "$here/$1" && cat $files | sha256sum | cut -c1-10)"
}

build_set() { # name module-path import-paths...
  local name=$1 mod=$2; shift 2
  local k out lock
  k=$(key "$name" "$mod")
  out=$cache/bin/$k
  # One builder per set: a second build.sh (tools/images.sh asking for the simulator while make
  # builds everything) waits for the first instead of building the same set beside it.
  exec {lock}>"$out.lock"
  flock "$lock"
  if [ -f "$out/.complete" ]; then
    echo "  $name: cached in $out" >&2
  else
    echo "  $name: building $k (first time only; a cold build of everything takes minutes)..." >&2
    local start=$SECONDS
    rm -rf "$out.tmp" && mkdir -p "$out.tmp"
    # OUT_NAME names a single binary whose package directory gives the wrong name (etcd's "v3").
    # No -trimpath: it writes each module's *required* version into every compile's flags, so a
    # set pinned down by a replace line (tools/align_go_sets.py) could not reuse what another set
    # compiled from the very same sources. No DWARF: -s -w strips it at link anyway. GOGC=off
    # (bounded by GOMEMLIMIT per process): the compiler's garbage collection is ~10 % of its CPU.
    (cd "$here/$name" && CGO_ENABLED=0 GOGC=off GOMEMLIMIT=3GiB go build -tags "${TAGS:-}" \
      -gcflags=all=-dwarf=false -ldflags "-s -w ${LDFLAGS:-}" -o "$out.tmp/${OUT_NAME:-}" "$@")
    rm -rf "$out" && mv "$out.tmp" "$out" && touch "$out/.complete"
    echo "  $name: built in $((SECONDS - start)) s" >&2
  fi
  for f in "$out"/*; do ln -sfn "$f" "$cache/bin/current/$(basename "$f")"; done
  # A binary that cannot print its version is broken (for example, an unstamped Kubernetes
  # binary panics at start-up): fail here rather than in the middle of `make up`.
  # (containerd's shim only knows Go's single-dash -v.)
  for f in "$out"/*; do "$f" --version >/dev/null 2>&1 || "$f" version --client >/dev/null 2>&1 \
    || "$f" version >/dev/null 2>&1 || "$f" -v >/dev/null 2>&1 \
    || { echo "error: $f does not run; delete $out and build again" >&2; exit 1; }; done
  exec {lock}>&-
}

mkdir -p "$cache/bin/current"
k8s_ver=$(modver k8s k8s.io/kubernetes)
k8s_minor=$(echo "$k8s_ver" | cut -d. -f2)
stamp=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp+=" -X $pkg.gitVersion=$k8s_ver -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
  stamp+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=2026-01-01T00:00:00Z"
done

# Go's build cache shares a compiled package only once it is done: sets started at once all miss
# it and compile their common modules (aligned on one version each, tools/align_go_sets.py) over
# again. So the simulator builds first, alone (the worker image waits for it; it compiles most of
# what the others share: Kubernetes' client libraries, gRPC, OpenTelemetry), then two lanes side by
# side, one per core, keep both cores busy through module downloads and links: Kubernetes itself
# in one, the smaller sets one after another in the other. Each set's progress lines carry its name.
wanted=" ${*:-all} "
for name in "$@"; do
  [ -f "$here/$name/go.mod" ] || { echo "error: no binary set '$name' (tools/*/go.mod)" >&2; exit 2; }
done

set_k8s() {
  LDFLAGS=$stamp build_set k8s k8s.io/kubernetes \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kubelet
}
set_etcd() { OUT_NAME=etcd build_set etcd go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3; }
set_kwok() { build_set kwok sigs.k8s.io/kwok sigs.k8s.io/kwok/cmd/kwok; }
set_sim() {
  build_set sim github.com/llm-d/llm-d-inference-sim github.com/llm-d/llm-d-inference-sim/cmd/llm-d-inference-sim
}
set_helm() {
  LDFLAGS="-X helm.sh/helm/v4/internal/version.version=$(modver helm helm.sh/helm/v4) -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
    build_set helm helm.sh/helm/v4 helm.sh/helm/v4/cmd/helm
}
# Prometheus with Kubernetes pod discovery (Debian's package has it patched out) and its promtool;
# only that discovery is compiled in. Module v0.316.0 is Prometheus 3.16.0.
set_prometheus() {
  local prom_minor prom_patch
  IFS=. read -r _ prom_minor prom_patch <<<"$(modver prometheus github.com/prometheus/prometheus)"
  TAGS=remove_all_sd,enable_kubernetes_sd \
  LDFLAGS="-X github.com/prometheus/common/version.Version=$((prom_minor / 100)).$((prom_minor % 100)).$prom_patch" \
    build_set prometheus github.com/prometheus/prometheus \
    github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
}
# The real node's runtime. The snapshotters we do not use need cgo or kernel headers: left out.
set_containerd() {
  local ctd=github.com/containerd/containerd/v2
  TAGS=no_btrfs,no_devmapper,no_zfs LDFLAGS="-X $ctd/version.Version=$(modver containerd $ctd)" \
    build_set containerd $ctd $ctd/cmd/containerd $ctd/cmd/ctr $ctd/cmd/containerd-shim-runc-v2
}

# The local platform's trace backend: Jaeger v2 (an OpenTelemetry Collector build: OTLP receivers,
# in-memory storage, the query API). Module v1.75.0 is Jaeger v2.12.0; the go module carries only a
# placeholder page where the web UI's assets go (those are built with npm upstream), so the query
# API on :16686/api/ is what serves here.
set_jaeger() {
  LDFLAGS="-X github.com/jaegertracing/jaeger/internal/version.latestVersion=$(modver jaeger github.com/jaegertracing/jaeger)" \
    build_set jaeger github.com/jaegertracing/jaeger github.com/jaegertracing/jaeger/cmd/jaeger
}

lane() { # set names, built in this order; stops at the first failure
  local name
  for name in "$@"; do
    [ "$wanted" = " all " ] || [[ $wanted == *" $name "* ]] || continue
    "set_$name" 2>&1 | sed -u "s/^/[$name] /" >&2 || return 1 # pipefail: the set's status
  done
}
lane sim || { echo "error: a binary set failed to build (see the lines above)" >&2; exit 1; }
pids=()
lane k8s &
pids+=("$!")
lane kwok etcd helm prometheus containerd jaeger &
pids+=("$!")
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
[ "$failed" = 0 ] || { echo "error: a binary set failed to build (see the lines above)" >&2; exit 1; }
echo "$cache/bin/current"

#!/usr/bin/env bash
# Times a cold first `make up` on this machine without touching its caches: a fresh clone of this
# checkout with HOME (Go module and build caches, pip's cache, ~/.cache/tokenfleet) and podman's
# storage pointed at empty directories. Apt packages and the Go toolchain stay the machine's.
# Then `make down`. The README's "cold first make up" row comes from this.
#
#   tools/measure_cold_up.sh [WORKDIR]     (default /tmp/tokenfleet-cold; wiped first)
# Writes WORKDIR/up.log (make up's output and /usr/bin/time -v), WORKDIR/load.log, WORKDIR/down.log.
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
root=${1:-/tmp/tokenfleet-cold}
umount "$root/storage/overlay" 2>/dev/null
rm -rf "$root"
mkdir -p "$root/home/.config" "$root/storage" "$root/run"
[ -d "$HOME/.config/go" ] && cp -r "$HOME/.config/go" "$root/home/.config/" # GOFLAGS, GOTOOLCHAIN
cat >"$root/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$root/storage"
runroot = "$root/run"
CONF
git clone -q "$repo" "$root/tokenfleet"
cd "$root/tokenfleet" || exit 1
export HOME=$root/home CONTAINERS_STORAGE_CONF=$root/storage.conf
start=$(date +%s)
(while sleep 30; do echo "$(($(date +%s) - start)) s load $(cut -d' ' -f1 /proc/loadavg)"; done) >"$root/load.log" &
monitor=$!
/usr/bin/time -v make up >"$root/up.log" 2>&1
echo "make up exit $? after $(($(date +%s) - start)) s" | tee -a "$root/up.log"
kill "$monitor"
t=$(date +%s)
make down >"$root/down.log" 2>&1
echo "make down exit $? after $(($(date +%s) - t)) s" | tee -a "$root/down.log"
umount "$root/storage/overlay" 2>/dev/null
grep -E "built in|ready in|User time|System time|Elapsed" "$root/up.log"

#!/usr/bin/env bash
# Checks what `make up` and `make test` need before anything is built, and says how to get what
# is missing. Debian packages are installed when running as root (as on our machines and CI).
set -uo pipefail
missing=()

if ! command -v go >/dev/null 2>&1; then
  missing+=("Go >= 1.26: not found on PATH. Install it from https://go.dev/dl/ (Debian's golang package is too old) and add its bin/ to PATH.")
else
  gover=$(go env GOVERSION | sed 's/^go//')
  if [ "$(printf '%s\n1.26\n' "$gover" | sort -V | head -n1)" != "1.26" ]; then
    missing+=("Go >= 1.26: found $gover. Install a newer Go from https://go.dev/dl/.")
  fi
fi

py=${PYTHON:-python3}
if ! command -v "$py" >/dev/null 2>&1; then
  missing+=("Python >= 3.11: '$py' not found. Install python3 (apt-get install python3 python3-venv).")
elif ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  missing+=("Python >= 3.11: '$py' is $("$py" -V 2>&1). Install a newer one or set PYTHON=/path/to/python3.11.")
elif ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  missing+=("Python's venv module: apt-get install python3-venv")
fi

# Debian packages the platform runs (command → package; a command may be an absolute path, for
# packages that put nothing on PATH). Installed here when we are root.
declare -A apt_packages=()
for pkg_cmd in ${TOKENFLEET_APT:-}; do apt_packages[${pkg_cmd%%:*}]=${pkg_cmd#*:}; done
need=()
for cmd in "${!apt_packages[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || [ -x "/usr/bin/$cmd" ] || need+=("${apt_packages[$cmd]}")
done
# make native compiles the hot paths with mypyc: a C compiler and the interpreter's headers.
if command -v "$py" >/dev/null 2>&1 && ! "$py" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null; then
  if [ "$("$py" -c 'import sys; print(sys.prefix)')" = /usr ]; then
    need+=(python3-dev)
  else
    missing+=("Python headers (Python.h) for $py: reinstall that Python with its development files.")
  fi
fi

if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian packages: ${need[*]}" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}") >&2 \
      || missing+=("Debian packages ${need[*]}: apt-get install failed; run 'apt-get update && apt-get install ${need[*]}' yourself.")
  else
    missing+=("Debian packages: ${need[*]}. Run: sudo apt-get install --no-install-recommends ${need[*]}")
  fi
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "TokenFleet cannot start; missing:" >&2
  for m in "${missing[@]}"; do echo "  - $m" >&2; done
  exit 2
fi

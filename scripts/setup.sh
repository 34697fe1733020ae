#!/usr/bin/env bash
# Installs what rebal and its tests need on Debian 12 (run as root), and starts zfs-fuse.
# Idempotent: a second run on a set-up machine only checks, so it is cheap to call before tests.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(zfs-fuse rsync mbuffer openssh-server openssh-client acl attr iproute2 procps zstd systemd python3 python3-pip prometheus)
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The project and its test extras, into the python3 on PATH.
if ! python3 -c 'import rebal, typer, apscheduler, xxhash, pytest, aiosmtpd, prometheus_client' 2>/dev/null \
   || [ "$(python3 -c 'import rebal, os; print(os.path.dirname(os.path.dirname(rebal.__file__)))' 2>/dev/null)" != "$PWD" ]; then
  echo "setup: pip install -e .[test]"
  python3 -m pip install -q -e ".[test]" 2>/dev/null \
    || python3 -m pip install -q --break-system-packages -e ".[test]"
fi

# The units in systemd/ start /usr/local/bin/rebal, where pip puts it for a system Python.
if [ ! -x /usr/local/bin/rebal ]; then
  ln -sf "$(python3 -c 'import os, sys; print(os.path.join(os.path.dirname(sys.executable), "rebal"))')" /usr/local/bin/rebal
fi

# zfs-fuse: a real ZFS (pool version 23) in user space; the tests and the demo use it.
if ! zpool list >/dev/null 2>&1; then
  [ -e /dev/fuse ] || modprobe fuse 2>/dev/null || true
  echo "setup: starting zfs-fuse"
  zfs-fuse
  for _ in $(seq 1 100); do zpool list >/dev/null 2>&1 && break; sleep 0.1; done
  zpool list >/dev/null 2>&1 || { echo "setup: zfs-fuse did not start" >&2; exit 1; }
fi
echo "setup: ready ($(python3 -m rebal --version), zfs-fuse running)"

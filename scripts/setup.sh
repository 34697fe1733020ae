#!/usr/bin/env bash
# Installs what rebal's demo and tests need on Debian 12 (run as root), and starts zfs-fuse.
# Idempotent: a second run on a set-up machine only checks, so it is cheap to call before tests.
#
# What it changes on the machine (the README says the same, "What the demo and the tests install"):
# - Debian packages: zfs-fuse, rsync, mbuffer, openssh-server and -client, acl, attr, iproute2,
#   procps, zstd, python3-venv, prometheus (for its promtool). A service a package it installs
#   brings (sshd on :22, prometheus on :9090) is neither started nor left enabled: the tests start
#   their own sshd on 127.0.0.1 and stop it again; only promtool, a program, is used.
# - rebal and its test dependencies in a virtual environment of this checkout (.venv, or
#   $REBAL_VENV), never in Debian's own Python (PEP 668); /usr/local/bin/rebal points to it (the
#   units in systemd/ start that path).
# - zfs-fuse, started (a daemon in user space; the tests' pools are sparse files).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${REBAL_VENV:-$PWD/.venv}"

PKGS=(zfs-fuse rsync mbuffer openssh-server openssh-client acl attr iproute2 procps zstd systemd python3 python3-venv
      prometheus)
QUIET=(openssh-server:ssh prometheus:prometheus)  # package:service, wanted for their programs alone
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then  # Debian's way to keep maintainer scripts from starting services
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && policy=1
  fi
  rc=0
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } || rc=$?
  [ -n "$policy" ] && rm -f /usr/sbin/policy-rc.d
  [ "$rc" -eq 0 ] || exit "$rc"
  for q in "${QUIET[@]}"; do
    pkg=${q%%:*} unit=${q##*:}
    if [[ " ${missing[*]} " == *" $pkg "* ]]; then
      if [ -d /run/systemd/system ]; then
        systemctl disable --now "$unit" >/dev/null 2>&1 || true
      else  # no systemd running (a container): policy-rc.d kept it from starting; not enabled either
        systemctl disable "$unit" >/dev/null 2>&1 || update-rc.d "$unit" disable >/dev/null 2>&1 || true
      fi
      echo "setup: $unit installed for its programs only: not running, not enabled"
    fi
  done
fi

# The project and its test extras, in a venv of this checkout.
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: python3 -m venv $VENV"
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c 'import rebal, typer, apscheduler, xxhash, pytest, xdist, hypothesis, aiosmtpd, prometheus_client, mypy' 2>/dev/null \
   || [ "$("$VENV/bin/python" -c 'import rebal, os; print(os.path.dirname(os.path.dirname(rebal.__file__)))' 2>/dev/null)" != "$PWD" ]; then
  echo "setup: pip install -e .[test] (into $VENV)"
  "$VENV/bin/python" -m pip install -q -e ".[test]"
fi

# The units in systemd/ start /usr/local/bin/rebal: this checkout's (an installed rebal that is a
# file, not a link, is the admin's and stays).
if [ -L /usr/local/bin/rebal ] || [ ! -e /usr/local/bin/rebal ]; then
  ln -sfn "$VENV/bin/rebal" /usr/local/bin/rebal
fi

# zfs-fuse: a real ZFS (pool version 23) in user space; the tests and the demo use it.
if ! zpool list >/dev/null 2>&1; then
  [ -e /dev/fuse ] || modprobe fuse 2>/dev/null || true
  echo "setup: starting zfs-fuse"
  zfs-fuse
  for _ in $(seq 1 100); do zpool list >/dev/null 2>&1 && break; sleep 0.1; done
  zpool list >/dev/null 2>&1 || { echo "setup: zfs-fuse did not start" >&2; exit 1; }
fi
echo "setup: ready ($("$VENV/bin/python" -m rebal --version) in $VENV, zfs-fuse running)"

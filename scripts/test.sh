#!/usr/bin/env bash
# Runs the whole test suite (as root: the integration tests make real zfs-fuse pools).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec python3 -m pytest -q "$@"

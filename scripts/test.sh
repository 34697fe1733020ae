#!/usr/bin/env bash
# Runs the whole test suite (as root: the integration tests make real zfs-fuse pools), in the
# checkout's venv that scripts/setup.sh makes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${REBAL_VENV:-$PWD/.venv}/bin/python" -m pytest -q --durations=25 "$@"

#!/usr/bin/env bash
# The OpenZFS lane: real OpenZFS 2.4 in a qemu guest (TCG). The first run builds the guest image
# (~17 min; cached under /var/cache/rebal-openzfs/, rebuilt when tests/openzfs/vm/ changes); later
# runs boot it in ~30 s. Runs the tests marked `openzfs` in the guest and `openzfs_vm` on the host.
#   bash scripts/test-openzfs.sh [-k EXPR] [--guest-only | --host-only] [--keep]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null   # the host side needs rebal's test dependencies
exec "${REBAL_VENV:-$PWD/.venv}/bin/python" tests/openzfs/vm/lane.py "$@"

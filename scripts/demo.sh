#!/usr/bin/env bash
# The rebal demo, on a throw-away pool of sparse files (zfs-fuse); no real disk is touched.
#   bash scripts/demo.sh          set up the machine, build the demo pool, show what rebal does
#   bash scripts/demo.sh --clean  destroy the demo pool and its files
# Run as root on Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${REBAL_DEMO_DIR:-/var/tmp/rebal-demo}
POOL=${REBAL_DEMO_POOL:-rebaldemo}
VDEV_SIZE=${REBAL_DEMO_VDEV_SIZE:-512M}

BACKUP=${POOL}bk
clean() {
  if [ -f "$DIR/sshd.pid" ]; then kill "$(cat "$DIR/sshd.pid")" 2>/dev/null || true; fi
  for p in "$POOL" "$BACKUP"; do
    for _ in $(seq 1 50); do   # zfs-fuse may call a pool busy for a moment after use
      zpool list "$p" >/dev/null 2>&1 || break
      zpool destroy -f "$p" 2>/dev/null && break
      sleep 0.2
    done
  done
  rm -rf "$DIR"
}
if [ "${1:-}" = "--clean" ]; then clean; echo "demo pools $POOL, $BACKUP and $DIR removed"; exit 0; fi

bash scripts/setup.sh
clean
mkdir -p "$DIR"
truncate -s "$VDEV_SIZE" "$DIR"/d1 "$DIR"/d2 "$DIR"/d3 "$DIR"/d4
cat > "$DIR/config.toml" <<CONF
state_db = "$DIR/state.db"
pools = ["$POOL"]
[rebalance]
target_spread = 10
CONF
export REBAL_CONFIG="$DIR/config.toml"
rebal() { "${REBAL_VENV:-$PWD/.venv}/bin/python" -m rebal "$@"; }
if [ -t 1 ]; then step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }; else step() { printf '\n== %s\n' "$*"; }; fi

step "zpool create $POOL on 2 file vdevs of $VDEV_SIZE"
zpool create -m "$DIR/mnt" "$POOL" "$DIR/d1" "$DIR/d2" 2>/dev/null
zfs create "$POOL/data"
step "fill to about 60% with random files"
python3 - "$DIR/mnt/data" <<'PY'
import os, random, sys
root = sys.argv[1]
rng = random.Random(1)
budget = int(os.environ.get("REBAL_DEMO_BYTES", 600 * 2**20))
i = 0
while budget > 0:
    d = os.path.join(root, f"dir{i % 8:02d}", f"sub{i % 3}")
    os.makedirs(d, exist_ok=True)
    n = min(budget, rng.randint(1, 8) * 2**20)
    with open(os.path.join(d, f"file{i:04d}.bin"), "wb") as f:
        f.write(os.urandom(n))
    budget -= n
    i += 1
print(f"{i} files written")
PY
sync
rebal status
step "zpool add $POOL $DIR/d3 $DIR/d4 (two new, empty vdevs): old data stays on d1 and d2"
zpool add "$POOL" "$DIR/d3" "$DIR/d4" 2>/dev/null
rebal status
rebal status --json | python3 -c 'import json,sys; p=json.load(sys.stdin)["pools"][0]; print("spread (JSON):", p["spread"], "points")'
step "rebal plan: what a rebalance would rewrite, and the predicted CAP per vdev (changes nothing)"
rebal plan "$POOL/data"
step "rebal rebalance: copy-verify-swap, directory by directory, until the spread is under 10 points"
rebal rebalance "$POOL/data"
step "rebal status: the spread has closed"
rebal status
step "replication: a throw-away backup pool, reached by ssh to 127.0.0.1 (a key and a pinned host key made now)"
truncate -s 1G "$DIR/b1"
zpool create -m "$DIR/backup" "$BACKUP" "$DIR/b1" 2>/dev/null
ssh-keygen -q -t ed25519 -N '' -f "$DIR/hostkey"
ssh-keygen -q -t ed25519 -N '' -f "$DIR/id_ed25519"
cp "$DIR/id_ed25519.pub" "$DIR/authorized_keys"
PORT=${REBAL_DEMO_SSH_PORT:-2299}
echo "[127.0.0.1]:$PORT $(cut -d' ' -f1,2 "$DIR/hostkey.pub")" > "$DIR/known_hosts"
mkdir -p /run/sshd
cat > "$DIR/sshd_config" <<SSHD
Port $PORT
ListenAddress 127.0.0.1
HostKey $DIR/hostkey
AuthorizedKeysFile $DIR/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
UsePAM no
StrictModes no
PidFile $DIR/sshd.pid
SSHD
/usr/sbin/sshd -f "$DIR/sshd_config"
for _ in $(seq 1 50); do ssh-keyscan -T 1 -p "$PORT" 127.0.0.1 >/dev/null 2>&1 && break; sleep 0.1; done
cat >> "$DIR/config.toml" <<CONF
[[replicate]]
name = "nightly"
source = "$POOL/data"
mode = "zfs"
target_host = "127.0.0.1"
target_port = $PORT
identity_file = "$DIR/id_ed25519"
known_hosts = "$DIR/known_hosts"
target = "$BACKUP/data"
CONF
rebal replicate nightly
step "some new data, then an incremental replication"
head -c 20M /dev/urandom > "$DIR/mnt/data/new-today.bin"
rebal replicate nightly
zfs list -t snapshot -r "$BACKUP"

step "history of the samples taken so far, and the runs"
rebal history "$POOL"
rebal runs
cat <<DONE

The demo pools stay for you to look around. Each rebal command needs the demo's config: either
  export REBAL_CONFIG=$REBAL_CONFIG
once in your shell, then for example
  rebal status $POOL          rebal plan $POOL/data       rebal runs
  rebal backups nightly       rebal restore nightly --path new-today.bin --to /tmp/back
  rebal health                rebal where $DIR/mnt/data
or put --config $REBAL_CONFIG before each command's name (rebal --config ... status).
bash scripts/demo.sh --clean removes all of it: the pools $POOL and $BACKUP, the demo's sshd on
127.0.0.1:$PORT and $DIR (its sparse files, config, key and state database). It leaves what
scripts/setup.sh installed (docs/development.md says all that stays).
DONE

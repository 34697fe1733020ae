#!/bin/bash
# A changed run on a backup dataset of N snapshots (issue 67), with rebal's record of them standing
# for their listing and, in turn, with the record removed (the dataset listed, as before records),
# three rounds; the ratio of the medians. Run as root in a lane guest kept with --keep (it takes its
# disks /dev/vdd and /dev/vde): `bash bench/record_listing.sh 1000`. A local target: the backup's
# listing costs what it costs over ssh, without the round trip.
set -eu
N=${1:-1000}
W=/var/tmp/rec1000; rm -rf $W; mkdir -p $W
zpool destroy sb 2>/dev/null || true; zpool destroy sbd 2>/dev/null || true
for d in vdd vde; do wipefs -aq /dev/$d; done
zpool create -f sb /dev/vdd; zpool create -f sbd /dev/vde
zfs create -o atime=off sb/d
t0=$SECONDS
python3 - "$N" <<'PY'
import sys, datetime, libzfs_core as l
n = int(sys.argv[1]); t = datetime.datetime(2026, 1, 1)
for i in range(n):
    name = (t + datetime.timedelta(minutes=i)).strftime("rebal-j-%Y%m%dT%H%M%SZ")
    l.lzc_snapshot([f"sb/d@{name}".encode()])
PY
echo "made $N snapshots in $((SECONDS - t0)) s"
last=$(zfs list -H -o name -t snapshot -s createtxg -d 1 sb/d | tail -1)
zfs send -R "$last" | zfs receive -u sbd/d
cat > $W/c.toml <<TOML
state_db = "$W/state.db"
[[replicate]]
name = "j"
source = "sb/d"
target = "sbd/d"
[replicate.retention_source]
last = 100000
hourly = 0
daily = 0
weekly = 0
monthly = 0
[replicate.retention_target]
last = 100000
hourly = 0
daily = 0
weekly = 0
monthly = 0
TOML
run() {
  head -c 4096 /dev/urandom >> /sb/d/f
  local s=$SECONDS; local t0=$(date +%s.%N)
  rebal --config $W/c.toml replicate j --json > $W/$1.json
  python3 - "$1" "$t0" <<'PY'
import json, sys, time
r = json.load(open(f"/var/tmp/rec1000/{sys.argv[1]}.json"))
print(f"{sys.argv[1]}: {time.time() - float(sys.argv[2]):.2f} s, outcome {r['outcome']}, backup {r['backup_asked']} "
      f"listed {r['backup_listed']} recorded {r.get('backup_recorded')}, remote {r['remote_commands']} local {r['local_commands']}, "
      f"phases {r['phases']}")
PY
}
run adopt
for i in 1 2 3; do
  run record$i
  python3 -c "import sqlite3; c=sqlite3.connect('$W/state.db'); c.execute(\"DELETE FROM kv WHERE key LIKE 'backup-snapshots:%'\"); c.commit()"
  run listed$i
done
python3 - <<'PY'
import glob, json, statistics
def secs(kind):
    out = []
    for p in sorted(glob.glob(f"/var/tmp/rec1000/{kind}*.json")):
        r = json.load(open(p))
        out.append(sum(r["phases"].values()))
    return out
rec, lst = secs("record"), secs("listed")
print(f"record_listing: run phases, with the record {rec}, listed {lst}: "
      f"{statistics.median(rec) / statistics.median(lst):.2f}x")
PY

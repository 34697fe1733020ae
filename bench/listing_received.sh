#!/bin/bash
# Which listing of N received (unmounted) datasets is cheap: each way of asking for their snapshots'
# guids, timed cold (the pool exported and imported: no dataset open) and warm. Run as root where
# OpenZFS is (the lane's guest: bash tests/openzfs/vm/lane.py --bench-only --benches none --keep,
# then this over its ssh). It makes and destroys a pool "lt" on a 2 GiB sparse file under /var/tmp.
#   bash bench/listing_received.sh [N]        (KEEP=1: leave the pool for another run)
set -e
N=${1:-300}
B=/var/tmp/lt
if ! zfs list lt/dst/c$N@c >/dev/null 2>&1; then
zpool destroy -f lt 2>/dev/null || true
rm -rf $B; mkdir -p $B
truncate -s 2G $B/d0
zpool create -f -m $B/mnt lt $B/d0
zfs create lt/src
for i in $(seq 1 $N); do zfs create lt/src/c$i; done
for s in a b c; do zfs snapshot -r lt/src@$s; done
zfs send -R lt/src@c | zfs receive -u lt/dst
fi
echo "datasets: $(zfs list -H -r -t filesystem lt/dst | wc -l), snapshots: $(zfs list -H -r -t snapshot lt/dst | wc -l)"
bases=$(for i in $(seq 1 $N); do printf "lt/dst/c%s@c " $i; done)
dss=$(for i in $(seq 1 $N); do printf "lt/dst/c%s " $i; done)
few=$(for i in 1 2 3; do printf "lt/dst/c%s " $i; done)
t() {  # label, cold|warm, command...
  local label=$1 mode=$2; shift 2
  if [ $mode = cold ]; then zpool export lt; zpool import -d $B lt; fi
  local t0=$EPOCHREALTIME
  "$@" > /tmp/out.txt 2>/dev/null || true
  local t1=$EPOCHREALTIME
  printf "%-60s %s %s s %s lines\n" "$label" $mode "$(python3 -c "print(round($t1 - $t0, 2))")" "$(wc -l < /tmp/out.txt)"
}
for mode in cold warm; do
  t "get -r guid,createtxg (rebal before da1f73e)" $mode zfs get -Hp -r -o name,property,value guid,createtxg lt/dst
  t "list -t all -r -o name,guid,createtxg (rebal now)" $mode zfs list -Hp -t all -r -o name,guid,createtxg lt/dst
  t "list -t snapshot -r -o name,guid,createtxg" $mode zfs list -Hp -t snapshot -r -o name,guid,createtxg lt/dst
  t "list -t snapshot -r -o name,guid,createtxg -s createtxg" $mode zfs list -Hp -t snapshot -r -o name,guid,createtxg -s createtxg lt/dst
  t "list -t snapshot -o name,guid -d 1 DS... (bzfs's batch)" $mode zfs list -Hp -t snapshot -o name,guid -d 1 $dss
  t "get guid DS@BASE... (the bases only)" $mode zfs get -Hp -o name,value guid $bases
  t "list -o name,guid DS@BASE... (the bases only)" $mode zfs list -Hp -o name,guid $bases
  t "get -r snapshots_changed (filesystems)" $mode zfs get -Hp -r -t filesystem -o name,value snapshots_changed lt/dst
  t "get -r receive_resume_token (filesystems, volumes)" $mode zfs get -Hp -r -t filesystem,volume -o name,value receive_resume_token lt/dst
  t "list -r -t filesystem,volume -o name (names only)" $mode zfs list -H -r -t filesystem,volume -o name lt/dst
  t "get -d 1 guid,createtxg,token DS1 DS2 DS3 (3 changed)" $mode zfs get -Hp -d 1 -o name,property,value guid,createtxg,receive_resume_token $few
done
[ "${KEEP:-}" ] || { zpool destroy -f lt; rm -rf $B; }

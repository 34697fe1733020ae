#!/usr/bin/env bash
# Builds the OpenZFS guest of the test lane: Debian 13 (trixie) with OpenZFS 2.4.x from
# trixie-backports, its kernel and initrd, and an ssh key to reach it. Run as root on the host.
#
#   bash tests/openzfs/vm/build.sh            # prints the image directory; builds only if missing
#
# The result is cached under /var/cache/rebal-openzfs/<key>/, where <key> is a hash of this file
# and packages.txt: change the recipe and the next run builds a new image. Measured on a 2-core
# machine: ~17 min cold (debootstrap ~4, packages + DKMS ~12), a second run returns at once.
# The guest has no network: everything it needs is installed here, in a chroot, where DKMS builds
# the ZFS module against the guest kernel's headers at native speed.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
CACHE="${REBAL_OPENZFS_CACHE:-/var/cache/rebal-openzfs}"
MIRROR="${REBAL_OPENZFS_MIRROR:-http://deb.debian.org/debian}"
KEY="$(cat "$HERE/build.sh" "$HERE/packages.txt" | sha256sum | cut -c1-16)"
OUT="$CACHE/$KEY"
if [ -f "$OUT/ready" ]; then echo "$OUT"; exit 0; fi

log() { echo "build-openzfs: $*" >&2; }
need=()
for t in debootstrap:debootstrap mke2fs:e2fsprogs qemu-system-x86_64:qemu-system-x86 qemu-img:qemu-utils ssh-keygen:openssh-client; do
  command -v "${t%%:*}" >/dev/null || need+=("${t##*:}")
done
if [ "${#need[@]}" -gt 0 ]; then
  log "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

WORK="$CACHE/build-$KEY"
ROOT="$WORK/root"
rm -rf "$WORK"; mkdir -p "$ROOT"
cleanup() {
  for m in dev/pts dev proc sys; do mountpoint -q "$ROOT/$m" && umount -l "$ROOT/$m"; done; true
}
trap cleanup EXIT
t0=$SECONDS

log "debootstrap trixie (minbase) from $MIRROR"
debootstrap --variant=minbase trixie "$ROOT" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
  || { tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
log "debootstrap done in $((SECONDS - t0)) s"

cat >"$ROOT/etc/apt/sources.list" <<SRC
deb $MIRROR trixie main contrib
deb $MIRROR trixie-backports main contrib
SRC
printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"; chmod +x "$ROOT/usr/sbin/policy-rc.d"
mount -t proc proc "$ROOT/proc"; mount --rbind /sys "$ROOT/sys"; mount --bind /dev "$ROOT/dev"
mount --bind /dev/pts "$ROOT/dev/pts"
in_root() { chroot "$ROOT" env DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }

mapfile -t BASE < <(grep -v '^#' "$HERE/packages.txt" | grep -v '^backports:' | tr ' ' '\n' | grep .)
mapfile -t BPO < <(grep '^backports:' "$HERE/packages.txt" | cut -d: -f2 | tr ' ' '\n' | grep .)
log "apt: ${#BASE[@]} packages, then ${BPO[*]} from trixie-backports"
{
  in_root apt-get update -qq
  in_root apt-get install -y -qq --no-install-recommends "${BASE[@]}"
  in_root apt-get install -y -qq --no-install-recommends -t trixie-backports "${BPO[@]}"
} >"$WORK/apt.log" 2>&1 || { tail -30 "$WORK/apt.log" >&2; exit 1; }
KVER="$(ls "$ROOT/lib/modules" | sort -V | tail -1)"
if ! ls "$ROOT/lib/modules/$KVER"/updates/dkms/zfs.ko* >/dev/null 2>&1; then
  log "DKMS did not build for $KVER in the postinst: building now"
  in_root dkms autoinstall -k "$KVER" >>"$WORK/apt.log" 2>&1
fi
ls "$ROOT/lib/modules/$KVER"/updates/dkms/zfs.ko* >/dev/null || { log "no zfs module for $KVER"; exit 1; }
log "packages and DKMS done at $((SECONDS - t0)) s (kernel $KVER, $(in_root zfs version --json 2>/dev/null | head -c 0)$(chroot "$ROOT" dpkg-query -W -f '${Version}' zfsutils-linux))"

# The guest: serial console, eth0 by DHCP on qemu's user network, root by ssh key only.
echo rebal-openzfs >"$ROOT/etc/hostname"
echo '/dev/vda / ext4 defaults,noatime 0 1' >"$ROOT/etc/fstab"
mkdir -p "$ROOT/etc/systemd/network"
printf '[Match]\nName=eth0\n[Network]\nDHCP=ipv4\n' >"$ROOT/etc/systemd/network/20-eth0.network"
in_root systemctl enable systemd-networkd ssh >/dev/null 2>&1
in_root systemctl disable apt-daily.timer apt-daily-upgrade.timer man-db.timer e2scrub_all.timer fstrim.timer >/dev/null 2>&1 || true
in_root systemctl mask systemd-networkd-wait-online.service >/dev/null 2>&1 || true
rm -f "$ROOT/usr/sbin/policy-rc.d"
mkdir -p "$OUT.tmp"; rm -f "$OUT.tmp"/*
ssh-keygen -q -t ed25519 -N '' -C rebal-openzfs-lane -f "$OUT.tmp/id_ed25519"
install -d -m 700 "$ROOT/root/.ssh"
install -m 600 "$OUT.tmp/id_ed25519.pub" "$ROOT/root/.ssh/authorized_keys"
printf 'PermitRootLogin prohibit-password\nUseDNS no\nPasswordAuthentication no\n' >"$ROOT/etc/ssh/sshd_config.d/lane.conf"
# the guest's own sshd is a backup host for replication tests inside it
in_root ssh-keygen -A >/dev/null
cp "$ROOT/boot/vmlinuz-$KVER" "$OUT.tmp/vmlinuz"; cp "$ROOT/boot/initrd.img-$KVER" "$OUT.tmp/initrd.img"
cleanup
log "image"
mke2fs -q -t ext4 -L rebal-root -d "$ROOT" "$OUT.tmp/root.img" 6G
chroot "$ROOT" dpkg-query -W >"$OUT.tmp/packages.installed" 2>/dev/null || true
echo "$KVER" >"$OUT.tmp/kernel"
rm -rf "$WORK"
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
date -u +%FT%TZ >"$OUT/ready"
log "built $OUT in $((SECONDS - t0)) s"
echo "$OUT"

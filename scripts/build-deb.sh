#!/usr/bin/env bash
# Builds rebal_<version>_all.deb for Debian 13 (trixie) from debian/, with dpkg-buildpackage in a
# trixie chroot (made once with debootstrap and cached under /var/cache/rebal-deb/, keyed on this
# script), then runs lintian on it there. Run as root on a Debian host; prints the .deb's path.
#
#   bash scripts/build-deb.sh [OUTDIR]        # default OUTDIR: dist/
#
# Why a chroot: the package is for trixie, whose python3-typer (0.15) the build uses to write the
# man page and the completion; Debian 12's typer (0.7) cannot load rebal's command line.
set -euo pipefail
HERE="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$(realpath -m "${1:-$HERE/dist}")"
CACHE="${REBAL_DEB_CACHE:-/var/cache/rebal-deb}"
MIRROR="${REBAL_DEB_MIRROR:-http://deb.debian.org/debian}"
BUILD_DEPS=(build-essential debhelper dh-python pybuild-plugin-pyproject python3-all python3-setuptools
            python3-typer python3-rich bash-completion lintian man-db)
# the chroot is made anew only when what goes into it changes (not on every edit of this script)
KEY="$(echo "trixie $MIRROR ${BUILD_DEPS[*]}" | sha256sum | cut -c1-16)"
ROOT="$CACHE/trixie-$KEY"
log() { echo "build-deb: $*" >&2; }

command -v debootstrap >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
if [ ! -f "$ROOT/.ready" ]; then
  log "making the trixie build chroot (once): $ROOT"
  rm -rf "$ROOT"; mkdir -p "$ROOT"
  debootstrap --variant=minbase trixie "$ROOT" "$MIRROR" >"$CACHE/debootstrap-$KEY.log" 2>&1 \
    || { tail -20 "$CACHE/debootstrap-$KEY.log" >&2; exit 1; }
  echo "deb $MIRROR trixie main contrib" >"$ROOT/etc/apt/sources.list"
  chroot "$ROOT" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  chroot "$ROOT" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${BUILD_DEPS[@]}" \
    >"$CACHE/apt-$KEY.log" 2>&1 || { tail -20 "$CACHE/apt-$KEY.log" >&2; exit 1; }
  touch "$ROOT/.ready"
fi

VERSION="$(sed -n '1s/^rebal (\([^)]*\)).*/\1/p' "$HERE/debian/changelog")"
SRC="$ROOT/build/rebal-$VERSION"
rm -rf "$ROOT/build"; mkdir -p "$SRC"
# the source as committed plus what is changed in the work tree (never build artefacts)
(cd "$HERE" && git ls-files -co --exclude-standard -z | grep -zv '^dist/' | xargs -0 cp --parents -t "$SRC")
mount -t proc proc "$ROOT/proc" 2>/dev/null || true
trap 'umount "$ROOT/proc" 2>/dev/null || true' EXIT
log "dpkg-buildpackage rebal $VERSION"
chroot "$ROOT" sh -c "cd /build/rebal-$VERSION && dpkg-buildpackage -us -uc -b" >"$ROOT/build/build.log" 2>&1 \
  || { tail -40 "$ROOT/build/build.log" >&2; exit 1; }
DEB="rebal_${VERSION}_all.deb"
log "lintian"
# an error or a warning that debian/rebal.lintian-overrides does not explain fails the build
lrc=0
chroot "$ROOT" lintian --info --display-info --pedantic --fail-on error,warning "/build/$DEB" \
  >"$ROOT/build/lintian.txt" 2>&1 || lrc=$?
mkdir -p "$OUT"
cp "$ROOT/build/$DEB" "$ROOT/build/lintian.txt" "$OUT/"
grep -v 'running with root privileges' "$OUT/lintian.txt" | sed 's/^/  /' >&2 || true
if [ "$lrc" -ne 0 ]; then
  log "lintian found errors or warnings not explained in debian/rebal.lintian-overrides (exit $lrc): not built"
  rm -f "$OUT/$DEB"
  exit 1
fi
echo "$OUT/$DEB"

"""The pool side of a `ZfsHost`: what is damaged and scrubbing it, and what a rebuild records before
the pool is destroyed. A mixin: ZfsHost gives it the link, `where` and the `_zfs`/`_zpool` runners."""

from __future__ import annotations

from collections.abc import Callable

from .. import names
from ..errors import HostError
from ..process.command import Result


class PoolCalls:
    # what ZfsHost (host.py) gives this mixin
    _zfs: Callable[..., Result]
    _zpool: Callable[..., Result]
    _error: Callable[[Result], HostError]

    @property
    def where(self) -> str:
        raise NotImplementedError

    # -- the pool: what is damaged, and scrubbing it --------------------------------------------

    def status_v(self, pool: str) -> str:
        names.pool(pool)
        res = self._zpool("status", "-v", pool)
        if res.returncode != 0:
            raise HostError(f"{self.where}: {res.stderr.strip() or 'no pool ' + pool}")
        return res.stdout

    def mounts(self, pool: str) -> dict[str, str]:
        """mount point -> dataset, of the pool's mounted file systems."""
        res = self._zfs("list", "-H", "-o", "name,mountpoint,mounted", "-t", "filesystem", "-r", pool)
        out = {}
        for line in res.stdout.splitlines():
            name, mp, mounted = (line.split("\t") + ["", "", ""])[:3]
            if mp.startswith("/") and mounted == "yes":
                out[mp] = name
        return out

    def scrub(self, pool: str, *, errors_only: bool = False) -> str:
        """Start a scrub (with ``errors_only`` an error scrub, `zpool scrub -e`, where the zpool has
        it: it reads only the blocks in the error log); returns how: "error scrub" or "scrub"."""
        names.pool(pool)
        if errors_only:
            res = self._zpool("scrub", "-e", pool, readonly=False)
            if res.returncode == 0:
                return "error scrub"
            if "invalid option" not in res.stderr and "usage" not in res.stderr.lower():
                raise HostError(f"{self.where}: zpool scrub -e {pool}: {res.stderr.strip()}")
        res = self._zpool("scrub", pool, readonly=False)
        if res.returncode != 0:
            raise HostError(f"{self.where}: zpool scrub {pool}: {res.stderr.strip()}")
        return "scrub"

    def wait_scrub(self, pool: str, timeout: float | None = None) -> None:
        """Until the pool's scrub (or error scrub) ends: `zpool wait -t scrub` (OpenZFS 2.0+)."""
        res = self._zpool("wait", "-t", "scrub", pool, timeout=timeout)
        if res.returncode != 0:
            raise HostError(f"{self.where}: zpool wait -t scrub {pool}: {res.stderr.strip()}")

    # -- what a rebuild records before the pool is destroyed -----------------------------------

    def datasets(self, root: str) -> list[str]:
        res = self._zfs("list", "-H", "-o", "name", "-t", "filesystem,volume", "-r", root)
        if res.returncode != 0:
            raise self._error(res)
        return res.stdout.split("\n")[:-1] if res.stdout.endswith("\n") else res.stdout.splitlines()

    def local_props(self, root: str) -> dict[str, dict[str, str]]:
        """dataset -> {property: value} of the properties set on it (source local), for the tree."""
        res = self._zfs("get", "-Hp", "-r", "-s", "local", "-o", "name,property,value", "all", root)
        if res.returncode != 0:
            raise self._error(res)
        out: dict[str, dict[str, str]] = {}
        for line in res.stdout.splitlines():
            name, prop, value = (line.split("\t", 2) + ["", ""])[:3]
            out.setdefault(name, {})[prop] = value
        return out

    def values(self, root: str, props: list[str], recursive: bool = True) -> dict[str, dict[str, str]]:
        """dataset -> {property: value} of the named properties (every source)."""
        res = self._zfs("get", "-Hp", *(["-r"] if recursive else []), "-o", "name,property,value", ",".join(props), root)
        if res.returncode != 0:
            raise self._error(res)
        out: dict[str, dict[str, str]] = {}
        for line in res.stdout.splitlines():
            name, prop, value = (line.split("\t", 2) + ["", ""])[:3]
            if "@" not in name and "#" not in name:
                out.setdefault(name, {})[prop] = value
        return out

    def pool_props(self, pool: str, *, local_only: bool = True) -> dict[str, str]:
        names.pool(pool)
        res = self._zpool("get", "-Hp", "-o", "property,value,source", "all", pool)
        rows = [(line.split("\t") + ["", "", ""])[:3] for line in res.stdout.splitlines()]
        if res.returncode != 0 and "invalid property" in res.stderr:  # an older zpool (zfs-fuse): a table
            res = self._zpool("get", "all", pool)
            rows = [ln.split()[1:4] for ln in res.stdout.splitlines()[1:] if len(ln.split()) >= 4]
        if res.returncode != 0:
            raise HostError(f"{self.where}: {res.stderr.strip() or 'no pool ' + pool}")
        out = {}
        for prop, value, source in rows:
            if not local_only or source == "local":
                out[prop] = value
        return out

    def status(self, pool: str) -> str:
        names.pool(pool)
        res = self._zpool("status", "-P", pool)
        if res.returncode != 0 and "invalid option" in res.stderr:  # an older zpool: names, not paths
            res = self._zpool("status", pool)
        if res.returncode != 0:
            raise HostError(f"{self.where}: {res.stderr.strip() or 'no pool ' + pool}")
        return res.stdout

    def sync(self, pool: str) -> None:
        self._zpool("sync", pool, readonly=False)

    def settle(self, pool: str) -> None:
        """Write out the pool's open transaction group, so sizes and `written` are current: `zpool
        sync`, or where there is none (zfs-fuse) a user property set and inherited (each commits)."""
        names.pool(pool)
        if self._zpool("sync", pool, readonly=False).returncode != 0:
            self._zfs("set", "rebal:settle=1", pool, readonly=False)
            self._zfs("inherit", "rebal:settle", pool, readonly=False)

"""The pool side of a `ZfsHost`: the fill figures and states of its pools (`pools` tries, in order,
`zpool list -v -j --json-int` (OpenZFS 2.3+), `zpool list -v -Hp` (OpenZFS 0.8+) and `zpool iostat -v`
+ `zpool status` (zfs-fuse, old ZFS), and keeps the first form the zpool accepts), their frees
settled, what is damaged and scrubbing it, and what a rebuild records before the pool is destroyed.
A mixin: ZfsHost gives it the link's runner, `where` and the `_zfs`/`_zpool` runners."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .. import names
from ..errors import CommandFailed, HostError, NoSuchPool, UnsupportedOption
from ..process.command import PIPE, Process, Result, spawn
from . import argv as zargv
from . import parse, queries
from .model import Pool, PoolStatus

if TYPE_CHECKING:
    from .link import Link

FLAVOURS = ("json", "parsable", "iostat")


class PoolCalls:
    # what ZfsHost (host.py) gives this mixin
    link: Link
    run: Callable[..., Result]
    _zfs: Callable[..., Result]
    _zpool: Callable[..., Result]
    _error: Callable[[Result], HostError]
    flavour: str | None  # the form of `zpool list` this zpool takes, once known

    # -- fill figures and states ----------------------------------------------------------------

    def pools(self, pool_names: Sequence[str] = (), features: Sequence[str] = ()) -> list[Pool]:
        """Fill figures of the named pools (all imported pools when none are named); with
        ``features``, their states too where `zpool list -j` says them (`Pool.features`)."""
        for n in pool_names:
            names.pool(n)
        order = [self.flavour] if self.flavour else list(FLAVOURS)
        for flavour in order:
            try:
                if flavour == "json":
                    found = parse.parse_zpool_list_json(self._read(queries.pool_list_json(pool_names, features)).stdout)
                elif flavour == "parsable":
                    found = parse.parse_zpool_list_hp(self._read(["zpool", "list", "-v", "-Hp", *pool_names]).stdout)
                else:
                    found = self._pools_iostat(list(pool_names))
            except UnsupportedOption:
                continue
            self.flavour = flavour
            return found
        raise CommandFailed(("zpool", "list"), 2, "this zpool supports none of: list -j, list -Hp, iostat -v")

    def _pools_iostat(self, pool_names: list[str]) -> list[Pool]:
        try:
            res = self._read(["zpool", "iostat", "-v", *pool_names])
        except CommandFailed as e:
            if "no pools available" in e.stderr:
                return []
            raise
        io = parse.parse_zpool_iostat_v(res.stdout)
        if pool_names:
            st = {s.name: s for s in self.status(pool_names)}
            return [parse.merge_iostat_status(p, st.get(p.name)) for p in io]
        # every pool: their status by no name, so that a pool exported or destroyed since the
        # listing is left out (naming it made `zpool status` fail, and with it a health check of
        # every pool: seen with another pool destroyed in between)
        st = {s.name: s for s in self.status()}
        return [parse.merge_iostat_status(p, st[p.name]) for p in io if p.name in st]

    def status(self, pool_names: Sequence[str] = ()) -> list[PoolStatus]:
        """`zpool status` of the named pools (every imported pool when none are named), parsed."""
        for n in pool_names:
            names.pool(n)
        return parse.parse_zpool_status(self._read(queries.pool_status(pool_names)).stdout)

    def has_pool(self, pool: str) -> bool:
        """``pool`` is imported on this host."""
        names.pool(pool)
        return self.run(zargv.pool_names(pool), check=False).returncode == 0

    def pool_names(self) -> list[str]:
        res = self._read(["zpool", "list", "-H", "-o", "name"])
        return [line.strip() for line in res.stdout.splitlines() if line.strip()]

    def pool_features(self, pool: str, features: Sequence[str]) -> dict[str, str]:
        """{feature: 'enabled' | 'active' | 'disabled'} of those this zpool knows; {} where it knows
        none of them, or fails on one it does not know (zfs-fuse, older OpenZFS)."""
        res = self.run(queries.pool_features(pool, features), check=False)
        if res.returncode != 0:
            return {}
        out = {}
        for line in res.stdout.splitlines():
            prop, _, value = line.partition("\t")
            if prop.startswith("feature@") and value.strip() in ("enabled", "active", "disabled"):
                out[prop[len("feature@"):]] = value.strip()
        return out

    def iostat(self, pool: str, interval: int = 1) -> Process:
        """`zpool iostat -v POOL INTERVAL` started on this host, its lines on the process's stdout
        until the caller ends it (process.command.end)."""
        if not self.link.local:
            raise HostError(f"{self.link.where}: zpool iostat is read on this host only")
        return spawn(zargv.iostat(pool, interval), stdout=PIPE)

    def _read(self, argv: list[str]) -> Result:
        """A zpool query that must answer: a missing pool said in words."""
        try:
            return self.run(argv)
        except UnsupportedOption:
            raise
        except CommandFailed as e:
            if "no such pool" in e.stderr:
                raise self._no_pool(e.stderr.split("'")[1] if e.stderr.count("'") >= 2 else "?") from None
            raise

    def _no_pool(self, pool: str) -> NoSuchPool:
        try:
            have = self.pool_names()
        except Exception:  # only the message's decoration
            have = []
        return NoSuchPool(f"no such pool: {pool} (imported pools: {', '.join(have) or 'none'})")

    # -- frees settled ------------------------------------------------------------------------

    def settle(self, pool: str, timeout: float = 30.0) -> None:
        """Write out the pool's open transaction group, so sizes and `written` are current, and
        wait until frees of deleted data show in the figures. OpenZFS: `zpool sync`, then the
        `freeing` property back to 0. Old ZFS (zfs-fuse) has neither and syncs an idle pool's
        transaction groups late: setting and clearing a user property of the pool's root dataset
        are two sync tasks, each of which waits for a transaction group to be written; nothing is
        left behind."""
        if self._sync(pool) and self._freeing(pool):
            self._wait_freed(pool, timeout)

    def settled(self, pool: str, timeout: float = 30.0) -> Pool:
        """`settle`, then the pool's figures. On OpenZFS 2.3+ `zpool list` says `freeing` beside
        them (one process after `zpool sync`); they are read again only when frees were
        still under way. Older OpenZFS: `freeing` asked on its own."""
        if not self._sync(pool):
            return self.pools([pool])[0]
        [found] = self.pools([pool])
        freeing = found.freeing if found.freeing is not None else self._freeing(pool)
        if freeing:
            self._wait_freed(pool, timeout)
            [found] = self.pools([pool])
        return found

    def _sync(self, pool: str) -> bool:
        """`zpool sync`; True where there is one (OpenZFS). zfs-fuse: its two sync tasks, False."""
        names.pool(pool)
        res = self._zpool("sync", pool, readonly=False)
        if res.returncode == 0:
            return True
        if "no such pool" in res.stderr:
            raise self._no_pool(pool)
        self._zfs("set", "rebal:settle=1", pool, readonly=False)  # (best effort: a gate refuses it)
        self._zfs("inherit", "rebal:settle", pool, readonly=False)
        return False

    def _freeing(self, pool: str) -> bool:
        """Are frees still under way (`freeing` above 0)?"""
        res = self._zpool("get", "-Hp", "-o", "value", "freeing", pool)
        return not (res.returncode != 0 or res.stdout.strip() in ("0", "-", ""))

    def _wait_freed(self, pool: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(0.2)
            if not self._freeing(pool):
                return

    @property
    def where(self) -> str:
        raise NotImplementedError

    # -- the pool: what is damaged, and scrubbing it --------------------------------------------

    def status_v(self, pool: str) -> str:
        names.pool(pool)
        res = self._zpool("status", "-v", pool)
        if res.returncode != 0:
            raise HostError(f"{self.link.where}: {res.stderr.strip() or 'no pool ' + pool}")
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
        it: it reads only the blocks in the error log); returns what: "scrub" or "error scrub"
        started, or "running" where one already was."""
        names.pool(pool)
        if errors_only:
            res = self._zpool("scrub", "-e", pool, readonly=False)
            if res.returncode == 0:
                return "error scrub"
            if "invalid option" not in res.stderr and "usage" not in res.stderr.lower():
                return self._scrub_refused(pool, res, "zpool scrub -e")
        res = self._zpool("scrub", pool, readonly=False)
        return "scrub" if res.returncode == 0 else self._scrub_refused(pool, res, "zpool scrub")

    def _scrub_refused(self, pool: str, res: Result, what: str) -> str:
        err = res.stderr
        if "currently scrubbing" in err or "scrub in progress" in err or "already" in err:
            return "running"
        if "no such pool" in err:
            raise self._no_pool(pool)
        raise HostError(f"{self.link.where}: {what} {pool}: {err.strip()}")

    def wait_scrub(self, pool: str, timeout: float | None = None) -> None:
        """Until the pool's scrub (or error scrub) ends: `zpool wait -t scrub` (OpenZFS 2.0+)."""
        res = self._zpool("wait", "-t", "scrub", pool, timeout=timeout)
        if res.returncode != 0:
            raise HostError(f"{self.link.where}: zpool wait -t scrub {pool}: {res.stderr.strip()}")

    # -- what a rebuild records before the pool is destroyed -----------------------------------

    def datasets(self, root: str) -> list[str]:
        res = self._zfs("list", "-H", "-o", "name", "-t", "filesystem,volume", "-r", root)
        if res.returncode != 0:
            raise self._error(res)
        return res.stdout.split("\n")[:-1] if res.stdout.endswith("\n") else res.stdout.splitlines()

    def local_props(self, root: str, recursive: bool = True) -> dict[str, dict[str, str]]:
        """dataset -> {property: value} of the properties set on it (source local), for the tree."""
        res = self._zfs("get", "-Hp", *(["-r"] if recursive else []), "-s", "local", "-o", "name,property,value",
                        "all", root)
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
            raise HostError(f"{self.link.where}: {res.stderr.strip() or 'no pool ' + pool}")
        out = {}
        for prop, value, source in rows:
            if not local_only or source == "local":
                out[prop] = value
        return out

    def status_text(self, pool: str) -> str:
        """`zpool status -P` as it prints it (the disks by path), for a rebuild's record."""
        names.pool(pool)
        res = self._zpool("status", "-P", pool)
        if res.returncode != 0 and "invalid option" in res.stderr:  # an older zpool: names, not paths
            res = self._zpool("status", pool)
        if res.returncode != 0:
            raise HostError(f"{self.link.where}: {res.stderr.strip() or 'no pool ' + pool}")
        return res.stdout

    def sync(self, pool: str) -> bool:
        """`zpool sync`: the open transaction group written out (`written` counts only synced
        ones); False where this zpool has no such command (zfs-fuse) or it failed."""
        names.pool(pool)
        return self._zpool("sync", pool, readonly=False).returncode == 0

"""Runs zpool/zfs and reads their answers. Features are detected by asking the tool.

`pools()` tries, in order, `zpool list -v -j --json-int` (OpenZFS 2.3+), `zpool list -v -Hp`
(OpenZFS 0.8+) and `zpool iostat -v` + `zpool status` (zfs-fuse, old ZFS). The first form that the
installed zpool accepts is remembered for the life of the process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .. import names
from ..errors import CommandFailed, NoSuchPool, UnsupportedOption
from ..runner import Result, run
from . import parse
from .model import Pool, PoolStatus

Runner = Callable[..., Result]

FLAVOURS = ("json", "parsable", "iostat")


class Zpool:
    def __init__(self, runner: Runner = run) -> None:
        self._run = runner
        self.flavour: str | None = None

    # -- reads --------------------------------------------------------------------------------

    def pools(self, pool_names: Sequence[str] = ()) -> list[Pool]:
        """Fill figures of the named pools (all imported pools when none are named)."""
        for n in pool_names:
            names.pool(n)
        order = [self.flavour] if self.flavour else list(FLAVOURS)
        for flavour in order:
            try:
                pools = getattr(self, f"_pools_{flavour}")(list(pool_names))
            except UnsupportedOption:
                continue
            self.flavour = flavour
            return pools
        raise CommandFailed(("zpool", "list"), 2, "this zpool supports none of: list -j, list -Hp, iostat -v")

    def status(self, pool_names: Sequence[str] = ()) -> list[PoolStatus]:
        for n in pool_names:
            names.pool(n)
        res = self._zpool(["status", *pool_names])
        return parse.parse_zpool_status(res.stdout)

    def pool_names(self) -> list[str]:
        res = self._zpool(["list", "-H", "-o", "name"])
        return [line.strip() for line in res.stdout.splitlines() if line.strip()]

    # -- flavours -----------------------------------------------------------------------------

    def _pools_json(self, pool_names: list[str]) -> list[Pool]:
        res = self._zpool(["list", "-v", "-j", "--json-int", *pool_names])
        return parse.parse_zpool_list_json(res.stdout)

    def _pools_parsable(self, pool_names: list[str]) -> list[Pool]:
        res = self._zpool(["list", "-v", "-Hp", *pool_names])
        return parse.parse_zpool_list_hp(res.stdout)

    def _pools_iostat(self, pool_names: list[str]) -> list[Pool]:
        try:
            res = self._zpool(["iostat", "-v", *pool_names])
        except CommandFailed as e:
            if "no pools available" in e.stderr:
                return []
            raise
        io = parse.parse_zpool_iostat_v(res.stdout)
        st = {s.name: s for s in self.status([p.name for p in io])}
        return [parse.merge_iostat_status(p, st.get(p.name)) for p in io]

    def _zpool(self, args: list[str]) -> Result:
        try:
            return self._run(["zpool", *args])
        except UnsupportedOption:
            raise
        except CommandFailed as e:
            if "no such pool" in e.stderr:
                missing = e.stderr.split("'")[1] if e.stderr.count("'") >= 2 else "?"
                raise NoSuchPool(f"no such pool: {missing} (imported pools: {', '.join(self._safe_names()) or 'none'})") from None
            raise

    def _safe_names(self) -> list[str]:
        try:
            return self.pool_names()
        except Exception:  # only used to decorate an error message
            return []

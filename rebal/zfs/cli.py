"""Runs zpool/zfs and reads their answers. Features are detected by asking the tool.

`pools()` tries, in order, `zpool list -v -j --json-int` (OpenZFS 2.3+), `zpool list -v -Hp`
(OpenZFS 0.8+) and `zpool iostat -v` + `zpool status` (zfs-fuse, old ZFS). The first form that the
installed zpool accepts is remembered for the life of the process.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .. import names
from ..errors import CommandFailed, NoSuchPool, UnsupportedOption, UsageError
from ..process.command import Result, Runner, run
from . import parse, queries
from .model import Pool, PoolStatus
from .queries import mounted_dataset


FLAVOURS = ("json", "parsable", "iostat")


class Zpool:
    def __init__(self, runner: Runner = run) -> None:
        self._run = runner
        self.flavour: str | None = None

    # -- reads --------------------------------------------------------------------------------

    def pools(self, pool_names: Sequence[str] = (), features: Sequence[str] = ()) -> list[Pool]:
        """Fill figures of the named pools (all imported pools when none are named); with
        ``features``, their states too where `zpool list -j` says them (`Pool.features`)."""
        for n in pool_names:
            names.pool(n)
        order = [self.flavour] if self.flavour else list(FLAVOURS)
        for flavour in order:
            try:
                pools = (self._pools_json(list(pool_names), features) if flavour == "json"
                         else getattr(self, f"_pools_{flavour}")(list(pool_names)))
            except UnsupportedOption:
                continue
            self.flavour = flavour
            return pools
        raise CommandFailed(("zpool", "list"), 2, "this zpool supports none of: list -j, list -Hp, iostat -v")

    def status(self, pool_names: Sequence[str] = ()) -> list[PoolStatus]:
        for n in pool_names:
            names.pool(n)
        res = self._zpool(queries.pool_status(pool_names)[1:])
        return parse.parse_zpool_status(res.stdout)

    def settle(self, pool: str, timeout: float = 30.0) -> None:
        """Wait until frees of deleted data show in the figures.

        OpenZFS: `zpool sync`, then the `freeing` property back to 0. Old ZFS (zfs-fuse) has neither
        and syncs an idle pool's transaction groups late: setting and clearing a user property of
        the pool's root dataset are two sync tasks, each of which waits for a transaction group to
        be written; nothing is left behind.
        """
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
        try:
            self._zpool(["sync", pool])
        except UnsupportedOption:
            self._run(["zfs", "set", "rebal:settle=1", pool], readonly=False)
            self._run(["zfs", "inherit", "rebal:settle", pool], readonly=False)
            return False
        return True

    def _freeing(self, pool: str) -> bool:
        """Are frees still under way (`freeing` above 0)?"""
        res = self._run(["zpool", "get", "-Hp", "-o", "value", "freeing", pool], check=False)
        return not (res.returncode != 0 or res.stdout.strip() in ("0", "-", ""))

    def _wait_freed(self, pool: str, timeout: float) -> None:
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(0.2)
            if not self._freeing(pool):
                return

    def scrub(self, pool: str) -> str:
        """Start a scrub: 'started', or 'running' when one already is."""
        names.pool(pool)
        try:
            self._run(["zpool", "scrub", pool], readonly=False)
        except CommandFailed as e:
            if "currently scrubbing" in e.stderr or "scrub in progress" in e.stderr or "already" in e.stderr:
                return "running"
            if "no such pool" in e.stderr:
                raise NoSuchPool(f"no such pool: {pool} (imported pools: {', '.join(self._safe_names()) or 'none'})") from None
            raise
        return "started"

    def features(self, pool: str, features: Sequence[str]) -> dict[str, str]:
        """{feature: 'enabled' | 'active' | 'disabled'} of those this zpool knows; {} where it knows
        none of them, or fails on one it does not know (zfs-fuse, older OpenZFS)."""
        res = self._run(queries.pool_features(pool, features), check=False)
        if res.returncode != 0:
            return {}
        out = {}
        for line in res.stdout.splitlines():
            prop, _, value = line.partition("\t")
            if prop.startswith("feature@") and value.strip() in ("enabled", "active", "disabled"):
                out[prop[len("feature@"):]] = value.strip()
        return out

    def pool_names(self) -> list[str]:
        res = self._zpool(["list", "-H", "-o", "name"])
        return [line.strip() for line in res.stdout.splitlines() if line.strip()]

    # -- flavours -----------------------------------------------------------------------------

    def _pools_json(self, pool_names: list[str], features: Sequence[str] = ()) -> list[Pool]:
        res = self._zpool(queries.pool_list_json(pool_names, features)[1:])
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


class Zfs:
    """Datasets, properties, snapshots, and what this `zfs` can do."""

    def __init__(self, runner: Runner = run) -> None:
        self._run = runner
        self._rewrite: tuple[bool, bool] | None = None

    mountinfo = "/proc/self/mountinfo"

    def mounted_filesystems(self) -> list[tuple[str, str]]:
        res = self._run(["zfs", "list", "-H", "-o", "name,mountpoint", "-t", "filesystem"])
        out = []
        for line in res.stdout.splitlines():
            name, _, mp = line.partition("\t")
            if mp.startswith("/"):
                out.append((name, mp))
        return out

    def dataset_for_path(self, path: str) -> tuple[str, str]:
        """(dataset, mountpoint) of the mounted ZFS file system that holds ``path``."""
        import os

        try:
            dev = os.stat(path).st_dev
        except OSError as e:
            raise UsageError(f"{path}: {e.strerror}") from None
        try:  # the kernel's table names it at once (OpenZFS); a `zfs list` was 0.13 s of a run's start
            with open(self.mountinfo, "rb") as f:
                found = mounted_dataset(os.fsdecode(f.read()), dev, os.path.realpath(path))
        except OSError:
            found = None
        if found is not None:
            return found
        best: tuple[str, str] | None = None
        for name, mp in self.mounted_filesystems():
            try:
                if os.stat(mp).st_dev != dev:
                    continue
            except OSError:
                continue
            if best is None or len(mp) > len(best[1]):
                best = (name, mp)
        if best is None:
            raise UsageError(f"{path} is not on a mounted ZFS file system")
        return best

    def mountpoint(self, dataset: str) -> str:
        names.dataset(dataset)
        props = self.get(dataset, ["mountpoint", "mounted"])
        if props.get("mounted") != "yes" or not props.get("mountpoint", "").startswith("/"):
            raise UsageError(f"dataset {dataset} is not mounted")
        return props["mountpoint"]

    def get(self, dataset: str, props: list[str]) -> dict[str, str]:
        try:
            res = self._run(["zfs", "get", "-Hp", "-o", "property,value", ",".join(props), dataset])
        except CommandFailed as e:
            if "dataset does not exist" in e.stderr:
                pool = dataset.split("/")[0].split("@")[0]
                pools = Zpool(self._run)._safe_names()
                if pool not in pools:
                    raise NoSuchPool(f"no such pool: {pool} (imported pools: {', '.join(pools) or 'none'})") from None
                raise UsageError(f"no such dataset: {dataset}") from None
            raise
        out = {}
        for line in res.stdout.splitlines():
            k, _, v = line.partition("\t")
            out[k] = v
        return out

    def newest_snapshots(self, root: str) -> dict[str, tuple[str, float] | None]:
        """Every dataset under ``root`` -> its newest snapshot (name, creation), None for one with none;
        {} where ``root`` is not there."""
        names.dataset(root)
        res = self._run(queries.tree_creation(root), check=False)
        if res.returncode != 0:
            return {}
        out: dict[str, tuple[str, float] | None] = {}
        snaps = []
        for line in res.stdout.splitlines():
            name, _, value = line.partition("\t")
            if "@" not in name:
                out.setdefault(name, None)
            elif value.strip().isdigit():
                snaps.append((name, float(value)))
        for name, t in snaps:
            d, _, s = name.partition("@")
            now = out.get(d)
            if d in out and (now is None or t > now[1]):
                out[d] = (s, t)
        return out

    def snapshots(self, dataset: str) -> list[tuple[str, int, int]]:
        """(name, creation time, used bytes) of the snapshots of ``dataset`` itself, oldest first.
        ``used``: what only that snapshot holds now (freed when it alone is destroyed)."""
        return self.snapshots_and(dataset, ())[0]

    def snapshots_and(self, dataset: str, props: Sequence[str]) -> tuple[list[tuple[str, int, int]], dict[str, str]]:
        """`snapshots`, and the values of ``props`` of ``dataset`` itself, read by the same `zfs get`
        (one process, not two)."""
        res = self._run(queries.snapshots_and(dataset, props))
        snaps: dict[str, dict[str, int]] = {}
        own: dict[str, str] = {}
        for line in res.stdout.splitlines():
            name, prop, value = (line.split("\t") + ["", ""])[:3]
            if name == dataset and prop in props:
                own[prop] = value
            elif name.startswith(dataset + "@") and value.isdigit():
                snaps.setdefault(name, {})[prop] = int(value)
        out = [(n, v["creation"], v.get("used", 0)) for n, v in snaps.items() if "creation" in v]
        return sorted(out, key=lambda s: s[1]), own

    def rewrite(self, paths: Sequence[bytes], physical: bool, stop: threading.Event | None,
                on_out: Callable[[bytes], None] | None = None) -> RewriteAnswer:
        """Rewrite these files in place with one `zfs rewrite -v [-P]` process (the caller keeps the
        command line under ARG_MAX). Ended at once when ``stop`` is set. What `-v` names was
        rewritten; what its errors name was not; whatever is named by neither was not answered.
        ``on_out`` is handed `-v`'s output as it comes (a line a file: progress while it runs)."""
        for p in paths:
            if not p.startswith(b"/"):
                raise ValueError("zfs rewrite needs absolute paths")  # so none can be read as an option
        # the paths go out as the bytes they are: a name that is not valid UTF-8 is still a name
        argv = ["zfs", "rewrite", "-v", *(["-P"] if physical else []), *paths]
        res = self._run(argv, readonly=False, timeout=None, check=False, stop=stop, on_out=on_out)
        return parse_rewrite_answer(res.stdout, res.stderr, paths, res.returncode)

    def rewrite_support(self) -> tuple[bool, bool]:
        """(zfs has `rewrite`, `rewrite` has -P), from the usage text `zfs rewrite` prints."""
        if self._rewrite is None:
            res = self._run(["zfs", "rewrite"], check=False)
            self._rewrite = parse_rewrite_usage(res.stdout + res.stderr)
        return self._rewrite


def parse_rewrite_usage(text: str) -> tuple[bool, bool]:
    """From `zfs rewrite` (no arguments) output: is there a rewrite command, and does it take -P."""
    m = re.search(r"^\s*rewrite\s+\[-([A-Za-z]+)\]", text, re.M)
    if not m:
        return (False, False)
    return (True, "P" in m.group(1))


@dataclass
class RewriteAnswer:
    done: list[bytes]  # named by -v: rewritten
    failed: dict[bytes, str]  # named by an error line: not rewritten, and why
    other: list[str]  # error lines that name none of the paths
    returncode: int  # negative: ended by a signal (the stop)


def parse_rewrite_answer(stdout: str, stderr: str, paths: Sequence[bytes], returncode: int) -> RewriteAnswer:
    """`zfs rewrite -v` names each file it rewrote, one "PATH\\n" after the other in the order it
    was handed them (one thread), and prints an error per file that failed ("failed to stat|open|
    rewrite PATH: REASON", OpenZFS 2.3-2.4); non-regular files are passed over without a word
    (fixture rewrite-v-mixed). Read in order, a name holding a newline is matched whole."""
    import os

    out = os.fsencode(stdout)
    done: list[bytes] = []
    at = 0
    for p in paths:
        if out.startswith(p + b"\n", at):
            done.append(p)
            at += len(p) + 1
    wanted = set(paths)
    failed: dict[bytes, str] = {}
    other: list[str] = []
    for line in stderr.splitlines():
        head, sep, reason = line.rpartition(": ")
        m = re.match(r"(?:failed|cannot) to \w+ (/.*)$", head) if sep else None
        named = os.fsencode(m.group(1)) if m else None
        if named is not None and named in wanted:
            failed[named] = reason.strip()
        elif line.strip():
            other.append(line.strip())
    return RewriteAnswer(done, failed, other, returncode)

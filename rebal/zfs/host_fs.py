"""The file-system side of a `ZfsHost` that a rebalance and `rebal where` read: which dataset holds a
path, one dataset's properties, the snapshots and what they hold, and `zfs rewrite` (run in place,
by lanes of processes, inplace_pass.py). A mixin: ZfsHost gives it `run` (its link's runner) and
its listings; the parsers of `zfs rewrite`'s answers are pure and live beside it."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import names
from ..errors import CommandFailed, NoSuchPool, RebalError, ToolMissing, UsageError
from ..process.command import Result, Stopping
from . import argv as zargv
from . import queries
from .queries import mounted_dataset


class FileSystems:
    # what ZfsHost (host.py) gives this mixin
    run: Callable[..., Result]
    filesystems: Callable[..., dict[str, str]]
    pool_names: Callable[[], list[str]]
    _rewrite: tuple[bool, bool] | None
    _zdb_roots: dict[str, str]

    mountinfo = "/proc/self/mountinfo"

    def dataset_for_path(self, path: str) -> tuple[str, str]:
        """(dataset, mountpoint) of the mounted ZFS file system that holds ``path`` (on this host)."""
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
        for name, mp in self.filesystems().items():
            try:
                if not mp.startswith("/") or os.stat(mp).st_dev != dev:
                    continue
            except OSError:
                continue
            if best is None or len(mp) > len(best[1]):
                best = (name, mp)
        if best is None:
            raise UsageError(f"{path} is not on a mounted ZFS file system")
        return best

    def mounted_at(self, dataset: str) -> str:
        """Where ``dataset`` is mounted; a UsageError where it is not."""
        names.dataset(dataset)
        props = self.get(dataset, ["mountpoint", "mounted"])
        if props.get("mounted") != "yes" or not props.get("mountpoint", "").startswith("/"):
            raise UsageError(f"dataset {dataset} is not mounted")
        return props["mountpoint"]

    def get(self, dataset: str, props: list[str]) -> dict[str, str]:
        """{property: value} of one dataset; a missing pool or dataset said in words."""
        try:
            res = self.run(["zfs", "get", "-Hp", "-o", "property,value", ",".join(props), dataset])
        except CommandFailed as e:
            if "dataset does not exist" in e.stderr:
                pool = dataset.split("/")[0].split("@")[0]
                pools = self.pool_names()
                if pool not in pools:
                    raise NoSuchPool(f"no such pool: {pool} (imported pools: {', '.join(pools) or 'none'})") from None
                raise UsageError(f"no such dataset: {dataset}") from None
            raise
        out = {}
        for line in res.stdout.splitlines():
            k, _, v = line.partition("\t")
            out[k] = v
        return out

    def properties(self, dataset: str, props: Sequence[str], *, check: bool = True) -> dict[str, str]:
        """{property: value} of ``props`` of one dataset, exact numbers, as `zfs get` gives them: a
        property this zfs does not know fails the command ({} where ``check`` is False)."""
        res = self.run(zargv.properties(dataset, props), check=check)
        if res.returncode != 0:
            return {}
        return dict(line.split("\t", 1) for line in res.stdout.splitlines() if "\t" in line)

    def create_writable(self, dataset: str) -> None:
        """A placeholder parent on a backup: writable, whatever its parent says (a receive goes under it)."""
        names.dataset(dataset)
        self.run(zargv.create_writable(dataset), readonly=False)

    def backup_choices(self, source: str, recursive: bool) -> list[tuple[str, str]]:
        """(dataset, its rebal:backup property or "-") of the file systems and volumes a job may
        take, in one command (zfs-fuse's `zfs get` has no -t)."""
        names.dataset(source)
        out = []
        for line in self.run(zargv.backup_listing(source, recursive)).stdout.splitlines():
            name, _, val = line.partition("\t")
            if name.strip():
                out.append((name.strip(), val.strip() or "-"))
        return out

    def choices_written(self, source: str, recursive: bool,
                        props: Sequence[str]) -> tuple[list[tuple[str, str]], dict[tuple[str, str], int]] | None:
        """backup_choices and written_since in one command: (the rows, (dataset, property) -> bytes);
        None where this zfs refuses it (then each is asked alone)."""
        names.dataset(source)
        res = self.run(zargv.choices_written(source, recursive, props), check=False)
        if res.returncode != 0:
            return None
        rows, written = [], {}
        for line in res.stdout.splitlines():
            parts = line.split("\t")
            if len(parts) != 2 + len(props) or not parts[0].strip():
                return None  # not the columns asked for: ask each alone
            name = parts[0].strip()
            rows.append((name, parts[1].strip() or "-"))
            for prop, value in zip(props, parts[2:]):
                if value.strip().isdigit():
                    written[(name, prop)] = int(value)
        return rows, written

    def written_since(self, source: str, recursive: bool, props: Sequence[str]) -> dict[tuple[str, str], int] | None:
        """(dataset, `written@SNAP` or `written#BOOKMARK`) -> bytes, of ``source`` (and with
        ``recursive`` its file systems and volumes); None where this zfs cannot say (no written@)."""
        res = self.run(zargv.written_since(source, recursive, props), check=False)
        if res.returncode != 0:
            return None
        out = {}
        for line in res.stdout.splitlines():
            parts = line.split("\t")
            if len(parts) >= 3 and parts[2].strip().isdigit():
                out[(parts[0], parts[1])] = int(parts[2])
        return out

    def creation(self, names_: Sequence[str]) -> dict[str, float]:
        """When each dataset or snapshot was made (seconds); those not there are left out."""
        if not names_:
            return {}
        res = self.run(zargv.creation(names_), check=False)
        out = {}
        for line in res.stdout.splitlines():
            name, _, value = line.partition("\t")
            if value.strip().isdigit():
                out[name] = float(value.strip())
        return out

    def snapshots_there(self, snaps: Sequence[str]) -> list[str]:
        """Those of ``snaps`` that exist."""
        res = self.run(zargv.snapshot_names(snaps), check=False)
        return [n for n in res.stdout.split() if n in snaps]

    # -- what a gate asks before and after the command it lets through (gate/serve.py) ---------

    def snapshot_names(self, dataset: str, *, recursive: bool = False) -> list[str]:
        """The names of ``dataset``'s snapshots (and its descendants' with ``recursive``); none
        where it cannot be listed."""
        names.dataset(dataset)
        res = self.run(zargv.snapshot_list(dataset, recursive), check=False)
        return [n for n in res.stdout.split("\n") if "@" in n] if res.returncode == 0 else []

    def guid(self, name: str) -> int | None:
        """The guid of a dataset or snapshot; None where it is not there."""
        names.dataset(re.split(r"[@#]", name, maxsplit=1)[0])
        res = self.run(zargv.guid(name), check=False)
        value = res.stdout.strip()
        return int(value) if res.returncode == 0 and value.isdigit() else None

    def received(self, props: Sequence[str], root: str) -> list[tuple[str, str]]:
        """(dataset, property) of ``props`` on ``root`` and every dataset under it whose value came
        from a received stream."""
        names.dataset(root)
        res = self.run(zargv.property_sources(props, root), check=False)
        rows = [row.split("\t") for row in res.stdout.splitlines()]
        return [(r[0], r[1]) for r in rows if len(r) == 3 and r[2] == "received"]

    def receive_excludes(self, root: str) -> bool:
        """Does this zfs's receive take -x? Asked of zfs receive itself, not read from its usage text:
        a dry run of an empty stream with -x (into ROOT/.rebal-probe, a name no dataset can have)
        fails reading the stream (exit 1) where -x exists, and on the option (a usage error, exit
        2) where it does not."""
        names.dataset(root)
        return self.run(zargv.receive_probe_x(root + "/.rebal-probe"), check=False, input=b"").returncode != 2

    def zdb(self, args: Sequence[str], timeout: float | None = 300) -> str:
        """What zdb prints for ``args`` (it reads the pool from its disks); a RebalError in words
        where it fails, ToolMissing where there is no zdb."""
        try:
            r = self.run(zargv.zdb(args), check=False, timeout=timeout)
        except ToolMissing:
            raise ToolMissing("zdb is not installed: it ships with zfsutils-linux (OpenZFS) and zfs-fuse") from None
        if r.returncode != 0:
            last = [x for x in (r.stderr or r.stdout).strip().splitlines() if x.strip()]
            raise RebalError(f"zdb {' '.join(args[:2])} failed: {last[-1] if last else f'exit {r.returncode}'} "
                             "(zdb reads the pool from its disks: it needs root and the pool in its cache file)")
        return r.stdout

    def zdb_name(self, dataset: str) -> str:
        """How zdb names a dataset. A pool's root dataset is `pool/` to OpenZFS's zdb (a bare pool name
        means its MOS there); zfs-fuse's zdb knows only the bare name. Asked once per pool."""
        if "/" in dataset:
            return dataset
        if dataset not in self._zdb_roots:
            r = self.run(zargv.zdb(["-d", dataset + "/"]), check=False, timeout=120)
            self._zdb_roots[dataset] = dataset + "/" if r.returncode == 0 else dataset
        return self._zdb_roots[dataset]

    def newest_snapshots(self, root: str) -> tuple[dict[str, tuple[str, float] | None], dict[str, str]]:
        """Every dataset under ``root`` -> its newest snapshot (name, creation), None for one with none
        ({} where ``root`` is not there); and the datasets that carry the failover mark -> its value
        (since when the backup serves them: recover/failover.py), in the same command."""
        names.dataset(root)
        res = self.run(queries.tree_creation(root), check=False)
        if res.returncode != 0:
            return {}, {}
        out: dict[str, tuple[str, float] | None] = {}
        marked: dict[str, str] = {}
        snaps = []
        for line in res.stdout.splitlines():
            name, prop, value = (line.split("\t") + ["", ""])[:3]
            if prop == names.FAILOVER_PROPERTY:
                if "@" not in name and value.strip() not in ("", "-"):
                    marked[name] = value.strip()
            elif "@" not in name:
                out.setdefault(name, None)
            elif value.strip().isdigit():
                snaps.append((name, float(value)))
        for name, t in snaps:
            d, _, s = name.partition("@")
            now = out.get(d)
            if d in out and (now is None or t > now[1]):
                out[d] = (s, t)
        return out, marked

    def snapshot_costs(self, dataset: str, props: Sequence[str]) -> tuple[list[tuple[str, int, int]], dict[str, str]]:
        """(name, creation time, used bytes) of the snapshots of ``dataset`` itself, oldest first
        (``used``: what only that snapshot holds now, freed when it alone is destroyed), and the
        values of ``props`` of the dataset, read by the same `zfs get` (one process, not two)."""
        res = self.run(queries.snapshots_and(dataset, props))
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

    def rewrite(self, paths: Sequence[bytes], physical: bool, stop: Stopping | None,
                on_out: Callable[[bytes], None] | None = None) -> RewriteAnswer:
        """Rewrite these files in place with one `zfs rewrite -v [-P]` process (the caller keeps the
        command line under ARG_MAX). Ended at once when ``stop`` is set. What `-v` names was
        rewritten; what its errors name was not; whatever is named by neither was not answered.
        ``on_out`` is handed `-v`'s output as it comes (a line a file: progress while it runs)."""
        for p in paths:
            if not p.startswith(b"/"):
                raise ValueError("zfs rewrite needs absolute paths")  # so none can be read as an option
        # the paths go out as the bytes they are: a name that is not valid UTF-8 is still a name
        argv: list[Any] = ["zfs", "rewrite", "-v", *(["-P"] if physical else []), *paths]
        res = self.run(argv, readonly=False, timeout=None, check=False, stop=stop, on_out=on_out)
        return parse_rewrite_answer(res.stdout, res.stderr, paths, res.returncode)

    def rewrite_support(self) -> tuple[bool, bool]:
        """(zfs has `rewrite`, `rewrite` has -P), from the usage text `zfs rewrite` prints."""
        if self._rewrite is None:
            res = self.run(["zfs", "rewrite"], check=False)
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

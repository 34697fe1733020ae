"""One host's ZFS, whichever side of a transfer it is on.

A `ZfsHost` runs zfs and zpool through a link: this host (the process layer), or another through the
job's ssh master. The link is what makes "here" and "there"; the host's methods are the same on both.
A replication sends from the source's host into the backup's; a restore sends from the backup's host
into the source's: the same calls with the two hosts swapped, whichever end rebal runs on (a pull job
runs on the backup host, so there the backup is "here").

Every command line is built here, as an argument list; the link joins it for ssh with shlex. On this
host, where pyzfs loads, snapshots, holds and bookmarks go through libzfs_core instead (no process
a call); listing always uses the zfs command (libzfs_core has none). The pool's side (status, scrub,
what a rebuild records) is host_pool.PoolCalls; what the zfs can do, abilities.py.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from .. import names
from ..errors import CommandFailed, HostError
from ..process.command import Result, Runner
from . import argv as zargv
from .abilities import Abilities, delegations
from .destroy import Batches, chunks, destroy_argv, release_argv
from .host_fs import FileSystems
from .host_list import Listings
from .host_pool import PoolCalls
from .host_stream import Streams
from .link import Kept, Link
from .snaps import Snap, Tree, parse_guid_txg, snapshots_from

__all__ = ["HostError", "Link", "NoBookmarks", "Tree", "ZfsHost", "delegations", "here_host", "here_hosts"]


class NoBookmarks(HostError):
    """This host's zfs has no `zfs bookmark` (zfs-fuse): a replication's base is held instead."""


class ZfsHost(PoolCalls, Listings, FileSystems, Streams):
    """The one door to ZFS: every zfs, zpool and zdb command rebal runs goes through a ZfsHost, on
    this host (`ZfsHost.here()`) or another through a job's ssh."""

    def __init__(self, link: Link, lzc: ModuleType | None = None, *, lzc_when_needed: bool = False) -> None:
        """``lzc``: pyzfs's libzfs_core, for a host reached through this process (see here_hosts).
        ``lzc_when_needed``: loaded at its first call instead (here_host), else the zfs command."""
        self.link = link
        self.flavour: str | None = None  # the form of `zpool list` this zpool takes (host_pool.pools)
        self._rewrite: tuple[bool, bool] | None = None  # what `zfs rewrite` takes (host_fs)
        self._zdb_roots: dict[str, str] = {}  # how zdb names a pool's root dataset (host_fs.zdb_name)
        self._lzc = lzc if link.local else None
        self._lzc_pending = lzc_when_needed and link.local and lzc is None
        self._lzc_lock = threading.Lock()
        self.batches = Batches(self.run)
        self._abilities: Abilities | None = None
        self._usage: dict[str, str] = {}  # command -> its usage text, as asked this run
        self._kept: tuple[Kept, str, bool] | None = None  # see keep_usage
        self.lists_fast: bool | None = None  # see fast_listing

    @classmethod
    def here(cls, runner: Runner | None = None) -> ZfsHost:
        """This host's ZFS through the zfs and zpool commands (``runner``: how a command runs, for a
        test's recorded answers or a run's counting; process.command.run where None)."""
        from ..transport import Here

        return cls(Here(runner))

    @property
    def lzc(self) -> ModuleType | None:
        """libzfs_core where this host uses it. Loaded at the first call that needs it where
        ``lzc_when_needed``: pyzfs's import parses its C declarations (3.3 s of a 9.4 s no-change run
        under the lane's TCG, profiled), which a run that snapshots nothing never needs."""
        if self._lzc_pending:
            with self._lzc_lock:
                if self._lzc_pending:
                    self._lzc = load_lzc()
                    self._lzc_pending = False
        return self._lzc

    @property
    def backend(self) -> str:
        return "libzfs_core" if self.lzc is not None else "zfs-cli"

    def run(self, argv: Sequence[str], **kw: Any) -> Result:
        """One command on this host (a runner: process.command.run's signature)."""
        return self.link.run(list(argv), **kw)

    @property
    def where(self) -> str:
        return "this host" if self.link.local else self.link.where

    @property
    def local(self) -> bool:
        return self.link.local

    def shown(self, argv: list[str]) -> str:
        """A command line built by this host, as a dry run shows it: as is here, `ssh HOST CMD` there."""
        return " ".join(argv) if self.local else f"ssh {self.where} {argv[-1]}"

    def _zfs(self, *args: str, readonly: bool = True, check: bool = False, timeout: float | None = 300) -> Result:
        return self.link.run(["zfs", *args], readonly=readonly, check=check, timeout=timeout)

    def _zpool(self, *args: str, readonly: bool = True, timeout: float | None = 300) -> Result:
        return self.link.run(["zpool", *args], readonly=readonly, check=False, timeout=timeout)

    def _error(self, res: Result) -> HostError:
        return HostError(f"{self.where}: {res.stderr.strip() or f'zfs exited {res.returncode}'}")

    # -- what it can do -------------------------------------------------------------------------

    def abilities(self) -> Abilities:
        """What this host's zfs can do, each part asked when first needed (abilities.Abilities)."""
        if self._abilities is None:
            self._abilities = Abilities(self.usage, self.version)
        return self._abilities

    def keep_usage(self, kept: Kept, where: str, *, store: bool = True) -> None:
        """Keep this host's usage texts in ``kept`` (state.Cache: a day) under ``where`` (the other
        end's user@host:port): a remote host is asked once a day, not each run. ``store``: False
        in a dry run (a kept text is still read)."""
        self._kept = (kept, where, store)

    def forget_usage(self) -> bool:
        """Forget the kept usage texts (the zfs refused an option, or a gate came): asked again next
        run. False where none are kept."""
        if self._kept is None:
            return False
        kept, where, _ = self._kept
        for command in ("send", "receive"):
            kept.forget(f"usage:zfs-{command}:{where}")
        return True

    def version(self) -> tuple[int, ...]:
        """The zfs userland's version, (2, 4, 4) from `zfs version`'s "zfs-2.4.4-1"; () where it
        has no such command (zfs-fuse, ZFS before OpenZFS 0.8). The usage texts do not show
        `receive -c` (OpenZFS 2.2+), so the version says."""
        import re  # noqa: PLC0415

        res = self._zfs("version")
        m = re.match(r"zfs-(\d+)\.(\d+)(?:\.(\d+))?", res.stdout.strip()) if res.returncode == 0 else None
        return tuple(int(x) for x in m.groups() if x is not None) if m else ()

    # -- listing --------------------------------------------------------------------------------

    def delegated(self, dataset: str, user: str, groups: tuple[str, ...] = ()) -> set[str]:
        """The permissions `zfs allow` gives ``user`` (by name, through ``groups``, or as everyone)
        on ``dataset``, from it and its parents (sets by name, as ``@set``, not opened)."""
        names.dataset(dataset)
        res = self._zfs("allow", dataset)
        if res.returncode != 0:
            raise self._error(res)
        return delegations(res.stdout, user, groups)

    def holds_nothing(self, dataset: str) -> bool:
        """The file system is mounted and its directory is empty (a new pool's root): receiving over it
        loses nothing. False when that cannot be seen (not mounted, not listed)."""
        v = self.values(dataset, ["mounted", "mountpoint"], recursive=False).get(dataset, {})
        mp = v.get("mountpoint", "")
        if v.get("mounted") != "yes" or not mp.startswith("/"):
            return False
        res = self.link.run(["ls", "-A", "--", mp], check=False)
        return res.returncode == 0 and not res.stdout.strip()

    def exists(self, name: str) -> bool:
        """``name`` (a dataset, snapshot or bookmark) is there."""
        if self.lzc is not None and "#" not in name:  # lzc_exists cannot see bookmarks (it answers False)
            return bool(self.lzc.lzc_exists(name.encode()))
        return self.run(zargv.exists(name), check=False).returncode == 0

    def usage(self, command: str) -> str:
        """What zfs prints for ``command`` given no arguments: its options. Asked once a run, or
        read from where keep_usage keeps it."""
        text = self._usage.get(command)
        if text is not None:
            return text
        key = f"usage:zfs-{command}:{self._kept[1]}" if self._kept is not None else ""
        if self._kept is not None:
            text = self._kept[0].get(key)
        if not text:
            res = self.run(zargv.usage(command), check=False)
            text = res.stdout + res.stderr
            if self._kept is not None and self._kept[2] and "usage" in text.lower():
                self._kept[0].set(key, text)
        self._usage[command] = text
        return text

    def has(self, program: str) -> bool:
        """``program`` is on this host's PATH (rebal asks only for its own fixed names)."""
        if not program.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"not a program name: {program!r}")
        return self.run(["sh", "-c", f"command -v {program}"], check=False).returncode == 0

    def token(self, dataset: str) -> str | None:
        if not self.abilities().resumable:
            return None
        res = self._zfs("get", "-H", "-o", "value", "receive_resume_token", dataset)
        tok = res.stdout.strip()
        return tok if res.returncode == 0 and tok not in ("", "-") else None

    def props(self, dataset: str, which: list[str]) -> dict[str, dict[str, str]]:
        """{property: {value, source}} of one dataset."""
        res = self._zfs("get", "-Hp", "-o", "property,value,source", ",".join(which), dataset)
        if res.returncode != 0:
            raise self._error(res)
        out = {}
        for line in res.stdout.splitlines():
            prop, value, source = (line.split("\t") + ["", "", ""])[:3]
            out[prop] = {"value": value, "source": source}
        return out

    def snapshots(self, dataset: str, *, bookmarks: bool = False) -> list[Snap] | None:
        """The dataset's own snapshots (and with ``bookmarks`` its bookmarks), oldest first; None
        when the dataset does not exist on this host."""
        names.dataset(dataset)
        res = self._zfs("get", "-Hp", "-d", "1", "-o", "name,property,value", "guid,createtxg", dataset)
        if res.returncode != 0:
            if "does not exist" in res.stderr:
                return None
            raise self._error(res)
        return snapshots_from(res.stdout, dataset, bookmarks)

    def snapshot_info(self, dataset: str) -> dict[str, dict[str, int]] | None:
        """name -> {creation, referenced, used, guid} of the snapshots of one dataset; None when the
        dataset does not exist on this host."""
        res = self._zfs("get", "-Hp", "-d", "1", "-o", "name,property,value", "creation,referenced,used,guid", dataset)
        if res.returncode != 0:
            if "does not exist" in res.stderr:
                return None
            raise self._error(res)
        return {n: v for n, v in parse_guid_txg(res.stdout).items() if n.startswith(dataset + "@")}

    def filesystems(self, root: str | None = None) -> dict[str, str]:
        """file system -> its mountpoint property, under ``root`` (every one where None)."""
        res = self._zfs("list", "-H", "-o", "name,mountpoint", "-t", "filesystem", *(["-r", root] if root else []))
        if res.returncode != 0:
            raise self._error(res)
        return dict((line.split("\t") + [""])[:2] for line in res.stdout.splitlines() if line)

    def mountpoint(self, dataset: str) -> str | None:
        """The dataset's mountpoint property where it is a path ("none", "legacy", "-": None)."""
        names.dataset(dataset)
        res = self._zfs("get", "-H", "-o", "value", "mountpoint", dataset)
        if res.returncode != 0:
            raise self._error(res)
        mp = res.stdout.strip()
        return mp if mp.startswith("/") else None

    def is_dir(self, path: str) -> bool:
        if self.local:
            return os.path.isdir(path)
        return self.link.run(["test", "-d", path], check=False).returncode == 0

    def private_dir(self, prefix: str) -> str:
        """A new empty directory only root can enter, under /tmp."""
        if self.local:
            return tempfile.mkdtemp(prefix=prefix)
        return self.link.run(["mktemp", "-d", f"/tmp/{prefix}XXXXXXXX"], readonly=False).stdout.strip()

    def remove_dir(self, path: str) -> None:
        if path:
            self.link.run(["rmdir", "--", path], readonly=False, check=False)

    # -- changing it ----------------------------------------------------------------------------

    def set(self, dataset: str, prop: str, value: str) -> None:
        res = self._zfs("set", f"{prop}={value}", dataset, readonly=False)
        if res.returncode != 0:
            raise self._error(res)

    def inherit(self, dataset: str, prop: str) -> None:
        res = self._zfs("inherit", prop, dataset, readonly=False)
        if res.returncode != 0:
            raise self._error(res)

    def clone(self, snapshot: str, name: str, props: dict[str, str]) -> None:
        names.snapshot(snapshot)
        names.dataset(name)
        opts = [a for k, v in props.items() for a in ("-o", f"{k}={v}")]
        res = self._zfs("clone", *opts, snapshot, name, readonly=False)
        if res.returncode != 0:
            raise self._error(res)

    def destroy_snapshot(self, dataset: str, snap: str) -> None:
        """Destroy one snapshot (rebal's own: the callers check the name)."""
        names.snapshot(f"{dataset}@{snap}")
        res = self._zfs("destroy", f"{dataset}@{snap}", readonly=False)
        if res.returncode != 0:
            raise self._error(res)

    def destroy_clone(self, name: str) -> None:
        """Destroy a clone rebal made (never anything else: the callers name only their own)."""
        names.dataset(name)
        for _ in range(50):  # zfs-fuse may call a just-used file system busy for a moment
            res = self._zfs("destroy", "-f", name, readonly=False)
            if res.returncode == 0 or "does not exist" in res.stderr:
                return
            time.sleep(0.1)

    def abort(self, dataset: str) -> None:
        """Forget a partial receive (its resume token)."""
        res = self._zfs("receive", "-A", dataset, readonly=False)
        if res.returncode != 0:
            raise self._error(res)

    def load_key(self, dataset: str, location: str | None = None) -> Result:
        """`zfs load-key` (from ``location``, a keylocation like file:///root/key, where given)."""
        return self._zfs("load-key", *(["-L", location] if location else []), dataset, readonly=False, timeout=None)

    def mount(self, dataset: str) -> None:
        res = self._zfs("mount", dataset, readonly=False)
        if res.returncode != 0 and "already mounted" not in res.stderr:
            raise self._error(res)

    def unmount(self, dataset: str) -> None:
        res = self._zfs("unmount", dataset, readonly=False)
        if res.returncode != 0 and "not currently mounted" not in res.stderr and "not mounted" not in res.stderr:
            raise self._error(res)

    def rollback(self, snapshot: str) -> None:
        """`zfs rollback -r`: ``snapshot``'s dataset back to it, the snapshots after it destroyed
        (the failback's only caller keeps their data elsewhere first, or was told to discard it)."""
        names.snapshot(snapshot)
        res = self._zfs("rollback", "-r", snapshot, readonly=False)
        if res.returncode != 0:
            raise self._error(res)

    def create_holder(self, dataset: str) -> None:
        """An empty file system that never mounts (canmount=off), to hold others under it."""
        names.dataset(dataset)
        res = self._zfs("create", "-o", "canmount=off", dataset, readonly=False)
        if res.returncode != 0 and "already exists" not in res.stderr:
            raise self._error(res)

    def change_key_inherit(self, dataset: str) -> None:
        """Make ``dataset`` inherit its parent's encryption root (after a raw receive made it its own)."""
        res = self._zfs("change-key", "-i", dataset, readonly=False)
        if res.returncode != 0:
            raise self._error(res)

    # -- a replication's snapshots, holds and bookmarks ----------------------------------------

    def snapshot(self, snaps: list[str], recursive: bool = False, dry_run: bool = False) -> None:
        """Take the snapshots in one atomic `zfs snapshot` (with -r: every child too)."""
        for s in snaps:
            names.snapshot(s)
        if self.lzc is not None and not recursive:  # lzc_snapshot takes the full list, no -r
            if not dry_run:
                self.lzc.lzc_snapshot([s.encode() for s in snaps])
            return
        self.run(zargv.snapshot(snaps, recursive), readonly=False, dry_run=dry_run)

    def hold(self, tag: str, snaps: list[str], recursive: bool = False) -> None:
        if self.lzc is not None and not recursive:
            self.lzc.lzc_hold({s.encode(): tag.encode() for s in snaps})
            return
        self.run(zargv.hold(tag, snaps, recursive), readonly=False)

    def release(self, tag: str, snaps: list[str], recursive: bool = False) -> None:
        """Release a hold on each of ``snaps`` (as many a command as destroy.chunks fits: zfs goes on
        past a snapshot without it); a hold that is not there is not an error."""
        if self.lzc is not None and not recursive:
            try:
                self.lzc.lzc_release({s.encode(): [tag.encode()] for s in snaps})
            except Exception as e:  # pyzfs raises its own error classes
                if "NoSuch" not in type(e).__name__ and "not" not in str(e).lower():
                    raise
            return
        for part in chunks(snaps):
            try:
                self.run(release_argv(tag, part, recursive=recursive), readonly=False)
            except CommandFailed as e:
                if "no such tag" not in e.stderr and "no such" not in e.stderr.lower():
                    raise

    def bookmark(self, snap: str, bookmark: str) -> None:
        if self.lzc is not None:
            self.lzc.lzc_bookmark({bookmark.encode(): snap.encode()})
            return
        try:
            self.run(zargv.bookmark(snap, bookmark), readonly=False)
        except CommandFailed as e:
            if "unrecognized command" in e.stderr or "usage:" in e.stderr:
                raise NoBookmarks(f"{self.where}: this ZFS has no bookmarks (OpenZFS 0.6.4+); holds keep the "
                                  "base instead") from None
            raise

    def destroy_snapshots(self, dataset: str, snaps: list[str], recursive: bool = False, dry_run: bool = False) -> None:
        """Destroy each of ``snaps`` of ``dataset``, one command each (a failure raises)."""
        for s in snaps:
            self.run(destroy_argv(dataset, [s], recursive=recursive), readonly=False, dry_run=dry_run)

    def destroy_each(self, dataset: str, snaps: list[str], recursive: bool = False,
                     dry_run: bool = False) -> dict[str, str]:
        """Destroy many snapshots in few commands (destroy.py); the ones that could not go, with why."""
        return self.batches.destroy(dataset, snaps, recursive=recursive, dry_run=dry_run)

    def destroy_bookmark(self, dataset: str, name: str) -> None:
        names.dataset(dataset)
        self.run(zargv.destroy_bookmark(dataset, name), readonly=False)


def here_hosts(link: Link) -> list[ZfsHost]:
    """This host's ZFS through each way that works here, over ``link`` (this host: transport.Here,
    with a run's counting runner): libzfs_core first where pyzfs loads, then the zfs command (always)."""
    if not link.local:
        raise ValueError("libzfs_core reaches only this host's ZFS")
    lzc = load_lzc()
    return [ZfsHost(link, lzc), ZfsHost(link)] if lzc is not None else [ZfsHost(link)]


def here_host(link: Link) -> ZfsHost:
    """This host's ZFS as a run uses it: libzfs_core where pyzfs loads, loaded at its first call
    (a run that makes no snapshot, hold nor bookmark never loads it), else the zfs command."""
    if not link.local:
        raise ValueError("libzfs_core reaches only this host's ZFS")
    return ZfsHost(link, lzc_when_needed=True)


def load_lzc() -> ModuleType | None:
    """pyzfs's libzfs_core, its C library loaded; None without pyzfs or where the library does not
    load (zfs-fuse has no libzfs_core)."""
    try:
        import libzfs_core as lzc  # noqa: PLC0415  (pyzfs, shipped with OpenZFS)

        lzc.lzc_exists(b"\x00")  # forces the C library to load
        return lzc
    except Exception:
        return None

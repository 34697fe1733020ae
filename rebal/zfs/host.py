"""One host's ZFS, whichever side of a transfer it is on.

A `ZfsHost` runs zfs and zpool through a link: this host (the process layer), or another through the
job's ssh master. The link is what makes "here" and "there"; the host's methods are the same on both.
A replication sends from the source's host into the backup's; a restore sends from the backup's host
into the source's: the same calls with the two hosts swapped, whichever end rebal runs on (a pull job
runs on the backup host, so there the backup is "here").

Every command line is built here, as an argument list; the link joins it for ssh with shlex.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import Protocol

from .. import names
from ..errors import RebalError
from ..process.command import Result
from .snaps import Snap, parse_guid_txg, snapshots_from, tree_from


class HostError(RebalError):
    pass


class Link(Protocol):
    """How commands reach a host: transport.Here or transport.Ssh."""

    local: bool

    @property
    def where(self) -> str: ...

    def argv(self, *parts: list[str]) -> list[str]: ...

    def run(self, *parts: list[str], readonly: bool = True, dry_run: bool = False, check: bool = True,
            timeout: float | None = 300, input: str | None = None) -> Result: ...


@dataclass
class Abilities:
    """What this host's zfs can do, from its usage texts (asked once per host and run)."""

    resumable: bool = False  # zfs receive -s / zfs send -t
    receive_u: bool = False  # receive without mounting
    receive_o: bool = False  # receive -o PROP=VALUE
    receive_x: bool = False  # receive -x PROP
    corrective: bool = False  # receive -c (OpenZFS 2.2+): heal damaged blocks from a stream
    raw: bool = False  # send -w
    props: bool = False  # send -p
    compressed: bool = False  # send -c
    large_blocks: bool = False  # send -L
    embedded: bool = False  # send -e


@dataclass
class Tree:
    """Datasets under a root with their snapshots (oldest first), and the resume tokens found."""

    snaps: dict[str, list[Snap]] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)

    def has(self, dataset: str, snap: str) -> bool:
        return any(s.name == snap and not s.bookmark for s in self.snaps.get(dataset, []))

    def guid(self, dataset: str, snap: str) -> int | None:
        return next((s.guid for s in self.snaps.get(dataset, []) if s.name == snap and not s.bookmark), None)


def _flags(usage: str) -> set[str]:
    """The one-letter options a zfs usage text shows (`[-Fhnsuv]`, `[-o property=value]`, ...)."""
    import re

    out: set[str] = set()
    for group in re.findall(r"\[-([A-Za-z]+)", usage):
        out.update(group)
    return out


def delegations(text: str, user: str, groups: tuple[str, ...] = ()) -> set[str]:
    """Of `zfs allow DATASET`'s text: what applies to ``user`` on DATASET: its own local and
    local+descendent grants, and its parents' descendent and local+descendent ones (create-time
    permissions and set definitions are not grants)."""
    out: set[str] = set()
    block, section = 0, ""
    applies = {1: ("Local permissions", "Local+Descendent permissions"),
               2: ("Descendent permissions", "Local+Descendent permissions")}
    whom = {"everyone", f"user {user}"} | {f"group {g}" for g in groups}
    for line in text.splitlines():
        if line.startswith("---- Permissions on "):
            block, section = min(block + 1, 2), ""
        elif not line.startswith("\t"):
            section = line.strip().rstrip(":")
        elif block and section in applies[block]:
            parts = line.split()
            who = "everyone" if parts[0] == "everyone" else " ".join(parts[:2])
            if who in whom and len(parts) >= 2:
                out.update(parts[-1].split(","))
    return out


class ZfsHost:
    def __init__(self, link: Link) -> None:
        self.link = link
        self._abilities: Abilities | None = None

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

    def _error(self, res: Result) -> HostError:
        return HostError(f"{self.where}: {res.stderr.strip() or f'zfs exited {res.returncode}'}")

    # -- what it can do -------------------------------------------------------------------------

    def abilities(self) -> Abilities:
        if self._abilities is None:
            send, recv = self._zfs("send"), self._zfs("receive")
            s, r = _flags(send.stdout + send.stderr), _flags(recv.stdout + recv.stderr)
            text = recv.stdout + recv.stderr
            self._abilities = Abilities(
                resumable="s" in r and "-t" in send.stdout + send.stderr, receive_u="u" in r,
                receive_o="-o " in text, receive_x="-x " in text, corrective=self.version() >= (2, 2),
                raw="w" in s, props="p" in s, compressed="c" in s, large_blocks="L" in s, embedded="e" in s)
        return self._abilities

    def version(self) -> tuple[int, ...]:
        """The zfs userland's version, (2, 4, 4) from `zfs version`'s "zfs-2.4.4-1"; () where it
        has no such command (zfs-fuse, ZFS before OpenZFS 0.8). The usage texts do not show
        `receive -c` (OpenZFS 2.2+), so the version says."""
        import re

        res = self._zfs("version")
        m = re.match(r"zfs-(\d+)\.(\d+)(?:\.(\d+))?", res.stdout.strip()) if res.returncode == 0 else None
        return tuple(int(x) for x in m.groups() if x is not None) if m else ()

    # -- listing --------------------------------------------------------------------------------

    def tree(self, root: str, *, recursive: bool = True, tokens: bool = False) -> Tree | None:
        """Every dataset under ``root`` (or ``root`` alone) with its snapshots, and with ``tokens``
        the receive_resume_token of those that have one, in one command; None when ``root`` does not
        exist on this host."""
        names.dataset(root)
        tokens = tokens and self.abilities().resumable  # an older zfs has no such property
        props = "guid,createtxg" + (",receive_resume_token" if tokens else "")
        res = self._zfs("get", "-Hp", *(["-r"] if recursive else ["-d", "1"]), "-o", "name,property,value", props, root)
        if res.returncode != 0:
            if "does not exist" in res.stderr:
                return None
            raise self._error(res)
        found = {}
        for line in res.stdout.splitlines():
            parts = line.split("\t")
            if len(parts) >= 3 and parts[1] == "receive_resume_token" and parts[2].strip() not in ("", "-"):
                found[parts[0]] = parts[2].strip()
        return Tree(tree_from(res.stdout), found)

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
        return self._zfs("list", "-H", "-o", "name", "-t", "all", name).returncode == 0

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

    def change_key_inherit(self, dataset: str) -> None:
        """Make ``dataset`` inherit its parent's encryption root (after a raw receive made it its own)."""
        res = self._zfs("change-key", "-i", dataset, readonly=False)
        if res.returncode != 0:
            raise self._error(res)

    # -- streams: argument lists, run through this host's link ----------------------------------

    def send_flags(self, *, raw: bool, compressed: bool = True, large_blocks: bool = True,
                   embedded: bool = True) -> list[str]:
        a = self.abilities()
        if raw and not a.raw:
            raise HostError(f"{self.where}: this zfs cannot send raw (-w), which encrypted datasets need")
        return [*(["-w"] if raw else []), *(["-c"] if compressed and a.compressed and not raw else []),
                *(["-L"] if large_blocks and a.large_blocks else []), *(["-e"] if embedded and a.embedded else [])]

    def send(self, snapshot: str, flags: list[str], *, base: str | None = None) -> list[str]:
        """`zfs send` of ``snapshot`` (incremental from ``base``: `@snap` -I, `#bookmark` -i), as the
        command that runs it on this host."""
        names.snapshot(snapshot)
        inc = [] if base is None else (["-i", base] if "#" in base else ["-I", base])
        return self.link.argv(["zfs", "send", *flags, *inc, snapshot])

    def resume_send(self, token: str) -> list[str]:
        return self.link.argv(["zfs", "send", "-t", token])

    def receive(self, dataset: str, *, force: bool = False, mount: bool = True, exclude: tuple[str, ...] = (),
                props: dict[str, str] | None = None, corrective: bool = False) -> list[str]:
        """`zfs receive` into ``dataset`` as the command that runs it on this host: resumable (-s)
        where the zfs can; ``corrective``: heal the blocks of an existing snapshot (-c)."""
        names.snapshot(dataset) if corrective else names.dataset(dataset)
        a = self.abilities()
        if corrective:
            if not a.corrective:
                raise HostError(f"{self.where}: this zfs has no corrective receive (zfs receive -c, OpenZFS 2.2+)")
            return self.link.argv(["zfs", "receive", "-c", dataset])
        opts = [*(["-s"] if a.resumable else []), *(["-u"] if not mount and a.receive_u else []),
                *(["-F"] if force else [])]
        for prop in exclude if a.receive_x else ():
            opts += ["-x", prop]
        for prop, value in (props or {}).items() if a.receive_o else ():
            opts += ["-o", f"{prop}={value}"]
        return self.link.argv(["zfs", "receive", *opts, dataset])

    # -- the pool: what is damaged, and scrubbing it --------------------------------------------

    def _zpool(self, *args: str, readonly: bool = True, timeout: float | None = 300) -> Result:
        return self.link.run(["zpool", *args], readonly=readonly, check=False, timeout=timeout)

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

"""The listing side of a `ZfsHost`: a tree's datasets, snapshots and bookmarks with guid and
createtxg, resume tokens, a part of a tree, and the guids of named snapshots. A mixin: ZfsHost gives
it `run`, `abilities` and `_error`.

OpenZFS gets `zfs list -Hp -t all -o name,guid,createtxg`, which reads those three without opening
each dataset and snapshot (received, unmounted backups cost most to open), and the resume tokens in a
second command beside it; a zfs without it (zfs-fuse) gets `zfs get` (snaps.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from .. import names
from ..errors import HostError
from ..process.command import Result
from . import argv as zargv
from .abilities import Abilities
from .destroy import chunks
from .snaps import Snap, Tree, guid_query, list_query, parse_guid_txg, parse_list, tokens_from, tree_of


def only_missing(stderr: str) -> bool:
    """A listing's errors are all of names that do not exist (the rest of its answer stands)."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    return bool(lines) and all("does not exist" in ln for ln in lines)


class Listings:
    # what ZfsHost (host.py) gives this mixin
    run: Callable[..., Result]
    abilities: Callable[[], Abilities]
    _error: Callable[[Result], HostError]
    lists_fast: bool | None

    def tree(self, root: str, *, recursive: bool = True, tokens: bool = False) -> Tree | None:
        """Every dataset under ``root`` (or ``root`` alone) with its snapshots, and with ``tokens``
        the receive_resume_token of those that have one; None when ``root`` does not exist on this
        host."""
        names.dataset(root)
        return self._guid_listing([root], recursive, tokens and self.abilities().resumable)

    def fast_listing(self) -> bool:
        """`zfs list -p` gives guid and createtxg here (OpenZFS: what has resumable streams has
        it, Abilities.lists_fast); False once a fast listing failed."""
        if self.lists_fast is None:
            self.lists_fast = self.abilities().lists_fast()
        return self.lists_fast

    def _guid_listing(self, roots: list[str], recursive: bool, tokens: bool, bookmarks: bool = False) -> Tree | None:
        """``roots`` (each with its children where ``recursive``, else its own snapshots and bookmarks
        and its direct children) with guid and createtxg, and the resume tokens where asked. The
        tokens are a second command, beside the listing: asking for them in the listing would take
        `zfs list` off its fast path. Bookmarks only where asked (a backup's are not bases). None: no
        root exists here; a root that does not exist beside others that do is left out."""
        fast = self.fast_listing()
        asked = (list_query(*roots, recursive=recursive) if fast else
                 guid_query(*roots, recursive=recursive, tokens=tokens))
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rebal-tokens") as ex:
            side = ex.submit(self.run, zargv.resume_tokens(roots, recursive), check=False) if fast and tokens else None
            res = self.run(asked, check=False)
            told = side.result() if side is not None else res
        if res.returncode != 0:
            if fast and ("invalid option" in res.stderr or "invalid property" in res.stderr):
                self.lists_fast = False  # not the zfs its usage text suggested: the slow listing
                return self._guid_listing(roots, recursive, tokens, bookmarks)
            if not only_missing(res.stderr):
                raise self._error(res)
            if not res.stdout.strip():
                return None
        if told is not res and told.returncode != 0 and not only_missing(told.stderr):
            raise self._error(told)
        rows = parse_list(res.stdout) if fast else parse_guid_txg(res.stdout)
        return Tree(tree_of(rows, bookmarks), tokens_from(told.stdout) if tokens else {})

    def guids(self, snapshots: list[str]) -> dict[str, int]:
        """name -> guid of those of ``snapshots`` (or bookmarks) that exist here, in as few commands
        as the names fit (a name that does not exist is left out, not an error)."""
        out: dict[str, int] = {}
        for part in chunks(snapshots):
            res = self.run(zargv.guids(part), check=False)
            if res.returncode != 0 and not only_missing(res.stderr):
                raise self._error(res)
            for line in res.stdout.splitlines():
                name, _, value = line.partition("\t")
                if value.strip().isdigit():
                    out[name] = int(value)
        return out

    def snapshot_marks(self, datasets: list[str]) -> dict[str, tuple[int, str]] | None:
        """Of each of ``datasets`` that exists here: (its `snapshots_changed` in seconds, its
        receive_resume_token or ""), in as few commands as the names fit; None where this zfs has
        no `snapshots_changed` (zfs-fuse, OpenZFS before 2.2)."""
        out: dict[str, tuple[int, str]] = {}
        for part in chunks(datasets):
            res = self.run(zargv.snapshot_marks(part), check=False)
            if res.returncode != 0 and any(w in res.stderr for w in ("invalid property", "bad property", "invalid option")):
                return None
            if res.returncode != 0 and not only_missing(res.stderr):
                raise self._error(res)
            for line in res.stdout.splitlines():
                name, _, rest = line.partition("\t")
                changed, _, token = rest.partition("\t")
                if changed.isdigit():
                    out[name] = (int(changed), "" if token.strip() in ("", "-") else token.strip())
        return out

    def snapshots_named(self, snapshots: list[str]) -> dict[str, Snap]:
        """``dataset@name`` -> its Snap, of those of ``snapshots`` that exist here, in as few commands
        as the names fit: what a run needs of the snapshot it just made, without listing the tree."""
        out: dict[str, Snap] = {}
        for part in chunks(snapshots):
            res = self.run(zargv.guid_txg(part), check=False)
            if res.returncode != 0 and not only_missing(res.stderr):
                raise self._error(res)
            for full, row in parse_guid_txg(res.stdout).items():
                if "@" in full and "guid" in row:
                    out[full] = Snap(full.split("@", 1)[1], row["guid"], row.get("createtxg", 0))
        return out

    def listing(self, root: str, recursive: bool, *, bookmarks: bool = True) -> dict[str, list[Snap]]:
        """A job's datasets (``root``, and its children where ``recursive``) with their snapshots (and
        bookmarks): one command for the whole tree; {} where ``root`` does not exist."""
        tree = self._guid_listing([root], recursive, False, bookmarks)
        if tree is None:
            return {}
        return {d: s for d, s in tree.snaps.items() if d == root or (recursive and d.startswith(root + "/"))}

    def tree_tokens(self, root: str, tokens: bool) -> tuple[dict[str, list[Snap]], dict[str, str]]:
        """Every dataset under ``root`` with its snapshots ({} where ``root`` does not exist) and,
        with ``tokens`` (the caller knows the zfs has them), the receive_resume_token of each that has
        one."""
        tree = self._guid_listing([root], True, tokens)
        return (tree.snaps, tree.tokens) if tree is not None else ({}, {})

    def part(self, datasets: list[str], tokens: bool,
             parents: Sequence[str] = ()) -> tuple[dict[str, list[Snap]], dict[str, str]]:
        """Of ``datasets`` alone (not their children), those that exist here with their snapshots,
        and with ``tokens`` the resume token of each that has one: one listing for them all. Of
        ``parents``, those that exist here (with no snapshots: asked only whether they are there, by
        a command beside the listing)."""
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rebal-parents") as ex:
            there = ex.submit(self.run, zargv.datasets_named(list(parents)), check=False) if parents else None
            tree = self._guid_listing(datasets, False, tokens) if datasets else None
            found = there.result() if there is not None else None
        if found is not None and found.returncode != 0 and not only_missing(found.stderr):
            raise self._error(found)
        snaps: dict[str, list[Snap]] = {p: [] for p in (found.stdout.split("\n") if found else []) if p in parents}
        if tree is None:
            return snaps, {}
        want = set(datasets)
        snaps.update({d: s for d, s in tree.snaps.items() if d in want})
        return snaps, {d: t for d, t in tree.tokens.items() if d in want}

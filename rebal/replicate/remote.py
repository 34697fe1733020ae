"""zfs on the other end of a replication job, behind one small interface: through ssh for a push
job's backup host, or run here for a pull job (which runs on the backup host)."""

from __future__ import annotations

from ..errors import RebalError
from ..process.command import Result
from ..zfs import argv as zargv
from ..zfs.cli import Runner
from ..zfs.destroy import Batches
from ..zfs.host import Link
from . import local as L
from .policy import Snap


class ReplicationError(RebalError):
    pass


def ssh_runner(ssh: Link) -> Runner:
    """A runner (the signature of runner.run) that runs each command on the other end, through ssh."""
    def run_there(argv: list[str], **kw: object) -> Result:
        return ssh.run(list(argv), **kw)  # type: ignore[arg-type]  # the runner's keywords, passed on
    return run_there


class Remote:
    """zfs on the backup host: through ssh (a push job), or here (a pull job runs on the backup host)."""

    def __init__(self, ssh: Link | None = None, runner: Runner | None = None) -> None:
        self.ssh = ssh
        if runner is None:
            if ssh is None:
                raise ValueError("Remote: a link or a runner")
            runner = ssh_runner(ssh)
        self.run = runner
        self.batches = Batches(runner)

    def snapshots(self, dataset: str) -> list[Snap] | None:
        res = self.run(L.guid_query(dataset, recursive=False), check=False)
        if res.returncode != 0:
            if "does not exist" in res.stderr:
                return None
            raise ReplicationError(f"backup host: {res.stderr.strip()}")
        return L.snapshots_from(res.stdout, dataset)

    def tree(self, root: str) -> dict[str, list[Snap]] | None:
        """Every dataset under ``root`` on the backup host with its snapshots (one call); None if
        ``root`` does not exist there."""
        res = self.run(L.guid_query(root, recursive=True), check=False)
        if res.returncode != 0:
            if "does not exist" in res.stderr:
                return None
            raise ReplicationError(f"backup host: {res.stderr.strip()}")
        return L.tree_from(res.stdout)

    def tree_tokens(self, root: str, tokens: bool) -> tuple[dict[str, list[Snap]], dict[str, str]]:
        """The tree (as tree(), {} where ``root`` does not exist) and, with ``tokens``, the
        receive_resume_token of every dataset under it that has one: one round trip for both."""
        res = self.run(zargv.tree_tokens(root, tokens), check=False)
        if res.returncode != 0:
            if "does not exist" in res.stderr:
                return {}, {}
            raise ReplicationError(f"backup host: {res.stderr.strip()}")
        found = {}
        for line in res.stdout.splitlines():
            parts = line.split("\t")
            if len(parts) >= 3 and parts[1] == "receive_resume_token" and parts[2].strip() not in ("", "-"):
                found[parts[0]] = parts[2].strip()
        return L.tree_from(res.stdout), found

    def destroy_many(self, dataset: str, snaps: list[str]) -> dict[str, str]:
        """Destroy snapshots of one dataset (not of its children) in as few commands as its ZFS
        allows; the ones that could not go, with why (rebal/zfs/destroy.py)."""
        return self.batches.destroy(dataset, snaps)

    def abort(self, dataset: str) -> None:
        self.run(zargv.receive_abort(dataset), readonly=False)

    def usage(self, command: str) -> str:
        res = self.run(zargv.usage(command), check=False)
        return res.stdout + res.stderr

    def has(self, program: str) -> bool:
        res = self.run(["sh", "-c", f"command -v {program}"], check=False)
        return res.returncode == 0

    def gate_info(self) -> dict | None:
        """What a gate (rebal gate, the ssh forced command) on the other end allows; None where there
        is none (a shell answers that no such command exists)."""
        import json

        from .gate import INFO

        res = self.run([INFO], check=False)
        if res.returncode != 0:
            return None
        try:
            info = json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return None
        return info if isinstance(info, dict) and info.get("rebal_gate") else None

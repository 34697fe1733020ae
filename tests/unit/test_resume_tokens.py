"""The resume-token path of zfs mode, which zfs-fuse cannot run (no `receive -s`): every zfs answer is
replayed from real OpenZFS 2.4.4 output (tests/fixtures/openzfs/recv-*), the command lines rebal
runs are recorded."""

from conftest import FIXTURES, fixture_text

from rebal.process.command import Result
from rebal.process.pipeline import StreamResult
from rebal.transport import Here
from rebal.zfs.host import ZfsHost
from rebal.transport import Endpoint
from rebal.replicate.zfs_send import Job, ZfsReplicator

USAGE = (FIXTURES / "openzfs-usage-send-receive.txt").read_text()
TOKEN = fixture_text("recv-resume_zfs-get-Hp-receive_resume_token.txt").split("\t")[2]
STALE = "cannot resume send: 'tank/src@s1' used in the initial send no longer exists\n"


class FakeSsh:
    """The backup host: answers with recorded OpenZFS output."""

    local = False

    def __init__(self, token: str | None):
        self.ep = Endpoint("backup.test")
        self.token = token
        self.calls = []
        self.commands = self.runs = 0

    def argv(self, *parts):
        return ["ssh", "backup.test", " | ".join(" ".join(p) for p in parts)]

    def run(self, *parts, readonly=True, check=True, **kw):
        argv = tuple(parts[-1])
        self.calls.append(argv)
        if argv == ("zfs", "receive"):
            return Result(argv, 2, "", USAGE)
        if argv[:4] == ("zfs", "get", "-H", "-o") and "receive_resume_token" in argv:
            return Result(argv, 0, (self.token or "-") + "\n", "")
        if argv[:3] == ("zfs", "receive", "-A"):
            self.token = None
            return Result(argv, 0, "", "")  # recv-abort_zfs-receive-A.txt is empty
        if argv[:3] == ("zfs", "get", "-Hp") and argv[-2] == "receive_resume_token":  # the tokens, beside
            return Result(argv, 0, f"{argv[-1]}\t{self.token or '-'}\n", "")
        if argv[:3] == ("zfs", "list", "-Hp"):  # OpenZFS's fast listing: the target has @s1
            ds = argv[-1]
            return Result(argv, 0, f"{ds}\t111\t5\n{ds}@s1\t4372394711059958230\t6\n", "")
        if argv[:3] == ("zfs", "get", "-Hp"):  # snapshots of the target: it has @s1 (and the token, asked)
            ds = argv[-1]
            token = (f"{ds}\treceive_resume_token\t{self.token}\n"
                     if self.token and "receive_resume_token" in argv[-2] else "")
            return Result(argv, 0, f"{ds}\tguid\t111\n{ds}\tcreatetxg\t5\n{token}{ds}@s1\tguid\t4372394711059958230\n"
                                   f"{ds}@s1\tcreatetxg\t6\n", "")
        return Result(argv, 0, "", "")


def local_runner(token_valid: bool, calls: list):
    def runner(argv, **kw):
        argv = tuple(argv)
        calls.append(argv)
        if argv == ("zfs", "send"):
            return Result(argv, 2, "", USAGE)
        if argv[:3] == ("zfs", "send", "-t") and argv[-1] == "-nvP":
            if token_valid:
                return Result(argv, 0, fixture_text("recv-resume_zfs-send-t-nvP.txt"), "")
            return Result(argv, 255, "", STALE)
        if argv[:3] == ("zfs", "get", "-Hp"):
            ds = argv[-1]
            return Result(argv, 0, f"{ds}@s1\tguid\t4372394711059958230\n{ds}@s1\tcreatetxg\t6\n"
                                   f"{ds}@rebal-j-20261122T000000Z\tguid\t9\n{ds}@rebal-j-20261122T000000Z\tcreatetxg\t9\n", "")
        if argv[:3] == ("zfs", "list", "-Hp"):  # OpenZFS's fast listing of the same
            ds = argv[-1]
            return Result(argv, 0, f"{ds}\t7\t2\n{ds}@s1\t4372394711059958230\t6\n"
                                   f"{ds}@rebal-j-20261122T000000Z\t9\t9\n", "")
        if argv[:2] == ("zfs", "list"):
            return Result(argv, 0, "tank/src\n", "")
        return Result(argv, 0, "", "")

    return runner


def make(token: str | None, valid: bool):
    from datetime import datetime, timezone

    calls: list = []
    runner = local_runner(valid, calls)
    ssh = FakeSsh(token)
    r = ZfsReplicator(Job("j", "tank/src", "tank/part"), ssh, source=ZfsHost(Here(runner)), runner=runner,
                      clock=lambda: datetime(2026, 11, 22, tzinfo=timezone.utc))
    streams = []

    def fake_stream(senders, recv, rep):
        streams.append((senders, recv))
        rep.bytes = 1000
        return StreamResult(1000, 0, "", 0, "", fixture_text("recv-resume_complete.txt"))

    r._stream = fake_stream
    return r, ssh, calls, streams


def test_a_stored_token_is_resumed_first():
    r, ssh, calls, streams = make(TOKEN, valid=True)
    rep = r.run()
    assert rep.tokens == {"tank/part": TOKEN}
    assert ("zfs", "send", "-t", TOKEN, "-nvP") in calls
    assert streams[0] == ([["zfs", "send", "-t", TOKEN]], ["zfs", "receive", "-s", "-u", "tank/part"])
    assert rep.resumed == ["tank/src@s1"]
    # then the regular incremental from the common base @s1 to the new snapshot
    send, recv = streams[1]
    # (-i: no snapshot between @s1 and the new one; -I would make zfs list every snapshot of the dataset)
    assert send[0][:2] == ["zfs", "send"] and "-I" not in send[0] and send[0][-1] == "tank/src@rebal-j-20261122T000000Z"
    assert send[0][send[0].index("-i") + 1] == "@s1"
    assert all(c[:3] != ("zfs", "receive", "-A") for c in ssh.calls)


def test_a_stale_token_is_aborted_once_and_the_send_restarts_from_the_base():
    r, ssh, calls, streams = make(TOKEN, valid=False)
    rep = r.run()
    assert ("zfs", "receive", "-A", "tank/part") in ssh.calls
    assert sum(c[:3] == ("zfs", "receive", "-A") for c in ssh.calls) == 1
    assert rep.aborted_tokens == ["tank/part"] and rep.resumed == []
    assert len(streams) == 1 and streams[0][0][0][-3:-1] == ["-i", "@s1"]
    assert any("could not be resumed" in n for n in rep.notes)


def test_no_token_no_resume():
    r, ssh, calls, streams = make(None, valid=True)
    rep = r.run()
    assert rep.tokens == {} and not any(c[:3] == ("zfs", "send", "-t") for c in calls)
    flags = streams[0][0][0]
    assert {"-c", "-L", "-e"} <= set(flags)  # OpenZFS send options where the job asks for them
    assert streams[0][1] == ["zfs", "receive", "-s", "-u", "tank/part"]

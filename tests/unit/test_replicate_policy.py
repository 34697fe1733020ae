"""Replication policy (pure), usage detection and error texts against recorded output."""

from datetime import datetime, timedelta, timezone

import pytest
from conftest import FIXTURES, fixture_text

from rebal.replicate import policy as P
from rebal.replicate.rsync import parse_stats, warning_files
from rebal.zfs.token import TokenInfo, parse_send_size, parse_token_check
from rebal.zfs.abilities import Abilities
from rebal.transport import (
    Endpoint,
    HostKeyError,
    Ssh,
    classify_ssh,
    remote_command,
)

UTC = timezone.utc


def test_snapshot_names_round_trip_and_carry_the_job():
    t = datetime(2026, 11, 22, 1, 2, 3, tzinfo=UTC)
    n = P.snapshot_name("night-ly.2", t)
    assert n == "rebal-night-ly.2-20261122T010203Z"
    assert P.parse_snapshot_name(n) == ("night-ly.2", t)
    assert P.is_ours(n, "night-ly.2") and not P.is_ours(n, "night")
    assert P.parse_snapshot_name("manual-snap") is None
    assert not P.is_ours("rebal-other-20261122T010203Z", "nightly")


def test_newest_common_matches_by_guid_not_name():
    src = [P.Snap("a", 1, 10), P.Snap("b", 2, 20), P.Snap("c", 3, 30)]
    tgt = [P.Snap("renamed", 2, 5), P.Snap("c", 99, 6)]  # same name, other guid: not common
    assert P.newest_common(src, tgt).name == "b"
    assert P.newest_common(src, []) is None


def test_plan_send_cases():
    src = [P.Snap("s1", 1, 10), P.Snap("s2", 2, 20), P.Snap("s3", 3, 30)]
    to = src[-1]
    assert P.plan_send("t/d", src, None, to, False).kind == "full"
    inc = P.plan_send("t/d", src, [P.Snap("s1", 1, 5)], to, False)
    assert (inc.kind, inc.base.name) == ("incremental", "s1")
    assert P.plan_send("t/d", src, [P.Snap("s3", 3, 5)], to, False).kind == "nothing"
    div = P.plan_send("t/d", src, [P.Snap("s1", 1, 5), P.Snap("local", 77, 6)], to, False)
    assert div.kind == "diverged" and div.newer_on_target == ["local"] and "@local" in div.message
    assert "--force-rollback" in div.message
    assert P.plan_send("t/d", src, [P.Snap("s1", 1, 5), P.Snap("local", 77, 6)], to, True).kind == "incremental"
    un = P.plan_send("t/d", src, [P.Snap("x", 50, 5)], to, False)
    assert un.kind == "unrelated" and "no snapshot in common" in un.message
    bare = P.plan_send("t/d", src, [], to, False)  # made by hand, or a first receive still running
    assert bare.kind == "unrelated" and "not made by replication" in bare.message
    assert "receive into it is still running" in bare.message and "Nothing was sent or destroyed" in bare.message


@pytest.mark.parametrize(
    "fixture, expect",
    [
        ("recv-err-modified_zfs-receive.txt.stderr", "was written to since its last snapshot"),
        ("recv-err-missing-src_zfs-receive.txt.stderr", "no longer has the base snapshot"),
        ("recv-err-nosnap_zfs-receive.txt.stderr", "no longer has the base snapshot"),
        ("recv-err-nodest_zfs-receive.txt.stderr", "does not exist on the backup host"),
        ("recv-err-exists_zfs-receive.txt.stderr", "already exists and is not a replica"),
    ],
)
def test_receive_errors_explained(fixture, expect):
    msg = P.explain_receive_error(fixture_text(fixture), "tank/dst", "s1")
    assert expect in msg and "nothing was destroyed" in msg.lower() or "create it first" in msg


def test_usage_detection_openzfs_and_zfs_fuse():
    oz = (FIXTURES / "openzfs-usage-send-receive.txt").read_text()
    f = Abilities.recorded(oz, oz, (2, 4, 4))
    assert f.send_resume and f.send_size and f.raw and f.compressed and f.large_blocks and f.embedded and f.props
    assert f.receive_resume and f.receive_u and f.receive_o and f.receive_x and f.resumable and f.corrective
    g = Abilities.recorded(fixture_text("zfsfuse_zfs-send-usage.txt.stderr"),
                           fixture_text("zfsfuse_zfs-receive-usage.txt.stderr"))
    assert not (g.send_resume or g.send_size or g.raw or g.compressed or g.large_blocks or g.embedded)
    assert not (g.receive_resume or g.receive_u or g.receive_o or g.receive_x or g.resumable or g.corrective)


def test_abilities_ask_each_usage_text_once_and_only_when_needed():
    """One model of a host's zfs, asked lazily: a replication's backup end is asked its receive text
    alone (a gate there passes that on), its listing reads the same text, and `zfs version` is asked
    only for the corrective receive."""
    oz = (FIXTURES / "openzfs-usage-send-receive.txt").read_text()
    asked: list[str] = []

    def usage(command: str) -> str:
        asked.append(command)
        return oz

    def version() -> tuple[int, ...]:
        asked.append("version")
        return (2, 1, 11)

    a = Abilities(usage, version)
    assert a.receive_u and a.receive_o and a.receive_resume and asked == ["receive"]
    assert a.lists_fast() and asked == ["receive"]
    assert a.raw and a.send_resume and a.resumable and asked == ["receive", "send"]
    assert not a.corrective and not a.corrective and asked == ["receive", "send", "version"]


def test_token_check_and_send_size_from_recorded_output():
    full = parse_token_check(fixture_text("recv-resume_zfs-send-t-nvP.txt"))
    assert full == TokenInfo("tank/src@s1", "full", 23283752, 0x3caee52f04c2c9d6)
    inc = parse_token_check(fixture_text("recv-resume-incr_zfs-send-t-nvP.txt"))
    assert inc.toname == "tank/src@s2" and inc.kind == "incremental" and inc.size == 4360536
    assert parse_token_check("cannot resume send: 'tank/src@s1' used in the initial send no longer exists") is None
    assert parse_send_size(fixture_text("send-full_zfs-send-nvP.txt")) == 25257584
    assert parse_send_size(fixture_text("send-incr_zfs-send-nvP-I.txt")) == 9525408


def test_retention_keeps_bucket_newest_and_protected():
    base = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    snaps = [(f"s{i}", base - timedelta(hours=i)) for i in range(0, 24 * 60, 6)]  # every 6 h for 60 days
    keep = P.retain(snaps, P.Buckets(hourly=2, daily=3, weekly=2, monthly=2), protect={"s1434"})
    assert "s0" in keep and "s1434" in keep
    # hourly 2 -> s0, s6; daily 3 -> newest of 3 days; weekly, monthly add a few; the rest goes
    assert {"s0", "s6"} <= keep
    assert len(keep) <= 2 + 3 + 2 + 2 + 1
    assert P.retain([], P.Buckets()) == set()
    assert P.retain(snaps, P.Buckets(0, 0, 0, 0)) == {"s0"}  # last = 1: the newest stays
    assert P.retain(snaps, P.Buckets(0, 0, 0, 0, last=0)) == set()  # the source default: none
    assert P.retain(snaps, P.Buckets(0, 0, 0, 0, last=0), protect={"s6"}) == {"s6"}  # but a base


def test_a_bookmark_is_a_base_and_the_snapshot_wins_a_tie():
    snap = P.Snap("rebal-j-1", guid=11, txg=100)
    mark = P.Snap("rebal-j-1", guid=11, txg=100, bookmark=True)
    older = P.Snap("rebal-j-0", guid=10, txg=50, bookmark=True)
    target = [P.Snap("rebal-j-0", 10, 40), P.Snap("rebal-j-1", 11, 90)]
    assert P.newest_common([older, mark, snap], target) == snap
    assert P.newest_common([older, mark], target) == mark  # the snapshot went: the bookmark is the base
    assert P.base_args("tank/d", mark) == ["-i", "tank/d#rebal-j-1"]
    assert P.base_args("tank/d", snap) == ["-I", "@rebal-j-1"]  # snapshots between it and the one sent
    assert P.base_args("tank/d", snap, between=False) == ["-i", "@rebal-j-1"]  # none: -i, no listing
    assert P.base_args("tank/d", mark, between=False) == ["-i", "tank/d#rebal-j-1"]
    to = P.Snap("rebal-j-2", 12, 200)
    plan = P.plan_send("tank/d", [older, mark, to], target, to, force_rollback=False)
    assert plan.kind == "incremental" and plan.base == mark
    # a target with a snapshot newer than the bookmark's has diverged, bookmark or not
    diverged = P.plan_send("tank/d", [mark, to], target + [P.Snap("manual", 99, 95)], to, force_rollback=False)
    assert diverged.kind == "diverged" and diverged.newer_on_target == ["manual"]


def test_listings_with_bookmarks():
    from rebal.zfs import snaps as L

    # `zfs get -Hp -r -o name,property,value guid,createtxg` lists bookmarks beside snapshots (OpenZFS)
    text = fixture_text("openzfs-2.4.4_zfs-get-guid-createtxg-bookmarks.txt")
    tree = L.tree_from(text, bookmarks=True)
    plain = L.tree_from(text)
    root = next(iter(sorted(tree)))
    assert any(s.bookmark for s in tree[root]) and not any(s.bookmark for s in plain[root])
    marks = {s.name: s for s in tree[root] if s.bookmark}
    snaps = {s.name: s for s in tree[root] if not s.bookmark}
    for name in set(marks) & set(snaps):  # a bookmark keeps its snapshot's guid and txg
        assert (marks[name].guid, marks[name].txg) == (snaps[name].guid, snaps[name].txg)
    assert L.snapshots_from(text, root, bookmarks=True) == tree[root]


def test_rsync_stats_and_warnings():
    st = parse_stats((FIXTURES / "rsync-stats.txt").read_text())
    assert st["bytes_sent"] == 224274 and st["bytes_expected"] == 222112 and st["files_transferred"] == 29
    w = warning_files('file has vanished: "/src/a b"\nrsync: [sender] send_files failed to open "/src/x": Permission denied (13)\n')
    assert w[0] == "vanished: /src/a b" and "Permission denied" in w[1]


def test_ssh_command_lines_are_strict_and_quoted():
    ep = Endpoint("backup.lan", "rebal", 2222, "/etc/rebal/id", "/etc/rebal/known_hosts")
    ssh = Ssh(ep, multiplex=False)
    argv = ssh.argv(["zfs", "receive", "-s", "backup/it's here"])
    assert argv[0] == "ssh" and "BatchMode=yes" in argv and "StrictHostKeyChecking=yes" in argv
    assert "UserKnownHostsFile=/etc/rebal/known_hosts" in argv and argv[argv.index("-i") + 1] == "/etc/rebal/id"
    assert argv[-3:-1] == ["--", "backup.lan"]
    assert argv[-1] == "zfs receive -s 'backup/it'\"'\"'s here'"
    assert remote_command(["zstd", "-dc"], ["zfs", "receive", "a b"]) == "zstd -dc | zfs receive 'a b'"
    with pytest.raises(Exception):
        Endpoint("-oProxyCommand=evil")


def test_host_key_failures_are_clear():
    ep = Endpoint("127.0.0.1", port=2222, known_hosts="/x/kh")
    e = classify_ssh(ep, "Host key verification failed.\r\n")
    assert isinstance(e, HostKeyError) and "never accepts a host key" in str(e) and "/x/kh" in str(e)
    e = classify_ssh(ep, "ssh: connect to host 127.0.0.1 port 2222: Connection refused")
    assert not isinstance(e, HostKeyError) and "Connection refused" in str(e)
    assert "PerSourcePenalties" not in str(e)


def test_a_login_cut_before_it_began_names_sshds_penalties():
    """What ssh said in CI's lane when OpenSSH 10's sshd shut 127.0.0.1 out (PerSourcePenalties)."""
    ep = Endpoint("127.0.0.1", port=42657)
    for said in ("Connection closed by 127.0.0.1 port 42657\r\n",
                 "kex_exchange_identification: read: Connection reset by peer\r\n"
                 "Connection reset by 127.0.0.1 port 42657\r\n"):
        e = classify_ssh(ep, said)
        assert not isinstance(e, HostKeyError) and "PerSourcePenalties" in str(e) and "MaxStartups" in str(e), e
        assert "port 42657" in str(e)


def test_a_permission_denied_receive_names_the_zfs_allow_set():
    msg = P.explain_receive_error("cannot receive new filesystem stream: permission denied\n", "bk/x", None)
    assert "permission denied receiving into bk/x" in msg and "zfs allow -u USER receive:append,create,mount,readonly" in msg


def test_the_record_gives_a_base_only_where_the_landed_snapshot_is_the_newest_point_of_the_job():
    from rebal.replicate.unchanged import record_bases

    s1, s2 = "rebal-j-20260101T000000Z", "rebal-j-20260102T000000Z"
    tree = {
        "p/a": [P.Snap(s1, 1, 10), P.Snap(s1, 1, 10, bookmark=True)],  # landed: the snapshot wins over its bookmark
        "p/b": [P.Snap(s1, 2, 10, bookmark=True)],  # landed, only its bookmark left on the source
        "p/c": [P.Snap(s1, 3, 10), P.Snap(s2, 4, 20)],  # a newer snapshot of the job (a run cut): no base
        "p/d": [P.Snap(s1, 5, 10), P.Snap("hourly", 6, 30)],  # someone else's newer snapshot: still the base
        "p/e": [P.Snap(s1, 7, 10)],  # no record
        "p/f": [P.Snap("rebal-other-20260101T000000Z", 8, 10)],  # another job's only
    }
    landed = {"p/a": s1, "p/b": s1, "p/c": s1, "p/d": s1, "p/f": s1}
    got = record_bases(list(tree), tree, landed, "j")
    assert {d: (b.name, b.bookmark) for d, b in got.items()} == {
        "p/a": (s1, False), "p/b": (s1, True), "p/d": (s1, False)}


def test_the_snapshot_a_run_just_made_is_asked_by_name_not_by_listing_the_tree():
    """ZfsHost.snapshots_named: one `zfs get` for the names (replayed from OpenZFS 2.4.4's answer to
    a recursive one, the rows of the names asked; a name that does not exist is said on stderr as
    zfs says it), each found as a Snap with its guid and txg; bookmarks and the rest left out."""
    from rebal.process.command import Result
    from rebal.zfs.host import ZfsHost
    from rebal.zfs.snaps import Snap

    rows = fixture_text("openzfs-2.4.4_zfs-get-guid-createtxg-bookmarks.txt").splitlines()
    missing = fixture_text("listing-bases_zfs-get-Hp-guid.txt.stderr").strip()  # cannot open '...': ... does not exist
    asked = []

    class Link:
        local = False

        def run(self, argv, **kw):
            asked.append(list(argv))
            names = argv[argv.index("guid,createtxg") + 1:]
            out = "".join(r + "\n" for r in rows if r.split("\t")[0] in names)
            gone = [n for n in names if not any(r.split("\t")[0] == n for r in rows)]
            err = "".join(missing.replace("fx/dst/b@gone", n) + "\n" for n in gone)
            return Result(list(argv), 1 if gone else 0, out, err)

    got = ZfsHost(Link()).snapshots_named(["bm/d@manual", "bm/d@not-there"])
    assert asked == [["zfs", "get", "-Hp", "-o", "name,property,value", "guid,createtxg", "bm/d@manual",
                      "bm/d@not-there"]]
    assert got == {"bm/d@manual": Snap("manual", 16725473792350961296, 12)}


def test_a_runs_own_host_imports_pyzfs_only_at_its_first_call(monkeypatch):
    """pyzfs's import parses its C declarations (2.0 s in the lane's guest): a replication run's host
    (zfs_send and rsync take here_host) tries it at its first libzfs_core call, not when it is made;
    where it does not load, the host is the zfs command's."""
    import sys

    from rebal.transport import Here
    from rebal.zfs.host import here_host

    tried = []

    class Watch:  # sees every attempt to import libzfs_core, and lets none of them find it
        def find_spec(self, name, path=None, target=None):
            if name == "libzfs_core":
                tried.append(name)
                raise ImportError("not here")
            return None

    monkeypatch.delitem(sys.modules, "libzfs_core", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Watch(), *sys.meta_path])
    host = here_host(Here())
    assert tried == []
    assert host.lzc is None and host.backend == "zfs-cli"
    assert tried == ["libzfs_core"]
    assert host.lzc is None and tried == ["libzfs_core"]  # asked once

"""rebal watch's pure parts: the gated roots of an authorized_keys text, and the gate's refusals in
its log file's and the journal's lines (the forms rebal gate writes: gate/serve.py's formatter)."""

from rebal.watch import gated_roots, refusals

KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIFake"


def test_the_roots_of_gated_keys_and_nothing_else():
    text = "\n".join([
        f'command="rebal gate --receive-into backup/fs1",restrict ssh-ed25519 {KEY} rebal@fs1',
        f'restrict,command="/usr/bin/rebal gate --allow-rollback --receive-into backup/fs2 --log /x" ssh-ed25519 {KEY}',
        f'# command="rebal gate --receive-into backup/old" ssh-ed25519 {KEY} commented out',
        f'command="rebal gate --send-from tank/data" ssh-ed25519 {KEY} a pull job\'s key',
        f'command="rebal gate --receive-into bad;name" ssh-ed25519 {KEY} x',
        f'command="rebal gate --receive-into" ssh-ed25519 {KEY} no root',
        f"ssh-ed25519 {KEY} admin@laptop",
    ])
    got = [(r.dataset, r.key) for r in gated_roots(text, "/root/.ssh/authorized_keys")]
    assert got == [("backup/fs1", "rebal@fs1"), ("backup/fs2", "/root/.ssh/authorized_keys")]


def test_refusals_from_the_log_file_and_the_journal_after_the_last_watch():
    lines = [
        "2026-12-06 19:28:47,666 WARNING refused from 10.0.0.5 (receive backup/fs1): zfs destroy -r backup/fs1: "
        "zfs destroy is not allowed through this key",
        "2026-12-06 19:28:48,001 INFO allowed from 10.0.0.5 (receive backup/fs1): zfs list -H backup/fs1",
        "1796585400.250000 bk rebal-gate[123]: refused from 10.0.0.6 (receive backup/fs2): sh -c x: shell syntax",
        "2026-12-06 10:00:00,000 WARNING refused from 10.0.0.7 (receive backup/fs3): old: before the last watch",
    ]
    from datetime import datetime

    since = datetime(2026, 12, 6, 12, 0).timestamp()
    got = [(who, what.split(":")[0]) for _t, who, what in refusals(lines, since)]
    assert got == [("10.0.0.5", "backup/fs1"), ("10.0.0.6", "backup/fs2")]


def test_a_failed_over_backup_is_said_so_and_not_called_late():
    from rebal.watch import Root, age_findings

    now = 1_800_000_000.0
    old = ("rebal-n-20270101T000000Z", now - 90 * 3600)
    r = Root("backup/fs2", "rebal@fs2", {"backup/fs2": None, "backup/fs2/data": old, "backup/fs2/data/home": old,
                                         "backup/fs2/other": old},
             {"backup/fs2/data": "2027-01-04T10:00:00Z", "backup/fs2/data/home": "2027-01-04T10:00:00Z"})
    found = age_findings([r], 26, now)
    over = [f for f in found if "failed over" in f.message]
    late = [f for f in found if "older than" in f.message]
    assert len(over) == 1 and over[0].message.startswith("backup/fs2/data is failed over since 2027-01-04T10:00:00Z")
    assert len(late) == 1 and "backup/fs2/other" in late[0].message and "fs2/data" not in late[0].message

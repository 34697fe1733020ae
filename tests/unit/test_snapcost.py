from datetime import datetime, timedelta, timezone

from rebal.config import Replicate, Retention
from rebal.rebalance.snapcost import expiry, owner_of
from rebal.schema import validate

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=timezone.utc)


def job(**kw):
    base = {"name": "nightly", "source": "tank/data", "target_host": "backup", "target": "b/copy"}
    return validate(Replicate, base | kw, "test")


def names(*days_ago):
    from rebal.replicate.policy import snapshot_name

    return [snapshot_name("nightly", NOW - timedelta(days=d)) for d in days_ago]


def test_owner_by_name():
    assert owner_of("rebal-nightly-20261122T023000Z", ["nightly"]) == ("rebal:nightly", None)
    assert owner_of("rebal-gone-20261122T023000Z", ["nightly"]) == ("other", None)
    assert owner_of("autosnap_2026-11-22_00:00:01_daily", []) == ("other", "sanoid (autosnap_*)")
    assert owner_of("zfs-auto-snap_hourly-2026-11-22-1200", []) == ("other", "zfs-auto-snapshot (zfs-auto-snap_*)")


def test_expiry_without_a_schedule_is_the_next_run():
    [snap] = names(1)
    assert expiry(snap, job(), [snap], NOW) == (None, "at the next run of job nightly")
    kept = job(retention_source=Retention(last=3, hourly=0, daily=0, weekly=0, monthly=0))
    assert expiry(snap, kept, [snap], NOW)[1].startswith("kept by job nightly's retention")


def test_expiry_follows_the_schedule_and_the_buckets():
    # daily at 02:30 keeping the newest of 3 days: a snapshot of yesterday goes at the third run from now
    j = job(schedule="30 2 * * *", retention_source=Retention(last=0, hourly=0, daily=3, weekly=0, monthly=0))
    existing = names(1)
    when, words = expiry(existing[0], j, existing, NOW)
    runs = [datetime.fromisoformat(when)]
    assert "at the run of job nightly" in words
    assert (runs[0] - NOW).days in (1, 2), when  # the 2nd or 3rd 02:30 from now (local time decides)
    # six fields (seconds) are read as the scheduler reads them; every 10 s, last = 2: the third run
    fast = job(schedule="*/10 * * * * *", retention_source=Retention(last=2, hourly=0, daily=0, weekly=0, monthly=0))
    [s0] = names(0)
    when, _ = expiry(s0, fast, [s0], NOW)
    assert timedelta(seconds=10) <= datetime.fromisoformat(when) - NOW <= timedelta(seconds=20)
    never = job(schedule="0 * * * *", retention_source=Retention(last=1000, hourly=0, daily=0, weekly=0, monthly=0))
    assert expiry(s0, never, [s0], NOW) == (None, "not within the next 800 runs of job nightly")

"""Health findings from recorded `zpool status` output (OpenZFS 2.4.4 and zfs-fuse)."""

from datetime import datetime

from conftest import fixture_text

from rebal import health as H
from rebal.zfs import parse
from rebal.zfs.model import Pool, Vdev

LIMITS = dict(cap_warning=80, cap_critical=90, target_spread=10, scrub_max_age_days=35)


def status(name):
    [st] = parse.parse_zpool_status(fixture_text(name))
    return st


def test_degraded_pool_is_critical_and_names_the_device():
    for fixture, dev in (("tank-degraded_zpool-status-v.txt", "vdc"), ("zfsfuse_degraded_zpool-status.txt", "/tmp/p/d3")):
        f = H.pool_findings(status(fixture), None, **LIMITS)
        assert H.overall(f) == H.CRITICAL
        lines = [x.line() for x in f]
        assert any(f"device {dev} (mirror-" in line and "OFFLINE" in line for line in lines), lines
        assert any("pool is DEGRADED" in line for line in lines)


def test_healthy_pool_after_resilver_is_ok_apart_from_scrub():
    f = H.pool_findings(status("tank-resilvered_zpool-status-v.txt"), None, **LIMITS)
    assert [x.message for x in f] == ["never scrubbed (rebal scrub POOL)"]


def test_a_new_pool_is_not_overdue_for_its_first_scrub():
    """A pool made a minute ago was never scrubbed, and that is fine until it is older than the
    scrub age limit (a new user met exit 1 on every new pool)."""
    st = status("tank-resilvered_zpool-status-v.txt")
    now = 2_000_000_000
    young = H.pool_findings(st, None, **LIMITS, now=now, created=now - 60)
    assert not any("scrub" in x.message for x in young)
    old = H.pool_findings(st, None, **LIMITS, now=now, created=now - (LIMITS["scrub_max_age_days"] + 1) * 86400)
    assert [x.message for x in old] == ["never scrubbed (rebal scrub POOL)"]


def test_scrub_age_from_openzfs_wording():
    st = status("rz-expanded-scrubbed_zpool-status-v.txt")
    t = H.scrub_time(st.scan)
    assert t is not None
    recent = H.pool_findings(st, None, **LIMITS, now=t + 86400)
    assert not any("scrub" in x.message for x in recent)
    old = H.pool_findings(st, None, **LIMITS, now=t + 40 * 86400)
    assert any("last scrub 40 days ago" in x.message for x in old)


def test_zfs_fuse_scrub_wording():
    t = H.scrub_time("scrub completed after 0h0m with 0 errors on Sun Nov 22 02:04:58 2026")
    assert t == datetime(2026, 11, 22, 2, 4, 58).timestamp()
    assert H.scrub_time("none requested") is None


def test_error_counts_and_data_errors():
    text = fixture_text("tank-resilvered_zpool-status-v.txt").replace(
        "vdd     ONLINE       0     0     0", "vdd     ONLINE       3     0    12").replace(
        "errors: No known data errors", "errors: 2 data errors, use '-v' for a list")
    [st] = parse.parse_zpool_status(text)
    f = H.pool_findings(st, None, **LIMITS)
    lines = [x.line() for x in f]
    assert "WARNING tank: device vdd (mirror-1) has errors: read 3, write 0, checksum 12" in lines
    assert any(x.level == H.CRITICAL and "data errors" in x.message for x in f)


def test_fill_and_spread_thresholds():
    st = status("tank-resilvered_zpool-status-v.txt")
    full = Pool("tank", 100, 92, 8, "ONLINE", (Vdev("a", "disk", 50, 49, 1), Vdev("b", "disk", 50, 43, 7)))
    f = H.pool_findings(st, full, **LIMITS)
    assert any(x.level == H.CRITICAL and "92% full" in x.message for x in f)
    assert any("spread is 12.0 points" in x.message for x in f)


def test_replication_age():
    f = H.replication_findings([
        {"job": "a", "last_success": None, "age_seconds": None},
        {"job": "b", "last_success": 1.0, "age_seconds": 40 * 3600},
        {"job": "c", "last_success": 1.0, "age_seconds": 3600},
    ], 36)
    assert [x.subject for x in f] == ["job:a", "job:b"] and H.overall(f) == H.WARNING


def test_digest_ignores_moving_numbers():
    from rebal.jobs import digest

    a = [H.Finding(1, "tank", "pool is 81% full (warning at 80%)")]
    b = [H.Finding(1, "tank", "pool is 82% full (warning at 80%)")]
    c = [H.Finding(2, "tank", "pool is 91% full (critical at 90%)")]
    assert digest(a) == digest(b) != digest(c)

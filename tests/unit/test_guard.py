"""The one guard of every snapshot destroy (rebal/replicate/guard.py, issue 64): whatever a caller
asks to destroy, a backup dataset keeps its newest snapshot, and neither side loses its base or a
snapshot newer than it (held on that side only), unless it is named. Examples, then a property over
random two-sided histories (hypothesis) in which the caller asks to destroy everything."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rebal.replicate.guard import allowed, base_of, rollback_allowed
from rebal.zfs.snaps import Snap


def snaps(*names: str, start: int = 10) -> list[Snap]:
    return [Snap(n, guid=hash(n) & 0xFFFFFFF, txg=start + i) for i, n in enumerate(names)]


def test_the_backup_keeps_its_newest_and_everything_above_the_base():
    src = snaps("a", "b")                       # the source was restored from @b
    bk = snaps("a", "b", "c", "d", start=100)   # the backup holds @c and @d, the source does not
    v = allowed("bk/w/c", "backup", bk, ["a", "b", "c", "d"], other=src)
    assert v.allowed == ["a"]
    assert set(v.refused) == {"b", "c", "d"}
    assert "newest" in v.refused["d"] and "only on the backup" in v.refused["c"] and "base" in v.refused["b"]


def test_the_source_keeps_what_was_never_sent_and_a_held_base():
    src = snaps("a", "b", "c")
    bk = snaps("a", "b", start=100)
    v = allowed("hs/d", "source", src, ["a", "b", "c"], other=bk)
    assert v.allowed == ["a"] and set(v.refused) == {"b", "c"}


def test_a_bookmarked_base_may_go_from_the_source():
    src = snaps("a", "b") + [Snap("b", guid=hash("b") & 0xFFFFFFF, txg=11, bookmark=True)]
    bk = snaps("a", "b", start=100)
    assert allowed("hs/d", "source", src, ["a", "b"], other=bk).allowed == ["a", "b"]


def test_no_common_snapshot_keeps_everything_on_both_sides():
    src, bk = snaps("x", "y"), snaps("a", "b", start=100)
    assert allowed("hs/d", "source", src, ["x"], other=bk).allowed == []
    assert allowed("bk/d", "backup", bk, ["a"], other=src).allowed == []
    assert allowed("hs/d", "source", src, ["x"], other=[]).allowed == []  # no backup dataset at all


def test_unseen_other_side():
    bk = snaps("a", "b", "c", start=100)
    # the backup host's own prune: only its newest is known to matter
    assert allowed("bk/d", "backup", bk, ["a", "b", "c"]).allowed == ["a", "b"]
    # the source, nothing known of the backup: nothing goes
    assert allowed("hs/d", "source", bk, ["a"]).allowed == []
    # the rsync mode: the base named by the run that just landed
    assert allowed("hs/d", "source", bk, ["a", "b", "c"], base="b").allowed == ["a"]


def test_named_goes_and_unknown_names_do_not():
    bk = snaps("a", "b", start=100)
    assert allowed("bk/d", "backup", bk, ["b", "zz"], other=[], named={"b"}).allowed == ["b"]
    assert "no such" in allowed("bk/d", "backup", bk, ["zz"], other=[]).refused["zz"]


def test_rollback_only_where_named():
    assert rollback_allowed("hs/d/c", "bk/w/c", ("bk/w/c",))
    assert rollback_allowed("hs/d/c", "bk/w/c", ("hs/d/c",))
    assert not rollback_allowed("hs/d/c", "bk/w/c", ("hs/d", "bk/w"))


@st.composite
def two_sides(draw):
    """A dataset's history: runs that snapshot the source, some sent (in order, as -I does), the
    source's old ones pruned, some with a bookmark kept instead; the backup's old ones pruned too."""
    n = draw(st.integers(1, 25))
    names = [f"rebal-w-{i:04d}" for i in range(n)]
    guid = {x: 1000 + i for i, x in enumerate(names)}
    sent = draw(st.integers(0, n))  # the first `sent` were received, the rest are only on the source
    src_kept = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    marks = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    bk_kept = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    src = [Snap(x, guid[x], 10 + i) for i, x in enumerate(names) if src_kept[i]]
    src += [Snap(x, guid[x], 10 + i, bookmark=True) for i, x in enumerate(names[:sent]) if marks[i]]
    bk = [Snap(x, guid[x], 500 + i) for i, x in enumerate(names[:sent]) if bk_kept[i]]
    extra = draw(st.integers(0, 3))  # a backup restored from/written by another: snapshots the source never had
    bk += [Snap(f"other-{i}", 9000 + i, 900 + i) for i in range(extra)]
    return src, bk


@settings(max_examples=400, deadline=None)
@given(two_sides())
def test_whatever_is_asked_nothing_only_one_side_has_goes(sides):
    src, bk = sides
    vb = allowed("bk/d", "backup", bk, [s.name for s in bk], other=src)
    vs = allowed("hs/d", "source", src, [s.name for s in src if not s.bookmark], other=bk)
    base_b = base_of(bk, src)
    if bk:
        assert max(bk, key=lambda s: s.txg).name not in vb.allowed
    for s in bk:
        if s.name in vb.allowed:  # went from the backup: older than a snapshot both sides still have
            assert base_b is not None and s.txg < base_b.txg
    base_s = base_of(src, bk)
    marks = {s.guid for s in src if s.bookmark}
    for s in src:
        if s.name in vs.allowed:  # went from the source: older than the base, or the base a bookmark keeps
            assert base_s is not None
            assert s.txg < base_s.txg or (s.guid == base_s.guid and s.guid in marks)

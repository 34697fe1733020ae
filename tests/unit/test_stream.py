"""The way back's stream (rebal/replicate/stream.py, issue 65): the incremental part of a send and
the filters, one decision shared with the replicator."""

from types import SimpleNamespace

from rebal.replicate.stream import incremental_args, stream_filters


def job(**kw):
    base = dict(raw=False, compressed=True, large_blocks=True, embedded=True, stream_compress="none",
                stream_compress_level=3, mbuffer=False, mbuffer_size="128M")
    return SimpleNamespace(**(base | kw))


def test_i_from_a_snapshot_with_nothing_between_and_from_a_bookmark():
    assert incremental_args(None) == []
    assert incremental_args("@a") == ["-i", "@a"]
    assert incremental_args("@a", between=True) == ["-I", "@a"]
    assert incremental_args("p/d#a", between=True) == ["-i", "p/d#a"]


def test_filters_where_both_ends_have_them():
    yes, no = (lambda p: True), (lambda p: False)
    s, r, notes = stream_filters(job(stream_compress="zstd", mbuffer=True, mbuffer_size="4M"), local=False,
                                 here=yes, there=yes)
    assert s == [["zstd", "-c", "-T0", "-3"], ["mbuffer", "-q", "-m", "4096k"]]
    assert r == [["mbuffer", "-q", "-m", "4096k"], ["zstd", "-dc"]] and notes == []
    s, r, notes = stream_filters(job(stream_compress="zstd"), local=False, here=yes, there=no)
    assert s == r == [] and "uncompressed" in notes[0]
    s, r, notes = stream_filters(job(stream_compress="zstd", mbuffer=True), local=True, here=yes, there=no)
    assert s == [["mbuffer", "-q", "-m", "131072k"]] and r == [] and "not compressed" in notes[0]

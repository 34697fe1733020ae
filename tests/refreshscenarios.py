"""Scenarios of `rebal refresh` shared by the zfs-fuse integration tests and the OpenZFS lane: data
written under one property value, the property changed, the plan's prediction against what the
refresh then does, and a second run that finds nothing."""

import json
import os
import random

from conftest import rebal, rebal_json
from fsenv import manifest
from zfsenv import sh, write_cfg


def text_like(path, mib: int, seed: int = 0) -> None:
    """Compressible data much like logs: lines of words and numbers (zstd and gzip about 3-5x)."""
    rnd = random.Random(seed)
    words = [w.encode() for w in "error warning info debug request response user disk pool vdev txg "
             "scrub resilver snapshot send receive bytes seconds ok failed retry".split()]
    with open(path, "wb") as f:
        left = mib << 20
        while left > 0:
            line = b"%d %s %s id=%d %s\n" % (rnd.randrange(10**9), rnd.choice(words), rnd.choice(words),
                                               rnd.randrange(10**6), b" ".join(rnd.choices(words, k=6)))
            f.write(line[:left])
            left -= len(line)


def incompressible(path, mib: int) -> None:
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(1 << 20))


def used(ds: str) -> int:
    return int(sh("zfs", "get", "-Hp", "-o", "value", "used", ds).stdout.strip())


def changed_and_planned(root, ds: str, prop: str, new: str, tmp_path):
    """The tree written (synced) and its manifest, then ``prop`` set to ``new`` on ``ds`` and the
    refresh's plan: (the manifest, the config, the plan, the plan's one dataset)."""
    os.sync()
    before = manifest(root)
    sh("zfs", "set", f"{prop}={new}", ds)
    cfg = write_cfg(tmp_path)
    plan = rebal_json("refresh", str(root), "--plan", config=cfg)
    [d] = plan["datasets"]
    return before, cfg, plan, d


def small_text_files(d, n: int = 200, size: int = 2000) -> None:
    """``n`` files of about ``size`` bytes of text: compressible, but at ashift 12 one sector either way."""
    d.mkdir()
    for i in range(n):
        rnd = random.Random(i)
        (d / f"note{i:04d}.txt").write_bytes(
            b" ".join(b"key%d=%d" % (rnd.randrange(50), rnd.randrange(10**6)) for _ in range(400))[:size])


def compression_scenario(pool, tmp_path, new: str, mib: int = 24) -> dict:
    """A dataset written with compression=off, set to ``new``: the plan predicts the saving, the refresh
    saves it (within 15%), nothing stays old, incompressible files are not taken for old, small files
    that cannot save a sector at the pool's ashift are not taken for old (make the pool with ashift=12),
    and a second run rewrites nothing. Returns the refresh's report."""
    ds = f"{pool.name}/logs"
    sh("zfs", "create", "-o", "compression=off", ds)
    root = pool.mountpoint / "logs"
    for i in range(4):
        text_like(root / f"app{i}.log", mib // 4, seed=i)
    incompressible(root / "random.bin", 2)
    small_text_files(root / "notes")
    before, cfg, plan, d = changed_and_planned(root, ds, "compression", new, tmp_path)
    assert set(d["by_property"]) == {"compression"}, d  # the random file's blocks are not counted old
    pred = plan["compression"]
    assert pred["predicted"], pred
    assert not [x for x in plan["dirs"] if x["path"].endswith("/notes")], plan["dirs"]  # one sector either way
    inodes = {n: os.stat(root / n).st_ino for n in os.listdir(root)}
    r = rebal("refresh", str(root), "--json", config=cfg)
    rep = json.loads(r.stdout.splitlines()[-1])
    assert rep["outcome"] == "ok" and rep["old_share_after"] == 0.0, rep
    assert sum(p["rewritten_files"] for p in rep["passes"]) == 4, rep["passes"]  # the logs, not the notes
    kept = inodes == {n: os.stat(root / n).st_ino for n in os.listdir(root)}
    saved = rep["usage"][ds]["saved_bytes"]
    assert abs(pred["saved_bytes"] - saved) <= 0.15 * saved, (pred, rep["usage"])
    assert manifest(root) == before
    again = json.loads(rebal("refresh", str(root), "--json", config=cfg).stdout.splitlines()[-1])
    assert again["passes"] == [] and "nothing" in again["reason"], again
    return {"plan": plan, "run": rep, "saved": saved, "inodes_kept": kept}


def recordsize_scenario(pool, tmp_path, old: str, new: str, new_bytes: int, mib: int = 3) -> dict:
    """Files written with recordsize ``old``, the dataset set to ``new``: the refresh copies them (a
    block size takes a copy), every file then has ``new_bytes`` blocks, and the tree equals its manifest."""
    ds = f"{pool.name}/media"
    sh("zfs", "create", "-o", f"recordsize={old}", ds)
    root = pool.mountpoint / "media"
    for i in range(3):
        incompressible(root / f"v{i}.bin", mib)
    (root / "small.txt").write_bytes(b"x" * 3000)  # one small block: already as a write now makes it
    before, cfg, plan, d = changed_and_planned(root, ds, "recordsize", new, tmp_path)
    assert set(d["by_property"]) == {"recordsize"} and plan["recordsize"][ds]["files_measured"] == 3, plan
    r = rebal("refresh", str(root), "--json", config=cfg)
    rep = json.loads(r.stdout.splitlines()[-1])
    assert [p["method"] for p in rep["passes"]] == ["copy"] and rep["passes"][0]["rewritten_files"] == 3, rep
    assert rep["outcome"] == "ok" and rep["old_share_after"] == 0.0, rep
    assert manifest(root) == before
    objs = [str(os.stat(root / f"v{i}.bin").st_ino) for i in range(3)]
    out = sh("zdb", "-dd", ds, *objs).stdout
    sizes = [ln.split()[3] for ln in out.splitlines() if ln.strip().split()[:1] in ([o] for o in objs)]
    assert len(sizes) == 3 and all(s == {1 << 20: "1M", 1 << 17: "128K", 32 << 10: "32K"}[new_bytes] for s in sizes), out
    return rep


def hardlink_scenario(pool, tmp_path, old: str, new: str, mib: int = 3) -> dict:
    """A recordsize change over files one of which has a second name: each inode is counted once,
    the plan and the run name the hardlinked file a copy would break and why ([rebalance]
    hardlinks = false), and with hardlinks = true the next run copies the link group whole."""
    ds = f"{pool.name}/media"
    sh("zfs", "create", "-o", f"recordsize={old}", ds)
    root = pool.mountpoint / "media"
    for i in range(3):
        incompressible(root / f"v{i}.bin", mib)
    os.link(root / "v0.bin", root / "also-v0.bin")
    before, cfg, plan, d = changed_and_planned(root, ds, "recordsize", new, tmp_path)
    assert plan["files"] == 3 and d["old_bytes"] < (3 * mib + 1) << 20, plan  # each inode once
    [left] = plan["left"]
    assert left["path"].endswith("v0.bin") and left["links"] == 2 and "hardlinks = true" in left["why"], left
    assert "leaves 1 old file(s)" in rebal("refresh", str(root), "--plan", config=cfg).stdout
    r = rebal("refresh", str(root), "--json", config=cfg)
    rep = json.loads(r.stdout.splitlines()[-1])
    assert sum(p["rewritten_files"] for p in rep["passes"]) == 2, rep["passes"]
    assert [x["path"] for x in rep["left"]] == [left["path"]] and "hardlinks = false" in rep["reason"], rep
    assert rep["old_bytes_after"] > 0 and manifest(root) == before
    cfg = write_cfg(tmp_path, hardlinks=True)
    again = json.loads(rebal("refresh", str(root), "--json", config=cfg).stdout.splitlines()[-1])
    assert again["left"] == [] and again["old_bytes_after"] == 0, again
    assert manifest(root) == before  # the link group re-created: still one inode with two names
    assert os.stat(root / "v0.bin").st_nlink == 2
    return again


def property_scenario(pool, tmp_path, prop: str, old: str, new: str, mib: int = 4, also: tuple = ()) -> dict:
    """Files written under ``prop=old``, the dataset set to ``new``: the plan counts every file old
    in that property alone (and ``also``: dedup=on brings its checksum, sha256, with it), the refresh
    rewrites them all, nothing stays old, the tree equals its manifest, and a second run rewrites
    nothing."""
    ds = f"{pool.name}/p"
    sh("zfs", "create", "-o", f"{prop}={old}", ds)
    root = pool.mountpoint / "p"
    for i in range(3):
        incompressible(root / f"f{i}.bin", mib)
    text_like(root / "log.txt", 1)
    before, cfg, plan, d = changed_and_planned(root, ds, prop, new, tmp_path)
    assert set(d["by_property"]) == {prop, *also} and d["old_bytes"] == d["bytes"] > 0, d
    rep = json.loads(rebal("refresh", str(root), "--json", config=cfg).stdout.splitlines()[-1])
    assert rep["outcome"] == "ok" and rep["old_share_after"] == 0.0 and rep["old_bytes_before"] > 0, rep
    assert sum(p["rewritten_files"] for p in rep["passes"]) == 4, rep["passes"]
    assert manifest(root) == before
    after = rebal_json("refresh", str(root), "--plan", config=cfg)
    assert after["datasets"][0]["old_bytes"] == 0, after["datasets"]
    again = json.loads(rebal("refresh", str(root), "--json", config=cfg).stdout.splitlines()[-1])
    assert again["passes"] == [] and "nothing" in again["reason"], again
    # a refresh by hand is recorded as the timer's is (it wrote no refresh row)
    assert [x["outcome"] for x in rebal_json("runs", "--kind", "refresh", config=cfg)["runs"]] == ["ok", "ok"]
    return rep

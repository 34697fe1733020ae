"""`rebal heal` on real OpenZFS 2.4: a pool without redundancy, replicated; blocks of two files
written over on the vdev (at their first L0 DVA from zdb, past the 4 MiB of labels), seen by a
scrub. The file the backup's snapshot holds is healed in place by a corrective receive (equal to
its manifest, no longer listed by `zpool status -v`); the file rewritten after the snapshot is
reported restorable, its backup copy put beside it, never over it."""

import json
import os
import re

import pytest
from conftest import rebal, rebal_json
from fsenv import manifest
from lanelib import write_random
from replscenarios import cfg_for, mountpoint
from zfsenv import sh

pytestmark = pytest.mark.openzfs
FIGURES = os.environ.get("REBAL_LANE_FIGURES", "/var/tmp/lane-figures.jsonl")
LABELS = 4 << 20  # the front labels and boot area of a vdev: DVA offsets count from after them


def first_l0(ds: str, ino: int) -> tuple[int, int]:
    """(vdev id, offset) of a file's first level-0 block, read from zdb."""
    out = sh("zdb", "-ddddd", ds, str(ino)).stdout
    for line in out.splitlines():
        m = re.match(r"^\s*0\s+L0\s+(\d+):([0-9a-f]+):([0-9a-f]+)", line)
        if m:
            return int(m.group(1)), int(m.group(2), 16)
    raise AssertionError(f"no L0 block of object {ino} in zdb's output:\n{out[-2000:]}")


def damage(pool, ds: str, path: str) -> None:
    """32 KiB of the file's first block written over on the (single) vdev."""
    sh("zpool", "sync", pool.name)
    vdev, off = first_l0(ds, os.stat(path).st_ino)
    assert vdev == 0
    with open(pool.disks[0], "r+b") as f:
        f.seek(off + LABELS)
        f.write(os.urandom(32 << 10))
        f.flush()
        os.fsync(f.fileno())


def scrub(pool) -> str:
    sh("zpool", "scrub", pool.name)
    sh("zpool", "wait", "-t", "scrub", pool.name)
    return sh("zpool", "status", "-v", pool.name).stdout


def test_heal_from_the_backup(make_pool, backup_host, tmp_path):
    src, dst = make_pool([[]], size="512M"), make_pool([[]], size="1G")
    ds = f"{src.name}/ds"
    sh("zfs", "create", "-o", "compression=off", ds)
    root = mountpoint(ds)
    keep, changed = os.path.join(root, "keep"), os.path.join(root, "changed")  # read apart: b stays damaged
    os.makedirs(keep)
    os.makedirs(changed)
    a, b = os.path.join(keep, "a.bin"), os.path.join(changed, "b.bin")
    write_random(a, 4, seed=1)
    write_random(b, 2, seed=2)
    want_a = manifest(keep)
    cfg = cfg_for(tmp_path, backup_host, name="h", source=ds, target=f"{dst.name}/ds",
                  retention_source={"last": 1})  # the source keeps the snapshot a corrective receive heals
    r = rebal_json("replicate", "h", config=cfg)
    assert r["outcome"] == "ok", r
    snap = r["snapshot"]
    old_b = manifest(changed)[b"b.bin"]
    write_random(b, 2, seed=3)  # rewritten after the snapshot: its new blocks are in no stream
    clean = rebal_json("heal", src.name, config=cfg)
    assert clean["before"] == [] and clean["files"] == []  # nothing damaged: nothing done
    damage(src, ds, a)
    damage(src, ds, b)
    src.cycle()  # nothing of the files left in the ARC
    before = scrub(src)
    print(before)
    assert a in before and b in before, before
    dry = rebal_json("heal", src.name, "--dry-run", config=cfg)
    states = {f["entry"]: (f["state"], f["source"]) for f in dry["files"]}
    assert states[a] == ("would heal", snap) and states[b][0] == "restorable", states
    assert len(dry["planned"]) == 1 and f"receive -c {ds}@{snap}" in dry["planned"][0], dry
    aside = tmp_path / "aside"
    r = rebal("heal", src.name, "--restore-to", str(aside), "--json", config=cfg, check=False)
    assert r.returncode == 1, r.stderr  # one file is not healed
    rep = json.loads(r.stdout)
    states = {f["entry"]: f for f in rep["files"]}
    assert states[a]["state"] == "healed" and states[a]["source"] == snap, rep
    assert states[b]["state"] == "restorable" and states[b]["source"] == snap, rep
    assert rep["corrected"] == [f"{ds}@{snap}"] and rep["scrub"] == "error scrub", rep
    assert a not in rep["after"] and b in rep["after"], rep
    src.cycle()
    after = sh("zpool", "status", "-v", src.name).stdout
    print(after)
    assert a not in after and f"{ds}@{snap}:/keep/a.bin" not in after, after
    assert manifest(keep) == want_a  # read from disk again: the healed blocks
    assert manifest(aside)[b"b.bin"] == old_b  # the backup's copy beside, the live file untouched
    with open(FIGURES, "a") as f:
        f.write(json.dumps({"test": "heal", "before": before, "after": after, "report": rep}) + "\n")

"""Whole-tree restores (`rebal restore JOB --all`), run on zfs-fuse (tests/integration) and on OpenZFS
(the lane) alike."""

import os
import subprocess
import sys
from pathlib import Path

from conftest import rebal, rebal_json
from fsenv import manifest
from replscenarios import cfg_for, fill, make_tree, mountpoint
from zfsenv import sh, sh_busy_retry

RELS = ("", "/child", "/child/grandchild", "/sibling")
# a writer that goes on: 4 KiB appended and synced every 20 ms (a workload, not a synchronisation)
WRITER = ("import os, sys, time\nf = open(sys.argv[1], 'ab')\nwhile True:\n    f.write(os.urandom(4096)); "
          "f.flush(); os.fsync(f.fileno()); time.sleep(0.02)\n")


def manifests(root: str) -> dict:
    """Each dataset of the tree under ``root``, read on its own (a child's files are not its parent's)."""
    return {rel: manifest(mountpoint(root + rel), exclude=("child", "sibling", "grandchild")) for rel in RELS}


def guids(root: str, snap: str) -> dict:
    out = sh("zfs", "get", "-Hp", "-r", "-o", "name,value", "guid", root).stdout
    return {n.split("@")[0][len(root):]: int(v) for n, v in (ln.split("\t") for ln in out.splitlines())
            if n.endswith("@" + snap)}


def lose_and_recreate(pool) -> None:
    """The pool is lost and made again, empty, under its name on the same (wiped) disks."""
    pool.destroy()
    for d in pool.disks:
        size = os.path.getsize(d)
        os.truncate(d, 0)
        os.truncate(d, size)
    sh("zpool", "create", "-f", "-m", str(pool.mountpoint), pool.name, *map(str, pool.disks))


def restore_tree_scenario(src, dst, backup_host, tmp_path, spare=None):
    """The tree of a recursive job comes back whole: into a new name first (each dataset equal to
    the source as read before the job ran, the point's snapshot with the backup's guid); then, after
    the source is lost, under the job's own names, and the job goes on incrementally (no dataset
    sent in full). A dry run changes nothing; what exists is refused, nothing overwritten; a second
    run leaves what is restored; with ``spare`` (an empty new pool) the tree lands on its root."""
    make_tree(src)
    cfg = cfg_for(tmp_path, backup_host, name="nightly", source=f"{src.name}/data", target=f"{dst.name}/copy",
                  recursive=True, retention_source={"last": 1}, retention_target={"last": 5})
    fill(src, 1)
    assert rebal_json("replicate", "nightly", config=cfg)["outcome"] == "ok"
    fill(src, 2)
    want = manifests(f"{src.name}/data")  # the expected trees, read before the run they are compared after
    r2 = rebal_json("replicate", "nightly", config=cfg)
    assert r2["outcome"] == "ok", r2
    point = r2["snapshot"]
    backup_guids = guids(f"{dst.name}/copy", point)
    assert set(backup_guids) == set(RELS)

    new = f"{src.name}/restored"
    dry = rebal_json("restore", "nightly", "--all", "--to", new, "--dry-run", config=cfg)
    assert len(dry["planned"]) == 4 and all(f"@{point}" in line for line in dry["planned"]), dry
    assert sh("zfs", "list", new, check=False).returncode != 0  # a dry run made nothing
    out = rebal_json("restore", "nightly", "--all", "--to", new, config=cfg)
    assert [d["kind"] for d in out["datasets"]] == ["full"] * 4, out
    assert [d["target"] for d in out["datasets"]] == [new + rel for rel in ("", "/child", "/sibling", "/child/grandchild")]
    assert out["bytes"] > 0 and out["point"] == point
    assert manifests(new) == want
    assert guids(new, point) == backup_guids  # the same snapshot: a chain can go on from it
    again = rebal_json("restore", "nightly", "--all", "--to", new, config=cfg)
    assert [d["kind"] for d in again["datasets"]] == ["present"] * 4 and again["bytes"] == 0, again
    runs = rebal_json("runs", "--kind", "restore", config=cfg)["runs"]
    assert [r["outcome"] for r in runs[:2]] == ["ok", "ok"], runs

    # refusals: a parent that does not exist, --all with --path; exit 2, nothing moved
    r = rebal("restore", "nightly", "--all", "--to", f"{src.name}/no/such", config=cfg, check=False)
    assert r.returncode == 2 and f"{src.name}/no does not exist" in r.stderr, r.stderr
    r = rebal("restore", "nightly", "--all", "--path", "top", "--to", new + "x", config=cfg, check=False)
    assert r.returncode == 2 and "--all" in r.stderr, r.stderr
    r = rebal("restore", "nightly", "--all", "--key-location", "file:///k", "--to", new + "x", config=cfg, check=False)
    assert r.returncode == 2 and "--key-location is for --all of a raw job" in r.stderr, r.stderr

    # the source is lost; the tree comes back under the job's own names, and the job goes on from it
    lose_and_recreate(src)
    sh("zfs", "create", f"{src.name}/data")  # made anew, without the point: refused, never received over
    mine = Path(mountpoint(f"{src.name}/data")) / "keep"
    mine.write_bytes(b"mine")
    r = rebal("restore", "nightly", "--all", "--to", f"{src.name}/data", config=cfg, check=False)
    assert r.returncode == 2 and f"{src.name}/data exists" in r.stderr and "nothing is overwritten" in r.stderr, r.stderr
    assert mine.read_bytes() == b"mine"
    sh_busy_retry("zfs", "destroy", "-r", f"{src.name}/data")
    back = rebal_json("restore", "nightly", "--all", "--to", f"{src.name}/data", config=cfg)
    assert [d["kind"] for d in back["datasets"]] == ["full"] * 4, back
    assert manifests(f"{src.name}/data") == want
    fill(src, 3)
    want3 = manifests(f"{src.name}/data")
    r3 = rebal_json("replicate", "nightly", config=cfg)
    assert r3["outcome"] == "ok", r3
    kinds = {d["source"]: d["kind"] for d in r3["datasets"]}
    assert set(kinds.values()) == {"incremental"}, kinds  # never a full send after the restore
    assert all(d["base"] == point for d in r3["datasets"]), r3["datasets"]
    assert sum(d["bytes"] for d in r3["datasets"]) < out["bytes"], (r3["datasets"], out["bytes"])
    v = rebal_json("verify", "nightly", "--sample", "all", config=cfg)
    assert v["level"] == "OK" and not v["findings"] and v["files"][0] == v["files"][1], v["findings"]
    assert manifests(f"{src.name}/data") == want3

    if spare is not None:  # a new pool's empty root: received over (it holds nothing); with a file, refused
        note = Path(mountpoint(spare.name)) / "note.txt"
        note.write_bytes(b"x")
        r = rebal("restore", "nightly", "--all", "--at", point, "--to", spare.name, config=cfg, check=False)
        assert r.returncode == 2 and f"{spare.name} exists" in r.stderr and note.read_bytes() == b"x", r.stderr
        note.unlink()
        root = rebal_json("restore", "nightly", "--all", "--at", point, "--to", spare.name, config=cfg)
        assert [d["kind"] for d in root["datasets"]] == ["full"] * 4, root
        assert manifests(spare.name) == want
    return out, r3


def rebuild_scenario(src, dst, backup_host, tmp_path, *, recreate, job_extra=None, props=None, encrypted=None,
                     writers_flag=()):
    """`rebal rebuild`: refused while a dataset of the pool is in no job (named, then --leave-out);
    checked and recorded (the restore point, the commands for the admin); refused to go on while the
    pool is the old one; after ``recreate(src)`` (the admin's zpool destroy and create) the tree,
    the datasets' own properties and (``encrypted``: dataset -> keylocation) their encryption roots
    are back as they were, every file verified, and the job goes on incrementally."""
    cfg = cfg_for(tmp_path, backup_host, name="all", source=f"{src.name}/data", target=f"{dst.name}/data",
                  recursive=True, **(job_extra or {}))
    fill(src, 1)
    for ds, (prop, value) in (props or {}).items():
        sh("zfs", "set", f"{prop}={value}", f"{src.name}/{ds}")
    assert rebal_json("replicate", "all", config=cfg)["outcome"] == "ok"
    fill(src, 2)
    want = manifests(f"{src.name}/data")  # read before the rebuild's own run
    sh("zfs", "create", f"{src.name}/scratch")
    r = rebal("rebuild", src.name, "--job", "all", *writers_flag, config=cfg, check=False)
    assert r.returncode == 2 and f"not backed up by job all: {src.name}/scratch" in r.stderr, r.stderr
    if not writers_flag:  # this ZFS says what was written: a writer that goes on is refused, named
        log = Path(mountpoint(f"{src.name}/data")) / "writer.log"
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log)])
        try:
            r = rebal("rebuild", src.name, "--job", "all", "--leave-out", f"{src.name}/scratch", config=cfg, check=False)
        finally:
            writer.kill()
            writer.wait()
        log.unlink()  # (the root's own files: the manifest of the data dataset lists them, the writer's went)
        assert r.returncode == 2 and "written after @" in r.stderr and f"{src.name}/data (" in r.stderr, r.stderr
        assert "Stop the writers" in r.stderr
    rec = rebal_json("rebuild", src.name, "--job", "all", "--leave-out", f"{src.name}/scratch", *writers_flag,
                     config=cfg)
    assert rec["step"] == "checked" and rec["point"], rec
    assert rec["files"][0] > 0 or encrypted, rec  # a raw backup's files cannot be read there: compared by guid
    assert rec["commands"][0] == f"zpool destroy {src.name}" and rec["commands"][-1] == f"rebal rebuild {src.name} --continue"
    assert rec["commands"][1].startswith("zpool create -o ashift=12"), rec["commands"]
    assert sorted(rec["datasets"]) == sorted(f"{src.name}/data{rel}" for rel in RELS), rec["datasets"]
    for ds, (prop, value) in (props or {}).items():
        assert rec["props"][f"{src.name}/{ds}"][prop] == value, rec["props"]
    r = rebal("rebuild", src.name, "--continue", config=cfg, check=False)
    assert r.returncode == 2 and "has not been destroyed and made again" in r.stderr, r.stderr
    assert "zpool destroy" in rebal("rebuild", src.name, "--status", config=cfg).stdout
    recreate(src)
    done = rebal_json("rebuild", src.name, "--continue", config=cfg)
    assert done["step"] == "done" and [s["step"] for s in done["steps"]][-4:] == \
        ["restoring", "restored", "configured", "done"], done["steps"]
    assert manifests(f"{src.name}/data") == want
    for ds, (prop, value) in (props or {}).items():
        got = sh("zfs", "get", "-Hp", "-o", "value,source", prop, f"{src.name}/{ds}").stdout.split()
        assert got == [value, "local"], (ds, prop, got)
    for ds, location in (encrypted or {}).items():
        root = sh("zfs", "get", "-H", "-o", "value", "encryptionroot", f"{src.name}/{ds}").stdout.strip()
        assert root == f"{src.name}/data", (ds, root)  # one encryption root, as the source had
    fill(src, 3)
    nxt = rebal_json("replicate", "all", config=cfg)
    assert nxt["outcome"] == "ok" and {d["kind"] for d in nxt["datasets"]} == {"incremental"}, nxt["datasets"]
    again = rebal_json("rebuild", src.name, "--continue", config=cfg)
    assert again["step"] == "done" and "the rebuild was done already" in again["notes"]
    return rec, done, nxt


def older_point_scenario(src, dst, backup_host, tmp_path, *, lose=None):
    """Issue 64's four steps. 1. a recursive job sends the tree in full; 2. a file is written into
    one child only, and only it gets a snapshot and is sent; 3. the pool is lost and the tree comes
    back (`restore --all`, or ``lose(cfg, point_of_c)`` for another way back) under the job's own
    names: every dataset at its own newest backup, c with the file; 4. a file is written into
    another child and the job goes on incrementally for every dataset, and no backup snapshot
    that holds data no other holds is destroyed at any step (c's newest is its only copy of the file)."""
    make_tree(src)
    # reading a file sets its atime, a write to its dataset: the tree is read to compare, and only
    # what the steps write may give a dataset a snapshot
    sh("zfs", "set", "atime=off", src.name)
    cfg = cfg_for(tmp_path, backup_host, name="w", source=f"{src.name}/data", target=f"{dst.name}/w",
                  recursive=True, retention_source={"last": 0, "hourly": 0, "daily": 0, "weekly": 0, "monthly": 0},
                  retention_target={"last": 1, "hourly": 0, "daily": 0, "weekly": 0, "monthly": 0})
    fill(src, 1)
    r1 = rebal_json("replicate", "w", config=cfg)
    assert r1["outcome"] == "ok" and {d["kind"] for d in r1["datasets"]} == {"full"}, r1
    with open(os.path.join(mountpoint(f"{src.name}/data/child"), "new1"), "wb") as f:
        f.write(os.urandom(3_000_000))
    sh("zpool", "sync", src.name, check=False)
    r2 = rebal_json("replicate", "w", config=cfg)
    want = manifests(f"{src.name}/data")  # step 2's tree: what the backup must give back
    sent = {d["source"]: d["kind"] for d in r2["datasets"]}
    assert r2["outcome"] == "ok" and sent.get(f"{src.name}/data/child") in ("full", "incremental"), r2
    assert [k for k in sent.values() if k in ("full", "incremental")] == ["incremental"], sent  # c alone
    c_point = r2["snapshot"]
    assert c_point in snap_names(f"{dst.name}/w/child")
    assert c_point not in snap_names(f"{dst.name}/w")  # the tree's restore point is per dataset now
    listed = rebal_json("backups", "w", config=cfg)["newest"]
    assert listed[f"{dst.name}/w/child"] == c_point and listed[f"{dst.name}/w"] == r1["snapshot"], listed

    if lose is None:
        lose_and_recreate(src)
        sh("zfs", "set", "atime=off", src.name)  # (the restored datasets inherit it)
        back = rebal_json("restore", "w", "--all", "--to", f"{src.name}/data", config=cfg)
        at = {d["target"][len(src.name) + len("/data"):]: d["point"] for d in back["datasets"]}
        assert at["/child"] == c_point and at[""] == r1["snapshot"], at
        assert not back.get("warnings"), back
    else:
        lose(cfg, c_point)
    assert manifests(f"{src.name}/data") == want  # c/new1 among them
    # c's newest backup: @c_point, or (after a rebuild's own run, which snapshots every dataset) a
    # newer one sent incrementally from it; new1 is in it either way
    assert c_point in snap_names(f"{dst.name}/w/child") or lose is not None

    with open(os.path.join(mountpoint(f"{src.name}/data/child/grandchild"), "new2"), "wb") as f:
        f.write(os.urandom(100_000))
    r4 = rebal_json("replicate", "w", config=cfg)
    assert r4["outcome"] == "ok", r4
    kinds = {d["source"]: d["kind"] for d in r4["datasets"]}
    assert "full" not in kinds.values() and "failed" not in kinds.values(), kinds
    assert kinds[f"{src.name}/data/child/grandchild"] == "incremental", kinds
    # (a restored parent was written to: mounting its children made their mount point directories)
    # c's newest backup is @c_point still, or this run's, sent incrementally from it: new1 is there
    # either way, and the backup equals the source file by file
    newest_c = snap_names(f"{dst.name}/w/child")[-1]
    assert newest_c == c_point or (newest_c == r4["snapshot"] and kinds[f"{src.name}/data/child"] == "incremental")
    v = rebal_json("verify", "w", "--sample", "all", config=cfg)
    assert v["level"] == "OK" and not v["findings"], v
    return cfg


def snap_names(ds: str) -> list[str]:
    out = sh("zfs", "list", "-H", "-o", "name", "-t", "snapshot", "-s", "createtxg", "-d", "1", ds).stdout.split()
    return [n.split("@", 1)[1] for n in out]


def rebuild_instead(src, writers_flag=()):
    """Step 3 of older_point_scenario by `rebal rebuild` (checked, the pool lost and made again by the
    test as the admin would, continued): for ``lose=``."""
    def lose(cfg, c_point):
        rec = rebal_json("rebuild", src.name, "--job", "w", *writers_flag, config=cfg)
        assert rec["step"] == "checked" and rec["point"], rec
        before = snap_names(f"{src.name}/data/child")
        assert rec["point"] in before and c_point < rec["point"], (rec["point"], before)
        lose_and_recreate(src)
        sh("zfs", "set", "atime=off", src.name)  # (the restored datasets inherit it)
        done = rebal_json("rebuild", src.name, "--continue", config=cfg)
        assert done["step"] == "done", done
    return lose

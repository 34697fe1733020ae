"""Replication scenarios run on zfs-fuse (tests/integration) and on OpenZFS (the lane) alike."""

import json
import os

from conftest import rebal, rebal_json
from fsenv import manifest
from zfsenv import sh, sh_busy_retry


def cfg_for(tmp_path, host, **job):
    p = tmp_path / "config.toml"
    p.write_text(f'state_db = "{tmp_path / "state.db"}"\n' + host.config_block(**job))
    return p


def mountpoint(ds):
    return sh("zfs", "get", "-H", "-o", "value", "mountpoint", ds).stdout.strip()


def backup_root(ds):
    """Where a backup dataset's files are read: OpenZFS receives with -u (not mounted), and zfs-fuse
    sometimes leaves a renamed, then received, file system unmounted: mount it to read it."""
    if sh("zfs", "get", "-H", "-o", "value", "mounted", ds).stdout.strip() != "yes":
        sh("zfs", "mount", ds)
    return mountpoint(ds)


def snaps(ds):
    out = sh("zfs", "list", "-H", "-o", "name", "-t", "snapshot", "-r", ds).stdout.split()
    return sorted(n.split("@", 1)[1] for n in out if n.startswith(ds + "@"))


def make_tree(src):
    for ds in ("data", "data/child", "data/child/grandchild", "data/sibling"):
        sh("zfs", "create", f"{src.name}/{ds}")


def fill(src, seed):
    from treegen import mixed_tree

    root = mountpoint(f"{src.name}/data")
    mixed_tree(os.path.join(root, "top", str(seed)), small=60, large=1, large_mib=(2, 3), seed=seed, xattrs=False)
    for kid in ("child", "child/grandchild", "sibling"):
        d = os.path.join(root, kid, f"f{seed}")
        with open(d, "wb") as f:
            f.write(os.urandom(50_000 + seed))


def tree_scenario(src, dst, backup_host, tmp_path):
    """Children added, destroyed and renamed between runs of a recursive job: a new child goes in
    full (said), old snapshots are pruned on every dataset that has them (none leaks), a destroyed
    child keeps its backup (said), a renamed child is not sent twice and continues once its backup
    is renamed too."""
    cfg = cfg_for(tmp_path, backup_host, name="tree", source=f"{src.name}/data", target=f"{dst.name}/copy",
                  recursive=True)
    fill(src, 1)
    r1 = rebal_json("replicate", "tree", config=cfg)
    assert r1["outcome"] == "ok", r1

    sh("zfs", "create", f"{src.name}/data/big")
    with open(os.path.join(mountpoint(f"{src.name}/data/big"), "f"), "wb") as f:
        f.write(os.urandom(300_000))
    r2 = rebal_json("replicate", "tree", config=cfg)
    assert r2["outcome"] == "ok", r2
    kinds = {d["source"]: d["kind"] for d in r2["datasets"]}
    assert kinds[f"{src.name}/data/big"] == "full" and kinds[f"{src.name}/data"] == "incremental"
    assert f"{src.name}/data/big is new: sent in full" in r2["notes"]
    assert not [n for n in r2["notes"] if "could not prune" in n], r2["notes"]
    # the cursor: a bookmark where the ZFS has them (OpenZFS: no rebal snapshot stays on the source,
    # each is pruned by the run that took it), else the held base snapshot (zfs-fuse: pruned next run)
    [cursor] = {d["cursor"] for d in r2["datasets"]}
    assert r1["snapshot"] in (r2 if cursor == "hold" else r1)["pruned_source"], (cursor, r1, r2)
    for ds in ("data", "data/child", "data/child/grandchild", "data/sibling", "data/big"):
        assert r1["snapshot"] not in snaps(f"{src.name}/{ds}"), ds  # pruned everywhere, nothing leaks
        assert (r2["snapshot"] in snaps(f"{src.name}/{ds}")) == (cursor == "hold"), (ds, cursor)
    assert manifest(mountpoint(f"{src.name}/data/big")) == manifest(backup_root(f"{dst.name}/copy/big"))

    if cursor == "hold":  # rebal holds its base snapshot: the admin releases the hold to destroy the child
        sh("zfs", "release", "rebal-tree", f"{src.name}/data/sibling@{r2['snapshot']}")
    sh_busy_retry("zfs", "destroy", "-r", f"{src.name}/data/sibling")
    r3 = rebal_json("replicate", "tree", config=cfg)
    assert r3["outcome"] == "ok", r3
    assert any(f"{dst.name}/copy/sibling: its source" in n and "kept" in n for n in r3["notes"]), r3["notes"]
    assert snaps(f"{dst.name}/copy/sibling"), "a backup whose source is gone keeps its snapshots"

    sh_busy_retry("zfs", "rename", f"{src.name}/data/child", f"{src.name}/data/kid")
    r4 = rebal("replicate", "tree", "--json", config=cfg, check=False)
    out = json.loads(r4.stdout)
    assert r4.returncode == 0 and out["outcome"] == "warning", out
    assert any("renamed from" in w and f"zfs rename {dst.name}/copy/child {dst.name}/copy/kid" in w
               for w in out["warnings"]), out["warnings"]
    assert sh("zfs", "list", f"{dst.name}/copy/kid", check=False).returncode != 0, "not sent twice"
    sh_busy_retry("zfs", "rename", f"{dst.name}/copy/child", f"{dst.name}/copy/kid")
    r5 = rebal_json("replicate", "tree", config=cfg)
    assert r5["outcome"] == "ok", r5
    kinds = {d["source"]: d["kind"] for d in r5["datasets"]}
    # (where nothing was written since, OpenZFS lets a dataset sit the run out: unchanged, from the same base)
    assert {kinds[f"{src.name}/data/kid"], kinds[f"{src.name}/data/kid/grandchild"]} <= {"incremental", "unchanged"}, kinds
    backup_root(f"{dst.name}/copy/kid")  # the parent first, then its child on top
    backup_root(f"{dst.name}/copy/kid/grandchild")
    a, b = manifest(mountpoint(f"{src.name}/data/kid")), manifest(backup_root(f"{dst.name}/copy/kid"))
    assert a == b, {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}


def restore_path_in_children_scenario(src, dst, backup_host, tmp_path):
    """`restore --path` in a recursive job reaches into child datasets: a file in a grandchild, a
    whole child with its own child inside, each as it was at the point asked for; a path the point
    does not hold is bad input (exit 2) named as the admin gave it, never by rebal's temporary view."""
    cfg = cfg_for(tmp_path, backup_host, name="nightly", source=f"{src.name}/data", target=f"{dst.name}/copy",
                  recursive=True, retention_source={"last": 5}, retention_target={"last": 5})
    fill(src, 1)
    child = mountpoint(f"{src.name}/data/child")
    then = manifest(child)  # the expected tree, read before any job runs
    r1 = rebal_json("replicate", "nightly", config=cfg)
    assert r1["outcome"] == "ok", r1
    with open(os.path.join(child, "grandchild", "f1"), "r+b") as f:
        f.write(b"changed after the first backup")
    fill(src, 2)
    now = manifest(child)
    r2 = rebal_json("replicate", "nightly", config=cfg)
    assert r2["outcome"] == "ok", r2
    assert then[b"grandchild/f1"] != now[b"grandchild/f1"]

    one = tmp_path / "one"
    one.mkdir()
    out = rebal_json("restore", "nightly", "--at", r1["snapshot"], "--path", "child/grandchild/f1", "--to",
                     str(one), config=cfg)
    assert out["kind"] == "path" and out["point"] == r1["snapshot"], out
    assert manifest(one)[b"f1"] == then[b"grandchild/f1"]

    tree = tmp_path / "tree"
    tree.mkdir()
    rebal("restore", "nightly", "--at", r1["snapshot"], "--path", "child", "--to", str(tree), config=cfg)
    got = manifest(tree / "child")
    got.pop("__hardlink_groups__", None)
    want = dict(then)
    want.pop("__hardlink_groups__", None)
    assert got == want  # the grandchild's files too, from its own snapshot
    latest = tmp_path / "latest"
    latest.mkdir()
    rebal("restore", "nightly", "--path", "child/grandchild", "--to", str(latest), config=cfg)
    got = manifest(latest / "grandchild")
    assert got[b"f1"] == now[b"grandchild/f1"] and got[b"f2"] == now[b"grandchild/f2"]

    r = rebal("restore", "nightly", "--at", r1["snapshot"], "--path", "child/grandchild/f2", "--to", str(one),
              config=cfg, check=False)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "child/grandchild/f2" in r.stderr and "not in this restore point" in r.stderr, r.stderr
    assert "rebal-view" not in r.stderr and "/.zfs/" not in r.stderr, r.stderr
    return cfg


def held_among_many_scenario(src, dst, backup_host, tmp_path) -> dict:
    """A snapshot someone else holds on the backup, among 21 pruned at once: OpenZFS destroys a
    comma list all or none, so the list fails; rebal halves it down to the held one, which alone
    stays (named in a note), in a few commands rather than one a snapshot."""
    data, copy = f"{src.name}/data", f"{dst.name}/copy"
    keep_all = {"last": 100, "hourly": 0, "daily": 0, "weekly": 0, "monthly": 0}
    job = dict(name="bulk", source=data, target=copy, retention_source=keep_all, retention_target=keep_all)
    cfg = cfg_for(tmp_path, backup_host, **job)
    fill(src, 1)
    assert rebal_json("replicate", "bulk", config=cfg)["outcome"] == "ok"
    bulk = [f"rebal-bulk-20261101T00{i:02}00Z" for i in range(20)]  # older by name, newer than the base
    for name in bulk:
        sh("zfs", "snapshot", f"{data}@{name}")
    fill(src, 2)
    r2 = rebal_json("replicate", "bulk", config=cfg)  # sends them all, keeps them all
    assert r2["outcome"] == "ok" and set(bulk) <= set(snaps(copy)), (r2, snaps(copy))
    held = bulk[13]
    sh("zfs", "hold", "admin-keep", f"{copy}@{held}")  # an admin keeps one on the backup
    try:
        job["retention_target"] = {"last": 1, "hourly": 0, "daily": 0, "weekly": 0, "monthly": 0}
        cfg = cfg_for(tmp_path, backup_host, **job)
        fill(src, 3)
        r = rebal("--debug", "replicate", "bulk", "--json", config=cfg)
        rep = json.loads(r.stdout)
        assert rep["outcome"] == "ok", rep
        assert snaps(copy) == sorted([held, rep["snapshot"]]), snaps(copy)  # only the held one stays
        assert held not in rep["pruned_target"] and set(bulk) - {held} <= set(rep["pruned_target"]), rep
        assert any(held in n and "could not prune" in n for n in rep["notes"]), rep["notes"]
        ran = [line.split(" run: ", 1)[1] for line in r.stderr.splitlines() if " run: " in line]
        on_backup = [c for c in ran if "zfs destroy" in c and f" {copy}@" in c]
        # 22 to go, one stuck: the list, then two halves at each of about five levels
        assert 3 <= len(on_backup) <= 12, on_backup
    finally:
        sh("zfs", "release", "admin-keep", f"{copy}@{held}")
    return {"pruned": len(rep["pruned_target"]), "destroys_backup": len(on_backup)}


def bulk_prune_scenario(src, dst, backup_host, tmp_path, comma_lists):
    """Pruning many snapshots takes few commands: 21 of a job's snapshots in 4 datasets went with a
    `zfs release` per snapshot and dataset (84) and a `zfs destroy` each; now one release, and on the
    source one `zfs destroy -r data@a,b,...`, on the backup one per dataset (``comma_lists``: OpenZFS).
    zfs-fuse has no comma lists: its first list fails and the rest go one at a time, as before."""
    data = f"{src.name}/data"
    none = {"last": 1, "hourly": 0, "daily": 0, "weekly": 0, "monthly": 0}
    cfg = cfg_for(tmp_path, backup_host, name="bulk", source=data, target=f"{dst.name}/copy", recursive=True,
                  retention_source=none, retention_target=none)
    fill(src, 1)
    r1 = rebal_json("replicate", "bulk", config=cfg)
    assert r1["outcome"] == "ok", r1
    bulk = [f"rebal-bulk-20261101T00{i:02}00Z" for i in range(20)]  # older by name, newer than the base
    for name in bulk:
        sh("zfs", "snapshot", "-r", f"{data}@{name}")
    fill(src, 2)
    r = rebal("--debug", "replicate", "bulk", "--json", config=cfg)
    rep = json.loads(r.stdout)
    assert rep["outcome"] == "ok", rep
    gone = set(bulk) | {r1["snapshot"]}
    assert gone <= set(rep["pruned_source"]) and gone <= set(rep["pruned_target"]), rep
    for ds in ("", "/child", "/child/grandchild", "/sibling"):
        assert snaps(data + ds) in ([], [rep["snapshot"]]), ds  # the source keeps its base (a hold), or a bookmark
        assert snaps(f"{dst.name}/copy{ds}") == [rep["snapshot"]], ds
    ran = [line.split(" run: ", 1)[1] for line in r.stderr.splitlines() if " run: " in line]
    releases = [c for c in ran if "zfs release" in c and bulk[0] in c]  # (the cursor's move releases each old base)
    on_source = [c for c in ran if "zfs destroy" in c and f" {data}" in c and "#" not in c]
    on_backup = [c for c in ran if "zfs destroy" in c and f" {dst.name}/copy" in c]
    assert len(releases) <= 1, releases  # (none where pyzfs releases them, a library call: OpenZFS's lane)
    if comma_lists:
        assert len(on_source) == 1 and len(on_backup) == 4, (on_source, on_backup)
    else:  # the first list fails (`does not exist`), then one at a time: the count of before, plus one
        assert len(on_source) == 1 + len(gone) and len(on_backup) == 1 + 4 * len(gone), (on_source, on_backup)
    return {"pruned": len(gone), "datasets": 4, "releases": len(releases), "destroys_source": len(on_source),
            "destroys_backup": len(on_backup)}

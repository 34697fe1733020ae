"""Replication setups (issue 37) run on zfs-fuse (tests/integration) and on OpenZFS (the lane) alike:
datasets chosen by patterns and by property, a local target, two jobs on one source, hooks."""

import json
import os
import stat
from datetime import datetime, timedelta, timezone

from conftest import rebal, rebal_json
from fsenv import manifest
from replscenarios import backup_root, mountpoint, snaps
from zfsenv import sh


def write_cfg(tmp_path, blocks: list[str], extra: str = "") -> str:
    p = tmp_path / "config.toml"
    p.write_text(f'state_db = "{tmp_path / "state.db"}"\n' + extra + "\n".join(blocks))
    return p


def local_block(**job) -> str:
    """A [[replicate]] job without target_host: the target is on this host."""
    lines = ["[[replicate]]"]
    for k, v in job.items():
        lines.append(f"{k} = {json.dumps(v) if not isinstance(v, bool) else ('true' if v else 'false')}")
    return "\n".join(lines) + "\n"


def put(ds: str, name: str, size: int = 40_000, seed: int = 0) -> None:
    with open(os.path.join(mountpoint(ds), name), "wb") as f:
        f.write(os.urandom(size + seed))


def exists(ds: str) -> bool:
    return sh("zfs", "list", "-H", "-o", "name", ds, check=False).returncode == 0


def _children(ds: str) -> tuple[str, ...]:
    """The mount points of ``ds``'s child datasets, relative to its own (left out of its comparison)."""
    names = sh("zfs", "list", "-H", "-o", "name", "-r", ds).stdout.split()
    kids = [n for n in names if n.startswith(ds + "/") and "/" not in n[len(ds) + 1:]]
    return tuple(n[len(ds) + 1:] for n in kids)


def mounted(ds: str) -> bool:
    return sh("zfs", "get", "-H", "-o", "value", "mounted", ds).stdout.strip() == "yes"


def mount_chain(ds: str) -> None:
    """Mount ``ds`` and its ancestors top-down, as `zfs mount -a` orders them at boot. A dataset
    mounted before its parent (an empty parent made on the target, mounted when made, under a
    replica received unmounted) is hidden once the parent mounts over it: unmount what is under
    each ancestor first, then mount again in order."""
    parts = ds.split("/")
    for i in range(2, len(parts) + 1):
        a = "/".join(parts[:i])
        if mounted(a) or sh("zfs", "get", "-H", "-o", "value", "canmount", a).stdout.strip() != "on":
            continue
        rows = [line.split("\t") for line in sh("zfs", "list", "-H", "-r", "-o", "name,mounted", a).stdout.splitlines()]
        under = sorted((n for n, m in rows if n != a and m == "yes"), key=lambda n: n.count("/"))
        for n in reversed(under):
            sh("zfs", "unmount", n)
        sh("zfs", "mount", a)
        for n in under:
            sh("zfs", "mount", n)


def same(src_ds: str, dst_ds: str) -> None:
    """A dataset's own files (not its children's) equal on both sides."""
    mount_chain(dst_ds)
    a = manifest(mountpoint(src_ds), exclude=_children(src_ds))
    b = manifest(backup_root(dst_ds), exclude=_children(src_ds) + _children(dst_ds))
    assert a == b, {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}


def excludes_scenario(src, dst, backup_host, tmp_path, tgt=None, verify=True):
    """exclude / include patterns: the plan says what is in and out and why; what is out gets no
    snapshot and no backup; an included grandchild under an excluded child lands under an empty
    parent; a child excluded later keeps its backup, said."""
    tgt = tgt or f"{dst.name}/copy"
    d = f"{src.name}/data"
    for ds in ("data", "data/a", "data/scratch", "data/scratch/keep", "data/scratch/junk", "data/b", "data/b/cache"):
        sh("zfs", "create", f"{src.name}/{ds}")
        put(f"{src.name}/{ds}", "f", seed=len(ds))
    block = backup_host.config_block(name="ex", source=d, target=f"{tgt}", recursive=True,
                                     exclude=["*/scratch", "*/cache"], include=[f"{d}/scratch/keep"])
    cfg = write_cfg(tmp_path, [block])
    plan = rebal_json("replicate", "ex", "--dry-run", config=cfg)
    out = {x.split(" (")[0]: x for x in plan["excluded"]}
    assert set(out) == {f"{d}/scratch", f"{d}/scratch/junk", f"{d}/b/cache"}, plan["excluded"]
    assert "exclude pattern '*/scratch'" in out[f"{d}/scratch"] and f"under {d}/scratch" in out[f"{d}/scratch/junk"]
    assert f"zfs create -o readonly=off {tgt}/scratch" in plan["planned"], plan
    assert not exists(f"{tgt}"), "a dry run changes nothing"

    r1 = rebal_json("replicate", "ex", config=cfg)
    assert r1["outcome"] == "ok", r1
    assert sorted(x["source"] for x in r1["datasets"]) == [d, f"{d}/a", f"{d}/b", f"{d}/scratch/keep"]
    assert r1["placeholders"] == [f"{tgt}/scratch"]
    for left in ("scratch", "scratch/junk", "b/cache"):
        assert r1["snapshot"] not in snaps(f"{d}/{left}"), left  # not snapshot: one atomic list of the chosen
        assert not exists(f"{tgt}/{left}") or left == "scratch", left
    assert snaps(f"{tgt}/scratch") == [] and not os.listdir(backup_root(f"{tgt}/scratch"))[1:]
    for kept in ("", "/a", "/b", "/scratch/keep"):
        same(d + kept, f"{tgt}{kept}")

    # round 2: a changes, and is excluded from now on; keep changes and goes on
    put(f"{d}/a", "g")
    put(f"{d}/scratch/keep", "g")
    cfg = write_cfg(tmp_path, [block.replace('exclude = ["*/scratch", "*/cache"]', 'exclude = ["*/scratch", "*/cache", "*/a"]')])
    r2 = rebal_json("replicate", "ex", config=cfg)
    assert r2["outcome"] == "ok", r2
    kinds = {x["source"]: x["kind"] for x in r2["datasets"]}
    # (where nothing was written, not even an atime, OpenZFS lets a dataset sit the run out: unchanged)
    assert set(kinds) == {d, f"{d}/b", f"{d}/scratch/keep"} and kinds[f"{d}/scratch/keep"] == "incremental", kinds
    assert set(kinds.values()) <= {"incremental", "unchanged"}, kinds
    assert any(f"{tgt}/a: its source {d}/a is left out now" in n for n in r2["notes"]), r2["notes"]
    assert r1["snapshot"] in snaps(f"{tgt}/a"), "a backup left out keeps its snapshots"
    same(f"{d}/scratch/keep", f"{tgt}/scratch/keep")
    assert not os.path.exists(os.path.join(backup_root(f"{tgt}/a"), "g"))
    if verify:
        verified_ok(cfg, "ex", 3)
    return r1, r2


def property_scenario(src, dst, backup_host, tmp_path, tgt=None, verify=True):
    """by_property: rebal:backup=JOB on a dataset takes it and its children; false on a child leaves
    it out; the job's name on a grandchild brings that one back; another job's name is out."""
    tgt = tgt or f"{dst.name}/copy"
    p = src.name
    for ds in ("data", "data/child", "data/child/grandchild", "data/sibling", "other"):
        sh("zfs", "create", f"{p}/{ds}")
        put(f"{p}/{ds}", "f", seed=len(ds))
    sh("zfs", "set", "rebal:backup=prop", f"{p}/data")
    sh("zfs", "set", "rebal:backup=false", f"{p}/data/child")
    sh("zfs", "set", "rebal:backup=other,prop", f"{p}/data/child/grandchild")
    sh("zfs", "set", "rebal:backup=other", f"{p}/other")
    cfg = write_cfg(tmp_path, [backup_host.config_block(name="prop", source=p, target=f"{tgt}",
                                                          recursive=True, by_property=True)])
    plan = rebal_json("replicate", "prop", "--dry-run", config=cfg)
    why = {x.split(" (")[0]: x for x in plan["excluded"]}
    assert set(why) == {p, f"{p}/data/child", f"{p}/other"}, plan["excluded"]
    assert "rebal:backup is not set" in why[p] and "rebal:backup=false (set here)" in why[f"{p}/data/child"]
    assert "names other jobs" in why[f"{p}/other"]
    r = rebal_json("replicate", "prop", config=cfg)
    assert r["outcome"] == "ok", r
    assert sorted(x["source"] for x in r["datasets"]) == [f"{p}/data", f"{p}/data/child/grandchild", f"{p}/data/sibling"]
    assert sorted(r["placeholders"]) == [f"{tgt}", f"{tgt}/data/child"]
    same(f"{p}/data/child/grandchild", f"{tgt}/data/child/grandchild")
    same(f"{p}/data/sibling", f"{tgt}/data/sibling")
    assert not exists(f"{tgt}/other")
    # a second run: incremental everywhere, nothing new made
    put(f"{p}/data/child/grandchild", "g")
    r2 = rebal_json("replicate", "prop", config=cfg)
    kinds = {x["source"]: x["kind"] for x in r2["datasets"]}
    assert r2["outcome"] == "ok" and kinds[f"{p}/data/child/grandchild"] == "incremental", r2
    assert set(kinds.values()) <= {"incremental", "unchanged"} and len(kinds) == 3, r2
    assert r2["placeholders"] == []
    same(f"{p}/data/child/grandchild", f"{tgt}/data/child/grandchild")
    if verify:  # (a gated key lets no verify through: it reads the backup's files)
        verified_ok(cfg, "prop", 3)
    return r, r2


def verified_ok(cfg, job: str, datasets: int) -> dict:
    """`rebal verify` of every dataset the job chooses: OK, contents compared in each."""
    v = rebal("verify", job, "--json", "--sample", "all", config=cfg, check=False)
    out = json.loads(v.stdout)
    assert v.returncode == 0 and out["level"] == "OK", out
    if datasets > 1:  # the sample names each dataset's files as "DATASET: path"
        assert len({x.split(": ")[0] for x in out["sample"]}) == datasets, out["sample"]
    else:
        assert out["sample"], out
    return out


def hook_script(tmp_path, name: str, code: int, log) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n"
                    f'printf "%s %s %s %s %s %s\\n" "$REBAL_PHASE" "$REBAL_JOB" "$REBAL_SNAPSHOT" "$REBAL_OUTCOME" '
                    f'"$REBAL_SOURCE" "$1" >> {log}\n'
                    + (f'echo "cannot flush: database busy" >&2\nexit {code}\n' if code else "exit 0\n"))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def hooks_scenario(src, dst, tmp_path, block_for):
    """pre_command runs before the snapshot (its failure fails the run, and no snapshot is taken);
    post_command always runs with the outcome; its failure is a warning. ``block_for(**hooks)``
    makes the job's config block."""
    d = f"{src.name}/data"
    sh("zfs", "create", d)
    put(d, "f")
    log = tmp_path / "hooks.log"
    ok_pre, bad_pre = hook_script(tmp_path, "pre-ok", 0, log), hook_script(tmp_path, "pre-bad", 3, log)
    ok_post, bad_post = hook_script(tmp_path, "post-ok", 0, log), hook_script(tmp_path, "post-bad", 1, log)

    cfg = write_cfg(tmp_path, [block_for(pre_command=[bad_pre, "arg one"], post_command=[ok_post, "x"])])
    before = snaps(d)
    r = rebal("replicate", "hk", "--json", config=cfg, check=False)
    out = json.loads(r.stdout)
    assert r.returncode != 0 and out["outcome"] == "failed", out
    assert "pre_command" in out["error"] and "exit 3" in out["error"] and "database busy" in out["error"], out
    assert snaps(d) == before, "a failing pre hook takes no snapshot"
    lines = log.read_text().splitlines()
    assert lines[0] == f"pre hk   {d} arg one", lines  # one argument with a space: no shell split it
    assert lines[1] == f"post hk  failed {d} x", lines

    log.unlink()
    cfg = write_cfg(tmp_path, [block_for(pre_command=[ok_pre], post_command=[bad_post])])
    r2 = rebal("replicate", "hk", "--json", config=cfg, check=False)
    out2 = json.loads(r2.stdout)
    assert out2["outcome"] == "warning" and r2.returncode == 0, out2
    assert any("post_command" in w and "exit 1" in w for w in out2["warnings"]), out2
    pre, post = log.read_text().splitlines()
    assert pre.startswith("pre hk  ") and post == f"post hk {out2['snapshot']} ok {d} ", (pre, post)
    same(d, f"{dst.name}/copy")
    runs = rebal_json("runs", "--job", "hk", config=cfg)["runs"]
    assert [x["outcome"] for x in runs] == ["warning", "failed"]


def two_jobs_one_failing_scenario(src, dst, backup_host, tmp_path) -> dict:
    """Two jobs on one source: an off-site job over ssh and a local one on the same source: separate snapshots and cursors.
    The local one fails for a week (its target diverged) while the off-site one runs daily and
    prunes by its retention: the local job's base survives, and once fixed it continues
    incrementally from it."""
    from rebal.config import load
    from rebal.replicate.job import connect, replicator

    d = f"{src.name}/data"
    sh("zfs", "create", d)
    put(d, "f")
    keep2 = "[replicate.retention_target]\nlast = 1\nhourly = 0\ndaily = 2\nweekly = 0\nmonthly = 0\n"
    cfg = load(str(write_cfg(tmp_path, [
        backup_host.config_block(name="offsite", source=d, target=f"{dst.name}/off") + keep2,
        local_block(name="usb", source=d, target=f"{dst.name}/usb") + keep2])))
    day0 = datetime(2026, 11, 1, 2, 30, tzinfo=timezone.utc)

    def run(job: str, day: int):
        j = cfg.job(job)
        with connect(j) as ssh:
            return replicator(j, ssh, clock=lambda: day0 + timedelta(days=day)).run()

    assert {x.kind for x in run("usb", 0).datasets} == {"full"}
    assert {x.kind for x in run("offsite", 0).datasets} == {"full"}
    usb_base = snaps(f"{dst.name}/usb")[-1]
    sh("zfs", "snapshot", f"{dst.name}/usb@someone-elses")  # the usb target diverges: its runs fail
    for day in range(1, 8):
        put(d, f"day{day}")
        rep = run("offsite", day)
        assert [x.kind for x in rep.datasets] == ["incremental"], rep
        bad = run("usb", day)
        assert [x.kind for x in bad.datasets] == ["failed"] and "diverged" in bad.datasets[0].error, bad
    marks = sh("zfs", "list", "-H", "-d", "1", "-t", "bookmark", "-o", "name", d, check=False).stdout.split()
    cursor = "bookmark" if f"{d}#{usb_base}" in marks else "hold" if usb_base in snaps(d) else None
    assert cursor, "the failing job's base stays on the source (held, or kept as its cursor)"
    assert len([s for s in snaps(f"{dst.name}/off") if s.startswith("rebal-offsite-")]) == 2  # daily 2 (the newest is also last 1)
    # a failing dataset keeps everything from its base up, on the source too, until an admin decides
    # (issue 64): the week's snapshots hold states of the data the backup never got
    kept = [s for s in snaps(d) if s.startswith("rebal-usb-") and s != usb_base]
    assert len(kept) == 7, kept
    sh("zfs", "destroy", f"{dst.name}/usb@someone-elses")
    rep = run("usb", 8)
    assert [(x.kind, x.base) for x in rep.datasets] == [("incremental", usb_base)], rep
    # once it lands again, the policy prunes them (daily 2 on the backup; the source's own policy here)
    assert [s for s in snaps(f"{dst.name}/usb") if s.startswith("rebal-usb-")][-1] == rep.snapshot
    same(d, f"{dst.name}/usb")
    same(d, f"{dst.name}/off")
    return {"cursor": cursor, "base": usb_base}

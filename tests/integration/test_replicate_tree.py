"""A recursive job of 50 datasets sent in parallel on zfs-fuse (issue 38): one dataset whose target
diverged fails alone, the others land, and the run says which failed."""

import json

import pytest
from conftest import rebal, rebal_json
from replscenarios import cfg_for, snaps
from setupscenarios import same
from treescenarios import make_wide_tree, touch
from zfsenv import sh

pytestmark = pytest.mark.zfs


def most_at_once(datasets: list[dict]) -> int:
    """The most streams under way at one instant."""
    edges = sorted([(d["started"], 1) for d in datasets] + [(d["started"] + d["seconds"], -1) for d in datasets],
                   key=lambda e: (e[0], e[1]))
    most = now = 0
    for _t, step in edges:
        now += step
        most = max(most, now)
    return most


def test_fifty_datasets_in_parallel_one_fails_alone(make_pool, backup_host, tmp_path):
    src, dst = make_pool([[]], size="512M"), make_pool([[]], size="512M")
    kids = make_wide_tree(src.name, 50)
    cfg = cfg_for(tmp_path, backup_host, name="wide", source=f"{src.name}/tree", target=f"{dst.name}/t",
                  recursive=True, parallel=6)
    r1 = rebal_json("replicate", "wide", config=cfg)
    assert r1["outcome"] == "ok" and len(r1["datasets"]) == 51 and {d["kind"] for d in r1["datasets"]} == {"full"}, r1
    # parallel=6 means streams at once: the most that ran together, from when each began and ended
    assert 2 <= most_at_once(r1["datasets"]) <= 6, [(d["started"], d["seconds"]) for d in r1["datasets"]]
    bad = kids[7]
    sh("zfs", "snapshot", f"{dst.name}/t/d007@someone-elses")  # this target diverges
    for k in kids[::5]:
        touch(k)
    r = rebal("replicate", "wide", "--json", config=cfg, check=False)
    r2 = json.loads(r.stdout)
    assert r.returncode == 1 and r2["outcome"] == "failed", r2
    kinds = {d["source"]: d["kind"] for d in r2["datasets"]}
    assert kinds.pop(bad) == "failed" and set(kinds.values()) == {"incremental"} and len(kinds) == 50, kinds
    bad_t = [d["target"] for d in r2["datasets"] if d["source"] == bad][0]
    assert r2["error"].startswith(f"{bad}: {bad_t} has diverged: it holds snapshots newer"), r2["error"]
    assert "d0" not in r2["error"].split(":", 1)[1].replace(bad_t, "").replace(bad, ""), r2["error"]  # no other dataset
    for k in kids[::5]:
        if k != bad:
            same(k, f"{dst.name}/t/{k.rsplit('/', 1)[1]}")
    assert r1["snapshot"] in snaps(bad), "the failed dataset's base stays"
    sh("zfs", "destroy", f"{dst.name}/t/d007@someone-elses")
    r3 = rebal_json("replicate", "wide", config=cfg)
    assert r3["outcome"] == "ok", r3
    assert {d["source"]: (d["kind"], d["base"]) for d in r3["datasets"]}[bad] == ("incremental", r1["snapshot"])
    same(bad, f"{dst.name}/t/d007")


def test_the_progress_of_parallel_streams_is_their_sum(make_pool, backup_host, tmp_path):
    """What the bar shows for a parallel run: the bytes of every stream done and under way, summed,
    never going back, ending at what all the streams carried; the total known once each stream's
    size was estimated (zfs send -nP where the ZFS has it), never below what was sent."""
    from rebal.config import load
    from rebal.replicate.job import connect, replicator

    src, dst = make_pool([[]], size="512M"), make_pool([[]], size="512M")
    kids = make_wide_tree(src.name, 12)
    for k in kids:
        touch(k, name="big", size=400_000)
    cfg = load(str(cfg_for(tmp_path, backup_host, name="wide", source=f"{src.name}/tree", target=f"{dst.name}/t",
                           recursive=True, parallel=4)))
    seen: list[tuple[int, int | None]] = []
    j = cfg.job("wide")
    with connect(j) as ssh:
        rep = replicator(j, ssh, progress=lambda done, total: seen.append((done, total))).run()
    assert {d.kind for d in rep.datasets} == {"full"}, rep
    done = [d for d, _t in seen]
    assert len(seen) > len(kids) and done == sorted(done), seen[:20]  # summed, never going back
    assert done[-1] == sum(d.bytes for d in rep.datasets) > 12 * 400_000, (done[-1], rep.datasets)
    assert all(t is None or t >= d for d, t in seen), [x for x in seen if x[1] is not None and x[1] < x[0]][:5]


def test_a_dataset_named_with_a_space_is_left_out_and_said_not_the_whole_job(make_pool, backup_host, tmp_path):
    """Issue 69 (3): ZFS takes `pool/docs/my files`; a recursive job picked it up, its dry run said
    nothing, and the real run failed the whole job ("bad dataset name"). The dataset (and what is
    below it) is left out, named as a warning in the dry run and the run alike, and the rest is sent."""
    src, dst = make_pool([[]], size="128M"), make_pool([[]], size="128M")
    for ds in ("docs", "docs/ok", "docs/my files", "docs/my files/kid"):
        sh("zfs", "create", f"{src.name}/{ds}")
    cfg = cfg_for(tmp_path, backup_host, name="d", source=f"{src.name}/docs", target=f"{dst.name}/docs",
                  recursive=True)
    dry = json.loads(rebal("replicate", "d", "--dry-run", "--json", config=cfg).stdout)
    said = " ".join(dry.get("warnings", []))
    assert f"{src.name}/docs/my files is not backed up" in said and "zfs rename" in said, dry
    run = rebal_json("replicate", "d", config=cfg)
    assert run["outcome"] == "warning", run
    assert sorted(d["source"] for d in run["datasets"]) == [f"{src.name}/docs", f"{src.name}/docs/ok"], run
    assert any(f"{src.name}/docs/my files/kid is not backed up" in w for w in run["warnings"]), run["warnings"]
    assert sh("zfs", "list", "-H", "-o", "name", f"{dst.name}/docs/ok").returncode == 0


def test_the_dry_run_says_what_the_run_does_with_the_parents(make_pool, backup_host, tmp_path):
    """Issue 69 (4): the dry run of a first run said the top dataset would be "made on the target as
    an empty parent ... its own source is left out" while the run sent it in full. The dry run plans
    from the same choice: a parent the run sends is received, not made; a left-out one is made."""
    src, dst = make_pool([[]], size="128M"), make_pool([[]], size="128M")
    for ds in ("top", "top/a", "top/a/b"):
        sh("zfs", "create", f"{src.name}/{ds}")
    cfg = cfg_for(tmp_path, backup_host, name="t", source=f"{src.name}/top", target=f"{dst.name}/top",
                  recursive=True)
    dry = json.loads(rebal("replicate", "t", "--dry-run", "--json", config=cfg).stdout)
    assert not [n for n in dry["notes"] if "empty parent" in n], dry["notes"]
    assert not [p for p in dry["planned"] if p.startswith("zfs create")], dry["planned"]
    run = rebal_json("replicate", "t", config=cfg)
    assert {d["source"]: d["kind"] for d in run["datasets"]} == {f"{src.name}/top{r}": "full" for r in ("", "/a", "/a/b")}
    # a job that leaves its own source out: the parent is made, in the dry run and the run alike
    (tmp_path / "two").mkdir()
    cfg2 = cfg_for(tmp_path / "two", backup_host, name="u", source=f"{src.name}/top", target=f"{dst.name}/u",
                   recursive=True, exclude=[f"{src.name}/top"], include=[f"{src.name}/top/a"])
    dry = json.loads(rebal("replicate", "u", "--dry-run", "--json", config=cfg2).stdout)
    made = [n for n in dry["notes"] if "empty parent" in n]
    run = rebal_json("replicate", "u", config=cfg2)
    assert made and made == [n for n in run["notes"] if "empty parent" in n], (made, run["notes"])

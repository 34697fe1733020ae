"""Which datasets a job takes (replicate/select.py), and the ssh options a job may pass on."""

import pytest

from rebal.names import pattern_problem, ssh_option_problem
from rebal.gate.check import Policy, Refused, check
from rebal.replicate.select import decide


def chosen(rows, job="j", **kw):
    return {c.dataset: (c.included, c.why) for c in decide(rows, job, **kw)}


def test_patterns_exclude_a_subtree_and_include_brings_one_back():
    rows = [(n, "-") for n in ("t/d", "t/d/scratch", "t/d/scratch/keep", "t/d/scratch/keep/deep", "t/d/scratch/junk",
                               "t/d/a", "t/d/a/cache", "t/d/cachet")]
    c = chosen(rows, exclude=["*/scratch", "*/cache"], include=["t/d/scratch/keep"])
    assert c["t/d"] == (True, "the source") and c["t/d/a"] == (True, "a child of the source")
    assert c["t/d/scratch"] == (False, "exclude pattern '*/scratch'")
    assert c["t/d/scratch/junk"] == (False, "under t/d/scratch, excluded by pattern '*/scratch'")
    assert c["t/d/scratch/keep"] == (True, "include pattern 't/d/scratch/keep'")
    assert c["t/d/scratch/keep/deep"][0] is True  # under an included one: in
    assert c["t/d/a/cache"][0] is False and c["t/d/cachet"][0] is True  # a pattern matches the whole name


def test_property_selection_inherits_and_false_cuts():
    rows = [("t", "-"), ("t/home", "j"), ("t/home/tmp", "false"), ("t/home/tmp/keep", "other,j"),
            ("t/home/u", "j"), ("t/vm", "other")]
    c = chosen(rows, by_property=True)
    assert c["t"] == (False, "rebal:backup is not set")
    assert c["t/home"] == (True, "rebal:backup=j (set here)")
    assert c["t/home/u"] == (True, "rebal:backup=j (inherited)")
    assert c["t/home/tmp"] == (False, "rebal:backup=false (set here)")
    assert c["t/home/tmp/keep"][0] is True
    assert c["t/vm"] == (False, "rebal:backup=other (set here) names other jobs")


def test_patterns_apply_before_the_property():
    rows = [("t/home", "j"), ("t/home/cache", "j")]
    c = chosen(rows, by_property=True, exclude=["*/cache"])
    assert c == {"t/home": (True, "rebal:backup=j (set here)"), "t/home/cache": (False, "exclude pattern '*/cache'")}


def test_the_choices_are_read_from_one_zfs_list():
    from rebal.process.command import Result
    from rebal.zfs.host import ZfsHost

    asked = []

    def zfs(argv, **kw):
        asked.append(argv)
        return Result(tuple(argv), 0, "tank/a\tj\ntank/a/b\t-\n\n", "")

    assert ZfsHost.here(zfs).backup_choices("tank/a", True) == [("tank/a", "j"), ("tank/a/b", "-")]
    assert asked == [["zfs", "list", "-H", "-r", "-o", "name,rebal:backup", "-t", "filesystem,volume", "tank/a"]]


@pytest.mark.parametrize("opt,ok", [
    ("Ciphers=aes128-gcm@openssh.com", True), ("ClearAllForwardings=yes", True), ("ControlMaster=no", True),
    ("ProxyJump=admin@jump.lan:2222", True), ("StrictHostKeyChecking=no", False), ("ProxyCommand=nc x 22", False),
    ("LocalCommand=touch /x", False), ("UserKnownHostsFile=/dev/null", False), ("Ciphers=a b", False),
    ("Ciphers", False), ("ControlMaster=autoask", False), ("ProxyJump=-oProxyCommand=x", False),
])
def test_ssh_options(opt, ok):
    assert (ssh_option_problem(opt) is None) is ok, ssh_option_problem(opt)


@pytest.mark.parametrize("p,ok", [("tank/*/cache", True), ("*", True), ("tank/[ab]*", True), ("tank/x y", False),
                                  ("tank/$(x)", False), ("", False)])
def test_patterns(p, ok):
    assert (pattern_problem(p) is None) is ok


def test_the_gate_lets_a_job_make_an_empty_parent_under_its_root_only():
    pol = Policy("receive", "backup/t")
    assert check(pol, "zfs create -o readonly=off backup/t/scratch") == [["zfs", "create", "-o", "readonly=off", "backup/t/scratch"]]
    for bad in ("zfs create backup/t/x", "zfs create -o readonly=off backup/other", "zfs create -V 1G backup/t/v",
                "zfs create -o mountpoint=/etc backup/t/x"):
        with pytest.raises(Refused):
            check(pol, bad)


def test_the_choices_and_what_was_written_since_the_bases_come_in_one_listing():
    """A run with a record asks the selection and `written@`/`written#` of its recorded base names in
    one `zfs list` (real OpenZFS 2.4.4 output: "-" where a dataset has no such snapshot or
    bookmark); the send gate of a pull job lets it through, and columns it did not ask for are no answer."""
    import shlex
    from pathlib import Path

    from rebal.process.command import Result
    from rebal.zfs.host import ZfsHost

    out = (Path(__file__).parents[1] / "fixtures/openzfs/choices-written_zfs-list-Hp-r-t-filesystem-written.txt").read_text()
    s = "rebal-j-20261207T120000Z"
    props = [f"written@{s}", f"written#{s}"]
    asked = []

    def zfs(argv, **kw):
        asked.append(argv)
        return Result(tuple(argv), 0, out, "")

    rows, written = ZfsHost.here(zfs).choices_written("tq/a", True, props)
    assert rows == [("tq/a", "j"), ("tq/a/b", "j"), ("tq/a/c", "off")]
    assert written == {("tq/a", f"written@{s}"): 0, ("tq/a/b", f"written#{s}"): 145408, ("tq/a/c", f"written@{s}"): 0}
    assert asked == [["zfs", "list", "-Hp", "-r", "-t", "filesystem,volume", "-o",
                      f"name,rebal:backup,written@{s},written#{s}", "tq/a"]]
    assert check(Policy("send", "tq/a"), shlex.join(asked[0])) == [asked[0]]
    with pytest.raises(Refused):
        check(Policy("send", "tq/a"), shlex.join(asked[0][:-1] + ["tq/other"]))
    assert ZfsHost.here(zfs).choices_written("tq/a", True, props[:1]) is None  # three columns for two asked
    assert ZfsHost.here(lambda argv, **kw: Result(tuple(argv), 1, "", "bad property list")).choices_written(
        "tq/a", True, props) is None

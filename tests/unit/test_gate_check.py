"""rebal gate's check (pure): what rebal sends is allowed, everything else refused, and a fuzz of
generated command lines (valid ones mutated) never lets a refusal through nor raises anything but
Refused. The end-to-end tests through a real sshd are in tests/integration/test_gate.py."""

import random
import subprocess
import shlex

import pytest

from rebal.gate.check import INFO, Policy, Refused, check

RECV = Policy("receive", "bk/copy", mountpoint="/bk/copy")
SEND = Policy("send", "tank/data")
S1, S2 = "rebal-j-20261101T000000Z", "rebal-j-20261102T000000Z"

# what rebal itself sends (taken from the command builders' output)
VALID_RECV = [
    INFO,
    "zfs receive",
    "zfs receive -s -u bk/copy/data",
    "zfs receive -s -u bk/copy",
    "zfs receive -A bk/copy/data/child",
    "mbuffer -q -m 128M | zstd -dc | zfs receive -s -u bk/copy/data",
    "zfs get -Hp -d 1 -o name,property,value guid,createtxg bk/copy/data",
    "zfs get -Hp -r -o name,property,value guid,createtxg bk/copy/data",
    "zfs get -H -o value receive_resume_token bk/copy/data",
    "zfs set readonly=on bk/copy/data",
    f"zfs snapshot bk/copy@{S1}",
    "zfs list -H -o name,mountpoint -t filesystem -r bk/copy",
    "rsync --server -lHogtpAXre.iLsfxCIvu --delete-delay --stats --partial-dir .rebal-partial --numeric-ids --mkpath . /bk/copy/x/",
    "rsync --server -lHogtpAXre.iLsfxCIvu --bwlimit=4096 --delete-delay --stats --numeric-ids --inplace --mkpath . /bk/copy/x\\ y/",
]
VALID_SEND = [
    INFO,
    "zfs send",
    f"zfs snapshot -r tank/data@{S2}",
    f"zfs send -c -L -e tank/data@{S1}",
    f"zfs send -c -L -e -I @{S1} tank/data/child@{S2} | zstd -c -T0 -3 | mbuffer -q -m 128M",
    f"zfs send -c -L -e -i 'tank/data#{S1}' tank/data@{S2}",
    f"zfs send -nP -c -I @{S1} tank/data@{S2}",
    "zfs send -t 1-10a4f3e1d6-f0-789c636064000310a500c4ec50360710e72765a5269730300 -nvP",
    "zfs send -t 1-10a4f3e1d6-f0-789c636064000310a500c4ec50360710e72765a5269730300",
    f"zfs hold rebal-j tank/data@{S2}",
    f"zfs release rebal-j tank/data/child@{S1}",
    f"zfs bookmark tank/data@{S2} 'tank/data#{S2}'",
    f"zfs destroy 'tank/data#{S1}'",
    f"zfs destroy -r tank/data@{S1}",
    f"zfs destroy tank/data/child@{S1},{S2}",
    "zfs get -Hp -o value referenced tank/data@" + S1,
    "zfs list -H -r -o name -t filesystem,volume tank/data",
]


@pytest.mark.parametrize("line", VALID_RECV)
def test_what_a_push_sends_is_allowed(line):
    assert check(RECV, line)


@pytest.mark.parametrize("line", VALID_SEND)
def test_what_a_pull_sends_is_allowed(line):
    assert check(SEND, line)


@pytest.mark.parametrize("policy,line", [
    (RECV, "zfs destroy -r bk/copy"),
    (RECV, "zfs receive -F bk/copy/data"),
    (RECV, "zfs receive -s -u bk/copyx"),  # a name that merely starts like the root
    (RECV, "zfs receive -s -u bk/copy/../other"),
    (RECV, "zfs receive -o mountpoint=/etc bk/copy/data"),
    (RECV, "zfs receive -d bk/copy"),
    (RECV, "zfs get all"),
    (RECV, "zfs set readonly=off bk/copy"),
    (RECV, "zfs set mountpoint=/etc bk/copy"),
    (RECV, "zstd -dc | sh"),
    (RECV, "zfs receive bk/copy | zstd -dc"),
    (RECV, "zstd -c | zfs receive bk/copy"),
    (RECV, "rsync --server --sender -logDtpre.iLsfxCIvu . /bk/copy/"),
    (RECV, "rsync --server -slogDtpre.iLsfxCIvu ."),
    (RECV, "rsync --server -logDtpre.iLsfxCIvu --log-file=/etc/x . /bk/copy/"),
    (RECV, "rsync --server -logDtpre.iLsfxCIvu --partial-dir /tmp . /bk/copy/"),
    (RECV, "rsync --server -logDtpre.iLsfxCIvu . /bk/copy/../etc"),
    (RECV, "rsync --server -logDtpre.iLsfxCIvu . /bk/copyx/"),
    (SEND, "zfs destroy tank/data"),
    (SEND, "zfs destroy -r tank/data@keep"),
    (SEND, f"zfs destroy -r tank/data@{S1},keep"),
    (SEND, "zfs send -R tank/data@x"),
    (SEND, "zfs send tank/other@x"),
    (SEND, "zfs send -i tank/other@x tank/data@y"),
    (SEND, "zfs receive tank/data"),
    (SEND, "zfs hold keep tank/data@x"),
    (SEND, "zfs send tank/data@x | zstd -dc"),
    (SEND, "zfs snapshot tank@x"),
    (SEND, "zfs send -t 'x y' -nvP"),
    # attacker: a device node or a special file made on the backup host (rsync -D)
    (RECV, "rsync --server -lHogDtpAXre.iLsfxCIvu --delete-delay . /bk/copy/x/"),
    (RECV, "rsync --server -logDtpre.iLsfxCIvu . /bk/copy/"),
    # attacker: snapshots that are not rebal's own (a flood of any name), holds on the admin's own
    (SEND, "zfs snapshot -r tank/data@ANY"),
    (RECV, "zfs snapshot bk/copy@mine"),
    (SEND, "zfs hold rebal-j tank/data@admins-keep"),
    (SEND, f"zfs send -w -t {'1-' + 'a' * 20}"),
])
def test_refused(policy, line):
    with pytest.raises(Refused):
        check(policy, line)


def test_rollback_only_with_allow_rollback():
    p = Policy("receive", "bk/copy", allow_rollback=True)
    assert check(p, "zfs receive -s -F bk/copy/data")


NASTY = [";", "$(id)", "`id`", "|", "||", "&&", "&", ">", ">>", "<", "'", '"', "\\", "\x00", "\n", "\t", " -F",
         " -r", "..", "/", "é", "☃", "\u202e", "a" * 300, "-", "--", "#", "@", ",", "*", "?", "~", "{a,b}",
         "/../", "bk/copyx", "tank/data2", "%", "=", " --sender", " -s", "$HOME", "!", " destroy"]
SUBS = ["destroy", "rollback", "rename", "receive", "send", "set", "inherit", "allow", "upgrade", "promote",
        "clone", "snapshot", "hold", "release", "bookmark", "get", "list", "mount", "unmount", "program"]


def mutate(rng: random.Random, line: str) -> str:
    words = line.split(" ")
    k = rng.randrange(7)
    if k == 0:  # insert something nasty inside or between words
        pos = rng.randrange(len(line) + 1)
        return line[:pos] + rng.choice(NASTY) + line[pos:]
    if k == 1 and len(words) > 1:
        del words[rng.randrange(len(words))]
    elif k == 2:
        i = rng.randrange(len(words))
        words.insert(i, words[i])
    elif k == 3 and len(words) > 2:
        i, j = rng.sample(range(len(words)), 2)
        words[i], words[j] = words[j], words[i]
    elif k == 4 and len(words) > 1 and words[0] == "zfs":
        words[1] = rng.choice(SUBS)
    elif k == 5:
        i = rng.randrange(len(words))
        words[i] = shlex.quote(words[i] + rng.choice(NASTY))
    else:
        i = rng.randrange(len(words))
        words[i] = words[i].replace("bk/copy", rng.choice(["bk", "bk/copyx", "bk/other", "tank/data"])).replace(
            "tank/data", rng.choice(["tank", "tank/datax", "bk/copy", "tank/data/../x"]))
    return " ".join(words)


def independent_ok(policy: Policy, stages: list[list[str]]) -> str | None:
    """Re-check an allowed command line by other means than the gate's own code: None if it is
    harmless, else what is wrong."""
    root = policy.root
    for stage in stages:
        for w in stage:
            if any(c in w for c in ";&$`()<>\n\x00") or not w.isascii():
                return f"shell syntax or non-ASCII in {w!r}"
    if stages == [[INFO]]:
        return None
    main = stages[-1] if policy.mode == "receive" else stages[0]
    others = stages[:-1] if policy.mode == "receive" else stages[1:]
    for f in others:
        if f[0] not in ("zstd", "mbuffer"):
            return f"a pipe into {f[0]}"
    if main[0] == "rsync":
        if policy.mode != "receive" or "--sender" in main:
            return "rsync that reads"
        dest = main[-1]
        return None if dest.startswith(policy.mountpoint) and ".." not in dest else f"rsync to {dest}"
    if main[0] != "zfs":
        return f"runs {main[0]}"
    sub = main[1] if len(main) > 1 else ""
    allowed = {"receive": {"receive", "recv", "get", "list", "holds", "set", "snapshot"},
               "send": {"send", "get", "list", "holds", "snapshot", "hold", "release", "bookmark", "destroy"}}
    if sub not in allowed[policy.mode] and not (len(main) == 1):
        return f"zfs {sub}"
    names = [w for w in main[2:] if "/" in w and not w.startswith("-")]
    for n in names:
        ds = n.split("@")[0].split("#")[0]
        if not (ds == root or ds.startswith(root + "/")) or ".." in ds.split("/"):
            return f"{n} outside {root}"
    if sub in ("receive", "recv") and any(w.startswith("-") and "F" in w for w in main) and not policy.allow_rollback:
        return "receive -F"
    if sub == "set" and main[2:3] != ["readonly=on"]:
        return "set other than readonly=on"
    if sub == "destroy":
        target = [w for w in main[2:] if not w.startswith("-")]
        if len(target) != 1 or ("@" not in target[0] and "#" not in target[0]):
            return "destroy of a dataset"
        parts = target[0].replace("#", "@").split("@", 1)[1].split(",")
        if not all(p.startswith("rebal-") for p in parts):
            return "destroy of a snapshot rebal did not make"
    return None


def test_fuzz_no_refusal_leaks_and_no_traceback():
    rng = random.Random(20261123)
    tried = allowed = refused = 0
    for policy, seeds in ((RECV, VALID_RECV), (SEND, VALID_SEND)):
        for _ in range(1500):
            line = rng.choice(seeds)
            for _ in range(rng.randint(1, 3)):
                line = mutate(rng, line)
            tried += 1
            try:
                stages = check(policy, line)
            except Refused as e:
                refused += 1
                assert str(e) and "\n" not in str(e)
                continue
            allowed += 1
            problem = independent_ok(policy, stages)
            assert problem is None, (line, stages, problem)
    assert tried >= 200 and refused > 1000 and allowed > 50, (tried, allowed, refused)


def _token_gate(tmp_path, command: str, root: str, guid: int) -> "subprocess.CompletedProcess":
    """`rebal gate --send-from ROOT` with SSH_ORIGINAL_COMMAND=command, where zfs is a stand-in that
    replays real OpenZFS 2.4.4 output of `zfs send -nvP -t` (tests/fixtures/openzfs; toname =
    tank/src@s1, toguid = 0x3caee52f04c2c9d6), answers `zfs get guid` with ``guid``, and streams
    STREAM for any other send."""
    import os
    import subprocess
    import sys

    from conftest import fixture_text

    fake = tmp_path / "zfs"
    (tmp_path / "contents").write_text(fixture_text("recv-resume_zfs-send-t-nvP.txt"))
    fake.write_text("#!/bin/sh\n"
                    f'case " $* " in *" -nvP "*) cat {tmp_path / "contents"}; exit 0;; esac\n'
                    f'case " $* " in *" guid "*) echo {guid}; exit 0;; esac\n'
                    "echo STREAM; exit 0\n")
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}", SSH_ORIGINAL_COMMAND=command)
    return subprocess.run([sys.executable, "-m", "rebal", "gate", "--send-from", root, "--log", str(tmp_path / "l")],
                          capture_output=True, text=True, env=env)


TOGUID = 0x3caee52f04c2c9d6


def test_a_resume_token_is_allowed_only_for_a_snapshot_under_the_root(tmp_path):
    """A token is an opaque blob naming what it sends: the gate asks zfs (dry run) and refuses one that
    names a dataset outside its root. zfs-fuse has no resume tokens (see _token_gate)."""
    ok = _token_gate(tmp_path, f"zfs send -t {TOKEN_OK}", "tank/src", TOGUID)
    assert ok.returncode == 0 and ok.stdout.strip() == "STREAM", (ok.stdout, ok.stderr)
    bad = _token_gate(tmp_path, f"zfs send -t {TOKEN_OK}", "tank/other", TOGUID)
    assert bad.returncode == 2 and "tank/src is outside tank/other" in bad.stderr and "STREAM" not in bad.stdout, bad.stderr


@pytest.mark.parametrize("command", ["zfs send -e -t {t}", "zfs send -v -t {t}", "zfs send -t{t}", "zfs send -nP -t {t}"])
def test_a_token_behind_a_flag_is_checked_all_the_same(tmp_path, command):
    """Attacker: a flag before -t (or the token in the same word) once skipped the check entirely."""
    bad = _token_gate(tmp_path, command.format(t=TOKEN_OK), "tank/other", TOGUID)
    assert bad.returncode == 2 and "STREAM" not in bad.stdout, (command, bad.stdout, bad.stderr)


def test_a_token_whose_guid_is_another_snapshots_is_refused(tmp_path):
    """Attacker: libzfs sends the snapshot a token's toguid names, found from toname's dataset up to
    the pool: a token with a toname under the root and the guid of a snapshot outside it would send
    that one. The gate asks the guid of toname and refuses a token that does not carry it."""
    bad = _token_gate(tmp_path, f"zfs send -t {TOKEN_OK}", "tank/src", TOGUID + 1)
    assert bad.returncode == 2 and "another snapshot's guid" in bad.stderr and "STREAM" not in bad.stdout, bad.stderr


TOKEN_OK = "1-10a4f3e1d6-f0-789c636064000310a500c4ec50360710e72765a5269730300"


def test_receive_may_set_readonly_on_and_nothing_else():
    from rebal.gate.check import Policy, Refused, check

    pol = Policy("receive", "backup/t")
    assert check(pol, "zfs receive -s -u -o readonly=on backup/t/new")[0][-3:] == ["-o", "readonly=on", "backup/t/new"]
    for bad in ("zfs receive -o mountpoint=/etc backup/t/x", "zfs receive -o readonly=on -o canmount=on backup/t/x",
                "zfs receive -A -o readonly=on backup/t/x"):
        with pytest.raises(Refused):
            check(pol, bad)


def test_a_pull_job_may_ask_what_was_written_since_its_bases():
    from rebal.gate.check import Policy, check
    from rebal.process.command import Result
    from rebal.replicate.policy import Snap
    from rebal.replicate.unchanged import props_of
    from rebal.zfs.host import ZfsHost

    def query(source, recursive, bases):  # the command line the replicator's host runs for it
        asked = []
        ZfsHost.here(lambda argv, **kw: asked.append(argv) or Result(tuple(argv), 0, "", "")).written_since(
            source, recursive, props_of(bases))
        return asked[0]

    argv = query("tank/data", True, {"tank/data": Snap("rebal-j-20260101T000000Z", 1, 1, bookmark=True),
                                     "tank/data/a": Snap("rebal-j-20260102T000000Z", 2, 2)})
    assert check(Policy("send", "tank/data"), shlex.join(argv)) == [argv]
    with pytest.raises(Refused):
        check(Policy("send", "tank/data"), shlex.join(query("tank/other", True, {"x": Snap("s", 1, 1)})))
    # the pool synced first (a write a second old counts in written@ only once synced): that pool only
    assert check(Policy("send", "tank/data"), "zpool sync tank") == [["zpool", "sync", "tank"]]
    for bad in ("zpool sync", "zpool sync other", "zpool sync tank other", "zpool scrub tank", "zpool sync -f tank"):
        with pytest.raises(Refused):
            check(Policy("send", "tank/data"), bad)
    with pytest.raises(Refused):
        check(RECV, "zpool sync bk")  # a receiving key has no use for it


def test_a_refusal_is_logged_somewhere_without_syslog_or_log(tmp_path, monkeypatch):
    """Issue 63: with no /dev/log and no --log, a refusal was logged nowhere on the gated host."""
    from rebal.gate import serve as gate_serve

    real_exists = gate_serve.os.path.exists
    monkeypatch.setattr(gate_serve.os.path, "exists", lambda p: False if p == "/dev/log" else real_exists(p))
    monkeypatch.setattr(gate_serve, "FALLBACK_LOG", str(tmp_path / "log" / "gate.log"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    for h in list(gate_serve.log.handlers):
        gate_serve.log.removeHandler(h)
    try:
        assert gate_serve.serve(Policy("receive", "bk/copy"), "zfs destroy -r bk/copy") == 2
    finally:
        for h in list(gate_serve.log.handlers):
            h.close()
            gate_serve.log.removeHandler(h)
    where = gate_serve._fallback_log()
    text = open(where).read()
    assert "refused" in text and "zfs destroy -r bk/copy" in text, text


# -- a property-based fuzz (hypothesis): lines built from the words rebal sends and an attacker's ----

from hypothesis import example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_NAMES = ["bk/copy", "bk/copy/data", "bk/copyx", "bk", "bk/other", "tank/data", "tank/data/c", "tank", "tank/datax",
          "bk/copy/../x", "tank/data/../../etc", "/etc", "bk/copy/data@" + S1, "tank/data@" + S2, "tank/data@keep",
          "tank/data#" + S1, "bk/copy@x", "tank/data@" + S1 + ",keep", "/bk/copy/x/", "/bk/copy/../../root/.ssh",
          "/bk/copyx/", "/etc/", "."]
_WORDS = ["zfs", "zpool", "rsync", "sh", "zstd", "mbuffer", "receive", "recv", "send", "get", "list", "set", "destroy",
          "rollback", "snapshot", "hold", "release", "bookmark", "allow", "-F", "-r", "-R", "-d", "-e", "-t", "-o",
          "-x", "-i", "-I", "-s", "-u", "-v", "-nvP", "-H", "-p", "-A", "--server", "--sender",
          "-logDtpre.iLsfxCIvu", "-lHogtpAXre.iLsfxCIvu", "-slogtpre.iLsfxCIvu", "--delete-delay", "--mkpath",
          "readonly=on", "mountpoint=/etc", "all", "guid,createtxg", "rebal-j", "1-abc", "|", "-dc", "-c", "-q", "-m",
          "128M", ";", "$(id)", "`id`", "&&", ">", "'", '"', "\\"]


@st.composite
def _lines(draw):
    policy = draw(st.sampled_from([RECV, SEND]))
    if draw(st.booleans()):  # words strung together
        return policy, " ".join(draw(st.lists(st.sampled_from(_WORDS + _NAMES), min_size=1, max_size=9)))
    words = shlex.split(draw(st.sampled_from(VALID_RECV if policy is RECV else VALID_SEND)))  # a line rebal sends...
    for _ in range(draw(st.integers(1, 3))):  # ...with words swapped, inserted or dropped
        i = draw(st.integers(0, len(words)))
        op = draw(st.sampled_from(["swap", "insert", "drop"]))
        w = draw(st.sampled_from(_WORDS + _NAMES))
        if op == "swap" and i < len(words):
            words[i] = w
        elif op == "insert":
            words.insert(i, w)
        elif words and i < len(words):
            del words[i]
    return policy, shlex.join(words) if words else ""


@settings(max_examples=4000, deadline=None)
@given(_lines())
@example((RECV, "rsync --server -lHogtpAXre.iLsfxCIvu --delete-delay . /bk/copy/x/ -r"))  # found by hypothesis
def test_no_accepted_line_reaches_outside_the_root(drawn):
    """Whatever a hostile client strings together, a line the gate accepts names no dataset, path or
    program outside its root, makes no device node, and creates or holds only rebal's own snapshots
    (independent_ok re-checks it by other means than the gate's code)."""
    policy, line = drawn
    try:
        stages = check(policy, line)
    except Refused as e:
        assert str(e) and "\n" not in str(e)
        return
    problem = independent_ok(policy, stages)
    assert problem is None, (line, stages, problem)
    for stage in stages:
        if stage[0] == "rsync":
            assert not any(w.startswith("-") and not w.startswith("--") and "D" in w.split("e")[0] for w in stage), line
        if stage[:2] in (["zfs", "snapshot"], ["zfs", "hold"]):
            snaps = [w for w in stage[2:] if "@" in w]
            assert all(w.split("@", 1)[1].startswith("rebal-") for w in snaps), line

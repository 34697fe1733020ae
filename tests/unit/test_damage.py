"""The permanent-error list of `zpool status -v`, as OpenZFS 2.4.4 printed it in the lane's heal
test (tests/fixtures/openzfs/zpool-status-v-permanent-errors.txt: a live file in a mounted file
system, a file rewritten after the snapshot, and the first file again in the snapshot)."""

from pathlib import Path

from rebal.zfs.damage import in_dataset, parse_entry, permanent_errors

FIX = Path(__file__).parent.parent / "fixtures" / "openzfs" / "zpool-status-v-permanent-errors.txt"
MNT = "/var/tmp/lane-pytest/test_heal_from_the_backup0/rbt612x0/mnt"


def test_the_recorded_list():
    found = permanent_errors(FIX.read_text())
    assert [d.entry for d in found] == [f"{MNT}/ds/keep/a.bin", f"{MNT}/ds/changed/b.bin",
                                        "rbt612x0/ds@rebal-h-20261127T055209Z:/keep/a.bin"]
    live, _, snap = found
    assert live.mounted and live.dataset is None
    assert (snap.dataset, snap.snapshot, snap.path) == ("rbt612x0/ds", "rebal-h-20261127T055209Z", "/keep/a.bin")
    mounts = {MNT: "rbt612x0", f"{MNT}/ds": "rbt612x0/ds"}
    resolved = in_dataset(live, mounts)
    assert (resolved.dataset, resolved.path, resolved.snapshot) == ("rbt612x0/ds", "/keep/a.bin", None)
    assert resolved.key == snap.key  # the live file and its snapshot's copy are one file


def test_no_errors_and_other_forms():
    assert permanent_errors("  pool: t\n state: ONLINE\nerrors: No known data errors\n") == []
    assert parse_entry("<metadata>:<0x0>").metadata
    d = parse_entry("tank/ds:<0x21>")
    assert (d.dataset, d.object, d.path) == ("tank/ds", 0x21, None)
    d = parse_entry("<0x3b>:<0x9>")
    assert d.dataset is None and d.object == 9
    d = parse_entry("tank/ds:/dir/with: colon")  # an unmounted dataset's path; a colon in the name stays
    assert (d.dataset, d.path) == ("tank/ds", "/dir/with: colon")
    # a path no mount point holds is left as it is
    assert in_dataset(parse_entry("/elsewhere/f"), {"/tank": "tank"}).dataset is None

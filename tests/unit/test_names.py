"""Pool, dataset, snapshot, host and user names: what zfs(8) and ssh accept passes, anything that
could be read as an option or change a command line's meaning is refused."""

import pytest

from rebal import names

GOOD = {
    names.pool_problem: ["tank", "t", "Tank_1", "a.b:c-d", "mirrorpool", "raidzz", "a" * 255],
    names.dataset_problem: ["tank", "tank/a", "tank/_a", "tank/9", "tank/a.b/c:d-e", "t/" + "a" * 253],
    names.snapshot_problem: ["tank@s", "tank/a@s", "tank/a@_s", "tank@2026-11-26_06:00"],
    names.host_problem: ["backup", "backup.example.org", "10.0.0.2", "::1", "[::1]", "b-1.x."],
    names.user_problem: ["root", "_rebal", "backup-1", "a.b"],
}
BAD = {
    names.pool_problem: ["", "-", "-o", "1tank", "_t", "mirror", "mirror1", "raidz2", "draid", "log", "tank\n",
                         "ta nk", "tank/a", "tank@s", "té", "a" * 256],
    names.dataset_problem: ["", "tank/", "/tank", "tank//a", "tank/.", "tank/..", "tank/a b", "-o/x", "tank/-o",
                            "tank/a\n", "tank/a@s", "tank#b", "mirror/a", "t/" + "a" * 254, "tank/$x"],
    names.snapshot_problem: ["tank", "tank/a@", "tank@-s", "tank@s@t", "tank@.s", "tank@a b", "tank/-x@s", "@s"],
    names.host_problem: ["", "-oProxyCommand=x", "a b", "host;rm", "a..b", "a" * 254, "h\n"],
    names.user_problem: ["", "-l", "Root", "a b", "a;b", "1abc", "a" * 33],
}


@pytest.mark.parametrize("check", list(GOOD), ids=lambda c: c.__name__)
def test_legal_names_pass(check):
    assert [(n, check(n)) for n in GOOD[check] if check(n) is not None] == []


@pytest.mark.parametrize("check", list(BAD), ids=lambda c: c.__name__)
def test_illegal_names_are_refused_with_a_reason(check):
    assert [n for n in BAD[check] if not check(n)] == []


def test_a_leading_dash_never_passes():
    for check in (names.pool_problem, names.dataset_problem, names.snapshot_problem):
        assert check("-o") and check("-tank/a") and check("-tank@s")
    with pytest.raises(Exception, match="bad dataset name"):
        names.dataset("tank/-o\n")

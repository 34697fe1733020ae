"""Pool, dataset and snapshot names are checked with str methods (names.py, issue 19): held here to
the regular expressions of zfs(8)'s rules that checked them before, on generated names."""

import random
import re

import pytest

from rebal import names

_COMPONENT = r"[A-Za-z0-9_][A-Za-z0-9_.:-]*"
POOL = re.compile(r"^[A-Za-z][A-Za-z0-9_.:-]*$")
DATASET = re.compile(rf"^[A-Za-z][A-Za-z0-9_.:-]*(?:/{_COMPONENT})*$")
SNAPNAME = re.compile(rf"^{_COMPONENT}$")
RESERVED = ("mirror", "raidz", "spare", "log", "cache", "special", "dedup", "draid")


def old_pool(name):
    if not POOL.fullmatch(name):
        return "a pool name starts with a letter and holds only letters, digits and _ - . :"
    if any(name == r or (name.startswith(r) and name[len(r):].isdigit()) for r in RESERVED):
        return f"{name!r} is a reserved word in ZFS, not a pool name"
    if len(name) > 255:
        return "a pool name is at most 255 characters"
    return None


def old_dataset(name):
    if len(name) > 255:
        return "a dataset name is at most 255 characters"
    if not DATASET.fullmatch(name) or "//" in name or name.endswith("/"):
        return "a dataset name is pool/path with letters, digits and _ - . : in each part"
    if any(part in (".", "..") for part in name.split("/")):
        return "'.' and '..' are not dataset name parts"
    return old_pool(name.split("/", 1)[0])


def old_snapshot(name):
    ds, sep, snap = name.partition("@")
    if not sep:
        return "a snapshot name is dataset@name"
    return old_dataset(ds) or (None if SNAPNAME.fullmatch(snap) else "a snapshot name after @ has letters, digits and _ - . :")


ALPHABET = "aZ9_.:-/@ \n\t#é$-" + "mirror"


def generated(n=20000, seed=19):
    rnd = random.Random(seed)
    yield from ["", "-", "tank", "tank/", "/tank", "tank//a", "tank/.", "tank/..", "tank/.a", "tank/_a", "1tank",
                "mirror", "mirror1", "mirror-1", "raidz2", "tank\n", "tank/a\n", "a" * 256, "t/" + "a" * 253,
                "tank@s", "tank/a@s", "tank/a@", "tank@-s", "tank@s@t", "tank@.s", "tank/a b", "-o/x", "tank/-o"]
    for _ in range(n):
        yield "".join(rnd.choice(ALPHABET) for _ in range(rnd.randint(1, 12)))


@pytest.mark.parametrize("new, old", [(names.pool_problem, old_pool), (names.dataset_problem, old_dataset),
                                      (names.snapshot_problem, old_snapshot)])
def test_the_str_checks_say_what_the_regular_expressions_said(new, old):
    differ = [(n, new(n), old(n)) for n in generated() if new(n) != old(n)]
    assert differ == []
    assert sum(old(n) is None for n in generated()) > 50  # the generated names hold valid ones too


def test_a_leading_dash_never_passes():
    for check in (names.pool_problem, names.dataset_problem, names.snapshot_problem):
        assert check("-o") and check("-tank/a") and check("-tank@s")
    with pytest.raises(Exception, match="bad dataset name"):
        names.dataset("tank/-o\n")

"""The metrics file's writer (rebal.metrics.atomic_file): replaced whole or left as it was, and only
its own failures said as 'cannot write'."""

from __future__ import annotations

import os

import pytest

from rebal.errors import CannotWrite
from rebal.metrics import atomic_file


def test_the_file_is_replaced_whole_when_the_block_ends(tmp_path):
    path = tmp_path / "rebal.prom"
    path.write_text("old\n")
    with atomic_file(str(path)) as put:
        put("new 1\n")
        assert path.read_text() == "old\n"  # the collector still reads the old one meanwhile
    assert path.read_text() == "new 1\n"
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert os.listdir(tmp_path) == ["rebal.prom"]


def test_an_error_of_the_work_is_not_called_a_write_failure(tmp_path):
    """A pool or the state failing inside the block (an OSError: zpool missing, a database not
    readable) goes on as it is, the old file kept and the temporary one removed."""
    path = tmp_path / "rebal.prom"
    path.write_text("old\n")
    with pytest.raises(FileNotFoundError) as e, atomic_file(str(path)) as put:
        put("half")
        raise FileNotFoundError(2, "No such file or directory", "zpool")
    assert not isinstance(e.value, CannotWrite)
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["rebal.prom"]


def test_a_place_it_cannot_write_is_said_before_the_block_runs(tmp_path):
    ran = []
    with pytest.raises(CannotWrite) as e:
        with atomic_file(str(tmp_path / "no" / "such" / "rebal.prom")):
            ran.append(1)
    assert ran == []
    assert "metrics file" in str(e.value)

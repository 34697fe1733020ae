"""A replication run begins its connection before it imports its parts (replicate.wire.early): the
ssh handshake overlaps the run's start. The run closes that connection however it ends."""

import subprocess
import sys
import textwrap

import pytest

from rebal.config import parse
from rebal.errors import UsageError
from rebal.replicate.job import run_job
from rebal.replicate.wire import early


def cfg(tmp_path, **job):
    data = {"state_db": str(tmp_path / "s.db"),
            "replicate": [{"name": "j", "source": "tank/d", "target": "backup/d", "target_host": "backup.lan", **job}]}
    return parse(data, "test.toml")


class Wire:
    closed = 0

    def close(self):
        self.closed += 1


def test_early_connects_only_where_a_run_would_connect_first(tmp_path, monkeypatch):
    monkeypatch.setattr("rebal.replicate.wire.connect", lambda j: Wire())
    assert isinstance(early(cfg(tmp_path), "j"), Wire)
    assert early(cfg(tmp_path), "nope") is None  # the run says the job is unknown
    assert early(cfg(tmp_path, pre_command=["/usr/local/bin/wake-backup"]), "j") is None  # it may wake the host
    local = parse({"state_db": str(tmp_path / "s.db"), "replicate": [{"name": "j", "source": "tank/d", "target": "tank/copy"}]},
                  "test.toml")
    assert early(local, "j") is None


def test_a_connection_that_cannot_begin_is_left_to_the_run(tmp_path, monkeypatch):
    from rebal.errors import RebalError

    def refuse(j):
        raise RebalError("ssh option 'ProxyCommand=x': not allowed")

    monkeypatch.setattr("rebal.replicate.wire.connect", refuse)
    assert early(cfg(tmp_path), "j") is None  # the run connects again: its record says why it failed


def test_a_run_that_ends_early_closes_the_wire_it_was_given(tmp_path):
    w = Wire()
    with pytest.raises(UsageError):
        run_job(cfg(tmp_path), "j", force_rollback=("other/x",), wire=w)  # refused before anything runs
    assert w.closed >= 1


def test_the_cli_begins_the_connection_before_it_imports_the_run(tmp_path):
    conf = tmp_path / "c.toml"
    conf.write_text(textwrap.dedent(f"""
        state_db = "{tmp_path / 's.db'}"
        [[replicate]]
        name = "j"
        source = "tank/d"
        target = "backup/d"
        target_host = "backup.lan"
    """))
    code = textwrap.dedent("""
        import sys
        import rebal.replicate.wire as w
        seen = []
        class Wire:
            def close(self):
                seen.append("closed")
        def connect(j):
            seen.append("rebal.replicate.job" in sys.modules)
            return Wire()
        w.connect = connect
        from rebal.cli import main
        try:
            main(["--config", sys.argv[1], "replicate", "j", "--force-rollback", "other/x"])
        except SystemExit:
            pass
        print(seen)
    """)
    r = subprocess.run([sys.executable, "-c", code, str(conf)], capture_output=True, text=True)
    assert r.stdout.strip().splitlines()[-1] == "[False, 'closed', 'closed']", r.stdout + r.stderr
    assert "not a dataset of job j" in r.stderr

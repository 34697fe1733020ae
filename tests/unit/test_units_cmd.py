"""`rebal units`: the drop-ins for both shipped units, and a clear error where it cannot write."""

import json

from conftest import rebal


def cfg(tmp_path, target):
    p = tmp_path / "config.toml"
    p.write_text(f'state_db = "{tmp_path / "state" / "state.db"}"\n[rebalance]\ntargets = ["{target}"]\n')
    return p


def test_units_writes_both_drop_ins_once(tmp_path):
    target = tmp_path / "data"
    target.mkdir()
    c = cfg(tmp_path, target)
    out = json.loads(rebal("units", "--dir", str(tmp_path / "units"), "--json", config=c).stdout)
    assert len(out["changed"]) == 2
    for d in out["drop_ins"]:
        text = (tmp_path / "units" / f"{d['unit']}.d" / "50-rebal-paths.conf").read_text()
        assert f"ReadWritePaths={tmp_path / 'state'} {target}\n" in text or \
            f"ReadWritePaths={target} {tmp_path / 'state'}\n" in text, text
    again = json.loads(rebal("units", "--dir", str(tmp_path / "units"), "--json", config=c).stdout)
    assert again["changed"] == [], "the same drop-ins are not rewritten"


def test_units_cannot_write_is_a_clear_error(tmp_path):
    target = tmp_path / "data"
    target.mkdir()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = rebal("units", "--dir", str(blocker / "units"), config=cfg(tmp_path, target), check=False)
    assert r.returncode != 0 and "cannot write the drop-ins" in r.stderr and "internal error" not in r.stderr, r.stderr


def test_units_let_the_metrics_schedule_write_its_file(tmp_path):
    """With a metrics schedule the metrics file's directory is writable to both units too (under
    ProtectSystem=strict the metrics job died on a read-only file system, issue 36), marked optional
    ("-"): a unit still starts before node_exporter made that directory."""
    target = tmp_path / "data"
    target.mkdir()
    c = tmp_path / "config.toml"
    c.write_text(f'state_db = "{tmp_path / "state" / "state.db"}"\nmetrics_file = "/srv/prom/rebal.prom"\n'
                 f'[rebalance]\ntargets = ["{target}"]\n[schedule]\nmetrics = "*/5 * * * *"\n')
    out = json.loads(rebal("units", "--dir", str(tmp_path / "units"), "--json", config=c).stdout)
    text = (tmp_path / "units" / "rebal-due.service.d" / "50-rebal-paths.conf").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("ReadWritePaths="))
    assert sorted(line.split("=", 1)[1].split()) == sorted([str(tmp_path / "state"), str(target), "-/srv/prom"]), line
    assert len(out["drop_ins"]) == 2
    c.write_text(c.read_text().replace('metrics = "*/5 * * * *"', ""))
    rebal("units", "--dir", str(tmp_path / "units"), config=c)
    assert "/srv/prom" not in (tmp_path / "units" / "rebal-due.service.d" / "50-rebal-paths.conf").read_text()


def test_units_let_the_scheduled_refresh_write_its_targets(tmp_path):
    target, other = tmp_path / "data", tmp_path / "old"
    target.mkdir()
    other.mkdir()
    c = tmp_path / "config.toml"
    c.write_text(f'state_db = "{tmp_path / "state" / "state.db"}"\n[rebalance]\ntargets = ["{target}"]\n'
                 f'[refresh]\ntargets = ["{other}"]\n[schedule]\nrefresh = "0 2 * * 6"\n')
    rebal("units", "--dir", str(tmp_path / "units"), config=c)
    text = (tmp_path / "units" / "rebal-due.service.d" / "50-rebal-paths.conf").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("ReadWritePaths="))
    assert sorted(line.split("=", 1)[1].split()) == sorted([str(tmp_path / "state"), str(target), str(other)]), line

"""The validated config kept beside the exact bytes it came from (rebal/config_cache.py): a hit is the
same Config without tomllib or typing imported; any change, a foreign or loose entry, a torn entry,
an invalid file or an empty REBAL_CACHE_DIR is a miss that parses as before."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import IN_CI

from rebal import config, config_cache
from rebal.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        if IN_CI:
            pytest.fail("the config cache is root's: this test runs as root in CI")
        pytest.skip("the config cache is root's only")
    d = tmp_path / "cache"
    monkeypatch.setenv("REBAL_CACHE_DIR", str(d))
    return d


def _example(tmp_path) -> Path:
    p = tmp_path / "config.toml"
    p.write_bytes((ROOT / "config.example.toml").read_bytes())
    return p


def test_a_second_load_is_the_same_config_from_the_cache(cache, tmp_path):
    p = _example(tmp_path)
    first = config.load(str(p))
    [entry] = list(cache.iterdir())
    assert entry.stat().st_mode & 0o777 == 0o600 and cache.stat().st_mode & 0o777 == 0o700
    assert config_cache.lookup(str(p), p.read_bytes(), False) == first
    assert config.load(str(p)) == first and config.load(str(p)).replicate[0].retention_target.daily == 30


def test_a_hit_imports_neither_tomllib_nor_typing(cache, tmp_path):
    p = _example(tmp_path)
    # (a site hook of the machine may import typing before rebal runs: only rebal's own import counts)
    code = ("import sys; before = 'typing' in sys.modules; from rebal import config; c = config.load(sys.argv[1]); "
            "print(c.replicate[0].name, 'tomllib' in sys.modules, 'typing' in sys.modules and not before)")
    env = dict(os.environ, REBAL_CACHE_DIR=str(cache))
    run = [sys.executable, "-c", code, str(p)]
    miss = subprocess.run(run, capture_output=True, text=True, env=env, check=True).stdout.split()
    hit = subprocess.run(run, capture_output=True, text=True, env=env, check=True).stdout.split()
    assert miss[:2] == ["nightly", "True"] and hit == ["nightly", "False", "False"]


def test_any_change_to_the_file_is_a_miss(cache, tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('state_db = "/a.db"\n[rebalance]\ntarget_spread = 5.0\n')
    assert config.load(str(p)).rebalance.target_spread == 5.0
    p.write_text('state_db = "/a.db"\n[rebalance]\ntarget_spread = 6.0\n')  # same size, same second
    assert config.load(str(p)).rebalance.target_spread == 6.0
    p.write_text('state_db = "/a.db"\n[rebalance]\ntarget_spread = 6.0\nmethod = "bogus"\n')
    with pytest.raises(ConfigError, match="method"):
        config.load(str(p))
    with pytest.raises(ConfigError, match="method"):  # an invalid file is never kept: said every time
        config.load(str(p))


def test_checked_cron_and_unchecked_are_apart(cache, tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('[schedule]\nrebalance = "not a cron line"\n')
    config.load(str(p))  # cron not checked: valid
    with pytest.raises(ConfigError, match="cron"):
        config.load(str(p), check_cron=True)


@pytest.mark.parametrize("spoil", ["group-writable", "torn", "not ours"])
def test_a_loose_torn_or_foreign_entry_is_ignored_and_replaced(cache, tmp_path, spoil):
    p = _example(tmp_path)
    good = config.load(str(p))
    [entry] = list(cache.iterdir())
    if spoil == "group-writable":
        entry.chmod(0o620)
    elif spoil == "torn":
        entry.write_bytes(entry.read_bytes()[:100])
    else:
        os.chown(entry, 1, 1)
    assert config_cache.lookup(str(p), p.read_bytes(), False) is None
    assert config.load(str(p)) == good  # parsed again, and kept again
    assert config_cache.lookup(str(p), p.read_bytes(), False) == good


def test_a_directory_others_can_write_is_not_used(cache, tmp_path):
    p = _example(tmp_path)
    config.load(str(p))
    cache.chmod(0o777)
    assert config_cache.lookup(str(p), p.read_bytes(), False) is None


def test_an_empty_cache_dir_turns_it_off(tmp_path, monkeypatch):
    monkeypatch.setenv("REBAL_CACHE_DIR", "")
    assert config_cache.cache_dir() is None
    p = _example(tmp_path)
    assert config.load(str(p)).replicate[0].name == "nightly"
    assert not config_cache.store(str(p), p.read_bytes(), False, config.Config())

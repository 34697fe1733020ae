"""The Debian package asks apt for what pyproject.toml asks pip for: a system whose packages are too
old (Debian 12: typer 0.7, apscheduler 3.9) must refuse the install, not crash at every command."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEBIAN_NAME = {"typer": "python3-typer", "rich": "python3-rich", "apscheduler": "python3-apscheduler",
               "xxhash": "python3-xxhash"}


def pyproject_bounds() -> dict[str, set[tuple[str, str]]]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    out: dict[str, set[tuple[str, str]]] = {}
    for dep in deps:
        name, spec = re.match(r"([A-Za-z0-9_.-]+)\s*(.*)", dep).groups()
        ops = {">=": ">=", "<": "<<", "==": "="}
        out[name.lower()] = {(ops[op], v) for op, v in re.findall(r"(>=|<|==)\s*([\w.]+)", spec)}
    return out


def control_depends() -> dict[str, set[tuple[str, str]]]:
    text = (ROOT / "debian" / "control").read_text()
    block = re.search(r"^Package: rebal$.*?^Depends:(.*?)^\S", text, re.S | re.M).group(1)
    out: dict[str, set[tuple[str, str]]] = {}
    for rel in (r.strip() for r in block.split(",")):
        m = re.match(r"([\w.+-]+)(?:\s*\((>=|<<|=)\s*([\w.~+-]+)\))?$", rel)
        if m:
            out.setdefault(m.group(1), set())
            if m.group(2):
                out[m.group(1)].add((m.group(2), m.group(3)))
    return out


def test_every_python_dependency_is_versioned_as_in_pyproject():
    bounds, depends = pyproject_bounds(), control_depends()
    assert set(bounds) == set(DEBIAN_NAME), "a new dependency needs its Debian name here and in debian/control"
    for name, deb in DEBIAN_NAME.items():
        assert deb in depends, f"debian/control does not depend on {deb}"
        assert depends[deb] == bounds[name], f"{deb}: debian/control says {depends[deb]}, pyproject {bounds[name]}"


def test_debian_12s_versions_are_refused():
    """The versions Debian 12 ships, which made every command die: each breaks a bound."""
    depends = control_depends()
    bookworm = {"python3-typer": "0.7.0", "python3-apscheduler": "3.9.1"}

    def key(v):
        return tuple(int(x) for x in re.findall(r"\d+", v))

    for deb, version in bookworm.items():
        lows = [v for op, v in depends[deb] if op == ">="]
        assert lows and any(key(version) < key(v) for v in lows), (deb, depends[deb])

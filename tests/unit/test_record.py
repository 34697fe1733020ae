"""rebal.record: the plain data classes that stand in for dataclasses (issue 19)."""

import json
import subprocess
import sys

import pytest

from rebal.record import (
    MISSING,
    FrozenInstanceError,
    asdict,
    field,
    fields,
    is_record,
    record,
    replace,
)


@record
class Point:
    x: int
    y: int = 0
    tags: list[str] = field(default_factory=list)


@record(frozen=True)
class Key:
    a: bytes
    b: int = 1


@record(kw_only=True)
class Opts:
    need: str = field(metadata={"alias": "from"})
    n: int = 3
    inner: Point | None = None


def test_init_defaults_positional_and_keywords():
    p = Point(1)
    assert (p.x, p.y, p.tags) == (1, 0, [])
    assert Point(1, 2, ["a"]) == Point(x=1, tags=["a"], y=2)
    assert Point(1).tags is not Point(1).tags  # a factory per instance
    assert Point(1) != Point(2) and Point(1) != (1, 0, [])
    assert repr(Point(1, 2)) == "Point(x=1, y=2, tags=[])"


@pytest.mark.parametrize("call, message", [
    (lambda: Point(), "missing required argument(s): 'x'"),
    (lambda: Point(1, 2, [], 4), "takes 3 positional argument(s) but 4 were given"),
    (lambda: Point(1, x=2), "multiple values for argument 'x'"),
    (lambda: Point(1, z=2), "unexpected keyword argument 'z'"),
    (lambda: Opts("a"), "takes 0 positional argument(s)"),
    (lambda: Opts(), "missing required argument(s): 'need'"),
])
def test_bad_calls_are_refused_as_dataclasses_refuse_them(call, message):
    with pytest.raises(TypeError) as e:
        call()
    assert message in str(e.value)


def test_frozen_records_refuse_assignment_and_hash_by_value():
    k = Key(b"x")
    with pytest.raises(FrozenInstanceError):
        k.a = b"y"
    with pytest.raises(AttributeError):
        del k.b
    assert {Key(b"x"): 1}[Key(b"x", 1)] == 1
    assert hash(k) == hash(Key(b"x", 1))
    with pytest.raises(TypeError):
        hash(Point(1))  # mutable and compared by value: not hashable


def test_class_definitions_that_dataclasses_refuses_are_refused():
    with pytest.raises(TypeError, match="non-default field 'b' follows default field 'a'"):
        @record
        class Bad:
            a: int = 0
            b: int

    with pytest.raises(ValueError, match="mutable default"):
        @record
        class Shared:
            a: list = []  # noqa: RUF012


def test_post_init_runs_on_init_and_replace():
    seen = []

    @record(frozen=True)
    class Checked:
        n: int

        def __post_init__(self):
            seen.append(self.n)
            if self.n < 0:
                raise ValueError("negative")

    c = Checked(1)
    assert replace(c, n=2) == Checked(2) and seen == [1, 2, 2]
    with pytest.raises(ValueError):
        replace(c, n=-1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'm'"):
        replace(c, m=1)


def test_fields_metadata_defaults_and_class_attributes():
    fs = fields(Opts)
    assert [f.name for f in fs] == ["need", "n", "inner"] and fields(Opts(need="a")) == fs
    assert fs[0].metadata == {"alias": "from"} and fs[0].default is MISSING
    assert fs[1].default == 3 and Opts.n == 3
    assert fields(Point)[2].default_factory is list and not hasattr(Point, "tags")
    assert is_record(Opts) and is_record(Opts(need="a")) and not is_record(object())
    with pytest.raises(TypeError):
        fields(object)


def test_asdict_turns_nested_records_into_plain_data():
    o = Opts(need="a", inner=Point(1, tags=["t"]))
    d = asdict(o)
    assert d == {"need": "a", "n": 3, "inner": {"x": 1, "y": 0, "tags": ["t"]}}
    d["inner"]["tags"].append("u")
    assert o.inner.tags == ["t"]  # a copy, not the record's list
    assert json.loads(json.dumps(asdict(Point(1, tags=[]))))["x"] == 1
    assert asdict(Point(1, tags=[Key(b"k")]))["tags"] == [{"a": b"k", "b": 1}]


def test_the_rebalance_path_loads_neither_dataclasses_nor_inspect_nor_pathlib():
    """What issue 19 took off the rebalance path stays off it: importing `dataclasses` loads
    `inspect`, `ast` and `dis`, and every @dataclass compiles code: 0.3 s of a run under TCG;
    `pathlib` (config and state used it for two calls) 35 ms. `-S` and the site directories by hand:
    an editable install's finder (a .pth that site runs) loads pathlib at start-up."""
    code = ("import site, sys\nsys.path += site.getsitepackages()\nbefore = set(sys.modules)\n"
            "import rebal.cli.fast, rebal.cli.rebalance_run, rebal.rebalance.engine, rebal.rebalance.prepare\n"
            "import rebal.rebalance.inplace_pass, rebal.rebalance.copy_pass, rebal.views.rebalance, rebal.config\n"
            "rebal.config.load('config.example.toml')\n"
            "print(' '.join(m for m in ('dataclasses', 'inspect', 'ast', 'dis', 'pathlib') if m in set(sys.modules) - before))\n")
    from pathlib import Path
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == ""

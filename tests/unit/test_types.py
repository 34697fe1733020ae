"""Issues 46 and 65: every parameter in rebal/ is typed (the *args and **kwargs too), and mypy finds
nothing in the whole package."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "rebal"


def untyped(tree: ast.AST, name: str) -> list[str]:
    """``name:line function(parameter)`` of each parameter in ``tree`` without an annotation."""
    bare = []
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = n.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *([a.vararg] if a.vararg else []),
                      *([a.kwarg] if a.kwarg else [])]
            bare += [f"{name}:{n.lineno} {n.name}({p.arg})" for p in params
                     if p.arg not in ("self", "cls") and p.annotation is None]
    return bare


def test_every_parameter_is_typed():
    bare = [b for p in sorted(ROOT.rglob("*.py")) for b in untyped(ast.parse(p.read_text()), str(p.relative_to(ROOT)))]
    assert bare == []


def test_the_count_sees_each_kind_of_parameter():
    tree = ast.parse("def f(a, /, b: int, *c, d, **e): pass\nclass K:\n    def m(self, x): pass\n")
    assert sorted(untyped(tree, "t.py")) == ["t.py:1 f(a)", "t.py:1 f(c)", "t.py:1 f(d)", "t.py:1 f(e)", "t.py:3 m(x)"]


def test_mypy_is_clean(tmp_path):
    r = subprocess.run([sys.executable, "-m", "mypy", "--ignore-missing-imports", "--follow-imports=silent",
                        "--cache-dir", str(tmp_path), str(ROOT)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-1000:]

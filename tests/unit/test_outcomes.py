"""One record: a run's outcome is `recorded.Outcome` everywhere in rebal/, never a bare string that
happens to spell one ("ok", "failed", ...): a typo there is a run that is never noticed as failed."""

import ast
from pathlib import Path

from rebal.recorded import Outcome

ROOT = Path(__file__).resolve().parents[2] / "rebal"
WORDS = {o.value for o in Outcome}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _skipped(tree: ast.AST) -> set[int]:
    """Constants that are no outcome: docstrings, dict keys, the text of f-strings, and the members of
    an enum's own definition."""
    out = _docstrings(tree)
    for n in ast.walk(tree):
        if isinstance(n, ast.Dict):
            out |= {id(k) for k in n.keys if k is not None}
        elif isinstance(n, ast.JoinedStr):
            out |= {id(v) for v in n.values}
        elif isinstance(n, ast.ClassDef) and any("Enum" in ast.unparse(b) for b in n.bases):
            out |= {id(c) for c in ast.walk(n) if isinstance(c, ast.Constant)}
    return out


def bare_outcomes() -> list[str]:
    found = []
    for p in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(p.read_text())
        skip = _skipped(tree)
        found += [f"{p.relative_to(ROOT.parent)}:{n.lineno} {n.value!r}" for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and n.value in WORDS and id(n) not in skip]
    return found


def test_no_outcome_is_a_bare_string():
    assert bare_outcomes() == []


def test_the_count_sees_a_bare_outcome(tmp_path):
    tree = ast.parse('def f(o):\n    """ok"""\n    return {"ok": 1} if o == "failed" else f"ok {o}"\n')
    skip = _skipped(tree)
    assert [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in WORDS
            and id(n) not in skip] == ["failed"]


def test_an_outcome_reads_as_its_word():
    assert f"{Outcome.FAILED}" == "failed" and str(Outcome.OK) == "ok" and Outcome("warning") is Outcome.WARNING


def test_one_owner_writes_a_runs_row():
    """Every kind of run is started and ended by recorded.py, nowhere else."""
    writers = set()
    for p in ROOT.rglob("*.py"):
        for n in ast.walk(ast.parse(p.read_text())):
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                    and n.func.attr in ("start_run", "end_run", "reopen_run")):
                writers.add(str(p.relative_to(ROOT.parent)))
    assert writers == {"rebal/recorded.py"}

"""Checking TOML data against the config's dataclasses (config.py): strict types (no "1" for 1, no
true for 1), bounds, patterns, per-item checks, unknown and missing keys, then each model's own
cross-field checks. Every problem is named by its key path (``replicate[0].target_host``), all of
them at once, and raised as one ConfigError naming the file.

Why not pydantic: its messages name regular expressions and Python types, where an admin needs
"give a size like 500G"; a pattern here always comes with the hint that is shown instead of it.
"""

from __future__ import annotations

import logging
import re
import types
import typing
from dataclasses import MISSING, Field, field, fields, is_dataclass
from functools import cache
from collections.abc import Mapping
from typing import Any, Callable, ClassVar, Literal, Union

from .errors import ConfigError

log = logging.getLogger(__name__)
_BAD = object()  # a value that failed its checks (its problem is already recorded)


class Model:
    """A config section. ``problems()``: checks across fields, run once every field is valid,
    as (key, problem) pairs; an empty key names the section itself. ``RETIRED``: keys it no longer
    has, accepted and ignored with a warning in the log (a config written for an older rebal still
    loads), each with why."""

    RETIRED: ClassVar[dict[str, str]] = {}

    def problems(self) -> list[tuple[str, str]]:
        return []


def spec(default: Any = MISSING, *, factory: Callable | None = None, gt: float | None = None,
         ge: float | None = None, lt: float | None = None, le: float | None = None, pattern: str | None = None,
         hint: str | None = None,
         check: Callable[[Any], str | None] | None = None, check_ctx: Callable[[Any, dict], str | None] | None = None,
         each: Callable[[Any], str | None] | None = None, min_items: int | None = None, alias: str | None = None):
    """A field with its checks: bounds, a regex ``pattern`` (searched, anchor it) with the ``hint`` an
    admin reads when it does not match, ``check`` (value ->
    problem or None), ``check_ctx`` (the same, given the validation context), ``each`` (a check per
    list item), ``min_items``, and the TOML key when it differs from the name (``alias``). No default
    and no factory: a required key."""
    if pattern is not None and not hint:
        raise ValueError("a pattern needs a hint: the admin reads the hint, not the regular expression")
    md = {k: v for k, v in dict(gt=gt, ge=ge, lt=lt, le=le, pattern=pattern, hint=hint, check=check, check_ctx=check_ctx,
                                each=each, min_items=min_items, alias=alias).items() if v is not None}
    if factory is not None:
        return field(default_factory=factory, metadata=md)
    return field(default=default, metadata=md)


def key_of(f: Field) -> str:
    """The TOML key of a record field."""
    return f.metadata.get("alias") or f.name


def default_of(f: Field) -> Any:
    """A field's default (MISSING for a required key)."""
    return f.default_factory() if f.default_factory is not MISSING else f.default


@cache
def _hints(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def validate(cls, data: Any, path: str, ctx: dict | None = None):
    """An instance of the record ``cls`` from ``data``, or ConfigError(path, every problem)."""
    problems: list[tuple[str, str]] = []
    obj = _model(cls, data, "", problems, ctx or {})
    if problems:
        lines = [f"{loc or '(top level)'}: {msg}" for loc, msg in problems]
        raise ConfigError(path, sorted(set(lines), key=lines.index))
    return obj


def _join(loc: str, key: str) -> str:
    return f"{loc}.{key}" if loc else key


def _model(cls, data: Any, loc: str, problems: list, ctx: dict):
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        problems.append((loc, "give a table of keys ([section] or {key = value})"))
        return _BAD
    hints = _hints(cls)
    by_key = {key_of(f): f for f in fields(cls)}
    before = len(problems)
    values = {}
    for key, f in by_key.items():
        sub = _join(loc, key)
        if key not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                problems.append((sub, "required key is missing"))
            continue
        v = _value(hints[f.name], data[key], sub, problems, ctx)
        if v is not _BAD and v is not None:
            v = _constrain(f.metadata, v, sub, problems, ctx)
        if v is not _BAD:
            values[f.name] = v
    for key in data:
        if key in getattr(cls, "RETIRED", {}) and key not in by_key:
            log.warning("%s: no longer used, ignored: %s", _join(loc, str(key)), cls.RETIRED[key])
        elif key not in by_key:
            import difflib

            near = difflib.get_close_matches(str(key), list(by_key), n=1, cutoff=0.6)
            problems.append((_join(loc, str(key)), "unknown key" + (f" (did you mean {near[0]!r}?)" if near else "")))
    if len(problems) > before:
        return _BAD
    obj = cls(**values)
    for key, problem in obj.problems():
        problems.append((_join(loc, key) if key else loc, problem))
    return obj


def _value(tp: Any, v: Any, loc: str, problems: list, ctx: dict):
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):  # X | None
        if v is None:
            return None
        [inner] = [a for a in args if a is not type(None)]
        return _value(inner, v, loc, problems, ctx)
    if origin is Literal:
        if any(v == a and type(v) is type(a) for a in args):
            return v
        problems.append((loc, "give one of " + ", ".join(f'"{a}"' if isinstance(a, str) else repr(a) for a in args)))
        return _BAD
    if origin is list:
        if not isinstance(v, list):
            problems.append((loc, "give a list, like [\"a\", \"b\"]"))
            return _BAD
        out = [_value(args[0], x, f"{loc}[{i}]", problems, ctx) for i, x in enumerate(v)]
        return _BAD if any(x is _BAD for x in out) else out
    if is_dataclass(tp):
        return _model(tp, v, loc, problems, ctx)
    ok = {bool: lambda: isinstance(v, bool),
          int: lambda: isinstance(v, int) and not isinstance(v, bool),
          float: lambda: isinstance(v, (int, float)) and not isinstance(v, bool),
          str: lambda: isinstance(v, str)}[tp]()
    if not ok:
        what = {bool: "true or false (no quotes)", int: "a whole number (no quotes)", float: "a number (no quotes)",
                str: "text in quotes"}[tp]
        problems.append((loc, f"give {what}"))
        return _BAD
    return float(v) if tp is float else v


def _constrain(md: Mapping[str, Any], v: Any, loc: str, problems: list, ctx: dict) -> Any:
    problem = None
    for op, word, fails in (("gt", "greater than", lambda b: not v > b), ("ge", "greater than or equal to", lambda b: not v >= b),
                            ("lt", "less than", lambda b: not v < b), ("le", "less than or equal to", lambda b: not v <= b)):
        if op in md and fails(md[op]):
            problem = f"give a number {word} {md[op]:g}"
            break
    if problem is None and "pattern" in md and not re.search(md["pattern"], v):
        problem = md["hint"]
    if problem is None and "min_items" in md and len(v) < md["min_items"]:
        problem = f"give at least {md['min_items']} item(s), not {len(v)}"
    if problem is None and "check" in md:
        problem = md["check"](v)
    if problem is None and "check_ctx" in md:
        problem = md["check_ctx"](v, ctx)
    if problem:
        problems.append((loc, problem))
        return _BAD
    if "each" in md:
        bad = [(f"{loc}[{i}]", p) for i, x in enumerate(v) for p in [md["each"](x)] if p]
        problems.extend(bad)
        return _BAD if bad else v
    return v

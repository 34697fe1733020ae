"""Plain data classes without the standard library's ``dataclasses``.

``@record`` does what rebal used ``@dataclass`` for: fields from the class's annotations, defaults
and ``field(default_factory=..., metadata=...)``, ``frozen=True`` (assignment refused, instances
hashable), ``kw_only=True``, ``__post_init__``, field-wise ``__eq__`` and ``__repr__``; with
``fields``, ``replace``, ``asdict``, ``is_record`` and ``MISSING`` beside it.

Why not ``dataclasses`` (issue 19): importing it loads ``inspect`` (and with it ``ast``, ``dis``,
``tokenize``), and every ``@dataclass`` compiles its methods from generated source and builds a
signature for its docstring. In the lane's OpenZFS guest (2 vCPUs under TCG) that was 0.11 s of
import and about 5 ms per class: about 0.3 s of a 4,000-file rewrite run's 4.8 s, for the 35
classes on that path. Here a class costs what a plain class costs: the methods below are shared by
every record and read the class's field table, so nothing is compiled and nothing imported.
"""

from __future__ import annotations

TYPE_CHECKING = False  # (not typing's: importing typing is 50 ms of a command's start in the lane's guest)
if TYPE_CHECKING:
    from typing import Any, Callable


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class FrozenInstanceError(AttributeError):
    pass


class Field:
    """One field of a record: its name, its default or default factory, and its metadata."""

    __slots__ = ("name", "default", "default_factory", "metadata")

    def __init__(self, default: Any = MISSING, default_factory: Any = MISSING, metadata: dict | None = None):
        self.name = ""
        self.default = default
        self.default_factory = default_factory
        self.metadata = dict(metadata or {})

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, default={self.default!r}, default_factory={self.default_factory!r})"


def field(*, default: Any = MISSING, default_factory: Callable[[], Any] | Any = MISSING,
          metadata: dict | None = None) -> Any:
    if default is not MISSING and default_factory is not MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return Field(default, default_factory, metadata)


def _class_var(annotation: Any) -> bool:
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return text.startswith(("ClassVar", "typing.ClassVar"))


def record(cls: type | None = None, /, *, frozen: bool = False, kw_only: bool = False):
    """Make ``cls`` a record (see the module's docstring); ``@record`` or ``@record(frozen=True)``."""

    def wrap(c: type) -> type:
        return _make(c, frozen, kw_only)

    return wrap if cls is None else wrap(cls)


def _make(cls: type, frozen: bool, kw_only: bool) -> type:
    table: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        table.update(getattr(base, "__record_fields__", {}))
    own = cls.__dict__.get("__annotations__", {})
    for name, annotation in own.items():
        if _class_var(annotation):
            continue
        value = cls.__dict__.get(name, MISSING)
        f = value if isinstance(value, Field) else Field(default=value)
        f.name = name
        if isinstance(f.default, (list, dict, set)):
            raise ValueError(f"{cls.__name__}.{name}: a mutable default is shared: use default_factory")
        if f.default is MISSING:
            if name in cls.__dict__:
                delattr(cls, name)  # a required field or a factory: no class attribute, as dataclasses does
        else:
            setattr(cls, name, f.default)
        table[name] = f
    names = tuple(table)
    if not kw_only:
        seen_default = None
        for name in names:
            f = table[name]
            if f.default is not MISSING or f.default_factory is not MISSING:
                seen_default = name
            elif seen_default is not None:
                raise TypeError(f"{cls.__name__}: non-default field {name!r} follows default field {seen_default!r}")
    cls.__record_fields__ = table
    cls.__record_spec__ = (
        names,
        frozenset(names),
        {n: f.default for n, f in table.items() if f.default is not MISSING},
        {n: f.default_factory for n, f in table.items() if f.default_factory is not MISSING},
        0 if kw_only else len(names),  # how many may be given by position
        getattr(cls, "__post_init__", None),
    )
    for name, fn in (("__init__", _init), ("__repr__", _repr), ("__eq__", _eq)):
        if name not in cls.__dict__:
            setattr(cls, name, fn)
    if frozen:
        cls.__setattr__ = _frozen_setattr
        cls.__delattr__ = _frozen_delattr
        if "__hash__" not in cls.__dict__ or cls.__dict__["__hash__"] is None:
            cls.__hash__ = _hash
    elif "__hash__" not in cls.__dict__:
        cls.__hash__ = None  # mutable and compared by value: not hashable (as dataclasses does)
    cls.__match_args__ = names if not kw_only else ()
    return cls


def _init(self, *args: Any, **kw: Any) -> None:
    names, known, defaults, factories, positional, post_init = type(self).__record_spec__
    cname = type(self).__name__
    if args:
        if len(args) > positional:
            raise TypeError(f"{cname}() takes {positional} positional argument(s) but {len(args)} were given")
        for name, value in zip(names, args):
            if name in kw:
                raise TypeError(f"{cname}() got multiple values for argument {name!r}")
            kw[name] = value
    if len(kw) > len(known) or not known.issuperset(kw):
        bad = sorted(set(kw) - known)
        raise TypeError(f"{cname}() got an unexpected keyword argument {bad[0]!r}")
    d = self.__dict__
    for name in names:
        if name in kw:
            d[name] = kw[name]
        elif name in defaults:
            d[name] = defaults[name]
        elif name in factories:
            d[name] = factories[name]()
        else:
            missing = [n for n in names if n not in kw and n not in defaults and n not in factories]
            raise TypeError(f"{cname}() missing required argument(s): {', '.join(map(repr, missing))}")
    if post_init is not None:
        post_init(self)


def _values(obj: Any) -> tuple:
    d = obj.__dict__
    return tuple(d[n] for n in type(obj).__record_spec__[0])


def _repr(self) -> str:
    d = self.__dict__
    return f"{type(self).__qualname__}({', '.join(f'{n}={d[n]!r}' for n in type(self).__record_spec__[0])})"


def _eq(self, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self) == _values(other)


def _hash(self) -> int:
    return hash(_values(self))


def _frozen_setattr(self, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def is_record(obj: Any) -> bool:
    """True for a record class or instance."""
    return hasattr(obj if isinstance(obj, type) else type(obj), "__record_spec__")


def fields(obj: Any) -> tuple[Field, ...]:
    """The fields of a record class or instance, in order."""
    cls = obj if isinstance(obj, type) else type(obj)
    try:
        return tuple(cls.__record_fields__.values())
    except AttributeError:
        raise TypeError(f"{cls.__name__} is not a record") from None


def replace(obj: Any, /, **changes: Any) -> Any:
    """A new record like ``obj`` with ``changes`` (through ``__init__``, so ``__post_init__`` runs)."""
    d = obj.__dict__
    return type(obj)(**{n: changes.pop(n) if n in changes else d[n] for n in type(obj).__record_spec__[0]}, **changes)


def asdict(obj: Any) -> dict[str, Any]:
    """A record as a dict, records inside it (in lists, tuples and dicts too) as dicts as well."""
    if not is_record(obj) or isinstance(obj, type):
        raise TypeError("asdict() takes a record instance")
    return _plain(obj)


def _plain(v: Any) -> Any:
    if is_record(v) and not isinstance(v, type):
        return {n: _plain(x) for n, x in zip(type(v).__record_spec__[0], _values(v))}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, tuple):
        return type(v)(*[_plain(x) for x in v]) if hasattr(v, "_fields") else tuple(_plain(x) for x in v)
    if isinstance(v, dict):
        return {_plain(k): _plain(x) for k, x in v.items()}
    return v

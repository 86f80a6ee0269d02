"""Frozen dataclasses that cost nothing at import: :func:`record`.

``@record`` makes a class what ``@dataclass(frozen=True)`` makes it (``@record(slots=True)``: with
``slots=True``; ``@record(eq=False)``: with ``eq=False``; ``@record(frozen=False)``: what ``@dataclass`` makes
it). Its ``__init__`` takes the fields in order, with their defaults and default factories, and calls
``__post_init__``; assigning or deleting a field of a frozen record raises ``FrozenInstanceError``; it compares
by the tuple of its compared fields and, when frozen, hashes by it (else it is unhashable, as a dataclass
is), and prints as ``Name(field=value, …)``; methods the class defines itself are kept. A class's
``_as_fields`` (names of properties computed on first read) are shown, compared and hashed after its fields,
as fields would be. Fields are declared as for dataclasses, with this module's :func:`field` or
``dataclasses.field`` (its metadata kept); ``ClassVar`` annotations are not fields.

What differs: dataclasses compiles up to six functions per class when the class is made, and importing it
imports ``inspect`` and ``ast`` (together most of a short command's start-up). A record needs neither: it
compiles its ``__init__`` when its first instance is made and shares one ``__repr__``, ``__eq__`` and
``__hash__`` among all records. This module's :func:`fields`, :func:`replace` and :func:`asdict` serve
binlogd's own code; ``dataclasses.fields``, ``replace``, ``asdict`` and ``is_dataclass`` work on a record as
well, through a ``__dataclass_fields__`` made (importing dataclasses) when it is first read.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from operator import attrgetter


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: No default (and no default factory).
MISSING = _Missing()


class Field:
    """One field of a record. Fields: name, type (the annotation, as written), default and default_factory
    (MISSING when none), repr and compare (whether repr() shows it and ==/hash() use it), and declared: what
    the class body gave for it (a ``dataclasses.Field`` kept for ``__dataclass_fields__``), else None."""

    __slots__ = ("name", "type", "default", "default_factory", "repr", "compare", "declared")

    def __init__(self, default=MISSING, default_factory=MISSING, repr: bool = True, compare: bool = True) -> None:
        self.name, self.type, self.declared = "", None, None
        self.default, self.default_factory, self.repr, self.compare = default, default_factory, repr, compare

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, default={self.default!r}, default_factory={self.default_factory!r})"


def field(*, default=MISSING, default_factory=MISSING, repr: bool = True, compare: bool = True) -> Field:
    """A field's declaration in a record's body, as ``dataclasses.field`` (these four of its arguments).

    Raises:
        ValueError: both default and default_factory are given.
    """
    if default is not MISSING and default_factory is not MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return Field(default, default_factory, repr, compare)


def fields(obj) -> tuple[Field, ...]:
    """The fields of a record (class or instance), in ``__init__``'s order.

    Raises:
        TypeError: obj is not a record.
    """
    try:
        return obj.__record_fields__
    except AttributeError:
        raise TypeError(f"{obj!r} is not a record") from None


def replace(obj, /, **changes):
    """A new record of obj's class, with its fields but ``changes`` (as ``dataclasses.replace``).

    Raises:
        TypeError: obj is not a record, or a change names no field.
    """
    for f in fields(obj):
        if f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
    return obj.__class__(**changes)


def asdict(obj) -> dict:
    """A record's fields as a dict, records, lists, tuples and dicts in it converted alike (values are not
    copied, where ``dataclasses.asdict`` deep-copies them).

    Raises:
        TypeError: obj is not a record.
    """
    return {f.name: _plain(getattr(obj, f.name)) for f in fields(obj)}


def _plain(value):
    if hasattr(type(value), "__record_fields__"):
        return asdict(value)
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)  # a namedtuple
    if isinstance(value, dict):
        return type(value)((_plain(k), _plain(v)) for k, v in value.items())
    return value


def record(cls: type | None = None, /, *, slots: bool = False, eq: bool = True, frozen: bool = True):
    """Make ``cls`` a record, its methods made as this module says. Returns the class (with ``slots``, a new
    one, as dataclasses makes it).

    Raises:
        TypeError: a field without a default follows one with a default.
    """
    def wrap(cls: type) -> type:
        own = cls.__dict__
        keep_repr, keep_eq = "__repr__" in own, "__eq__" in own
        keep_hash = "__hash__" in own and not (own["__hash__"] is None and keep_eq)  # dataclasses' rule
        every, mine = _collect(cls)
        cls = _slotted(cls, every) if slots else _without_defaults(cls, mine)
        cls.__record_fields__ = every
        cls.__match_args__ = tuple(f.name for f in every)
        cls.__dataclass_fields__ = _DataclassFields()
        derived = tuple(getattr(cls, "_as_fields", ()))
        cls._shown = tuple(f.name for f in every if f.repr) + derived
        compared = [f.name for f in every if f.compare] + list(derived)
        cls._key = staticmethod(attrgetter(*compared) if len(compared) > 1 else _one(compared[0]) if compared
                                else _none)
        cls.__init__ = _first_init(cls)
        if not keep_repr:
            cls.__repr__ = _repr
        if eq and not keep_eq:
            cls.__eq__ = _eq
        if eq and not keep_hash:
            cls.__hash__ = _hash if frozen else None
        if frozen:
            cls.__setattr__, cls.__delattr__ = _frozen, _frozen
        if slots:  # pickle and copy: slots, and no __setattr__ (as dataclasses does)
            cls.__getstate__, cls.__setstate__ = _getstate, _setstate
        return cls

    return wrap if cls is None else wrap(cls)


def _collect(cls: type) -> tuple[tuple[Field, ...], list[Field]]:
    """The fields of cls: its bases' (records'), then those its own annotations declare. Returns (all, own).

    Raises:
        TypeError: a field without a default follows one with a default.
    """
    every: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for f in base.__dict__.get("__record_fields__", ()):
            every[f.name] = f
    mine = []
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        if _is_classvar(annotation):
            continue
        f = _declared(cls.__dict__.get(name, MISSING))
        f.name, f.type = name, annotation
        every[name] = f
        mine.append(f)
    defaulted = None
    for f in every.values():
        if f.default is not MISSING or f.default_factory is not MISSING:
            defaulted = f.name
        elif defaulted is not None:
            raise TypeError(f"non-default argument {f.name!r} follows default argument {defaulted!r}")
    return tuple(every.values()), mine


def _is_classvar(annotation) -> bool:
    if isinstance(annotation, str):
        return annotation.startswith(("ClassVar", "typing.ClassVar"))
    typing = sys.modules.get("typing")  # a ClassVar object is typing's: typing is imported then
    return typing is not None and getattr(annotation, "__origin__", annotation) is typing.ClassVar


def _declared(value) -> Field:
    """The Field a class body's value for an annotated name stands for."""
    if type(value) is Field:
        return value
    if type(value).__name__ == "Field" and type(value).__module__ == "dataclasses":
        import dataclasses

        f = Field(MISSING if value.default is dataclasses.MISSING else value.default,
                  MISSING if value.default_factory is dataclasses.MISSING else value.default_factory,
                  value.repr, value.compare)
        f.declared = value
        return f
    return Field(value)


def _without_defaults(cls: type, mine: list[Field]) -> type:
    """cls with a class attribute for each own field that has a default (its value), and none for the others
    (as dataclasses leaves them)."""
    for f in mine:
        if f.default is not MISSING:
            type.__setattr__(cls, f.name, f.default)
        elif f.name in cls.__dict__:
            type.__delattr__(cls, f.name)
    return cls


def _slotted(cls: type, every: tuple[Field, ...]) -> type:
    """A new class as cls, with a slot for each field no base has one for (as dataclasses makes it)."""
    inherited = set()
    for base in cls.__mro__[1:-1]:
        slots = base.__dict__.get("__slots__", ())
        inherited.update((slots,) if isinstance(slots, str) else slots)
    names = {f.name for f in every}
    body = {k: v for k, v in cls.__dict__.items() if k not in names and k not in ("__dict__", "__weakref__")}
    body["__slots__"] = tuple(f.name for f in every if f.name not in inherited)
    new = type(cls)(cls.__name__, cls.__bases__, body)
    new.__qualname__ = cls.__qualname__
    return new


class _DataclassFields:
    """A record's ``__dataclass_fields__``, made when first read: the fields dataclasses makes for a class
    with the same annotations and declarations (so that ``dataclasses.fields``, ``replace``, ``asdict`` and
    ``is_dataclass`` work on records)."""

    def __get__(self, obj, cls: type) -> dict:
        import dataclasses

        every = cls.__record_fields__
        body = {"__annotations__": {f.name: f.type for f in every}, "__module__": cls.__module__}
        for f in every:
            body[f.name] = f.declared if f.declared is not None else dataclasses.field(
                default=dataclasses.MISSING if f.default is MISSING else f.default,
                default_factory=dataclasses.MISSING if f.default_factory is MISSING else f.default_factory,
                repr=f.repr, compare=f.compare)
        made = dataclasses.dataclass(init=False, repr=False, eq=False)(type(cls.__name__, (), body))
        value = made.__dataclass_fields__
        type.__setattr__(cls, "__dataclass_fields__", value)
        return value


def _one(name: str) -> Callable:
    def key(self) -> tuple:
        return (getattr(self, name),)
    return key


def _none(self) -> tuple:
    return ()


class _Slotted:
    __slots__ = ("slot",)


_MEMBER = type(_Slotted.slot)  # the descriptor of a __slots__ entry


def _frozen(self, name, value=None):
    from dataclasses import FrozenInstanceError  # only now: its import is what records do without

    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _getstate(self) -> list:
    # A view of an event's bytes (RowsQueryEvent.statement) goes as bytes: a memoryview does not pickle.
    return [bytes(v) if type(v) is memoryview else v for v in (getattr(self, f.name) for f in fields(self))]


def _setstate(self, state: list) -> None:
    for f, value in zip(fields(self), state):
        object.__setattr__(self, f.name, value)


def _repr(self) -> str:
    return f"{type(self).__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self._shown)})"


def _eq(self, other) -> bool:
    return self._key(self) == other._key(other) if other.__class__ is self.__class__ else NotImplemented


def _hash(self) -> int:
    return hash(self._key(self))


def _first_init(cls: type) -> Callable:
    """``cls.__init__`` until its first instance: it compiles the real one (:func:`_compiled_init`),
    puts it on the class and runs it."""
    def __init__(self, *args, **kwargs):
        init = cls.__init__ = _compiled_init(cls)
        init(self, *args, **kwargs)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _compiled_init(cls: type) -> Callable:
    """An ``__init__`` taking ``cls``'s fields in order (defaults and default factories as declared),
    setting each and calling ``__post_init__`` if the class has one: the one dataclasses would write,
    except that a slot is set through its own descriptor (faster than ``object.__setattr__`` by name)."""
    params, body, names = ["self"], [], {"_set": object.__setattr__, "_MISSING": MISSING}
    for f in fields(cls):
        slot = cls.__dict__.get(f.name)
        if type(slot) is _MEMBER:
            names[f"_s_{f.name}"] = slot.__set__
        if f.default is not MISSING:
            names[f"_d_{f.name}"] = f.default
            params.append(f"{f.name}=_d_{f.name}")
        elif f.default_factory is not MISSING:
            names[f"_f_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_MISSING")
            body.append(f"if {f.name} is _MISSING: {f.name} = _f_{f.name}()")
        else:
            params.append(f.name)
        body.append(f"_s_{f.name}(self, {f.name})" if f"_s_{f.name}" in names else f"_set(self, {f.name!r}, {f.name})")
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    source = "\n".join([f"def __init__({', '.join(params)}):", *(f"    {line}" for line in body or ["pass"])])
    exec(compile(source, f"{cls.__module__}.<{cls.__qualname__}>", "exec"), names)
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init

"""Frozen dataclasses that cost nothing at import: :func:`record`.

``@record`` makes a class what ``@dataclass(frozen=True)`` makes it (``@record(slots=True)``: with
``slots=True``; ``@record(eq=False)``: with ``eq=False``). ``dataclasses.fields``, ``asdict``, ``replace`` and
``is_dataclass`` work on it; its ``__init__`` takes the fields in order, with their defaults and default
factories, and calls ``__post_init__``; assigning or deleting a field raises ``FrozenInstanceError``; it
compares and hashes by the tuple of its compared fields and prints as ``Name(field=value, …)``; methods the
class defines itself are kept. A class's ``_as_fields`` (names of properties computed on first read) are
shown, compared and hashed after its fields, as fields would be. What differs: dataclasses compiles up to six
functions per class when the class is made (about half a millisecond each class, which was most of the command
line's start-up), where a record compiles its ``__init__`` when its first instance is made and shares one
``__repr__``, ``__eq__`` and ``__hash__`` among all records. ``__dataclass_params__`` reads ``frozen=False``:
the record, not dataclasses, makes it frozen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, FrozenInstanceError, dataclass, fields
from operator import attrgetter


def record(cls: type | None = None, /, *, slots: bool = False, eq: bool = True):
    """Make ``cls`` a frozen dataclass, its methods made as this module says. Returns the class (with
    ``slots``, a new one, as dataclasses makes it)."""
    def wrap(cls: type) -> type:
        own = cls.__dict__
        keep_repr, keep_eq = "__repr__" in own, "__eq__" in own
        keep_hash = "__hash__" in own and not (own["__hash__"] is None and keep_eq)  # dataclasses' rule
        cls = dataclass(slots=slots, init=False, repr=False, eq=False)(cls)
        every, derived = fields(cls), tuple(getattr(cls, "_as_fields", ()))
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
            cls.__hash__ = _hash
        cls.__setattr__, cls.__delattr__ = _frozen, _frozen
        if slots:  # pickle and copy: slots, and no __setattr__ (as dataclasses does)
            cls.__getstate__, cls.__setstate__ = _getstate, _setstate
        return cls

    return wrap if cls is None else wrap(cls)


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

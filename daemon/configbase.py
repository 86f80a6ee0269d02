"""The config dataclasses' machinery: validated fields, the one-line ConfigError, the Secret password type.

A section is a frozen dataclass deriving from :class:`Section` whose fields are declared with :func:`setting`
(numeric range, allowed strings, non-empty); construction checks and normalises every field
(:func:`_validate`: ints accepted for floats, lists made tuples, ``""`` made None for optional strings,
choices lowercased, a string map's ``"key=value"`` list made a :class:`StrMap`) and then runs the section's
``_check`` for cross-field rules.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from dataclasses import field
from typing import ClassVar

from binlogd.protocol.errors import BinlogError


class ConfigError(BinlogError):
    """An invalid configuration value, key or file; ``str()`` is ``config error: <key>: <message> (from <origin>)``.

    Fields: key (dotted, ``""`` for a whole-file problem), message (never the password), origin (file path,
    ``BINLOGD_…`` variable, ``"command line"``, or None).
    """

    def __init__(self, key: str, message: str, origin: str | None = None):
        self.key, self.message, self.origin = key, message, origin
        text = "config error: " + (f"{key}: " if key else "") + message + (f" (from {origin})" if origin else "")
        super().__init__(text.replace("\r", "\\r").replace("\n", "\\n"))


class Secret:
    """A string that prints as ``***`` (repr, str, format); ``reveal()`` returns it. Immutable; equal to a
    Secret with the same value; truthy when non-empty."""

    __slots__ = ("_value",)

    def __init__(self, value: str = ""):
        object.__setattr__(self, "_value", str(value))

    def reveal(self) -> str:
        """Return the secret text."""
        return self._value

    def __setattr__(self, name, value):
        raise AttributeError("Secret is immutable")

    def __repr__(self) -> str:
        return "***"

    __str__ = __repr__
    __format__ = lambda self, spec: "***"
    __eq__ = lambda self, other: isinstance(other, Secret) and other._value == self._value
    __hash__ = lambda self: hash((Secret, self._value))
    __bool__ = lambda self: bool(self._value)
    __reduce__ = lambda self: (Secret, (self._value,))


def setting(default=dataclasses.MISSING, *, factory=dataclasses.MISSING, lo=None, hi=None, lo_open=False,
       choices=None, nonempty=False):
    """A dataclass field with validation metadata (numeric range, allowed strings, non-empty)."""
    meta = {"lo": lo, "hi": hi, "lo_open": lo_open, "choices": choices, "nonempty": nonempty}
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def type_kind(tp) -> str:
    """Map a resolved field type to one of: int float bool str optstr strs strmap secret section."""
    if dataclasses.is_dataclass(tp):
        return "section"
    if tp is Secret:
        return "secret"
    if tp in (int, float, bool, str):
        return tp.__name__
    args = typing.get_args(tp)
    if set(args) == {str, type(None)}:
        return "optstr"
    if typing.get_origin(tp) is tuple and args and args[0] is str:
        return "strs"
    if tp is StrMap:
        return "strmap"
    raise TypeError(f"unsupported config field type {tp!r}")


def expected_text(kind: str, meta: Mapping) -> str:
    """Describe what a field accepts, for error messages: ``an integer 1-65535``, ``one of 'a', 'b'``."""
    lo, hi, choices = meta.get("lo"), meta.get("hi"), meta.get("choices")
    if choices:
        return "one of " + ", ".join(repr(c) for c in choices)
    if kind == "int":
        return f"an integer {lo}-{hi}" if hi is not None else "an integer" + (f" >= {lo}" if lo is not None else "")
    if kind == "float":
        parts = [f"{'>' if meta.get('lo_open') else '>='} {lo:g}" if lo is not None else "",
                 f"<= {hi:g}" if hi is not None else ""]
        return "a number" + (" " + " and ".join(p for p in parts if p) if any(parts) else "")
    return {"bool": "true or false", "strs": "a list of strings", "section": "a table",
            "strmap": "a table of strings ({ key = \"value\" })"}.get(
        kind, "a non-empty string" if meta.get("nonempty") else "a string")


def shown_value(kind: str, value) -> str:
    """The value as shown in an error message (never the value of a secret)."""
    return f"a value of type {type(value).__name__}" if kind == "secret" else repr(value)


def _validate(obj) -> None:
    """Check and normalise every field of a config dataclass; raise ConfigError naming the first bad key."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        kind, meta, value = type_kind(hints[f.name]), f.metadata, getattr(obj, f.name)
        key = f"{obj.SECTION}.{f.name}"
        bad = ConfigError(key, f"must be {expected_text(kind, meta)}, got {shown_value(kind, value)}")
        if kind == "float" and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        elif kind == "strs" and isinstance(value, list):
            value = tuple(value)
        elif kind == "strmap" and isinstance(value, (list, tuple)) and all(isinstance(x, str) for x in value):
            value = str_map(value, bad)
        elif kind == "strmap" and isinstance(value, dict) and all(isinstance(x, str) for x in value.values()):
            value = StrMap(value)
        elif kind == "secret" and isinstance(value, str):
            value = Secret(value)
        elif kind == "optstr" and value == "":
            value = None
        elif kind == "str" and meta.get("choices") and isinstance(value, str):
            value = value.strip().lower()
        lo, hi = meta.get("lo"), meta.get("hi")
        if (not _type_ok(kind, value, hints[f.name])
                or lo is not None and (value <= lo if meta.get("lo_open") else value < lo)
                or hi is not None and value > hi
                or meta.get("choices") and value not in meta["choices"]
                or meta.get("nonempty") and not value.strip()):
            raise bad
        object.__setattr__(obj, f.name, value)


def _type_ok(kind: str, v, tp) -> bool:
    """True when ``v`` is of the field's (normalised) type."""
    if kind == "int":
        return isinstance(v, int) and not isinstance(v, bool)
    if kind == "float":
        return isinstance(v, float) and math.isfinite(v)
    if kind == "optstr":
        return v is None or isinstance(v, str)
    if kind == "strs":
        return isinstance(v, tuple) and all(isinstance(x, str) for x in v)
    if kind == "strmap":
        return isinstance(v, StrMap)
    return isinstance(v, {"bool": bool, "str": str, "secret": Secret}.get(kind, tp))


class StrMap(dict):
    """A config value that maps strings to strings: a dict that cannot change (so a config stays hashable)."""

    __slots__ = ()

    def __hash__(self) -> int:
        return hash(frozenset(self.items()))

    def _immutable(self, *args, **kwargs):
        raise TypeError("a config value cannot change")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _immutable


def str_map(items, bad: ConfigError) -> StrMap:
    """A string map from its list form, ``"key=value"`` items (the env's and the command line's text form, split
    at commas, and an older TOML form). Raises: ``bad``, naming the first item that is not one."""
    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise ConfigError(bad.key, f"items must be 'key=value' (or write a table: {{ key = \"value\" }}), "
                                       f"got {item!r}", bad.origin)
        out[key.strip()] = value.strip()
    return StrMap(out)


class Section:
    """Base of the section dataclasses: validates fields on construction, then runs ``_check``."""

    SECTION: ClassVar[str] = ""

    def __post_init__(self):
        _validate(self)
        self._check()

    def _check(self) -> None:
        """Cross-field checks; raise ConfigError."""


def error_reason(e: BaseException) -> str:
    return getattr(e, "strerror", None) or getattr(e, "reason", None) or type(e).__name__


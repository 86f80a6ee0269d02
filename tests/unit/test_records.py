"""protocol.records: a ``@record`` class behaves as the same class under ``@dataclass(frozen=True)``.

Each case declares one class body twice, once as a record and once as a dataclass, and checks that what
users of a frozen dataclass rely on comes out the same: the constructor (defaults, factories,
``__post_init__``, wrong arguments), fields, repr, equality, hashing, ``replace``, ``asdict``, pickle, copy
and the FrozenInstanceError. The module's own ``fields``, ``replace`` and ``asdict`` agree with dataclasses',
and importing it (or making records) does not import dataclasses.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from binlogd.protocol import records
from binlogd.protocol.records import record


def _pair(body: str, record_args: str = "", dataclass_args: str = "frozen=True",
          names: tuple[str, str] = ("C", "C")) -> tuple[type, type]:
    """The class of ``body`` made with ``@record(record_args)`` and with ``@dataclass(dataclass_args)``,
    named ``names`` in this module (pickle finds a class by its module and name)."""
    made = []
    for decorator, name in zip((f"record({record_args})" if record_args else "record",
                                f"dataclass({dataclass_args})"), names):
        scope = {"record": record, "dataclass": dataclass, "field": field, "__name__": __name__}
        exec(f"@{decorator}\nclass {name}:\n" + body, scope)  # noqa: S102 (the test's own source)
        made.append(scope[name])
    return made[0], made[1]


POINT = """
    x: int
    y: int = 2
    tags: list = field(default_factory=list)
    note: str = field(default="", repr=False, compare=False)
"""
RecPoint, DcPoint = _pair(POINT, names=("RecPoint", "DcPoint"))
RecSlotted, DcSlotted = _pair(POINT, "slots=True", "frozen=True, slots=True", ("RecSlotted", "DcSlotted"))
PAIRS = [(RecPoint, DcPoint), (RecSlotted, DcSlotted)]


def _same(a, b) -> None:
    assert repr(a).split("(", 1)[1] == repr(b).split("(", 1)[1]


@pytest.mark.parametrize("rec,dc", PAIRS)
def test_construction_fields_repr_eq_hash_match_dataclass(rec, dc):
    assert [f.name for f in dataclasses.fields(rec)] == [f.name for f in dataclasses.fields(dc)]
    assert dataclasses.is_dataclass(rec)
    for call in (lambda c: c(1), lambda c: c(1, 3), lambda c: c(x=5, tags=[1], note="n"), lambda c: c(1, 2, [3], "x")):
        a, b = call(rec), call(dc)
        _same(a, b)
        assert dataclasses.asdict(a) == dataclasses.asdict(b)
    assert rec(1) == rec(1, 2, [], "other note") and rec(1) != rec(2) and rec(1) != dc(1)
    assert hash(rec(1, 2, (), "a")) == hash(dc(1, 2, (), "b")) == hash((1, 2, ()))
    assert rec(1).tags is not rec(1).tags  # a fresh default per instance
    for bad in (lambda c: c(), lambda c: c(1, 2, [], "", 5), lambda c: c(1, z=3)):
        with pytest.raises(TypeError):
            bad(dc)
        with pytest.raises(TypeError):
            bad(rec)


@pytest.mark.parametrize("rec,dc", PAIRS)
def test_frozen_replace_pickle_copy(rec, dc):
    p = rec(1, 2, [3], "n")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        del p.y
    q = dataclasses.replace(p, y=9)
    assert (q.x, q.y, q.tags, q.note) == (1, 9, [3], "n")
    for clone in (pickle.loads(pickle.dumps(p)), copy.copy(p), copy.deepcopy(p)):
        assert clone == p and clone.note == "n" and type(clone) is rec
    assert hasattr(p, "__dict__") == hasattr(dc(1), "__dict__")  # slots as dataclasses makes them


def test_post_init_runs_and_may_set_fields():
    body = """
    name: str
    def __post_init__(self):
        if not self.name:
            raise ValueError("empty")
        object.__setattr__(self, "name", self.name.lower())
"""
    for cls in _pair(body):
        assert cls("ABC").name == "abc"
        with pytest.raises(ValueError):
            cls("")
        assert dataclasses.replace(cls("X"), name="Y").name == "y"


def test_the_class_own_methods_are_kept_and_eq_false_is_identity():
    body = """
    a: int
    def __repr__(self):
        return "mine"
    def __eq__(self, other):
        return isinstance(other, type(self)) and self.a % 10 == other.a % 10
"""
    rec, dc = _pair(body)
    assert repr(rec(1)) == repr(dc(1)) == "mine"
    assert rec(1) == rec(11) and dc(1) == dc(11)
    assert hash(rec(1)) == hash(dc(1))  # __eq__ without __hash__: the fields' hash, as dataclasses adds
    rec, dc = _pair("    a: int\n", "eq=False", "frozen=True, eq=False")
    assert rec(1) != rec(1) and dc(1) != dc(1)
    one = rec(1)
    assert one == one and {one: 1}[one] == 1


def test_subclass_adds_fields():
    base = record(slots=True)(type("Base", (), {"__annotations__": {"a": "int"}, "__module__": __name__}))
    child = record(slots=True)(type("Child", (base,), {"__annotations__": {"b": "int"}, "b": 0,
                                                       "__module__": __name__}))
    c = child(1, 2)
    assert (c.a, c.b) == (1, 2) and repr(c) == "Child(a=1, b=2)" and c == child(1, 2) != base(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.a = 3


@pytest.mark.parametrize("rec,dc", PAIRS)
def test_own_fields_replace_asdict_agree_with_dataclasses(rec, dc):
    p = rec(1, 2, [rec(3)], "n")
    ours = [(f.name, f.repr, f.compare) for f in records.fields(p)]
    assert ours == [(f.name, f.repr, f.compare) for f in dataclasses.fields(dc)]
    assert records.asdict(p) == dataclasses.asdict(p) == {"x": 1, "y": 2, "note": "n",
                                                         "tags": [{"x": 3, "y": 2, "tags": [], "note": ""}]}
    assert records.replace(p, y=9, note="m") == dataclasses.replace(p, y=9, note="m") == rec(1, 9, [rec(3)])
    with pytest.raises(TypeError):
        records.replace(p, z=1)
    with pytest.raises(TypeError):
        records.fields(dc(1))


def test_mutable_record_is_a_plain_dataclass():
    rec, dc = _pair(POINT, "frozen=False", "")
    a, b = rec(1), dc(1)
    a.x, b.x = 5, 5
    _same(a, b)
    assert a == rec(5) and rec.__hash__ is None is dc.__hash__  # eq without frozen: unhashable, as dataclasses
    assert dataclasses.replace(a, y=3) == rec(5, 3)


def test_classvars_metadata_and_defaults_order():
    body = """
    KIND: ClassVar[str] = "k"
    a: int = field(default=1, metadata={"lo": 0})
    b: list = field(default_factory=list, metadata={"hi": 9})
"""
    scope = {"record": record, "field": field, "ClassVar": __import__("typing").ClassVar, "__name__": __name__}
    exec("@record\nclass M:\n" + body, scope)  # noqa: S102
    m = scope["M"]
    assert [f.name for f in records.fields(m)] == ["a", "b"] and m.KIND == "k"
    assert [dict(f.metadata) for f in dataclasses.fields(m)] == [{"lo": 0}, {"hi": 9}]
    assert m() == m(1, []) and m.a == 1 and not hasattr(m, "b")  # as dataclasses leaves the class
    typing = __import__("typing")
    evaluated = record(type("E", (), {"__annotations__": {"K": typing.ClassVar[int], "a": int}, "K": 1, "a": 2,
                                      "__module__": __name__}))  # annotations as objects, not strings
    assert [f.name for f in records.fields(evaluated)] == ["a"] and evaluated.K == 1 and evaluated().a == 2
    with pytest.raises(TypeError, match="non-default argument 'c' follows default argument 'a'"):
        exec("@record\nclass N:\n    a: int = 1\n    c: int\n", dict(scope))  # noqa: S102


def test_records_do_without_dataclasses():
    code = ("import sys; from binlogd.protocol import events, records; from binlogd.library.schema import model;"
            "e = events.EventHeader(1, 2, 3, 4, 5, 6); records.replace(e, pos=9); records.asdict(e);"
            "print('dataclasses' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr

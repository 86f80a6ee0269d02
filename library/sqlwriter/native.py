"""The statements of a rows event written in C, straight from its row images.

The reference path decodes every row into a dict of Python values and renders each value with the
renderers of :mod:`.literals` (:class:`.rowsql.TablePlan`). When the optional C extension
``library._sqlrows`` is built, :func:`row_lines` writes the same bytes from the row images instead:
each image shape of a table is compiled once (the decoder's plan, :func:`protocol.rowcodec.image_plan`,
and how each column's literal is written) and no Python object is made per value, except for the kinds
of values whose literal comes from a Python function (JSON, VECTOR, old TIME and DATETIME, text of
character sets other than UTF-8, latin1 and ascii), which are given to their renderer. PARTIAL_UPDATE_ROWS
events, rows events made by hand, images flashback cannot invert and ``BINLOGD_PURE_PYTHON=1`` take the
reference path, and so does any event the C writer raises on (the reference raises the canonical error).
The two give the same bytes (tests/unit/test_sql_native.py, tests/integration/test_sql_native_every_type.py).
"""

from __future__ import annotations

from binlogd.protocol import events as E
from binlogd.protocol import rowcodec, speedups
from binlogd.protocol.constants import ColumnType as T
from binlogd.protocol.primitives import text as text_of
from binlogd.protocol.rows import RowImages

from .literals import literal_kind, quote
from .rowsql import TablePlan

try:
    from binlogd.library import _sqlrows as C
except ImportError:  # not built: the reference path writes every row
    C = None

_speedups = C is not None and rowcodec.C is not None and speedups.ENABLED
_ENCODING = ("utf-8", "surrogateescape")  # the output's: surrogate-escaped text turns back into the logged bytes
_NATIVE_KINDS = frozenset({"number", "double", "temporal", "bit", "enum_set", "null"})


def use_speedups(enabled: bool = True) -> bool:
    """Write rows with the C extension (when it and the C row decoder are built) or not; returns whether
    it now does. The default comes from ``BINLOGD_PURE_PYTHON`` (:mod:`protocol.speedups`)."""
    global _speedups
    _speedups = bool(enabled) and C is not None and rowcodec.C is not None
    return _speedups


def keep_freed_memory() -> bool:
    """Have malloc keep freed memory for reuse (``_sqlrows.keep_freed_memory``), when the C writer is in use: for
    ``binlogd sql``, a process that writes and exits. Returns whether it applied."""
    return _speedups and C.keep_freed_memory()


def speedups_enabled() -> bool:
    """Whether :func:`row_lines` writes with the C extension."""
    return _speedups


class _Shape:
    """One image shape of a table compiled for the C writer.

    Fields:
        image: the ``_sqlrows.Image``. full: it holds every column. keyed: it finds exactly its row
        (the whole primary key, or every column). insert, update, delete: the heads of the statements
        (``INSERT INTO `db`.`t` (`a`,`b`…) VALUES ``, ``UPDATE `db`.`t` SET ``, ``DELETE FROM `db`.`t```).
    """

    __slots__ = ("image", "full", "keyed", "insert", "update", "delete")

    def __init__(self, plan: TablePlan, present: list[int], null_offset: int):
        names = [plan.table_columns[i].name for i in present]
        plan_entries = rowcodec.image_plan(plan.table_columns, present)
        forms = tuple(_form(plan, plan.table_columns[i], entry) for i, entry in zip(present, plan_entries))
        has_key = bool(plan.pk) and all(k in names for k in plan.pk)
        key = tuple(names.index(k) for k in plan.pk) if has_key else None
        self.image = C.Image(plan_entries, null_offset, forms, key)
        self.full = len(present) == len(plan.table_columns)
        self.keyed = has_key or self.full
        columns = ",".join(plan.quoted[n] for n in names)
        self.insert = f"INSERT INTO {plan.name} ({columns}) VALUES ".encode(*_ENCODING)
        self.update = f"UPDATE {plan.name} SET ".encode(*_ENCODING)
        self.delete = f"DELETE FROM {plan.name}".encode(*_ENCODING)


def _load_powers() -> None:
    """Give the C writer the powers of 5 it writes DOUBLE and FLOAT values with (once; computed exactly)."""
    global _powers
    if not _powers:
        def top(p: int) -> int:  # the top 125 bits
            return p >> p.bit_length() - 125 if p.bit_length() >= 125 else p << 125 - p.bit_length()

        pow5 = b"".join(top(5**i).to_bytes(16, "little") for i in range(326))
        inv = b"".join(((1 << (5**q).bit_length() - 1 + 125) // 5**q + 1).to_bytes(16, "little") for q in range(292))
        C.load_powers(pow5, inv)
        _powers = True


_powers = False


def _form(plan: TablePlan, col, entry: tuple) -> tuple:
    """How the C writer writes one column's literal: ``(form, quoted name, arg)`` (see ``library._sqlrows``).

    Raises:
        ValueError: a column only the reference can write (an integer of unknown signedness).
    """
    op, _, params, _ = entry
    name = plan.quoted[col.name].encode(*_ENCODING)
    kind = literal_kind(col)
    python_op = op in (rowcodec.C.OP_TEXT, rowcodec.C.OP_BYTES_CALL, rowcodec.C.OP_FIXED_CALL, rowcodec.C.OP_JSON)
    if kind in ("double", "float"):
        _load_powers()
    if kind in _NATIVE_KINDS and not python_op:
        if op in (rowcodec.C.OP_ENUM, rowcodec.C.OP_SET) and params[1] is not None:
            literals = [quote(n) for n in params[1]]
            if op == rowcodec.C.OP_SET:  # quote(",".join(names)): the names escaped, one pair of quotes
                literals = [text[1:-1] for text in literals]
            return C.F_NATIVE, name, tuple(text.encode(*_ENCODING) for text in literals)
        return C.F_NATIVE, name, None
    if kind == "float" and op == rowcodec.C.OP_FIXED_CALL and params[0] == 4:
        return C.F_FLOAT32, name, None
    if kind == "text" and op == rowcodec.C.OP_TEXT:
        return C.F_TEXT, name, None
    if kind == "hex" and op == rowcodec.C.OP_BYTES_CALL:  # BINARY(n): the decoder pads it to n bytes
        return C.F_HEX, name, col.meta if col.type == T.STRING else 0
    if kind != "signed?" and python_op:
        return C.F_CALL, name, (plan.value[col.name], plan.match[col.name])
    raise ValueError(f"no C form for {col!r}")


def _shape(plan: TablePlan, present_bits: int, null_offset: int) -> _Shape | None:
    """The compiled shape of an image (cached on the plan), None when only the reference can write it."""
    key = (present_bits, null_offset)
    cache = plan.native
    if key not in cache:
        try:
            if len({c.name for c in plan.table_columns}) != len(plan.table_columns):
                raise ValueError("two columns of one name: a row dict keeps one of them")
            present = [i for i in range(len(plan.table_columns)) if present_bits >> i & 1]
            cache[key] = _Shape(plan, present, null_offset)
        except ValueError:
            cache[key] = None
    return cache[key]


def _writer(plan: TablePlan, event: E.RowsEvent, invert: bool) -> tuple | None:
    """The arguments ``C.rows`` writes the event's statements with after its data: ``(first image, second
    image or None, what, head, invert)``; None when the reference must write them (see the module doc)."""
    images = event.images
    if not _speedups or type(images) is not RowImages or images.partial or \
            images.codec.columns is not plan.table_columns and images.codec.columns != plan.table_columns:
        return None
    first = _shape(plan, images.present_before, images.null_offset)
    if first is None:
        return None
    kind = event.kind
    if kind == "update":
        after = images.present_after if images.present_after is not None else images.present_before
        second = _shape(plan, after, images.null_offset)
        if second is None or invert and not (first.full and second.keyed):
            return None
        return first.image, second.image, C.W_UPDATE_SWAPPED if invert else C.W_UPDATE, first.update, invert
    if kind == ("delete" if invert else "insert"):
        if invert and not first.full:
            return None
        return first.image, None, C.W_VALUES, first.insert, invert
    if invert and not first.keyed:  # an insert undone
        return None
    return first.image, None, C.W_DELETE, first.delete, invert


def row_lines(plan: TablePlan, event: E.RowsEvent, invert: bool) -> list[bytes] | None:
    """The statements of one rows event as :meth:`TablePlan.replay` (or, with ``invert``,
    :meth:`TablePlan.invert`) gives them, each followed by ``;``, as UTF-8 bytes in one line item
    (statements parted by newlines); None when the reference must write them (see the module doc).

    The caller has checked that the event holds rows. The plan must be the one of the event's TABLE_MAP.

    Raises:
        EventDecodeError, SqlOutError, …: what the C writer raised; the caller then takes the reference
            path, which raises the canonical error (or, should the C writer have failed otherwise, writes).
    """
    args = _writer(plan, event, invert)
    if args is None:
        return None
    first, second, what, head, reverse = args
    return [C.rows(first, second, event.images.data, what, head, reverse)[0]]


def run_lines(plan: TablePlan, run, invert: bool) -> list[bytes] | None:
    """:func:`row_lines` of every event of a :class:`.groups.RowsRun` (the last first with ``invert``), in one
    line item: what ``row_lines`` gives for each, in order, parted by newlines; None as for ``row_lines``.

    Raises:
        as :func:`row_lines`: the caller then takes the run's events one by one.
    """
    args = _writer(plan, run.first, invert)
    if args is None:
        return None
    first, second, what, head, reverse = args
    return [C.rows_events(first, second, run.view, run.start, run.stop, run.head, run.crc, what, head, reverse)[0]]


def comment(query: str | None, raw: memoryview | bytes | None) -> bytes | tuple:
    """An ANNOTATE_ROWS or ROWS_QUERY statement as SQL comment lines, UTF-8: ``-- `` before each of its
    lines, a carriage return as a space (``raw``: the statement's bytes as logged, ``RowsQueryEvent.statement``,
    or None; ``query``: the decoder's text of them, or None to have it decoded from raw only when needed). The
    C writer writes raw when it is well-formed UTF-8, which the text is then made of; else the text is written.

    Returns:
        The lines as bytes, or, when raw is one well-formed UTF-8 line, ``(b"-- ", raw)``: the line as two
        pieces to be written one after the other, so that a long statement is not copied (nor its copy's
        memory first touched) on its way out.
    """
    if _speedups and raw is not None:
        if C.one_line(raw):
            return b"-- ", raw
        text = C.comment(raw)
        if text is not None:
            return text
    if query is None:
        query = text_of(raw)  # as RowsQueryEvent.query decodes it
    return b"-- " + query.encode(*_ENCODING).replace(b"\r", b" ").replace(b"\n", b"\n-- ")

"""Row-image decoders compiled once per TABLE_MAP and column-presence bitmap.

A :class:`TableCodec` turns a table's columns into Python source for one
function per image shape, specialised to the column types (fixed-width values
read with ``struct`` at known offsets, no per-value dispatch), and compiles it.
The generated function is ``image(view, pos, partial) -> (row_dict, new_pos)``
(``partial``: the JSON columns an after image holds as diffs, decoded to :class:`protocol.jsonb.JsonDiffs`);
values go to locals and the row dict is built once, at the end.

When the optional C extension :mod:`protocol._rowimage` is built (``pip install``
compiles it where a compiler is available), images are decoded by it instead,
from a plan (:func:`image_plan`) built once per image shape; values it does not
decode natively (FLOAT, JSON, GEOMETRY, VECTOR, BINARY padding, binary text,
unknown charsets, pre-5.6 temporal types) go through the same Python functions.
Set ``BINLOGD_PURE_PYTHON=1`` in the environment, or call
:func:`use_speedups(False) <use_speedups>`, to use the generated Python code.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import partial as _bind

from . import speedups
from . import values as V
from .charsets import codec_for_collation
from .constants import ColumnType as T
from .errors import EventDecodeError
from .jsonb import decode_json, decode_json_diff
from .tablemap import BLOB_TYPES, Column

ImageDecoder = Callable[[memoryview, int, frozenset], tuple[dict, int]]

_STRUCTS = {
    "i8": struct.Struct("<b"), "i16": struct.Struct("<h"), "u16": struct.Struct("<H"),
    "i32": struct.Struct("<i"), "u32": struct.Struct("<I"), "i64": struct.Struct("<q"),
    "u64": struct.Struct("<Q"), "f32": struct.Struct("<f"), "f64": struct.Struct("<d"),
}
_INT_FORMATS = {T.TINY: (1, "i8", None), T.SHORT: (2, "i16", "u16"), T.LONG: (4, "i32", "u32"),
                T.LONGLONG: (8, "i64", "u64")}
BINARY_COLLATION = 63

try:
    from . import _rowimage as C
except ImportError:  # not built (no compiler at install time): the generated Python code does it all
    C = None
_speedups = C is not None and speedups.ENABLED


def use_speedups(enabled: bool = True) -> bool:
    """Decode row images with the C extension (when it is built) or not; returns whether it now is.

    Affects images compiled afterwards (new TABLE_MAPs); the default comes from ``BINLOGD_PURE_PYTHON``.
    """
    global _speedups
    _speedups = bool(enabled) and C is not None
    return _speedups


def speedups_enabled() -> bool:
    """Whether new row image decoders are the C extension's."""
    return _speedups


def _globals() -> dict:
    ns = {f"_{k}": s.unpack_from for k, s in _STRUCTS.items()}
    ns.update(_float32=V.float32, _date=V.date_text, _dates=V.DATE_TEXTS, _ymds=V.YMD_TEXTS, _times=V.HMS_TEXTS,
              _ymd=V.ymd_text, _hms=V.hms_text, _dt2=V.datetime2_text,
              _time2=V.time2_text, _ts2=V.timestamp2_text, _utc=V.utc_text, _otime=V.old_time_text,
              _odt=V.old_datetime_text, _year=V.year_value, _b64=V.base64_text, _padded=V.padded_base64,
              _guess=V.text_or_base64,
              _json=decode_json, _jdiff=decode_json_diff, _vector=V.vector_value, _int=int.from_bytes)
    return ns


class _Source:
    """Accumulates generated lines and the per-column constants they reference."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: dict[str, object] = {}

    def const(self, name: str, value: object) -> str:
        self.consts[name] = value
        return name


def _prefixed(key: str, prefix_len: int, convert: str) -> list[str]:
    """A value stored as a little-endian length of ``prefix_len`` bytes then the data."""
    length = {1: "n = v[p]", 2: "n = v[p] | v[p + 1] << 8", 4: "n = _u32(v, p)[0]"}.get(
        prefix_len, f"n = _int(v[p:p + {prefix_len}], 'little')")
    return [length, f"p += {prefix_len}", f"{key} = {convert.format(raw='v[p:p + n]')}", "p += n"]


def _string_convert(src: _Source, col: Column) -> str:
    """Expression template turning raw bytes into the column's string form."""
    coll = col.collation
    if coll is None:
        return "_guess({raw})"
    codec = codec_for_collation(coll)
    if coll == BINARY_COLLATION or codec is None:
        return "_b64({raw})"
    name = src.const(f"_codec{col.index}", codec)
    return "str({raw}, " + name + ", 'backslashreplace')"


def _number_lines(src: _Source, col: Column, key: str) -> list[str] | None:
    """Integers, floats, YEAR, DECIMAL and BIT; None for another type."""
    t, m = col.type, col.meta
    if t in _INT_FORMATS:
        size, signed, unsigned = _INT_FORMATS[t]
        if t == T.TINY and col.unsigned:
            return [f"{key} = v[p]", "p += 1"]
        fmt = unsigned if col.unsigned else signed
        return [f"{key} = _{fmt}(v, p)[0]", f"p += {size}"]
    if t == T.INT24:
        return [f"{key} = _int(v[p:p + 3], 'little', signed={not col.unsigned})", "p += 3"]
    if t == T.FLOAT:
        return [f"{key} = _float32(_f32(v, p)[0])", "p += 4"]
    if t == T.DOUBLE:
        return [f"{key} = _f64(v, p)[0]", "p += 8"]
    if t == T.YEAR:
        return [f"{key} = _year(v[p])", "p += 1"]
    if t == T.NEWDECIMAL:
        return _decimal_lines(src, col, key)
    if t == T.BIT:
        bits, nbytes = m
        size = (nbytes * 8 + bits + 7) // 8
        return [f"{key} = _int(v[p:p + {size}], 'big')", f"p += {size}"]
    return None


def _decimal_lines(src: _Source, col: Column, key: str) -> list[str]:
    """DECIMAL(prec, scale): one integer and one fraction group split inline, any other by its decoder."""
    (prec, scale), i = col.meta, col.index
    valid = 0 < prec <= 65 and 0 <= scale <= min(prec, 30)
    size = V.decimal_size(prec, scale) if valid else 0
    if valid and prec <= 18 and scale and prec - scale <= 9 and scale <= 9:
        # One integer group and one fraction group: split one big-endian integer inline.
        frac_bits = 8 * V.decimal_size(scale, scale)
        sign = 1 << (8 * size - 1)
        message = src.const(f"_msg{i}", f"DECIMAL({prec},{scale}) has an out-of-range digit group")
        return [f"x = _int(v[p:p + {size}], 'big')",
                f"if x & {sign}: x ^= {sign}; s = ''",
                f"else: x ^= {sign ^ ((1 << 8 * size) - 1)}; s = '-'",
                f"w = x >> {frac_bits}; f = x & {(1 << frac_bits) - 1}",
                f"if w >= {10 ** (prec - scale)} or f >= {10 ** scale}: raise _err({message})",
                f"{key} = '%s%d.%0{scale}d' % ('' if not (w or f) else s, w, f)",
                f"p += {size}"]
    fn = src.const(f"_dec{i}", V.decimal_decoder(prec, scale))
    return [f"{key} = {fn}(v, p)", f"p += {size}"]


def _time_lines(col: Column, key: str) -> list[str] | None:
    """Dates, times, datetimes and timestamps (old and fractional forms); None for another type."""
    t, m = col.type, col.meta
    if t in (T.DATE, T.NEWDATE):
        return ["x = v[p] | v[p + 1] << 8 | v[p + 2] << 16", f"{key} = _dates.get(x) or _date(x)", "p += 3"]
    if t == T.TIME:
        return [f"{key} = _otime(_int(v[p:p + 3], 'little', signed=True))", "p += 3"]
    if t == T.DATETIME:
        return [f"{key} = _odt(_u64(v, p)[0])", "p += 8"]
    if t == T.TIMESTAMP:
        return [f"{key} = _utc(_u32(v, p)[0])", "p += 4"]
    if t not in (T.TIME2, T.DATETIME2, T.TIMESTAMP2):
        return None
    fsp = m if isinstance(m, int) and 0 <= m <= 6 else 0
    if t == T.DATETIME2:
        return _datetime2_lines(fsp, key)
    base, fn = {T.TIME2: (3, "_time2"), T.TIMESTAMP2: (4, "_ts2")}[t]
    return [f"{key} = {fn}(v, p, {fsp})", f"p += {base + (fsp + 1) // 2}"]


def _datetime2_lines(fsp: int, key: str) -> list[str]:
    """DATETIME2(fsp) inline: 5 bytes of date and time, then (fsp + 1) // 2 bytes of fraction."""
    nfrac = (fsp + 1) // 2
    lines = ["x = _int(v[p:p + 5], 'big') - 0x8000000000",
             "y = x >> 17", "z = x & 0x1FFFF",
             "d = (_ymds.get(y) or _ymd(y)) + ' ' + (_times.get(z) or _hms(z))"]
    if fsp == 6:
        lines.append("d += '.%06d' % (v[p + 5] << 16 | v[p + 6] << 8 | v[p + 7])")
    elif nfrac:
        unit = (10_000, 100, 1)[nfrac - 1]
        lines.append(f"d += '.' + ('%06d' % (_int(v[p + 5:p + {5 + nfrac}], 'big') * {unit}))[:{fsp}]")
    return lines + [f"{key} = d", f"p += {5 + nfrac}"]


def _member_lines(src: _Source, col: Column, key: str) -> list[str] | None:
    """ENUM (its name) and SET (its names), or the number when the names are not known; None for another type."""
    t, m, i = col.type, col.meta, col.index
    if t == T.ENUM:
        size = m if m in (1, 2) else 1
        lines = [f"x = _int(v[p:p + {size}], 'little')", f"p += {size}"]
        if col.enum_values is not None:
            names = src.const(f"_enum{i}", ("",) + col.enum_values)
            return lines + [f"{key} = {names}[x] if x <= {len(col.enum_values)} else x"]
        return lines + [f"{key} = x"]
    if t == T.SET:
        size = m if 1 <= m <= 8 else 1
        lines = [f"x = _int(v[p:p + {size}], 'little')", f"p += {size}"]
        if col.set_values is not None:
            names = src.const(f"_set{i}", col.set_values)
            return lines + [f"{key} = [s for b, s in enumerate({names}) if x >> b & 1]"]
        return lines + [f"{key} = x"]
    return None


def _bytes_lines(src: _Source, col: Column, key: str) -> list[str] | None:
    """Length-prefixed values: strings, BLOBs, GEOMETRY, VECTOR, JSON; None for another type."""
    t, m = col.type, col.meta
    if t == T.STRING and col.collation == BINARY_COLLATION:
        return _prefixed(key, 1 if m < 256 else 2, "_padded({raw}, " + str(m) + ")")
    if t in (T.VARCHAR, T.VAR_STRING, T.STRING):
        return _prefixed(key, 1 if m < 256 else 2, _string_convert(src, col))
    prefix = m if m in (1, 2, 3, 4) else 4
    if t in BLOB_TYPES:
        return _prefixed(key, prefix, _string_convert(src, col))
    if t == T.GEOMETRY:
        return _prefixed(key, prefix, "_b64({raw})")
    if t == T.VECTOR:
        return _prefixed(key, prefix, "_vector({raw})")
    if t == T.JSON:
        lines = _prefixed(key, prefix, "_json({raw})")
        lines[2] = f"{key} = _jdiff(v[p:p + n]) if {col.index} in partial else _json(v[p:p + n])"
        return lines
    return None


def _column_lines(src: _Source, col: Column, key: str) -> list[str]:
    """Generated statements that decode one non-NULL value of ``col`` at ``p`` into the local ``key``."""
    lines = (_number_lines(src, col, key) or _time_lines(col, key) or _member_lines(src, col, key)
             or _bytes_lines(src, col, key))
    if lines is not None:
        return lines
    if col.type == T.NULL:
        return [f"{key} = None"]
    # Never put data from the binlog (names, types) into generated source: only via constants.
    message = src.const(f"_msg{col.index}",
                        f"column {col.label!r} has type {int(col.type)}, which cannot appear in a row image")
    return [f"raise _err({message})"]


def compile_image(columns: tuple[Column, ...], present: list[int], null_offset: int = 0) -> ImageDecoder:
    """Compile the decoder for an image holding the columns at indexes ``present``.

    ``null_offset`` is 1 for pre-GA (5.1 beta) rows, whose null bitmap is the
    MyISAM record's, with bit 0 reserved.
    """
    src = _Source()
    nbytes = (len(present) + null_offset + 7) // 8
    body = [
        f"if p + {nbytes} > len(v): raise _err('row image null bitmap runs past the event')",
        f"nb = _int(v[p:p + {nbytes}], 'little')" if nbytes else "nb = 0",
        f"p += {nbytes}",
    ]
    items = []
    for bit, idx in enumerate(present):
        col = columns[idx]
        key, local = src.const(f"_k{idx}", col.label), f"c{idx}"
        items.append(f"{key}: {local}")
        if col.nullable:
            body.append(f"if nb >> {bit + null_offset} & 1: {local} = None")
            body.append("else:")
            body.extend("    " + line for line in _column_lines(src, col, local))
        else:  # NOT NULL: the server never sets its null bit, so there is nothing to test
            body.extend(_column_lines(src, col, local))
    body.append("if p > len(v): raise _err('row image runs past the end of the event')")
    body.append("return {" + ", ".join(items) + "}, p")
    code = "def image(v, p, partial):\n" + "\n".join("    " + line for line in body) + "\n"
    namespace = _globals()
    namespace.update(src.consts, _err=EventDecodeError)
    exec(compile(code, f"<row image of {len(columns)} columns>", "exec"), namespace)
    return namespace["image"]


def _float_value(raw: bytes) -> float:
    return V.float32(_STRUCTS["f32"].unpack(raw)[0])


def _old_time(raw: bytes) -> str:
    return V.old_time_text(int.from_bytes(raw, "little", signed=True))


def _old_datetime(raw: bytes) -> str:
    return V.old_datetime_text(int.from_bytes(raw, "little"))


def _big_endian(raw: bytes) -> int:
    return int.from_bytes(raw, "big")


def _plan_op(col: Column) -> tuple[int, tuple]:
    """The C opcode and params decoding one non-NULL value of ``col``: the same value as :func:`_column_lines`."""
    t, m, i = col.type, col.meta, col.index
    if t in _INT_FORMATS or t == T.INT24:
        return C.OP_INT, ({T.TINY: 1, T.SHORT: 2, T.INT24: 3, T.LONG: 4, T.LONGLONG: 8}[t], not col.unsigned)
    if t == T.FLOAT:
        return C.OP_FIXED_CALL, (4, _float_value)
    simple = {T.DOUBLE: C.OP_DOUBLE, T.YEAR: C.OP_YEAR, T.DATE: C.OP_DATE, T.NEWDATE: C.OP_DATE,
              T.TIMESTAMP: C.OP_TIMESTAMP}
    if t in simple:
        return simple[t], ()
    if t == T.TIME:
        return C.OP_FIXED_CALL, (3, _old_time)
    if t == T.DATETIME:
        return C.OP_FIXED_CALL, (8, _old_datetime)
    if t in (T.TIME2, T.DATETIME2, T.TIMESTAMP2):
        fsp = m if isinstance(m, int) and 0 <= m <= 6 else 0
        return {T.TIME2: C.OP_TIME2, T.DATETIME2: C.OP_DATETIME2, T.TIMESTAMP2: C.OP_TIMESTAMP2}[t], (fsp,)
    if t == T.NEWDECIMAL:
        prec, scale = m
        if not (0 < prec <= 65 and 0 <= scale <= min(prec, 30)):
            return C.OP_RAISE, (f"invalid DECIMAL({prec},{scale})",)
        # values.decimal_decoder keeps the sign of a zero with 9+ fraction digits; the inline form never does.
        inline = prec <= 18 and scale and prec - scale <= 9 and scale <= 9
        return C.OP_DECIMAL, (prec, scale, bool(inline or scale < 9))
    if t == T.BIT:
        bits, nbytes = m
        size = (nbytes * 8 + bits + 7) // 8
        return (C.OP_BIT, (size,)) if size <= 8 else (C.OP_FIXED_CALL, (size, _big_endian))
    if t == T.ENUM:
        names = ("",) + col.enum_values if col.enum_values is not None else None
        return C.OP_ENUM, (m if m in (1, 2) else 1, names)
    if t == T.SET:
        return C.OP_SET, (m if 1 <= m <= 8 else 1, col.set_values)
    if t == T.STRING and col.collation == BINARY_COLLATION:
        return C.OP_BYTES_CALL, (1 if m < 256 else 2, _bind(V.padded_base64, length=m))
    prefix = None
    if t in (T.VARCHAR, T.VAR_STRING, T.STRING):
        prefix = 1 if m < 256 else 2
    elif t in BLOB_TYPES:
        prefix = m if m in (1, 2, 3, 4) else 4
    if prefix is not None:
        codec = codec_for_collation(col.collation)
        if col.collation is None:
            return C.OP_BYTES_CALL, (prefix, V.text_or_base64)
        if col.collation == BINARY_COLLATION or codec is None:
            return C.OP_BYTES_CALL, (prefix, V.base64_text)
        return C.OP_TEXT, (prefix, codec)
    prefix = m if m in (1, 2, 3, 4) else 4
    if t == T.GEOMETRY:
        return C.OP_BYTES_CALL, (prefix, V.base64_text)
    if t == T.VECTOR:
        return C.OP_BYTES_CALL, (prefix, V.vector_value)
    if t == T.JSON:
        return C.OP_JSON, (prefix, i, decode_json, decode_json_diff)
    if t == T.NULL:
        return C.OP_NONE, ()
    return C.OP_RAISE, (f"column {col.label!r} has type {int(t)}, which cannot appear in a row image",)


def image_plan(columns: tuple[Column, ...], present: list[int]) -> tuple:
    """The C extension's plan for an image holding the columns at ``present``.

    One ``(opcode, nullable, params, key)`` per present column (see :mod:`protocol._rowimage`).
    """
    return tuple((op, columns[idx].nullable, params, columns[idx].label)
                 for idx in present for op, params in (_plan_op(columns[idx]),))


_NO_PARTIAL: frozenset = frozenset()


def decode_rows(first: ImageDecoder, second: ImageDecoder | None, data: bytes, out: list) -> None:
    """Append every row image of ``data`` to ``out`` (``(before, after)`` pairs when ``second`` is given).

    Rows decoded before an error stay in ``out``, so the caller can say which row failed.

    Raises:
        EventDecodeError: malformed rows, or an image that holds no column.
    """
    if C is not None and type(first) is C.Image and (second is None or type(second) is C.Image):
        C.decode_rows(first, second, data, out)
        return
    pos, end, append = 0, len(data), out.append
    if second is None:
        while pos < end:
            row, new_pos = first(data, pos, _NO_PARTIAL)
            if new_pos == pos:
                raise EventDecodeError("row image is empty (no column present): the event cannot hold rows")
            append(row)
            pos = new_pos
    else:
        while pos < end:
            start = pos
            before, pos = first(data, pos, _NO_PARTIAL)
            after, pos = second(data, pos, _NO_PARTIAL)
            if pos == start:
                raise EventDecodeError("row images are empty (no column present): the event cannot hold rows")
            append((before, after))


class TableCodec:
    """Row decoding for one TABLE_MAP: compiled image decoders, cached by presence bitmap.

    Fields:
        columns: the table's columns.
        labels: the key of each column in decoded rows.
        json_columns: indexes of JSON columns (for PARTIAL_UPDATE_ROWS bits).
    """

    __slots__ = ("columns", "labels", "json_columns", "_images")

    def __init__(self, columns: tuple[Column, ...]):
        self.columns = columns
        self.labels = tuple(c.label for c in columns)
        self.json_columns = tuple(c.index for c in columns if c.type == T.JSON)
        self._images: dict[tuple[int, int], ImageDecoder] = {}

    def image(self, present_bits: int, null_offset: int = 0) -> ImageDecoder:
        """The compiled decoder for an image whose present columns are ``present_bits`` (LSB = column 1)."""
        key = (present_bits, null_offset, _speedups)
        fn = self._images.get(key)
        if fn is None:
            present = [i for i in range(len(self.columns)) if present_bits >> i & 1]
            if _speedups:
                fn = C.Image(image_plan(self.columns, present), null_offset)
            else:
                fn = compile_image(self.columns, present, null_offset)
            self._images[key] = fn
        return fn

    def compiled(self, kind: str, present_bits: int, null_offset: int, build: Callable[[tuple, list, int], object]):
        """Another form of the image :meth:`image` decodes (``kind``: e.g. "json", see :mod:`library.jsonrows`),
        made once by ``build(columns, present, null_offset)`` and cached like the decoders."""
        key = (present_bits, null_offset, kind)
        if key not in self._images:
            self._images[key] = build(self.columns, [i for i in range(len(self.columns)) if present_bits >> i & 1],
                                      null_offset)
        return self._images[key]

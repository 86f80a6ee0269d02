"""``before``/``after`` in a caller-given Spark type instead of JSON text.

By default a row image is JSON text (:func:`library.serialize.dumps`), the
values in README.md's JSON forms ("Values"). When the caller's schema gives ``before`` or
``after`` another type, each column value (already in its JSON form) maps as:

=====================  =======================================================================
Spark type             from the JSON value
=====================  =======================================================================
string                 strings as they are; numbers, lists, objects as JSON text
boolean                booleans; numbers (TINYINT(1)): non-zero is true
byte/short/int/long    integers; integral DECIMAL strings and floats; booleans as 0/1
float/double           numbers; DECIMAL strings
decimal(p,s)           DECIMAL strings and numbers, rounded half up to scale s (as Spark casts)
date                   ``YYYY-MM-DD``; MySQL's zero dates (month or day 0) are null
timestamp / _ntz       ``YYYY-MM-DD HH:MM:SS[.f]`` read as UTC; zero dates are null; numbers are unix seconds
binary                 base64 text (BINARY/BLOB/GEOMETRY) decoded; other strings as UTF-8
array<T>               lists (SET names, VECTOR, JSON arrays), elements mapped as T
map<string,T>          objects (JSON columns), values mapped as T
struct<…>              objects, fields by name, missing fields null
=====================  =======================================================================

For the image itself: ``map<string,T>`` gives every column of the image (only the
columns present in a MINIMAL/NOBLOB image appear); ``struct<…>`` picks columns by
name, ignores others and leaves absent ones null. A value that does not map (text
into an int field, say) fails the task with a :class:`ConversionError` naming the
file, the offset, the row, the table and the column; a schema is a promise.
"""

from __future__ import annotations

import base64
import datetime as dt
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from binlogd.library.serialize import dumps

_UTC = dt.timezone.utc


class ConversionError(ValueError):
    """A row value that does not fit the caller's schema (never treated as a corrupt file)."""


def _fail(value, type_name: str):
    raise ConversionError(f"cannot convert {value!r} to {type_name}")


def _json_text(value) -> str:
    return value if isinstance(value, str) else dumps(value).decode()


def _to_int(value):
    if type(value) is int:
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (float, Decimal)) and value == int(value):
        return int(value)
    if isinstance(value, str):
        try:
            d = Decimal(value)
        except InvalidOperation:
            return None
        if d == d.to_integral_value():
            return int(d)
    return None


def _to_float(value):
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _to_bool(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    return None


def _zero_date(text: str) -> bool:
    return text[5:7] == "00" or text[8:10] == "00" or text.startswith("0000-00-00")


def _to_date(value):
    if isinstance(value, str) and len(value) >= 10:
        if _zero_date(value):
            return _NULL
        try:
            return dt.date.fromisoformat(value[:10])
        except ValueError:
            return None
    return None


def _to_datetime(value, aware: bool):
    if isinstance(value, str) and len(value) >= 10:
        if _zero_date(value):
            return _NULL
        try:
            out = dt.datetime.fromisoformat(value)
        except ValueError:
            return None
        if out.tzinfo is not None:
            out = out.astimezone(_UTC)
            return out if aware else out.replace(tzinfo=None)
        return out.replace(tzinfo=_UTC) if aware else out
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        out = dt.datetime.fromtimestamp(value, _UTC)
        return out if aware else out.replace(tzinfo=None)
    return None


def _to_binary(value):
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except ValueError:
            return value.encode("utf-8")
    return None


_NULL = object()  # a value that maps to null on purpose (zero dates)


def value_converter(data_type):
    """A function JSON-form value -> Python value of ``data_type`` (raises ConversionError)."""
    from pyspark.sql import types as T

    name = data_type.simpleString()
    if isinstance(data_type, T.StringType):
        return lambda v: None if v is None else _json_text(v)
    if isinstance(data_type, T.ArrayType):
        elem = value_converter(data_type.elementType)

        def array(v):
            if v is None:
                return None
            if not isinstance(v, list):
                _fail(v, name)
            return [elem(x) for x in v]
        return array
    if isinstance(data_type, T.MapType):
        if not isinstance(data_type.keyType, T.StringType):
            raise ConversionError(f"map keys must be strings, not {data_type.keyType.simpleString()}")
        val = value_converter(data_type.valueType)

        def mapping(v):
            if v is None:
                return None
            if not isinstance(v, dict):
                _fail(v, name)
            return {k: val(x) for k, x in v.items()}
        return mapping
    if isinstance(data_type, T.StructType):
        fields = [(f.name, value_converter(f.dataType)) for f in data_type.fields]

        def struct(v):
            if v is None:
                return None
            if not isinstance(v, dict):
                _fail(v, name)
            return {n: conv(v.get(n)) for n, conv in fields}
        return struct
    if isinstance(data_type, T.DecimalType):
        quantum = Decimal(1).scaleb(-data_type.scale)

        def decimal(v):
            if v is None:
                return None
            try:
                if isinstance(v, bool):
                    raise InvalidOperation
                d = v if isinstance(v, Decimal) else Decimal(str(v) if isinstance(v, (int, float)) else v)
                return d.quantize(quantum, rounding=ROUND_HALF_UP)
            except (InvalidOperation, TypeError, ValueError):
                _fail(v, name)
        return decimal
    if isinstance(data_type, T.TimestampType):
        scalar = lambda v: _to_datetime(v, True)  # noqa: E731
    elif isinstance(data_type, T.TimestampNTZType):
        scalar = lambda v: _to_datetime(v, False)  # noqa: E731
    elif isinstance(data_type, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        scalar = _to_int
    elif isinstance(data_type, (T.FloatType, T.DoubleType)):
        scalar = _to_float
    elif isinstance(data_type, T.BooleanType):
        scalar = _to_bool
    elif isinstance(data_type, T.DateType):
        scalar = _to_date
    elif isinstance(data_type, T.BinaryType):
        scalar = _to_binary
    else:
        raise ConversionError(f"before/after fields cannot be {name}")

    def convert(v):
        if v is None:
            return None
        out = scalar(v)
        if out is None:
            _fail(v, name)
        return None if out is _NULL else out
    return convert


def image_converter(data_type):
    """A function row image (dict or None) -> the column value for ``data_type``."""
    from pyspark.sql import types as T

    if isinstance(data_type, (T.StringType, T.BinaryType)):
        return lambda image: None if image is None else dumps(image)
    if isinstance(data_type, T.MapType):
        return value_converter(data_type)
    if isinstance(data_type, T.StructType):
        fields = [(f.name, value_converter(f.dataType)) for f in data_type.fields]

        def struct(image):
            if image is None:
                return None
            out = {}
            for name, conv in fields:
                try:
                    out[name] = conv(image.get(name))
                except ConversionError as exc:
                    raise ConversionError(f"column {name}: {exc}") from None
            return out
        return struct
    raise ConversionError(f"before/after must be string, binary, map<string,…> or struct<…>, "
                          f"not {data_type.simpleString()}")


def pair_converter(before_type, after_type):
    """``(before, after, change) -> (before value, after value)`` for ChangeRows, with context in errors."""
    conv_b = image_converter(before_type)
    conv_a = image_converter(after_type)

    def convert(before, after, change):
        try:
            return conv_b(before), conv_a(after)
        except ConversionError as exc:
            src = change.get("source", {}) if change else {}
            raise ConversionError(
                f"{src.get('file')}: {change.get('op')} of {change.get('schema')}.{change.get('table')} "
                f"at offset {src.get('pos')} row {src.get('row')}: {exc}") from None
    return convert

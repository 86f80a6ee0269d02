"""Events and row values as JSON-ready objects, in the forms README.md fixes ("Values").

``binlogd dump --json``, the JSON-lines sink and the Spark source all go
through :func:`event_to_dict` and :func:`dumps`, so they agree byte for byte.
"""

from __future__ import annotations

import dataclasses
from base64 import b64encode
from decimal import Decimal

import orjson

from binlogd.protocol import events as E
from binlogd.protocol.constants import EventType
from binlogd.protocol.jsonb import JsonDiffs
from binlogd.protocol.records import fields
from binlogd.protocol.tablemap import Column

from .identity import stream_prefix

_SKIP = {"header", "images", "_cache", "events", "statement", "_text"}


def _default(obj):
    """orjson fallback: exact decimals as JSON numbers, bytes as base64, other values as text."""
    if isinstance(obj, Decimal):
        return orjson.Fragment(format(obj, "f").encode())
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return b64encode(obj).decode("ascii")
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if dataclasses.is_dataclass(obj):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def dumps(obj) -> bytes:
    """JSON bytes (no trailing newline) for an event dict or a change event."""
    return orjson.dumps(obj, default=_default)


def column_to_dict(col: Column) -> dict:
    """A TABLE_MAP column as JSON: only the facts that are known."""
    out = {"name": col.label, "type": int(col.type), "meta": col.meta, "nullable": col.nullable}
    for key in ("unsigned", "collation", "enum_values", "set_values", "geometry_type", "vector_dimensions"):
        value = getattr(col, key)
        if value is not None:
            out[key] = value
    if col.primary_key:
        out["primary_key"] = True
    if not col.visible:
        out["visible"] = False
    return out


_PARTIAL_UPDATE = int(EventType.PARTIAL_UPDATE_ROWS)
_DIFF_OPS = {"REPLACE": "replace", "INSERT": "insert", "REMOVE": "remove"}


def has_json_diffs(event: E.RowsEvent) -> bool:
    """Whether the event's after images may hold :class:`protocol.jsonb.JsonDiffs` (a PARTIAL_UPDATE_ROWS event)."""
    return event.header.type_code == _PARTIAL_UPDATE


def split_json_diffs(after: dict) -> tuple[dict, dict | None]:
    """An after image without its partially updated JSON columns, and their diffs.

    Returns ``(after, None)`` when no column holds diffs, else a new image without them and
    ``{column: [{"op": "replace"|"insert"|"remove", "path", "value"}, …]}`` (no ``value`` for "remove"),
    the diffs in the order they apply to the column's value before the update.
    """
    if not any(type(v) is JsonDiffs for v in after.values()):
        return after, None
    image, diffs = {}, {}
    for key, value in after.items():
        if type(value) is JsonDiffs:
            diffs[key] = [{"op": _DIFF_OPS[d.op], "path": d.path} if d.op == "REMOVE" else
                          {"op": _DIFF_OPS[d.op], "path": d.path, "value": d.value} for d in value]
        else:
            image[key] = value
    return image, diffs


def rows_to_json(event: E.RowsEvent) -> list:
    """WRITE/DELETE rows as ``{column: value}``; UPDATE rows as ``{"before": …, "after": …}``, and
    ``"json_diffs"`` after them when the after image held partial JSON (:func:`split_json_diffs`)."""
    if event.kind == "update":
        if has_json_diffs(event):
            out = []
            for before, after in event.rows:
                image, diffs = split_json_diffs(after)
                row = {"before": before, "after": image}
                if diffs:
                    row["json_diffs"] = diffs
                out.append(row)
            return out
        return [{"before": before, "after": after} for before, after in event.rows]
    return event.rows


def event_to_dict(event: E.Event, file: str | None = None, next_pos: int | None = None, rows: bool = True) -> dict:
    """One event as the stable JSON object of ``binlogd dump --json``.

    Keys: file, pos, next_pos, timestamp, type, server_id, then the event's own
    fields. Row events add schema, table and rows; TABLE_MAP's columns are
    objects; a TRANSACTION_PAYLOAD gives ``event_count`` (its events follow it).
    ``pos`` is ``header.pos``; ``next_pos`` defaults to ``pos + event_length``, the real
    offset after the event, never the header's next_position (0 inside a transaction on
    MariaDB 11.4+, the primary's offsets in a relay log). An event inside a
    TRANSACTION_PAYLOAD has its payload's pos: pass the payload's end as ``next_pos``.
    ``rows=False`` leaves a row event's rows out (:func:`library.jsonrows.event_json` writes them).
    """
    h = event.header
    next_pos = h.pos + h.event_length if next_pos is None else next_pos
    out = {"file": file, "pos": h.pos, "next_pos": next_pos, "timestamp": h.timestamp,
           "type": h.type_name, "server_id": h.server_id}
    if isinstance(event, E.RowsEvent):
        out.update(schema=event.schema, table=event.table, table_id=event.table_id, flags=event.flags)
        if rows:
            out["rows"] = rows_to_json(event)
        return out
    for f in fields(event):  # the record's own tuple (dataclasses.fields rebuilds one per call)
        if f.name in _SKIP:
            continue
        value = getattr(event, f.name)
        if f.name == "columns":
            value = [column_to_dict(c) for c in value]
        elif f.name == "post_header_lengths":
            value = list(value)
        out[f.name] = value
    if isinstance(event, E.RowsQueryEvent):
        out["query"] = event.query  # its text, decoded from ``statement`` now
    elif isinstance(event, E.GtidEvent):
        out["gtid"] = event.gtid
    elif isinstance(event, E.MariadbGtidEvent):
        out["gtid"], out["standalone"] = event.gtid, event.standalone
    elif isinstance(event, E.TransactionPayloadEvent):
        out["event_count"] = len(event.events)
    return out


def flatten(event: E.Event):
    """The event, then (for a TRANSACTION_PAYLOAD) its inner events in order."""
    yield event
    if isinstance(event, E.TransactionPayloadEvent):
        yield from event.events


def change_events(event: E.RowsEvent, file: str | None, gtid: str | None, inner: int = 0):
    """The change events (ARCHITECTURE.md's change-event contract) of one rows event, one per row.

    Yields dicts with op, schema, table, before, after, json_diffs (only when the update's after image
    held partial JSON: :func:`split_json_diffs`), ts and source (server_id, file, pos, gtid, row, id);
    ``source.pos`` is the rows event's position, ``inner`` its offset inside its TRANSACTION_PAYLOAD (0:
    none), ``source.id`` the change's identity (:mod:`library.identity`).
    """
    h = event.header
    base = {"server_id": h.server_id, "file": file, "pos": h.pos, "gtid": gtid}
    prefix = stream_prefix(file or "", h.pos, inner)
    partial = event.kind == "update" and has_json_diffs(event)
    for index, row in enumerate(event.rows):
        diffs = None
        if event.kind == "update":
            before, after = row
            if partial:
                after, diffs = split_json_diffs(after)
        elif event.kind == "insert":
            before, after = None, row
        else:
            before, after = row, None
        if diffs:
            yield {"op": event.kind, "schema": event.schema, "table": event.table, "before": before,
                   "after": after, "json_diffs": diffs, "ts": h.timestamp,
                   "source": {**base, "row": index, "id": f"{prefix}:{index}"}}
            continue
        yield {"op": event.kind, "schema": event.schema, "table": event.table, "before": before,
               "after": after, "ts": h.timestamp, "source": {**base, "row": index, "id": f"{prefix}:{index}"}}

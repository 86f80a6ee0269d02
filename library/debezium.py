"""Change events in Debezium's MySQL envelope (``[sink] format = "debezium"``; README.md, "Debezium format").

A binlogd change event (ARCHITECTURE.md's change-event contract, :func:`library.serialize.change_events`)
becomes the value payload that Debezium's MySQL connector writes with ``schemas.enable=false``: no
``schema`` part, and the fields in the order of Debezium 2.6+:

``{"before", "after", "source": {"version", "connector": "mysql", "name", "ts_ms", "snapshot", "db",
"sequence": null, "ts_us", "ts_ns", "table", "server_id", "gtid", "file", "pos", "row", "id", "thread": null,
"query": null}, "op", "ts_ms", "ts_us", "ts_ns", "transaction": null}``

``source.id`` is binlogd's change identity (:mod:`library.identity`), which Debezium's envelope has no field for.

``op``: insert/update/delete/read become c/u/d/r. ``source.ts_*`` is the event's time (binlog header,
whole seconds), the top-level ``ts_*`` the time binlogd wrote the change. ``before`` and ``after`` are
binlogd's row objects unchanged (README.md's "Values" forms, not Debezium's numeric encodings).
``json_diffs`` (binlogd's, :func:`library.serialize.split_json_diffs`) follows ``after`` in an update whose
after image held partial JSON; Debezium has no field for it.

Three ways in, the same bytes out (``tests/unit/test_debezium.py``): :func:`envelope` (a dict),
:func:`debezium_json` (its JSON, from a change dict or a change's JSON bytes), and :func:`change_lines`
(every row of a rows event, written from the row images by :func:`library.jsonrows.rows_json`, no
dict per row). :func:`formatter` and :func:`rows_writer` pick by format name, for any sink.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import cache, partial

import orjson

from binlogd.protocol import events as E

from . import jsonrows, metaevents
from .identity import stream_prefix
from .serialize import change_events, dumps

FORMATS = ("binlogd", "debezium")
DEFAULT_SERVER_NAME = "binlogd"
OPS = {"insert": "c", "update": "u", "delete": "d", "read": "r"}
# binlogd's source.snapshot (absent on streamed changes) -> Debezium's source.snapshot text
_SNAPSHOT = {None: "false", False: "false", True: "true", "false": "false", "true": "true", "last": "last",
             "incremental": "incremental", "first": "first", "first_in_data_collection": "first_in_data_collection",
             "last_in_data_collection": "last_in_data_collection"}


@cache
def version() -> str:
    """``source.version``: binlogd's own version (installed package metadata), never a Debezium version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    try:
        return package_version("binlogd")
    except PackageNotFoundError:
        return "unknown"


def snapshot_text(value) -> str:
    """Debezium's ``source.snapshot`` for binlogd's ``source.snapshot`` (None: a streamed change).

    True -> "true", "incremental"/"last"/... as they are, None/False -> "false".

    Raises:
        ValueError: a value binlogd never writes.
    """
    try:
        return _SNAPSHOT[value]
    except (KeyError, TypeError):
        raise ValueError(f"unknown source.snapshot value {value!r}") from None


def _source(server_name: str, ts: int, snapshot: str, schema: str, table: str, server_id: int, gtid, file,
            pos: int) -> dict:
    """Debezium's MySQL ``source`` up to (not including) ``row``."""
    return {"version": version(), "connector": "mysql", "name": server_name, "ts_ms": ts * 1000,
            "snapshot": snapshot, "db": schema, "sequence": None, "ts_us": ts * 1_000_000,
            "ts_ns": ts * 1_000_000_000, "table": table, "server_id": server_id, "gtid": gtid, "file": file,
            "pos": pos}


def envelope(change: dict, server_name: str = DEFAULT_SERVER_NAME, now_ns: int | None = None) -> dict:
    """The Debezium envelope of one binlogd change event.

    ``change``: a dict of ARCHITECTURE.md's change-event shape (op, schema, table, before, after, ts,
    source: server_id, file, pos, gtid, row, optional snapshot). ``server_name``: ``source.name``, the
    logical server name. ``now_ns``: the processing time in nanoseconds since the epoch (default: now).
    Returns a new dict; ``before``/``after`` are the change's own objects (not copied).

    Raises:
        KeyError: a field of the change-event shape is missing.
        ValueError: an op or a source.snapshot that binlogd never writes.
    """
    src = change["source"]
    try:
        op = OPS[change["op"]]
    except KeyError:
        raise ValueError(f"unknown change op {change['op']!r}") from None
    now_ns = time.time_ns() if now_ns is None else now_ns
    diffs = change.get("json_diffs")
    source = _source(server_name, change["ts"], snapshot_text(src.get("snapshot")), change["schema"],
                     change["table"], src["server_id"], src["gtid"], src["file"], src["pos"])
    source.update(row=src["row"], id=src["id"], thread=None, query=None)
    if diffs is not None:  # right after "after", where change_lines writes it
        return {"before": change["before"], "after": change["after"], "json_diffs": diffs, "source": source,
                "op": op, "ts_ms": now_ns // 1_000_000, "ts_us": now_ns // 1_000, "ts_ns": now_ns, "transaction": None}
    return {"before": change["before"], "after": change["after"], "source": source, "op": op,
            "ts_ms": now_ns // 1_000_000, "ts_us": now_ns // 1_000, "ts_ns": now_ns, "transaction": None}


def debezium_json(change: dict | bytes, server_name: str = DEFAULT_SERVER_NAME, now_ns: int | None = None) -> bytes:
    """JSON bytes (no newline) of :func:`envelope` for a change dict, or for a change's JSON bytes as the
    binlogd format writes them (one line of the jsonl sink, with or without its newline).

    Raises:
        KeyError, ValueError: as :func:`envelope`; orjson.JSONDecodeError (a ValueError) for bytes that
        are not JSON.
    """
    if isinstance(change, (bytes, bytearray, memoryview, str)):
        change = orjson.loads(change)
    return dumps(envelope(change, server_name, now_ns))


def change_lines(event: E.RowsEvent, file: str | None, gtid: str | None, inner: int = 0,
                 server_name: str = DEFAULT_SERVER_NAME, now_ns: int | None = None) -> tuple[bytes, int]:
    """Debezium's :func:`library.jsonrows.change_lines`: the envelope of every row of one rows event, one
    JSON line each (the bytes of ``debezium_json(change, server_name, now_ns)`` and a newline for each change of
    :func:`library.serialize.change_events`), and how many there are. One processing time for the event.

    Raises:
        EventDecodeError: malformed rows.
    """
    h = event.header
    now_ns = time.time_ns() if now_ns is None else now_ns
    source = dumps(_source(server_name, h.timestamp, "false", event.schema, event.table, h.server_id, gtid,
                           file, h.pos))[:-1] + b',"row":'
    tail = (b'","thread":null,"query":null},"op":"%s","ts_ms":%d,"ts_us":%d,"ts_ns":%d,"transaction":null}\n'
            % (OPS[event.kind].encode(), now_ns // 1_000_000, now_ns // 1_000, now_ns))
    again = jsonrows.id_opening(stream_prefix(file or "", h.pos, inner))
    if event.kind == "insert":
        return jsonrows.rows_json(event, b'{"before":null,"after":', b"", b',"source":' + source, b"", tail, again)
    if event.kind == "delete":
        return jsonrows.rows_json(event, b'{"before":', b"", b',"after":null,"source":' + source, b"", tail, again)
    return jsonrows.rows_json(event, b'{"before":', b',"after":', b',"source":' + source, b"", tail, again)


def transaction_lines(event: E.RowsEvent, file: str | None, gtid: str | None, inner: int, order: tuple,
                      server_name: str = DEFAULT_SERVER_NAME, now_ns: int | None = None) -> tuple[bytes, int]:
    """:func:`change_lines` with each change's ``transaction`` block filled in (``[sink] transaction_events``):
    ``{"id", "total_order", "data_collection_order"}``, counted on from ``order`` = (the transaction's id, its
    changes so far, this table's changes so far in it)."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    tx, total, in_table = order
    out = []
    for index, change in enumerate(change_events(event, file, gtid, inner), 1):
        value = envelope(change, server_name, now_ns)
        value["transaction"] = {"id": tx, "total_order": total + index, "data_collection_order": in_table + index}
        out.append(dumps(value) + b"\n")
    return b"".join(out), len(out)


def meta_json(event: dict, server_name: str = DEFAULT_SERVER_NAME, now_ns: int | None = None) -> bytes:
    """JSON bytes (no newline) of Debezium's value for an event beyond rows (:mod:`library.metaevents`)."""
    now_ns = time.time_ns() if now_ns is None else now_ns

    def source_of(ddl: dict) -> dict:
        src = ddl["source"]
        source = _source(server_name, ddl["ts"], "false", ddl["schema"], ddl["table"], src["server_id"],
                         src["gtid"], src["file"], src["pos"])
        source.update(row=0, id=src["id"], thread=None, query=None)
        return source

    return dumps(metaevents.debezium(event, server_name, source_of, now_ns // 1_000_000))


def check_format(fmt: str) -> str:
    """``fmt`` when it names a format.

    Raises:
        ValueError: not one of :data:`FORMATS`.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown change-event format {fmt!r} (one of {', '.join(FORMATS)})")
    return fmt


def formatter(fmt: str = "binlogd", server_name: str = DEFAULT_SERVER_NAME) -> Callable[[dict], bytes]:
    """The function a sink gives a change dict to get its JSON bytes (no newline) in format ``fmt``:
    :func:`library.serialize.dumps` for "binlogd", :func:`debezium_json` for "debezium".

    Raises:
        ValueError: an unknown format.
    """
    if check_format(fmt) == "binlogd":
        return dumps
    return partial(debezium_json, server_name=server_name)


def meta_formatter(fmt: str = "binlogd", server_name: str = DEFAULT_SERVER_NAME) -> Callable[[dict], bytes]:
    """:func:`formatter` for the events beyond rows: :func:`library.serialize.dumps` for "binlogd",
    :func:`meta_json` for "debezium".

    Raises:
        ValueError: an unknown format.
    """
    if check_format(fmt) == "binlogd":
        return dumps
    return partial(meta_json, server_name=server_name)


def rows_writer(fmt: str = "binlogd", server_name: str = DEFAULT_SERVER_NAME
                ) -> Callable[[E.RowsEvent, str | None, str | None, int], tuple[bytes, int]]:
    """The function a sink gives ``(event, file, gtid, inner)`` to get the JSON lines of a rows event's changes and
    their count in format ``fmt``: :func:`library.jsonrows.change_lines` itself for "binlogd",
    :func:`change_lines` for "debezium". Lines end in ``\\n``; JSON never holds a raw newline, so
    ``lines.split(b"\\n")[:-1]`` gives one message per change.

    Raises:
        ValueError: an unknown format.
    """
    if check_format(fmt) == "binlogd":
        return jsonrows.change_lines
    return partial(change_lines, server_name=server_name)

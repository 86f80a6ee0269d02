"""The events beyond rows: a transaction's begin and commit, a schema change, a heartbeat (README.md, "Events
beyond rows"), in the "binlogd" format and in Debezium's.

The "binlogd" form, one object per line or message:

- ``{"op": "begin", "transaction", "ts", "source"}`` before a transaction's first selected change;
- ``{"op": "commit", "transaction", "ts", "source", "events": N, "tables": {"s.a": n}}`` after its last one
  (``transaction``: its GTID, or ``file:pos`` of the event that opened it without one: Debezium's id);
- ``{"op": "ddl", "schema", "table", "ddl", "ts", "source", "columns": [...]}`` for each selected table a DDL
  statement changed: its columns after the statement, as the schema history holds them (``[]``: dropped or not
  known);
- ``{"op": "heartbeat", "ts", "source"}``: ``source`` the daemon's committed position.

``source`` is ``{"server_id", "file", "pos", "gtid", "id"}``: ``id`` the event's identity
(:mod:`library.identity`), ``pos`` where its binlog event starts (a heartbeat's: the committed position).
:func:`debezium` gives Debezium 2.6+'s value for each; binlogd's ``source.id`` is in ``source.id`` there too, so one
path de-duplicates every event.
"""

from __future__ import annotations

import time

from .schema.model import TableDef

#: The kinds of event, as the bus sinks route them: their own stream, subject or table each.
KINDS = {"begin": "transaction", "commit": "transaction", "ddl": "schema", "heartbeat": "heartbeat"}


def begin(transaction: str, source: dict, ts: int) -> dict:
    """A transaction's begin event (``source``: server_id, file, pos, gtid, id; ``transaction``:
    :func:`transaction_id`)."""
    return {"op": "begin", "transaction": transaction, "ts": ts, "source": source}


def commit(transaction: str, source: dict, ts: int, tables: dict) -> dict:
    """A transaction's commit event; ``tables``: changes per ``"schema.table"``, in the order first written."""
    return {"op": "commit", "transaction": transaction, "ts": ts, "source": source,
            "events": sum(tables.values()), "tables": tables}


def ddl(schema: str, table: str, statement: str, source: dict, ts: int, definition: TableDef | None) -> dict:
    """A schema-change event of table ``schema.table`` (``definition``: after the statement; None: dropped or not
    known)."""
    return {"op": "ddl", "schema": schema, "table": table, "ddl": statement, "ts": ts, "source": source,
            "columns": columns(definition)}


def heartbeat(source: dict, ts: int) -> dict:
    """A heartbeat event carrying the committed position in ``source``."""
    return {"op": "heartbeat", "ts": ts, "source": source}


def columns(definition: TableDef | None) -> list[dict]:
    """A definition's columns as the ddl event lists them: name, type (with length, precision, scale, unsigned,
    values, dimensions where known), nullable, charset where known, primary_key when in the key."""
    if definition is None:
        return []
    key = {name.lower() for name in definition.primary_key}
    out = []
    for col in definition.columns:
        item = {"name": col.name, "type": type_text(col), "nullable": col.nullable}
        if col.charset is not None:
            item["charset"] = col.charset
        if col.name.lower() in key:
            item["primary_key"] = True
        out.append(item)
    return out


def type_text(col) -> str:
    """A column's type as SQL text: ``varchar(40)``, ``decimal(10,2)``, ``int unsigned``, ``enum('a','b')``."""
    name = col.type
    if col.values is not None:
        quoted = ",".join("'" + v.replace("'", "''") + "'" for v in col.values)
        name = f"{name}({quoted})"
    elif col.type == "decimal" and col.precision is not None:
        name = f"decimal({col.precision},{col.scale or 0})"
    elif col.dimensions is not None:
        name = f"{name}({col.dimensions})"
    elif col.length is not None:
        name = f"{name}({col.length})"
    elif col.precision:
        name = f"{name}({col.precision})"
    return name + " unsigned" if col.unsigned else name


def transaction_id(gtid: str | None, file: str, pos: int) -> str:
    """Debezium's transaction id: the GTID, or ``file:pos`` of the event that opened it without one."""
    return gtid if gtid else f"{file}:{pos}"


def debezium(event: dict, server_name: str, source_of, now_ms: int | None = None) -> dict:
    """Debezium's value for one of this module's events.

    ``source_of(event)`` gives Debezium's ``source`` block of a ddl event (the change envelope's, with
    ``source.id``). Begin/commit: ``{"status": "BEGIN"|"END", "id", "ts_ms", "event_count",
    "data_collections", "source": {"id"}}``; ddl: ``{"source", "ts_ms", "databaseName", "schemaName", "ddl",
    "tableChanges"}``; heartbeat: ``{"ts_ms", "source": {"id", "file", "pos", "gtid"}}``.

    Raises:
        KeyError: not an event of this module.
    """
    now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    op, src = event["op"], event["source"]
    if op in ("begin", "commit"):
        tx = event["transaction"]
        if op == "begin":
            return {"status": "BEGIN", "id": tx, "ts_ms": event["ts"] * 1000, "event_count": None,
                    "data_collections": None, "source": {"id": src["id"]}}
        collections = [{"data_collection": name, "event_count": n} for name, n in event["tables"].items()]
        return {"status": "END", "id": tx, "ts_ms": event["ts"] * 1000, "event_count": event["events"],
                "data_collections": collections, "source": {"id": src["id"]}}
    if op == "ddl":
        return {"source": source_of(event), "ts_ms": now_ms, "databaseName": event["schema"], "schemaName": None,
                "ddl": event["ddl"], "tableChanges": [_table_change(event)]}
    return {"ts_ms": event["ts"] * 1000, "source": {key: src[key] for key in ("id", "file", "pos", "gtid")}}


def _table_change(event: dict) -> dict:
    """Debezium's ``tableChanges`` entry of a ddl event: DROP when no columns are known, CREATE for a CREATE
    statement, else ALTER."""
    cols = event["columns"]
    kind = "DROP" if not cols else "CREATE" if event["ddl"].lstrip().upper().startswith("CREATE") else "ALTER"
    table = None
    if cols:
        table = {"defaultCharsetName": None,
                 "primaryKeyColumnNames": [c["name"] for c in cols if c.get("primary_key")],
                 "columns": [{"name": c["name"], "typeName": c["type"].split("(")[0].upper(),
                              "typeExpression": c["type"].upper(), "charsetName": c.get("charset"),
                              "position": i, "optional": c["nullable"]}
                             for i, c in enumerate(cols, 1)]}
    return {"type": kind, "id": f'"{event["schema"]}"."{event["table"]}"', "table": table}

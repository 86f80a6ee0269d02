"""mysqlbinlog-like text for ``binlogd dump`` without ``--json``."""

from __future__ import annotations

import time

from binlogd.library.serialize import dumps
from binlogd.protocol import events as E
from binlogd.protocol.jsonb import JsonDiffs

_OP = {"insert": "INSERT INTO", "update": "UPDATE", "delete": "DELETE FROM"}


def _value(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(v, (dict, list)):
        return "'" + dumps(v).decode() + "'"
    return str(v)


def _diffs(column: str, diffs: JsonDiffs) -> str:
    """A partially updated JSON column as mysqlbinlog -v writes it: the diffs applied to the column, in order."""
    expr = column
    for d in diffs:
        path = _value(d.path)
        if d.op == "REMOVE":
            expr = f"JSON_REMOVE({expr}, {path})"
        else:
            fn = "JSON_ARRAY_INSERT" if d.op == "INSERT" and d.path.endswith("]") else f"JSON_{d.op}"
            expr = f"{fn}({expr}, {path}, {_value(dumps(d.value).decode())})"
    return expr


def _image(row: dict) -> list[str]:
    return [f"###   {k}={_diffs(k, v) if type(v) is JsonDiffs else _value(v)}" for k, v in row.items()]


def format_event(event: E.Event) -> str:
    """Text for one event: ``# at POS`` header line, then what mysqlbinlog -vv would show."""
    h = event.header
    stamp = time.strftime("%y%m%d %H:%M:%S", time.gmtime(h.timestamp))
    lines = [f"# at {h.pos}", f"#{stamp} server id {h.server_id}  end_log_pos {h.next_position}  {h.type_name}"]
    if isinstance(event, E.QueryEvent):
        if event.schema:
            lines.append(f"use `{event.schema}`;")
        lines.append(event.query.rstrip() + ";")
    elif isinstance(event, E.RowsQueryEvent):
        lines.append(f"# {event.query}")
    elif isinstance(event, E.TableMapEvent):
        lines.append(f"#\tTable_map: `{event.schema}`.`{event.table}` mapped to number {event.table_id}")
    elif isinstance(event, E.RowsEvent):
        for row in event.rows:
            lines.append(f"### {_OP[event.kind]} `{event.schema}`.`{event.table}`")
            if event.kind == "update":
                before, after = row
                lines += ["### WHERE", *_image(before), "### SET", *_image(after)]
            else:
                lines += ["### SET" if event.kind == "insert" else "### WHERE", *_image(row)]
    elif isinstance(event, (E.GtidEvent, E.MariadbGtidEvent)):
        lines.append(f"# GTID {event.gtid}")
    elif isinstance(event, E.XidEvent):
        lines.append(f"COMMIT /* xid={event.xid} */;")
    elif isinstance(event, E.RotateEvent):
        lines.append(f"# Rotate to {event.next_file}  pos: {event.position}")
    elif isinstance(event, E.FormatDescriptionEvent):
        lines.append(f"# Start: binlog v {event.binlog_version}, server v {event.server_version}")
    elif isinstance(event, E.PreviousGtidsEvent):
        lines.append(f"# Previous-GTIDs {event.gtid_set}")
    elif isinstance(event, E.MariadbGtidListEvent):
        lines.append(f"# Gtid list [{','.join(event.gtids)}]")
    return "\n".join(lines)

"""A change's identity, ``source.id``: one per change, unique, in delivery order, and the same when the same
change is delivered again after a crash (ARCHITECTURE.md, "Change identity").

Three forms, each ``<prefix>:<row>``:

- a streamed change: ``<file>:<pos>:<inner>:<row>``: ``pos`` is where its rows event starts in the primary's
  file (for an event inside a TRANSACTION_PAYLOAD, where the payload starts), ``inner`` the rows event's offset
  in the payload's uncompressed bytes (0 outside a payload), ``row`` its index in the rows event;
- an incremental snapshot's row: ``<file>:<pos>:c<run>.<chunk>:<row>``: written at the transaction boundary
  ``pos`` (before the transaction that starts there); ``run`` names the snapshot's run (a new one after each
  restart), ``chunk`` counts its chunks, ``row`` the row's number in its table;
- an initial snapshot's row: ``snapshot:<table>:<run>:<row>``: ``table`` the table's place in the snapshot's
  list (from 0), ``run`` the snapshot's run (0, then one more after each restart), ``row`` the row's number in
  that table (from 0, counting the rows read before a restart).

The events beyond rows (``[sink] transaction_events``, ``schema_events``, ``heartbeat_seconds``) name the binlog
event they stand for in the same way, with a word for the row:

- a transaction's begin: ``<file>:<pos>:<inner>:begin``, the event that opens it (a GTID, BEGIN or its first
  statement); its commit: ``<file>:<pos>:<inner>:commit``, the event that ends it (XID, COMMIT...; ``inner`` its
  offset in a TRANSACTION_PAYLOAD);
- a schema change: ``<file>:<pos>:0:ddl.<k>``, the DDL statement's event, ``k`` the table's place among the
  selected tables it changed;
- a heartbeat: ``<file>:<pos>:h<ms>:heartbeat``, the committed position it carries and the time it was written
  (milliseconds since the epoch).

A row read again after a restart (in another read view, where it may differ) is in another run, so another
change. :func:`order_key` gives the order they are delivered in: every initial snapshot row before every
streamed change; streamed changes by (file number, position, an incremental chunk before the transaction's own
rows, inner offset, row).
"""

from __future__ import annotations

SNAPSHOT = "snapshot"


def stream_prefix(file: str, pos: int, inner: int = 0) -> str:
    """The id of a streamed rows event's changes, less ``:<row>``."""
    return f"{file}:{pos}:{inner}"


def incremental_prefix(file: str, pos: int, run: int, chunk: int) -> str:
    """The id of an incremental snapshot chunk's rows written at boundary ``file``:``pos``, less ``:<row>``."""
    return f"{file}:{pos}:c{run}.{chunk}"


def snapshot_prefix(table: int, run: int) -> str:
    """The id of an initial snapshot's rows of its ``table``-th table read in run ``run``, less ``:<row>``."""
    return f"{SNAPSHOT}:{table}:{run}"


def begin_id(file: str, pos: int, inner: int = 0) -> str:
    """The id of the begin event of the transaction that the event at ``file``:``pos`` (``inner``) opens."""
    return f"{file}:{pos}:{inner}:begin"


def commit_id(file: str, pos: int, inner: int = 0) -> str:
    """The id of the commit event of the transaction that the event at ``file``:``pos`` (``inner``) ends."""
    return f"{file}:{pos}:{inner}:commit"


def ddl_id(file: str, pos: int, index: int) -> str:
    """The id of the schema-change event of the ``index``-th table the DDL statement at ``file``:``pos`` changed."""
    return f"{file}:{pos}:0:ddl.{index}"


def heartbeat_id(file: str, pos: int, ms: int) -> str:
    """The id of a heartbeat written at ``ms`` (milliseconds since the epoch) with committed position ``file:pos``."""
    return f"{file}:{pos}:h{ms}:heartbeat"


_WORDS = {"begin": -1, "commit": 1 << 62}


def file_key(file: str) -> tuple:
    """(file number, base name) of a binlog file name, in the order the server writes them."""
    stem, _, number = file.rpartition(".")
    return (int(number) if number.isdigit() else -1, stem)


def order_key(change_id: str) -> tuple:
    """The sort key of ``change_id``: ``a < b`` when the change ``a`` is delivered before ``b`` (of one source).

    Raises:
        ValueError: not a change id of this module's forms.
    """
    parts = change_id.rsplit(":", 3)
    if len(parts) != 4:
        raise ValueError(f"not a change id: {change_id!r}")
    head, a, b, row = parts
    if head == SNAPSHOT:
        return (0, int(a), int(b), int(row))
    if b.startswith("c"):
        run, _, chunk = b[1:].partition(".")
        return (1, *file_key(head), int(a), 0, int(run), int(chunk), int(row))
    if b.startswith("h") and row == "heartbeat":
        return (1, *file_key(head), int(a), -1, int(b[1:]), 0, 0)
    if not row.isdigit():
        number = _WORDS.get(row)
        row = number if number is not None else int(row[4:]) if row.startswith("ddl.") else int(row)
    return (1, *file_key(head), int(a), 1, int(b), 0, int(row))


def boundary_key(file: str, pos: int) -> tuple:
    """The sort key of the transaction boundary ``file``:``pos``: after every change before it, before every
    change of the transaction that starts there, every incremental chunk and every heartbeat written there; no
    change has it."""
    return (1, *file_key(file), pos, -1, 0, 0, 0)

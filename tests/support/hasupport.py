"""Helpers of the ``[ha]`` tests: reading a NATS stream's changes past binlogd's own subjects (the checkpoint and
the fences, ``_binlogd.*``), and driving a bus sink or the mirror by hand (changes with ids, a commit with a
checkpoint)."""

from __future__ import annotations


def mirror_sink(url: str):
    """A MirrorSink on ``url`` that knows the table of :func:`change` (``d.a``: ``id`` int primary key, ``v``
    varchar(64)), as the schema history would tell it."""
    from binlogd.daemon.sinks.mirror import MirrorSink
    from binlogd.library.schema.model import ColumnDef, TableDef, compile_schema

    table = TableDef("d", "a", (ColumnDef("id", "int", nullable=False), ColumnDef("v", "varchar", 64,
                                                                                    charset="utf8mb4")), ("id",))
    sink = MirrorSink(url)
    sink.use_schema(lambda schema, name: compile_schema(table) if (schema, name) == ("d", "a") else None)
    return sink


def read_mirror_ids(url: str) -> list[int]:
    """The keys of the mirrored ``d.a`` (none when it is not there yet), in order."""
    import psycopg

    with psycopg.connect(url) as conn:
        if conn.execute("SELECT to_regclass('d.a')").fetchone()[0] is None:
            return []
        return [r[0] for r in conn.execute("SELECT id FROM d.a ORDER BY id").fetchall()]


def change(i: int, file: str = "b.000001") -> dict:
    """A row change of ``d.a`` at position ``1000 + i`` (its id and key ``i``)."""
    pos = 1000 + i
    return {"schema": "d", "table": "a", "op": "insert", "after": {"id": i, "v": "x" * 50},
            "source": {"file": file, "pos": pos, "row": 0, "server_id": 1, "gtid": None, "id": f"{file}:{pos}:0:0"}}


def write(sink, first: int, n: int) -> None:
    """Hand changes ``first`` .. ``first + n - 1`` to ``sink`` and flush them (not committed)."""
    for i in range(first, first + n):
        sink.change(change(i))
    sink.flush()


def commit(sink, upto: int) -> None:
    """Commit what was flushed with the checkpoint at position ``1000 + upto``, and wait for it. Raises SinkError."""
    from binlogd.library.checkpointfile import Checkpoint
    from binlogd.protocol.position import Position

    sink.flushed(Checkpoint(Position("b.000001", 1000 + upto)))
    sink.begin_sync()
    sink.sync()

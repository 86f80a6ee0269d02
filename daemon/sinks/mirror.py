"""The PostgreSQL mirror: each selected MySQL table kept as a PostgreSQL table, committed with the checkpoint.

It rides the bus sinks' pipeline (:mod:`.bus`): the consumer's calls become ops handed to a private thread that
runs psycopg 3's :class:`psycopg.AsyncConnection`, in order, inside one open PostgreSQL transaction; each mark
(a source transaction boundary) writes the checkpoint row and commits. So a reader never sees part of a source
transaction (several may share one commit), and the checkpoint and the rows it covers commit together: the
daemon resumes from the checkpoint PostgreSQL holds (the resume rule, :mod:`daemon.delivery.resumerule`). With
``[ha]`` every commit first locks the lease row of ``binlogd_mirror_lease`` FOR SHARE and checks its epoch
(:func:`.lease.check_fence`), so an instance whose lease was taken over never commits again.

Ops: ``("table", TableDef, keys_known)`` before a table's first rows and after its TABLE_MAP changed (the table is
created, or checked); ``("rows", name, kind, rows, id prefix)``, a rows event's rows; ``("row", name, op, before,
after, id)``, one change; ``("copy", name, columns, COPY text, id prefix, first)`` or ``("lines", name, JSON lines,
id prefix, first)``, a snapshot chunk's rows; ``("ddl", query, db, file, pos, changes, truncated)``. Consecutive row
changes of one table, kind and columns are applied as one batch, at most :data:`BATCH_ROWS` (:meth:`Tables.apply`:
COPY for inserts, a set-wise UPDATE or DELETE for a run of distinct keys); a snapshot chunk by one COPY.
"""

from __future__ import annotations

from binlogd.daemon.sinks.base import Sink, SinkError
from binlogd.daemon.sinks.bus import (
    EXIT_AUTH,
    EXIT_CHECKPOINT,
    EXIT_DATA,
    EXIT_MISCONFIGURED,
    EXIT_UNREACHABLE,
    PIECE_BYTES,
    BusSink,
)
from binlogd.daemon.sinks.lease import MIRROR, check_fence, fence_query, fence_session
from binlogd.daemon.sinks.mirrorddl import DdlError, tablemap_def
from binlogd.daemon.sinks.mirrortables import CHECKPOINT, DataError, ShapeError, Tables, copy_kinds, truncated
from binlogd.daemon.sinks.mirrorwatermark import Watermarks
from binlogd.library import textcopy
from binlogd.library.checkpointfile import Checkpoint
from binlogd.library.identity import stream_prefix
from binlogd.library.schema.catalog import Catalog
from binlogd.library.schema.model import TableDef, agrees
from binlogd.library.serialize import has_json_diffs
from binlogd.protocol import events as E
from binlogd.protocol.events import RowsEvent

EXIT_DDL = 7  # a DDL the mirror cannot apply (README, "Exit codes")
BATCH_ROWS = 10000  # a batch of row changes this big is applied without waiting for more


class MirrorSink(BusSink):
    """Mirror tables in PostgreSQL (``psycopg`` 3).

    Args:
        url: ``postgresql://user[:password]@host:port/db``.
        schema_map: MySQL schema → PostgreSQL schema (a schema not named keeps its name).
    """

    KIND = "mirror"

    def __init__(self, url: str, schema_map: dict[str, str] | None = None):
        super().__init__(url, max_change_bytes=1 << 62)
        self.tables = Tables(dict(schema_map or {}))
        self.watermarks = Watermarks()   # keyless tables' snapshot views (:mod:`.mirrorwatermark`)
        self._lookup = None
        self._catalog = Catalog()   # the mirrored tables and those the stream's DDL defined (consumer side)
        self._maps: dict[tuple[str, str], tuple] = {}   # name -> (TABLE_MAP columns, TableDef, keys known)
        self._sent: dict[tuple[str, str], object] = {}  # name -> the TableDef last handed on (consumer side)
        self._kinds: dict[tuple, bytes | None] = {}     # (TableDef, snapshot columns) -> copy_kinds (consumer side)
        self._file, self._version = "", ""
        self._conn = self._fence_sql = None
        self._batch: list = []
        self._batch_key = None

    def use_schema(self, lookup) -> None:
        """Take table definitions from the schema history: ``lookup(schema, table)`` gives a
        :class:`library.schema.model.CheckedSchema` (its ``definition`` names the primary key) or None.
        Without it a table's definition is the mirror's own (the tables it holds and those the stream's DDL
        created), else the TABLE_MAP's (its primary key only with ``binlog_row_metadata=FULL``), and a snapshot's
        tables cannot be mirrored."""
        self._lookup = lookup

    # ------------------------------------------------------------------ consumer side
    def open(self, state: dict | None) -> None:
        self._sent.clear()
        self._maps.clear()
        super().open(state)
        self._catalog = Catalog()
        if self.remote is not None:  # before the stream's first FORMAT_DESCRIPTION (a snapshot's rows)
            self.tables.json_text = self.remote.source.get("flavor") == "mariadb"
        for name, table in self.tables.defs.items():  # as committed with the checkpoint the stream resumes from
            self._catalog.set(name, table)

    def event(self, raw: bytes, event) -> None:
        if isinstance(event, E.TableMapEvent):
            self._table_map(event)
        elif isinstance(event, E.QueryEvent):
            self._query(event)
        elif isinstance(event, E.RotateEvent):
            self._file = event.next_file
        elif isinstance(event, E.FormatDescriptionEvent):
            self._version = event.server_version
            self.tables.json_text = "mariadb" in event.server_version.lower()
        elif isinstance(event, E.TransactionPayloadEvent):
            for inner in event.events:
                self.event(b"", inner)

    def _table_map(self, event) -> None:
        name = (event.schema, event.table)
        known = self._maps.get(name)
        if known is not None and known[0] is event.columns:
            return
        table, keys = None, False
        checked = self._lookup(*name) if self._lookup is not None else None
        if checked is not None and checked.definition is not None and checked.agrees(event.columns):
            table, keys = checked.definition, True
        followed = self._catalog.tables.get(name)
        if table is None and isinstance(followed, TableDef) and agrees(followed, event.columns):
            table, keys = followed, True
        if table is None:
            table = tablemap_def(event.schema, event.table, event.columns)
            keys = table is not None and bool(table.primary_key)
        self._maps[name] = (event.columns, table, keys)

    def _query(self, event) -> None:
        from binlogd.library.schema.readddl import read_ddl

        query = event.query
        head = query.lstrip()[:9].upper()
        if head.startswith(("BEGIN", "COMMIT", "ROLLBACK", "XA ", "SAVEPOINT", "INSERT", "UPDATE", "DELETE",
                            "REPLACE")):
            return
        cut = truncated(query, event.schema)
        if cut and self.watermarks.covers(cut, self._file, event.header.pos):
            return
        changes = [] if cut else read_ddl(query, event.schema, event.status.get("sql_mode", 0), self._version)
        if cut or changes:
            for change in changes:
                self._catalog.apply(change)
            self._sent.clear()  # every table's next rows re-check its definition after the DDL
            self._piece.append((("ddl", query, event.schema, self._file, event.header.pos, changes, cut), b"", 0))
            self._piece_bytes += len(query) + 256

    def _announce(self, name: tuple[str, str], cid: str) -> None:
        """Hand on the table's definition before its rows when it was not yet, or changed since."""
        table = self._maps.get(name)
        if table is None:  # a snapshot's rows: no TABLE_MAP before them
            checked = self._lookup(*name) if self._lookup is not None else None
            table = self._maps[name] = (None, getattr(checked, "definition", None), True)
        if self._sent.get(name) is not table[1]:
            if table[1] is None:
                raise SinkError(f"{self.name}: the columns of {name[0]}.{name[1]} are not known (positional names; "
                                f"no schema history for it) at change {cid}", fatal=True, exit_code=EXIT_DATA)
            self._sent[name] = table[1]
            self._piece.append((("table", table[1], table[2]), b"", 0))

    def change(self, change: dict) -> None:
        name, cid = (change["schema"], change["table"]), change["source"]["id"]
        if change.get("json_diffs"):
            raise SinkError(f"{self.name}: partial JSON updates cannot be mirrored (change {cid} of {name[0]}."
                            f"{name[1]}); set binlog_row_value_options = '' on the source", fatal=True,
                            exit_code=EXIT_DATA)
        self._announce(name, cid)
        self._piece.append((("row", name, change["op"], change.get("before"), change.get("after"), cid), b"", 1))
        self._piece_bytes += 96 + 48 * len(change.get("after") or change.get("before") or ())
        if self._piece_bytes >= PIECE_BYTES:
            self._hand_piece()

    def rows(self, event: RowsEvent, file: str, gtid: str | None, inner: int = 0) -> int:
        if event.kind == "update" and has_json_diffs(event):
            return Sink.rows(self, event, file, gtid, inner)  # change() refuses it with its id
        name, rows = (event.schema, event.table), event.rows
        if not rows or self.watermarks.covers(name, file, event.header.pos):
            return 0
        prefix = stream_prefix(file, event.header.pos, inner)
        self._announce(name, f"{prefix}:0")
        self._piece.append((("rows", name, event.kind, rows, prefix), b"", len(rows)))
        self._piece_bytes += (96 + 48 * len(event.columns)) * len(rows)
        if self._piece_bytes >= PIECE_BYTES:
            self._hand_piece()
        return len(rows)

    def change_lines(self, lines, count: int = 0, prefix: str = "", first: int = 0, schema: str = "",
                     table: str = "") -> bool:
        """A snapshot chunk's ``count`` rows of ``schema``.``table`` as change-event JSON lines (the "binlogd"
        format: values in README's JSON forms, as the stream gives them; ids ``<prefix>:<first + i>``), applied
        like inserts, by one COPY in the worker (:meth:`Tables.copy_lines`). Returns True (taken)."""
        if not count:
            return True
        name = (schema, table)
        self._announce(name, f"{prefix}:{first}")
        data = bytes(lines)
        self._piece.append((("lines", name, data, prefix, first), b"", count))
        self._piece_bytes += len(data) + 64 * count
        if self._piece_bytes >= PIECE_BYTES:
            self._hand_piece()
        return True

    def text_rows(self, rows, columns, *, count: int, prefix: str, first: int, schema: str, table: str) -> bool:
        """:meth:`Sink.text_rows`: the rows made COPY text now (:func:`library.textcopy.rows`), applied by one COPY
        in the worker (:meth:`Tables.copy_text`). False (nothing written) when a column's type or a value is not
        one that COPY text takes as the server sent it (:func:`.mirrortables.copy_kinds`): then
        :meth:`change_lines` takes the chunk, which names a value PostgreSQL cannot hold."""
        if not count:
            return True
        name = (schema, table)
        self._announce(name, f"{prefix}:{first}")
        key = (self._sent[name], tuple(columns))
        kinds = self._kinds.get(key, False)
        if kinds is False:
            kinds = self._kinds[key] = copy_kinds(self._sent[name], columns)
        data = None if kinds is None else textcopy.rows(rows.buf, rows.start, rows.end, kinds)
        if data is None:
            return False
        self._piece.append((("copy", name, key[1], data, prefix, first), b"", count))
        self._piece_bytes += len(data) + 64 * count
        if self._piece_bytes >= PIECE_BYTES:
            self._hand_piece()
        return True

    # ------------------------------------------------------------------ worker side
    async def _connect(self) -> None:
        import psycopg

        self._batch, self._batch_key = [], None
        self._conn = conn = await psycopg.AsyncConnection.connect(self.url, connect_timeout=10, autocommit=False)
        if self.epoch is not None:  # [ha]: a paused instance must not hold the lease row (FOR SHARE) for long
            await fence_session(conn)
            self._fence_sql = fence_query(MIRROR)
        async with conn.cursor() as cur:
            await cur.execute("SET TIME ZONE 'UTC'")
            await cur.execute("SELECT pg_advisory_xact_lock(hashtext('binlogd mirror'))")  # one creator at once
            await self.tables.load(cur)
            await self.watermarks.load(cur)
            await cur.execute(f"SELECT checkpoint::text FROM {CHECKPOINT} WHERE id")
            row = await cur.fetchone()
        await conn.commit()
        try:
            checkpoint = Checkpoint.parse(row[0]) if row else None
        except ValueError as exc:
            raise SinkError(f"{self.name}: {CHECKPOINT} does not hold a binlogd checkpoint: {exc}", fatal=True,
                            exit_code=EXIT_CHECKPOINT) from None
        self._use_checkpoint(checkpoint)

    async def _write(self, piece: list) -> None:
        for op, _lines, n in piece:
            try:
                if op[0] == "row":
                    await self._batched(op[1], op[2], op[3], op[4], [(op[3], op[4], op[5])])
                    continue
                if op[0] == "rows":
                    await self._batched(op[1], op[2], *_images(op[2], op[3], op[4]))
                    continue
                await self._apply_batch()
                if op[0] == "copy":
                    await self._applied(op[1], "read", n, f"{op[4]}:{op[5]}",
                                        self.tables.copy_text(self._conn, *op[1:4]))
                elif op[0] == "lines":
                    await self._applied(op[1], "read", n, f"{op[3]}:{op[4]}",
                                        self.tables.copy_lines(self._conn, *op[1:]))
                elif op[0] == "table":
                    await self._ensure(op[1], op[2])
                else:
                    await self._ddl(*op[1:])
            except ShapeError as exc:
                raise SinkError(f"{self.name}: {exc}", fatal=True, exit_code=EXIT_MISCONFIGURED) from None
            except DdlError as exc:
                raise SinkError(f"{self.name}: cannot apply the DDL at {op[3]}:{op[4]} ({exc}): "
                                f"{' '.join(op[1].split())[:300]}", fatal=True, exit_code=EXIT_DDL) from None

    async def _ensure(self, table, keys_known: bool) -> None:
        """The table mirrored (created or checked). Raises: ShapeError (also for a name or type PostgreSQL cannot
        hold)."""
        try:
            async with self._conn.cursor() as cur:
                await self.tables.ensure(cur, table, keys_known)
        except (ValueError, DdlError) as exc:
            raise ShapeError(f"cannot mirror {table.schema}.{table.table}: {exc}") from None

    async def _ddl(self, query: str, db: str, file: str, pos: int, changes: list, cut) -> None:
        import psycopg

        async with self._conn.cursor() as cur:
            try:
                if cut:
                    await self.tables.truncate(cur, cut)
                for change in changes:
                    await self.tables.ddl(cur, change, query)
            except psycopg.OperationalError:
                raise  # the connection: retried
            except ValueError as exc:  # a name PostgreSQL cannot hold
                raise DdlError(str(exc)) from None
            except psycopg.Error as exc:
                raise DdlError(f"PostgreSQL refused it: {str(exc).strip().splitlines()[0]}") from None

    async def _batched(self, name, op: str, before, after, rows: list) -> None:
        """Add ``rows`` ((before, after, id), all with the columns of the images ``before`` and ``after``) to
        the batch, applied first when it holds changes of another table, kind or columns; a batch of
        :data:`BATCH_ROWS` is applied at once (PostgreSQL works on it while the next rows are decoded)."""
        key = (name, op, tuple(after or before or ()))
        if key != self._batch_key:
            await self._apply_batch()
            self._batch_key = key
        self._batch.extend(rows)
        if len(self._batch) >= BATCH_ROWS:
            await self._apply_batch()

    async def _apply_batch(self) -> None:
        if not self._batch:
            return
        (name, op, _cols), rows = self._batch_key, self._batch
        self._batch, self._batch_key = [], None
        await self._applied(name, op, len(rows), rows[0][2], self.tables.apply(self._conn, name, op, rows))

    async def _applied(self, name, op: str, count: int, cid: str, applying) -> None:
        """Await ``applying``, the change of ``count`` rows of table ``name`` from change ``cid``; the data
        errors fatal (exit 7)."""
        import psycopg

        try:
            await applying
        except DataError as exc:
            raise SinkError(f"{self.name}: {exc}", fatal=True, exit_code=EXIT_DATA) from None
        except (psycopg.errors.DataError, psycopg.errors.IntegrityError) as exc:
            raise SinkError(f"{self.name}: PostgreSQL refused the {op} of {count} rows of {name[0]}.{name[1]} "
                            f"from change {cid}: {str(exc).strip().splitlines()[0]}", fatal=True,
                            exit_code=EXIT_DATA) from None

    async def _commit(self, checkpoint: bytes | None) -> None:
        await self._apply_batch()
        if self.epoch is not None:  # the lease row locked until COMMIT: no takeover in between
            await check_fence(self._conn, self._fence_sql, self.epoch, self.name)
        if checkpoint is not None:
            async with self._conn.cursor() as cur:
                await cur.execute(f"INSERT INTO {CHECKPOINT} (id, checkpoint) VALUES (true, %s) "
                                  "ON CONFLICT (id) DO UPDATE SET checkpoint = excluded.checkpoint",
                                  (checkpoint.decode(),))
                await self.watermarks.commit(cur, checkpoint)
        await self._conn.commit()

    async def _disconnect(self) -> None:
        self._batch, self._batch_key = [], None
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()  # an open transaction is rolled back

    def _error_of(self, exc: Exception) -> SinkError:
        """Refused credentials: fatal, exit 3; a lost or refused connection: retryable (exit 4 at the start)."""
        import psycopg

        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if getattr(exc, "sqlstate", None) in ("28P01", "28000") or "password authentication failed" in text \
                or "no password supplied" in text:
            return SinkError(f"{self.name}: authentication failed: {text}", fatal=True, exit_code=EXIT_AUTH)
        if isinstance(exc, (psycopg.OperationalError, OSError)):
            return SinkError(f"{self.name}: unreachable: {text}", exit_code=EXIT_UNREACHABLE)
        return SinkError(f"{self.name}: {text}")


def _images(kind: str, rows: list, prefix: str) -> tuple:
    """The first row's before and after images, and the rows of one rows event as (before, after, id)."""
    if kind == "update":
        out = [(b, a, f"{prefix}:{i}") for i, (b, a) in enumerate(rows)]
    elif kind == "insert":
        out = [(None, a, f"{prefix}:{i}") for i, a in enumerate(rows)]
    else:
        out = [(b, None, f"{prefix}:{i}") for i, b in enumerate(rows)]
    return out[0][0], out[0][1], out


__all__ = ["MirrorSink"]

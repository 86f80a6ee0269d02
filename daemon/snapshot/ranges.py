"""A table read chunk by chunk: how a big table is split into key ranges, and the reader of one range.

- :func:`key_ranges`: equal steps between a one-column integer key's least and greatest value;
- :class:`RangeReader`: one key range (or a whole table after a key) on one reader, chunk by chunk: the fetch,
  the next chunk's query sent before this chunk is written (the fast path), and the view renewed when the
  table's definition changed under it;
- :func:`all_at_once`: the ranges' readers run at once, the first error ending them all.
"""

from __future__ import annotations

import asyncio
import dataclasses

from binlogd.daemon.snapshot.readers import Readers
from binlogd.daemon.snapshot.servererrors import ER_NO_SUCH_TABLE, ER_TABLE_DEF_CHANGED, error_code
from binlogd.daemon.snapshot.tables import TableInfo, describe, quote_name, read_chunk
from binlogd.daemon.snapshot.views import Reader, end_view, query, release
from binlogd.daemon.snapshot.wire import ChunkReader
from binlogd.daemon.tasks import close_tasks

RENEWALS = 3   # views renewed in a row for one table's changed definition before its error is raised


async def key_ranges(conn, info: TableInfo, count: int) -> list[dict] | None:
    """``info``'s key (one integer column) split at equal steps between its least and greatest value, read on
    ``conn`` in its view (the chunk's metadata lock released after).

    Returns:
        ``count`` ranges ``{"last": key after which it starts (None: from the first), "upto": its last key
        (None: no end), "done": False}``, or None: the table changed or was dropped (one reader meets it
        again), or its keys span fewer than ``count`` values.
    Raises:
        pymysql.err.Error, OSError: the query failed otherwise.
    """
    import pymysql

    key = quote_name(info.key[0])
    try:
        least, most = (await query(conn, f"SELECT MIN({key}), MAX({key}) FROM {quote_name(info.schema)}."
                                         f"{quote_name(info.table)}"))[0]
    except pymysql.err.MySQLError as exc:
        if error_code(exc) in (ER_TABLE_DEF_CHANGED, ER_NO_SUCH_TABLE):
            return None
        raise
    await release(conn)
    if least is None or int(most) - int(least) < count:
        return None
    least, most = int(least), int(most)
    bounds = [least + (most - least) * i // count for i in range(1, count)]
    return [{"last": [str(bounds[i - 1])] if i else None, "upto": [str(bounds[i])] if i < count - 1 else None,
             "done": False} for i in range(count)]


async def all_at_once(coros) -> list:
    """Run the coroutines at once and return their results, in order.

    Raises:
        The first error (in the coroutines' order) of those that raised; the others are cancelled first.
    """
    tasks = [asyncio.ensure_future(c) for c in coros]
    if not tasks:
        return []
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        ended = await close_tasks(*tasks)
    errors = [e for e in ended if e is not None and not isinstance(e, asyncio.CancelledError)]
    if errors:
        raise errors[0]
    return [task.result() for task in tasks]


@dataclasses.dataclass
class Chunk:
    """One chunk read. Fields: rows (:meth:`ChunkReader.fetch`'s result on the fast path, else PyMySQL tuples;
    ``len()``: how many), full (``chunk_rows`` rows: more may follow)."""

    rows: object
    full: bool


class RangeReader:
    """Reads a table's key range on one reader, chunk by chunk.

    Args:
        readers: the snapshot's readers (a view is renewed through them); reader: the one this range is read on.
        info: the table as described in ``reader``'s view.
        last: the key after which the range goes on (None: from its start); upto: its last key (None: no end).
        chunk_rows: rows per chunk; fast: rows off the wire (:class:`ChunkReader`), else PyMySQL's.
    Fields:
        info, rows: the table's description and :class:`ChunkReader` in the current view (those that read the
            last chunk :meth:`next` returned); last: the last key read; gone: the table was dropped.
    """

    def __init__(self, readers: Readers, reader: Reader, info: TableInfo, last: list | None, upto: list | None,
                 chunk_rows: int, fast: bool):
        self.readers, self.reader, self.info, self.last, self.upto = readers, reader, info, last, upto
        self.chunk_rows, self.fast = chunk_rows, fast
        self.rows = ChunkReader(info)
        self.gone = False
        self.renewed = 0                          # views renewed since the last chunk read
        self.pending: asyncio.Future | None = None   # the next chunk's query, sent before this chunk is written

    async def next(self) -> Chunk | None:
        """The next chunk (after :attr:`last`), its rows valid until the call after the next; None when the
        table was dropped (:attr:`gone`). A full chunk's successor is asked for at once on the fast path.

        Raises:
            pymysql.err.Error, OSError: a query failed (see :meth:`retry`).
        """
        import pymysql

        while True:
            fetching, self.pending = self.pending or self._fetch(self.last), None
            try:
                rows, key = await fetching
            except pymysql.err.MySQLError as exc:
                if not await self.retry(exc):
                    return None
                continue
            self.renewed = 0
            full = len(rows) == self.chunk_rows
            if full and self.fast:  # the server reads the next chunk while this one is written
                self.pending = asyncio.ensure_future(self._fetch(key))
                await asyncio.sleep(0)
            self.last = key if key is not None else self.last
            return Chunk(rows, full)

    async def retry(self, exc: Exception) -> bool:
        """After a query of this range failed with ``exc`` (a PyMySQL error): True when the table changed
        definition after the view opened and the view was renewed (read again), False when the table was dropped
        (:attr:`gone`).

        Raises:
            exc: any other error, or the definition changed again after :data:`RENEWALS` renewals in a row.
        """
        code = error_code(exc)
        if code == ER_NO_SUCH_TABLE:
            self.gone = True
            return False
        if code != ER_TABLE_DEF_CHANGED or self.renewed >= RENEWALS:
            raise exc
        self.renewed += 1
        self.readers.ctx.log.info("snapshot: %s changed definition after the read view opened: renewing the view",
                                  self.info.name)
        await end_view(self.reader.conn)
        await self.readers.open_view(self.reader)
        self.info = await describe(self.reader.conn, self.info.schema, self.info.table) or self.info
        self.rows = ChunkReader(self.info)
        return True

    async def close(self) -> None:
        """Cancel the next chunk's query if one was sent (its connection, mid-result, closes with the snapshot)."""
        pending, self.pending = self.pending, None
        await close_tasks(pending)

    async def _fetch(self, after: list | None) -> tuple[object, list | None]:
        """The chunk after key ``after`` and its last key, then the chunk's metadata lock released."""
        conn, info = self.reader.conn, self.info
        if self.fast:
            got = await self.rows.fetch(conn, after, self.chunk_rows, self.upto)
        else:
            found = await read_chunk(conn, info, after, self.chunk_rows, self.upto)
            got = found, (info.last_key(found[-1]) if found and info.key else None)
        await release(conn)
        return got

"""The initial snapshot's readers: connections of its own, each in its own consistent read view.

The main reader's view is the snapshot's (P1 for a new snapshot, a later one for a resumed run): the table list,
the schema and every table not split are read in it. More readers read a big table's key ranges at once
(:mod:`.ranges`): where a view needs no lock (MariaDB, Percona) each in a view opened after P1; on Oracle MySQL
in views opened with the main one's, inside one ``FLUSH TABLES WITH READ LOCK`` (at P1 itself).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from binlogd.daemon.snapshot.context import SnapshotContext
from binlogd.daemon.snapshot.views import Reader, end_view, open_view, open_view_locked
from binlogd.daemon.tasks import close_tasks


class Readers:
    """The snapshot's readers: the main one, the others, and those being opened.

    Args:
        ctx: the session's :class:`SnapshotContext`.
        flavor: the server's flavor (``"mariadb"`` asks ``BINLOG_GTID_POS`` of a view's position).
        main_view: called with the main reader each time its view opens (the checkpoint records that view).
    Fields:
        open: the readers, each in its own view; the first is the main one.
        spares: more readers being opened (futures of :class:`Reader`; :meth:`close` closes them too).
    """

    def __init__(self, ctx: SnapshotContext, flavor: str, main_view: Callable[[Reader], None]):
        self.ctx, self.flavor, self.main_view = ctx, flavor, main_view
        self.open: list[Reader] = []
        self.spares: list[asyncio.Future] = []
        self.gtids: dict[tuple[str, int], str] = {}   # BINLOG_GTID_POS of the views' positions (open_view)

    @property
    def main(self) -> Reader:
        """The main reader (:meth:`start` opened it)."""
        return self.open[0]

    @property
    def lock_free(self) -> bool:
        """Whether the main reader's view was opened without a lock (so more views may be opened at will)."""
        return self.main.how == "binlog_snapshot"

    @property
    def ranges(self) -> bool:
        """Whether a table may be read in key ranges at once: more views can be opened without a lock, or more
        readers were opened with the main one (:meth:`start`)."""
        return self.lock_free or len(self.open) > 1

    async def start(self, count: int = 1) -> Reader:
        """Open the main reader: a new connection in a new view. Where that view took FTWRL (Oracle MySQL) and
        ``count`` readers are wanted, the others are opened now and every view again inside one FTWRL
        (:meth:`_open_together`), as no view opened later can be had without a lock.

        Raises:
            LockRefused: the server has no view position and refused FTWRL (the connection stays open, in
                :attr:`open`, for the binlog's end).
            SourceError, pymysql.err.Error, OSError: as :func:`~.views.open_view`, or no connection.
        """
        reader = Reader(await self.connect())
        self.open.append(reader)
        await self.open_view(reader)
        if reader.how == "ftwrl" and count > 1:
            await self._open_together(count)
        return reader

    async def _open_together(self, count: int) -> None:
        """Open up to ``count - 1`` more connections (one that fails: a warning, fewer readers), then end the main
        reader's view and open every reader's inside one FTWRL (:func:`~.views.open_view_locked`): all at one
        position, the main reader's view (handed to ``main_view`` again)."""
        self.spares += [asyncio.ensure_future(self._reader()) for _ in range(count - 1)]  # close() ends them too
        await asyncio.wait(self.spares)
        for spare in self.spares:
            if spare.exception() is None:
                self.open.append(spare.result())
            else:
                self._no_reader(spare.exception())
        self.spares = []
        if len(self.open) < 2:
            return
        main = self.main
        await end_view(main.conn)
        view = await open_view_locked(main.conn, [r.conn for r in self.open[1:]])
        for reader in self.open:
            reader.view, reader.how, reader.ts = view, "ftwrl", int(time.time())
        self.ctx.log.info("snapshot: read view of %d readers at %s:%d%s (FLUSH TABLES WITH READ LOCK held while "
                          "they opened)", len(self.open), view.file, view.pos,
                          f", GTID {view.gtid_set}" if view.gtid_set else "")
        self.main_view(main)

    def prepare(self, count: int) -> None:
        """Begin opening readers (:meth:`new`) until ``count`` are open or being opened."""
        while len(self.open) + len(self.spares) < count:
            self.spares.append(asyncio.ensure_future(self.new()))

    async def new(self) -> Reader:
        """A new reader in a new view.

        Raises:
            pymysql.err.Error, OSError: the connection or a query failed (nothing is left open).
        """
        reader = Reader(await self.connect())
        try:
            await self.open_view(reader)
        except BaseException:
            reader.conn.close()
            raise
        return reader

    async def take(self, spare: asyncio.Future) -> Reader | None:
        """The reader a spare gives once it is open (then one of :attr:`open`), or None when it could not be
        opened (``max_user_connections``, say): one warning, the other readers read its ranges."""
        try:
            reader = await spare   # kept in spares until it is a reader: close() finds it either way
        except Exception as exc:  # noqa: BLE001 (the other readers read the ranges)
            self.spares.remove(spare)
            self._no_reader(exc)
            return None
        self.spares.remove(spare)
        self.open.append(reader)
        return reader

    async def connect(self):
        """A new connection of the snapshot's (:meth:`SnapshotContext.raw_connection`).

        Raises:
            pymysql.err.Error, OSError: as there.
        """
        return await self.ctx.raw_connection()

    async def _reader(self) -> Reader:
        return Reader(await self.connect())

    def _no_reader(self, exc: BaseException) -> None:
        self.ctx.log.warning("snapshot: no connection for another key range reader (%s): the other readers read "
                             "its ranges", exc)

    async def open_view(self, reader: Reader) -> None:
        """A new consistent read view of ``reader`` (:func:`~.views.open_view`), logged (a key range reader's
        quietly); the main reader's is handed to ``main_view``.

        Raises:
            as :meth:`start`.
        """
        reader.view, reader.how = await open_view(reader.conn, self.flavor, self.gtids)
        reader.ts = int(time.time())
        view, main = reader.view, reader is self.open[0]
        self.ctx.log.log(logging.INFO if main else logging.DEBUG,
                         "snapshot: read view at %s:%d%s (%s)", view.file, view.pos,
                         f", GTID {view.gtid_list or view.gtid_set}" if view.gtid_list or view.gtid_set else "",
                         "no lock" if reader.how == "binlog_snapshot" else
                         "FLUSH TABLES WITH READ LOCK held while it opened")
        if main:
            self.main_view(reader)

    async def end(self) -> None:
        """End every reader's view with ``ROLLBACK`` (errors ignored: the connections close next)."""
        for reader in self.open:
            try:
                await end_view(reader.conn)
            except Exception:  # noqa: BLE001 (the view is no longer needed; the connection closes anyway)
                pass

    async def close(self) -> None:
        """Close every reader's connection, the spares' too (those still opening are cancelled); a cancel while
        they end closes them all the same."""
        try:
            await close_tasks(*self.spares)  # they have all ended when it returns or raises
        finally:
            self.open += [spare.result() for spare in self.spares
                          if spare.done() and not spare.cancelled() and spare.exception() is None]
            for reader in self.open:
                reader.conn.close()
            self.open, self.spares = [], []

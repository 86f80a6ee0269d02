"""The snapshot's fast path: a chunk's result set read off the wire, its rows made JSON lines at once.

PyMySQL's result reading (a coroutine per packet in aiomysql, then a Python converter per value) is most of a
snapshot's time. Here the text-protocol result set of a ``COM_QUERY`` is read straight from the socket into one
buffer, the connection's transport lent to a :class:`asyncio.BufferedProtocol` for the result's time
(:func:`query_result`; the packets parsed by :mod:`binlogd.protocol.textrows`, its ``header`` and ``scan``);
then :func:`binlogd.library.textjson.lines` (C, or its Python twin) writes every row of the chunk as JSON in
one call, each value in the form :meth:`TableInfo.row` gives (README "Values"), as the table's :func:`plan`
says from its columns' types: :meth:`ChunkReader.lines` the whole change lines of the "binlogd" format (the
bytes a sink's ``change`` would write for them), :meth:`ChunkReader.changes` change dicts whose ``after`` is
an :class:`orjson.Fragment`, for a sink that takes no lines.

Every aiomysql internal it needs goes through :mod:`binlogd.daemon.replication._aiomysql` (``send_query``,
``transport``, ``take_over``); it relies on the connection not asking for CLIENT_DEPRECATE_EOF (PyMySQL never
does).
"""

from __future__ import annotations

import asyncio

import orjson

from binlogd.daemon.replication import _aiomysql
from binlogd.daemon.snapshot.tables import BYTE_TYPES, INT_TYPES, TableInfo, vector_values
from binlogd.library import textjson
from binlogd.library.serialize import dumps
from binlogd.protocol import textrows
from binlogd.protocol.values import float32

_PACE = 0.001     # seconds a chunk's socket is left unread before each read (see _Buffer.more)
_READ = 1 << 20   # get_buffer offers at least this much free space (one socket read takes what it holds)


def _double(v: bytes) -> bytes:
    return orjson.dumps(float(v))


def _float(v: bytes) -> bytes:
    return orjson.dumps(float32(float(v)))


def _bit(v: bytes) -> bytes:
    return str(int.from_bytes(v, "big")).encode()


def _set(v: bytes) -> bytes:
    return orjson.dumps(v.decode().split(",") if v else [])


def _json(v: bytes) -> bytes:
    return orjson.dumps(orjson.loads(v))


def _vec(v: bytes) -> bytes:
    return orjson.dumps(vector_values(v))


#: A column's :data:`textjson kind <binlogd.library.textjson.RAW>` by its information_schema DATA_TYPE (any
#: other: TEXT); FLOAT is read as a DOUBLE (:meth:`TableInfo.select_list`) and written as its float32.
KINDS = {**dict.fromkeys(INT_TYPES, textjson.RAW), **dict.fromkeys(BYTE_TYPES, textjson.BASE64),
         **dict.fromkeys(("decimal", "date", "datetime", "timestamp", "time"), textjson.QUOTED),
         "double": textjson.DOUBLE, "bit": textjson.BIT, "float": textjson.CALL, "set": textjson.CALL,
         "json": textjson.CALL, "vector": textjson.CALL}
#: The Python function of a column by its DATA_TYPE: a CALL kind's converter, a BIT or DOUBLE kind's fallback.
CALLS = {"double": _double, "bit": _bit, "float": _float, "set": _set, "json": _json, "vector": _vec}


def plan(info: TableInfo) -> textjson.Plan:
    """The :class:`textjson.Plan` of ``info``'s columns, from their data types (:data:`KINDS`, :data:`CALLS`)."""
    return textjson.Plan(bytes(KINDS.get(t, textjson.TEXT) for t in info.types),
                         tuple(orjson.dumps(name) + b":" for name in info.columns),
                         tuple(CALLS.get(t) for t in info.types), orjson.dumps)


def _key(info: TableInfo, values: list) -> list:
    """Raw key values (bytes, in key order) as :meth:`TableInfo.last_key` keeps them (text; binary as hex)."""
    out = []
    for name, v in zip(info.key, values):
        binary = info.types[info.columns.index(name)] in BYTE_TYPES or info.types[info.columns.index(name)] == "bit"
        out.append({"hex": v.hex()} if binary else v.decode("utf-8", "surrogateescape"))
    return out


def _raise_err(payload: bytes):
    from pymysql.err import raise_mysql_exception

    raise_mysql_exception(payload)


class ResultRows:
    """A chunk's result set as read off the wire: its row packets, headers included, in ``buf[start:end]``.

    Fields:
        buf: the bytes read (bytearray); start, end: where its rows are; rows: how many; last: the offset of
            the last row (-1: none); columns: the column count.
    """

    __slots__ = ("buf", "start", "end", "rows", "last", "columns")

    def __init__(self, buf, start: int, end: int, rows: int, last: int, columns: int):
        self.buf, self.start, self.end, self.rows, self.last, self.columns = buf, start, end, rows, last, columns

    def __len__(self) -> int:
        return self.rows

    def last_values(self) -> list | None:
        """The last row's raw values (bytes, None for NULL), None without rows."""
        if self.last < 0:
            return None
        return textrows.fields(textrows.payload(self.buf, self.last, self.end), self.columns)


class _Buffer(asyncio.BufferedProtocol):
    """The bytes of one result set as read: ``data[:size]`` (``data`` may be longer: a buffer used again keeps
    its memory, so no page of it is new). Between :meth:`attach` and :meth:`detach` it is the connection's
    protocol: the socket is read straight into ``data`` (no stream buffer, no flow-control pauses).

    Fields:
        data, size: as above.
        lost: the connection ended (closed by the server, or lost with an error).
        whole: the result set (or the server's error) was read to its end.
    """

    def __init__(self, data: bytearray | None = None):
        self.data, self.size = data if data is not None else bytearray(), 0
        self.lost = self.whole = False
        self._transport = self._inner = self._waiter = None

    def attach(self, conn) -> None:
        """Become the protocol of ``conn``'s transport (what its stream reader held moves here first).

        Raises:
            OperationalError: 2013, the connection has ended.
        """
        from pymysql.err import OperationalError

        transport = _aiomysql.transport(conn)
        held = _aiomysql.take_over(conn)
        if transport is None or transport.is_closing() or held.error is not None or held.eof:
            raise OperationalError(2013, "Lost connection to server before a snapshot chunk")
        self.data[:len(held.data)] = held.data
        self.size = len(held.data)
        self._transport, self._inner = transport, transport.get_protocol()
        transport.set_protocol(self)
        if not transport.is_reading():
            transport.resume_reading()  # the stream reader may have paused it

    def detach(self) -> None:
        """Give the transport back to the connection's own protocol."""
        if self._transport is not None:
            transport, self._transport = self._transport, None
            transport.set_protocol(self._inner)

    def get_buffer(self, sizehint: int) -> memoryview:
        if len(self.data) - self.size < _READ:
            self.data.extend(bytes(max(_READ, len(self.data))))
        return memoryview(self.data)[self.size:]

    def buffer_updated(self, nbytes: int) -> None:
        self.size += nbytes
        self._wake()

    def eof_received(self) -> bool:
        self.lost = True
        self._wake()
        return bool(self._inner.eof_received())

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._wake()
        self._inner.connection_lost(exc)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def more(self) -> None:
        """Wait until more bytes arrive. The socket is left unread for :data:`_PACE` seconds first, so that one
        read takes what the server sent meanwhile: a read (and a wake-up on both sides) per 16 KB write of the
        server's costs more than the wait.

        Raises:
            OperationalError: 2013, the connection ended.
        """
        size, transport = self.size, self._transport
        if transport is not None and not transport.is_closing() and transport.is_reading():
            transport.pause_reading()
            try:
                await asyncio.sleep(_PACE)
            finally:
                if not transport.is_closing():
                    transport.resume_reading()
        while self.size == size:
            if self.lost:
                from pymysql.err import OperationalError

                raise OperationalError(2013, "Lost connection to server during a snapshot chunk")
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def scan(self, pos: int) -> tuple[int, int, int, int]:
        """:func:`textrows.scan` of what is read."""
        with memoryview(self.data)[:self.size] as view:
            return textrows.scan(view, pos)


async def query_result(conn, sql: str, buffer: bytearray | None = None) -> ResultRows:
    """Run ``sql`` (one SELECT) on an aiomysql connection and read its whole result set straight from the
    socket: the header (column count, definitions, EOF) by :func:`textrows.header`, the rows by
    :func:`textrows.scan`.
    ``buffer``: a bytearray to read into (its old contents are overwritten; the result's rows are in it), else
    a new one. The connection is closed when the result could not be read to its end (an error, a cancel).

    Raises:
        pymysql.err.Error: the server's error (as PyMySQL raises it); OperationalError 2013 when the connection
            ends inside the result, 2027 when more data follows it.
    """
    got = _Buffer(buffer)
    got.attach(conn)
    try:
        await _aiomysql.send_query(conn, sql)
        return await _read_result(got)
    finally:
        got.detach()
        if not got.whole:
            conn.close()


async def _read_result(got: _Buffer) -> ResultRows:
    """The result set of the query just sent, read through ``got`` (attached to its connection).

    Raises:
        as :func:`query_result`; a server's error only once its packet was read whole.
    """
    from pymysql.err import OperationalError

    while (head := textrows.header(got.data, got.size)) is None:
        await got.more()
    if isinstance(head, bytes):
        got.whole = True
        _raise_err(head)
    start, columns = head
    pos, rows, last = start, 0, -1
    while True:
        pos, n, at, done = got.scan(pos)
        rows += n
        if at >= 0:
            last = at
        if done:
            break
        await got.more()
    end, payload = textrows.packet_at(got.data, pos, got.size)
    if end != got.size:
        raise OperationalError(2027, "unexpected data after a snapshot chunk's result")
    got.whole = True
    if done == 2:
        _raise_err(payload)
    return ResultRows(got.data, start, pos, rows, last, columns)


def _split_line(template: dict) -> list[bytes]:
    """``dumps(template)`` (the sinks' JSON) cut where its two :class:`orjson.Fragment` markers (a NUL byte each,
    which JSON text never holds raw) are: [head, mid, tail]."""
    parts = dumps(template).split(b"\0")
    if len(parts) != 3:
        raise ValueError("a NUL byte in a change's envelope")
    return parts


class ChunkReader:
    """Reads one table's chunks as change events on a given connection (the initial snapshot's, or an
    incremental one's).

    Args:
        info: the table.
    """

    def __init__(self, info: TableInfo):
        self.info = info
        self.plan = plan(info)
        self._key_at = [info.columns.index(k) for k in info.key]
        self._buffers = [bytearray(), bytearray()]   # used in turn: a chunk's rows stay while the next is read
        self._outs = [bytearray(), bytearray()]      # lines' output, used in turn

    async def fetch(self, conn, after: list | None, limit: int | None,
                    upto: list | None = None) -> tuple[ResultRows, list | None]:
        """The chunk after key ``after`` (None: from the start) of at most ``limit`` rows (None: all), up to key
        ``upto`` (None: to the last; :meth:`TableInfo.chunk_sql`): its rows
        as read (``len()`` of it: how many; valid until the fetch after the next, which reads into the same
        memory), and its last key (None when it is empty or there is no key).

        Raises:
            pymysql.err.Error: the server's error, or the connection's.
        """
        info = self.info
        self._buffers.reverse()
        result = await query_result(conn, info.chunk_sql(after, limit, conn.escape, upto=upto), self._buffers[0])
        last = None
        if result.rows and info.key:
            values = result.last_values()
            last = _key(info, [values[i] for i in self._key_at])
        return result, last

    def lines(self, result: ResultRows, source: dict, ts: int, first: int, prefix: str,
              last: bool = False) -> memoryview:
        """The rows of :meth:`fetch` as the JSON lines (each ending in a newline) that a sink in the "binlogd"
        format writes for the change dicts of :meth:`changes` (the same bytes), written into memory kept from
        chunk to chunk, two buffers in turn: a view of them, whose bytes stay as they are until the second call
        after this one (a sink may still write them meanwhile). ``last``: the final row's ``source.snapshot``
        is ``"last"`` (the snapshot's last row), as a change dict with that value set would be written.

        Raises:
            BufferError: a view of the buffer these lines go into is still held (not released since the call
                before the last).
        """
        self._outs.reverse()
        out, again = self._outs[0], b',"id":' + orjson.dumps(prefix + ":")[:-1]
        cut = result.last if last and result.rows else result.end
        head, mid, tail = self._envelope(source, ts, False)
        n = textjson.lines(result.buf, result.start, cut, self.plan, head, mid, tail, first, out, again)
        if cut < result.end:
            head, mid, tail = self._envelope(source, ts, True)
            final = textjson.lines(result.buf, cut, result.end, self.plan, head, mid, tail, first + result.rows - 1,
                                   None, again)
            out[n:n + len(final)] = final
            n += len(final)
        return memoryview(out)[:n]

    def _envelope(self, source: dict, ts: int, last: bool) -> list[bytes]:
        """(head, mid, tail) of :func:`textjson.lines` for these rows' change lines, their ``id`` written
        between mid and tail; ``last``: with ``source.snapshot`` ``"last"`` (in its place in ``source``, else
        after ``id``)."""
        src, extra = {**source, "row": orjson.Fragment(b"\0")}, b""
        if last and "snapshot" in source:
            src["snapshot"] = "last"
        elif last:
            extra = b',"snapshot":"last"'
        head, mid, tail = _split_line({"op": "read", "schema": self.info.schema, "table": self.info.table,
                                       "before": None, "after": orjson.Fragment(b"\0"), "ts": ts, "source": src})
        return [head, mid, b'"' + extra + tail + b"\n"]

    def changes(self, result: ResultRows, source: dict, ts: int, first: int, prefix: str) -> list[dict]:
        """The rows of :meth:`fetch` as ``op: "read"`` change dicts whose ``after`` is an
        :class:`orjson.Fragment` of the row's JSON, with ``source`` plus ``row`` (from ``first``) and ``id``
        (``<prefix>:<row>``)."""
        schema, table, fragment = self.info.schema, self.info.table, orjson.Fragment
        objects = textjson.lines(result.buf, result.start, result.end, self.plan, b"", None, b"\n", 0)
        return [{"op": "read", "schema": schema, "table": table, "before": None, "after": fragment(text),
                 "ts": ts, "source": {**source, "row": index, "id": f"{prefix}:{index}"}}
                for index, text in enumerate(objects.split(b"\n")[:-1], first)]

"""The snapshot's fast path: a chunk's result set read off the wire, its rows made JSON lines at once.

PyMySQL's result reading (a coroutine per packet in aiomysql, then a Python converter per value) is most of a
snapshot's time. Here the text-protocol result set of a ``COM_QUERY`` (column count, column definitions, EOF,
one packet per row of length-encoded values, EOF) is read straight from the socket into one buffer, the
connection's transport lent to a :class:`asyncio.BufferedProtocol` for the result's time (:func:`query_result`,
the rows found by :func:`binlogd.protocol.textrows.scan`); then
:func:`binlogd.protocol.textrows.lines` (C, or its Python twin) writes every row of the chunk as JSON in one
call, each value in the form :meth:`TableInfo.row` gives (README "Values"; the table's :func:`plan`):
:meth:`ChunkReader.lines` the whole change lines for a JSON-lines sink (the bytes its ``change`` would
write), :meth:`ChunkReader.changes` change dicts whose ``after`` is an :class:`orjson.Fragment` for the others.

It relies on aiomysql's ``_execute_command``, on :func:`binlogd.daemon.replication._aiomysql.transport` and
``take_over``
(the seams on aiomysql's internals), and on the connection not asking for CLIENT_DEPRECATE_EOF (PyMySQL never
does).
"""

from __future__ import annotations

import asyncio
from base64 import b64encode

import orjson

from binlogd.daemon.snapshot.tables import BYTE_TYPES, INT_TYPES, TableInfo, vector_values
from binlogd.library.serialize import dumps
from binlogd.protocol import textrows
from binlogd.protocol.values import float32

COM_QUERY = 3
_PACE = 0.001     # seconds a chunk's socket is left unread before each read (see _Buffer.more)
_READ = 1 << 20   # get_buffer offers at least this much free space (one socket read takes what it holds)


def _dq(v: bytes) -> bytes:
    return b'"' + v + b'"'


def _double(v: bytes) -> bytes:
    return orjson.dumps(float(v))


def _float(v: bytes) -> bytes:
    return orjson.dumps(float32(float(v)))


def _bit(v: bytes) -> bytes:
    return str(int.from_bytes(v, "big")).encode()


def _text(v: bytes) -> bytes:
    return orjson.dumps(v.decode("utf-8", "replace"))


def _set(v: bytes) -> bytes:
    return orjson.dumps(v.decode().split(",") if v else [])


def _b64(v: bytes) -> bytes:
    return b'"' + b64encode(v) + b'"'


def _json(v: bytes) -> bytes:
    return orjson.dumps(orjson.loads(v))


def _vec(v: bytes) -> bytes:
    return orjson.dumps(vector_values(v))


def _encoder(data_type: str):
    """Raw text-protocol bytes of a ``data_type`` value -> its JSON bytes; None: the bytes are already JSON."""
    if data_type in INT_TYPES:
        return None
    if data_type in ("decimal", "date", "datetime", "timestamp", "time"):
        return _dq
    if data_type == "double":
        return _double
    if data_type == "float":
        return _float
    if data_type == "bit":
        return _bit
    if data_type == "set":
        return _set
    if data_type == "json":
        return _json
    if data_type == "vector":
        return _vec
    if data_type in BYTE_TYPES:
        return _b64
    return _text


def after_encoder(info: TableInfo):
    """``encode(values) -> bytes``: the JSON object ``{column: value}`` of one raw row (values as bytes or None),
    the same JSON as ``dumps(info.row(...))`` of the row read through PyMySQL."""
    prefixes = [orjson.dumps(name) + b":" for name in info.columns]
    encoders = [_encoder(t) for t in info.types]
    plan = list(zip(prefixes, encoders))

    def encode(values: list) -> bytes:
        parts = []
        for (prefix, enc), v in zip(plan, values):
            if v is None:
                parts.append(prefix + b"null")
            elif enc is None:
                parts.append(prefix + v)
            else:
                parts.append(prefix + enc(v))
        return b"{" + b",".join(parts) + b"}"

    return encode


def _key(info: TableInfo, values: list) -> list:
    """Raw key values (bytes, in key order) as :meth:`TableInfo.last_key` keeps them (text; binary as hex)."""
    out = []
    for name, v in zip(info.key, values):
        binary = info.types[info.columns.index(name)] in BYTE_TYPES or info.types[info.columns.index(name)] == "bit"
        out.append({"hex": v.hex()} if binary else v.decode("utf-8", "surrogateescape"))
    return out


def _fields(p: bytes, n: int) -> list:
    """The ``n`` length-encoded values of a text-protocol row packet (None for NULL).

    Raises:
        ValueError: the packet does not hold ``n`` values.
    """
    return textrows.fields(p, n)


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

    def payloads(self) -> list[bytes]:
        """Each row's payload (the packets of a row of 16 MiB or more joined)."""
        out, pos = [], self.start
        while pos < self.end:
            nxt, _ = textrows._row_at(self.buf, pos, self.end)
            out.append(textrows.payload(self.buf, pos, nxt))
            pos = nxt
        return out


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

        from binlogd.daemon.replication import _aiomysql

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
    socket: the header (column count, definitions, EOF) framed here, the rows by :func:`textrows.scan`.
    ``buffer``: a bytearray to read into (its old contents are overwritten; the result's rows are in it), else
    a new one. The connection is closed when the result could not be read to its end (an error, a cancel).

    Raises:
        pymysql.err.Error: the server's error (as PyMySQL raises it); OperationalError 2013 when the connection
            ends inside the result, 2027 when more data follows it.
    """
    got = _Buffer(buffer)
    got.attach(conn)
    try:
        await conn._execute_command(COM_QUERY, sql)
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

    buf, pos, columns, skip = got.data, 0, -1, 0
    while columns < 0 or skip:
        if got.size - pos >= 4:
            length = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16
            if got.size - pos - 4 >= length:
                payload = bytes(buf[pos + 4:pos + 4 + length])
                pos += 4 + length
                first = payload[0] if payload else 0
                if first == 0xFF:
                    got.whole = True
                    _raise_err(payload)
                if columns < 0:
                    columns = first if first < 251 else payload[1] | payload[2] << 8   # 252: a 2-byte count
                    skip = columns + 1
                else:
                    skip -= 1
                continue
        await got.more()
    start, rows, last = pos, 0, -1
    while True:
        pos, n, at, done = got.scan(pos)
        rows += n
        if at >= 0:
            last = at
        if done:
            break
        await got.more()
    length = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16
    if pos + 4 + length != got.size:
        raise OperationalError(2027, "unexpected data after a snapshot chunk's result")
    got.whole = True
    if done == 2:
        _raise_err(bytes(buf[pos + 4:pos + 4 + length]))
    return ResultRows(buf, start, pos, rows, last, columns)


async def query_packets(conn, sql: str) -> tuple[list[bytes], int]:
    """Run ``sql`` (one SELECT); return the payloads of its row packets (a row of 16 MiB or more joined) and
    its column count.

    Raises:
        pymysql.err.Error: as :func:`query_result`.
    """
    result = await query_result(conn, sql)
    return result.payloads(), result.columns


async def query_rows(conn, sql: str) -> list[list]:
    """Run ``sql`` (one SELECT) and return its rows, each a list of raw values (bytes, None for NULL).

    Raises:
        pymysql.err.Error: as :func:`query_result`.
    """
    packets, columns = await query_packets(conn, sql)
    return [_fields(p, columns) for p in packets]


def plan(info: TableInfo) -> textrows.Plan:
    """The :class:`textrows.Plan` of ``info``'s columns: each value in the form :func:`after_encoder` gives it."""
    kinds, calls = [], []
    for data_type in info.types:
        enc = _encoder(data_type)
        kind = (textrows.RAW if enc is None else textrows.QUOTED if enc is _dq else textrows.TEXT if enc is _text
                else textrows.BASE64 if enc is _b64 else textrows.BIT if enc is _bit else textrows.DOUBLE
                if enc is _double else textrows.CALL)
        kinds.append(kind)
        calls.append(enc if kind in (textrows.BIT, textrows.DOUBLE, textrows.CALL) else None)
    return textrows.Plan(bytes(kinds), tuple(orjson.dumps(name) + b":" for name in info.columns), tuple(calls),
                         orjson.dumps)


def _split_line(template: dict) -> list[bytes]:
    """``dumps(template)`` (the sinks' JSON) cut where its two :class:`orjson.Fragment` markers (a NUL byte each,
    which JSON text never holds raw) are: [head, mid, tail]."""
    parts = dumps(template).split(b"\0")
    if len(parts) != 3:
        raise ValueError("a NUL byte in a change's envelope")
    return parts


def rows_json(info: TableInfo):
    """``json(payloads) -> [bytes]``: text-protocol row payloads of ``info``'s columns to the JSON objects of
    their ``after`` (what :func:`after_encoder` makes of their values)."""
    table_plan = plan(info)

    def rows(payloads) -> list[bytes]:
        buf = b"".join(len(p).to_bytes(3, "little") + b"\0" + p for p in payloads)
        return textrows.lines(buf, 0, len(buf), table_plan, b"", None, b"\n", 0).split(b"\n")[:-1]

    return rows


def row_json(info: TableInfo):
    """``json(payload) -> bytes``: :func:`rows_json` for one row packet's payload (under 16 MiB)."""
    rows = rows_json(info)
    return lambda payload: rows((payload,))[0]


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

    def lines(self, result: ResultRows, source: dict, ts: int, first: int, prefix: str) -> memoryview:
        """The rows of :meth:`fetch` as the JSON lines (each ending in a newline) that a sink in the "binlogd"
        format writes for the change dicts of :meth:`changes` (the same bytes), written into memory kept from
        chunk to chunk, two buffers in turn: a view of them, whose bytes stay as they are until the second call
        after this one (a sink may still write them meanwhile).

        Raises:
            BufferError: a view of the buffer these lines go into is still held (not released since the call
                before the last).
        """
        self._outs.reverse()
        head, mid, tail = self._envelope(source, ts)
        n = textrows.lines(result.buf, result.start, result.end, self.plan, head, mid, b'"' + tail, first,
                           self._outs[0], b',"id":' + orjson.dumps(prefix + ":")[:-1])
        return memoryview(self._outs[0])[:n]

    def _envelope(self, source: dict, ts: int) -> list[bytes]:
        """(head, mid, tail) of :func:`textrows.lines` for these rows' change lines, less their ``id``."""
        head, mid, tail = _split_line({"op": "read", "schema": self.info.schema, "table": self.info.table,
                                       "before": None, "after": orjson.Fragment(b"\0"), "ts": ts,
                                       "source": {**source, "row": orjson.Fragment(b"\0")}})
        return [head, mid, tail + b"\n"]

    def changes(self, result: ResultRows, source: dict, ts: int, first: int, prefix: str) -> list[dict]:
        """The rows of :meth:`fetch` as ``op: "read"`` change dicts whose ``after`` is an
        :class:`orjson.Fragment` of the row's JSON, with ``source`` plus ``row`` (from ``first``) and ``id``
        (``<prefix>:<row>``)."""
        schema, table, fragment = self.info.schema, self.info.table, orjson.Fragment
        objects = textrows.lines(result.buf, result.start, result.end, self.plan, b"", None, b"\n", 0)
        return [{"op": "read", "schema": schema, "table": table, "before": None, "after": fragment(text),
                 "ts": ts, "source": {**source, "row": index, "id": f"{prefix}:{index}"}}
                for index, text in enumerate(objects.split(b"\n")[:-1], first)]

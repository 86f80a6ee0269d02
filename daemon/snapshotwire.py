"""The snapshot's fast path: a chunk's result set read off the wire, each row's ``after`` made JSON at once.

PyMySQL's result reading (a coroutine per packet in aiomysql, then a Python converter per value) is most of a
snapshot's time. Here the text-protocol result set of a ``COM_QUERY`` (column count, column definitions, EOF,
one packet per row of length-encoded values, EOF) is read in large blocks from the aiomysql connection's
stream and framed in one loop (:func:`query_packets`); each row packet goes straight to the JSON bytes of its
``after`` object by a function generated for the table (:func:`row_json`), in the forms :meth:`TableInfo.row`
gives (README "Values"), and reaches the sink as an :class:`orjson.Fragment` inside the change dict.

It relies on aiomysql's ``_execute_command`` and ``_reader`` (see :mod:`binlogd.daemon._aiomysql` for the
other such seams) and on the connection not asking for CLIENT_DEPRECATE_EOF (PyMySQL never does).
"""

from __future__ import annotations

from base64 import b64encode

import orjson

from binlogd.protocol.values import float32

from .snapshotrows import _BYTES, _INTS, TableInfo, _vector

COM_QUERY = 3
_READ = 1 << 20


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
    return orjson.dumps(_vector(v))


def _encoder(data_type: str):
    """Raw text-protocol bytes of a ``data_type`` value -> its JSON bytes; None: the bytes are already JSON."""
    if data_type in _INTS:
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
    if data_type in _BYTES:
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
        binary = info.types[info.columns.index(name)] in _BYTES or info.types[info.columns.index(name)] == "bit"
        out.append({"hex": v.hex()} if binary else v.decode("utf-8", "surrogateescape"))
    return out


def _fields(p: bytes, n: int) -> list:
    """The ``n`` length-encoded values of a text-protocol row packet (None for NULL)."""
    out = []
    i = 0
    for _ in range(n):
        b = p[i]
        if b < 251:
            j = i + 1 + b
            out.append(p[i + 1:j])
        elif b == 251:
            out.append(None)
            i += 1
            continue
        elif b == 252:
            j = i + 3 + (p[i + 1] | p[i + 2] << 8)
            out.append(p[i + 3:j])
        elif b == 253:
            j = i + 4 + int.from_bytes(p[i + 1:i + 4], "little")
            out.append(p[i + 4:j])
        else:
            j = i + 9 + int.from_bytes(p[i + 1:i + 9], "little")
            out.append(p[i + 9:j])
        i = j
    return out


def _raise_err(payload: bytes):
    from pymysql.err import raise_mysql_exception

    raise_mysql_exception(payload)


async def query_packets(conn, sql: str) -> tuple[list[bytes], int]:
    """Run ``sql`` (one SELECT) on an aiomysql connection; return the payloads of its row packets (bytes, a row
    of 16 MiB or more joined) and its column count, framed here in one loop over large reads.

    Raises:
        pymysql.err.Error: the server's error (as PyMySQL raises it); OperationalError 2013 when the connection
            ends inside the result.
    """
    from pymysql.err import OperationalError

    await conn._execute_command(COM_QUERY, sql)
    reader = conn._reader
    rows: list[bytes] = []
    buf, pos, columns, skip = b"", 0, -1, 0
    parts: list[bytes] = []   # the chunks of a packet of 16 MiB or more
    while True:
        end = len(buf)
        while end - pos >= 4:
            length = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16
            start = pos + 4
            if end - start < length:
                break
            pos = start + length
            if length == 0xFFFFFF or parts:
                parts.append(buf[start:pos])
                if length == 0xFFFFFF:
                    continue
                payload, parts = b"".join(parts), []
            else:
                payload = buf[start:pos]
            first = payload[0] if payload else 0
            if first == 0xFF:
                _raise_err(payload)
            if columns < 0:
                columns = first if first < 251 else payload[1] | payload[2] << 8   # 252: a 2-byte count
                skip = columns + 1
            elif skip:
                skip -= 1
            elif first == 0xFE and length < 9:
                if pos != end:
                    raise OperationalError(2027, "unexpected data after a snapshot chunk's result")
                return rows, columns
            else:
                rows.append(payload)
        data = await reader.read(_READ)
        if not data:
            conn.close()
            raise OperationalError(2013, "Lost connection to server during a snapshot chunk")
        buf = buf[pos:] + data
        pos = 0


async def query_rows(conn, sql: str) -> list[list]:
    """Run ``sql`` (one SELECT) and return its rows, each a list of raw values (bytes, None for NULL).

    Raises:
        pymysql.err.Error: as :func:`query_packets`.
    """
    packets, columns = await query_packets(conn, sql)
    return [_fields(p, columns) for p in packets]


def rows_json(info: TableInfo):
    """``json(payloads) -> [bytes]``: text-protocol row packets of ``info``'s columns straight to the JSON objects
    of their ``after`` (what :func:`after_encoder` makes of their values), by a function written for the table
    (one loop over the rows; none over the columns, no list of values)."""
    env = {"_long": _long, "_d": orjson.dumps}
    lines = ["def rows(packets):", "    res = []", "    push = res.append", "    for p in packets:", "        i = 0"]
    names = []
    for k, (name, data_type) in enumerate(zip(info.columns, info.types)):
        enc = _encoder(data_type)
        prefix = orjson.dumps(name) + b":"
        env[f"_p{k}"], env[f"_n{k}"], env[f"_e{k}"] = prefix, prefix + b"null", enc
        value = ("v" if enc is None else "b'\"' + v + b'\"'" if enc is _dq else "_d(v.decode('utf-8', 'replace'))"
                 if enc is _text else "_d(float(v))" if enc is _double else f"_e{k}(v)")
        lines += ["        b = p[i]",
                  "        if b < 251:",
                  "            j = i + 1 + b",
                  "            v = p[i + 1:j]",
                  "            i = j",
                  f"            a{k} = _p{k} + {value}",
                  "        elif b == 251:",
                  "            i += 1",
                  f"            a{k} = _n{k}",
                  "        else:",
                  "            v, i = _long(p, i)",
                  f"            a{k} = _p{k} + {value}"]
        names.append(f"a{k}")
    lines += [f"        push(b'{{' + b','.join(({', '.join(names)},)) + b'}}')", "    return res"]
    exec(compile("\n".join(lines), f"<snapshot rows {info.name}>", "exec"), env)  # noqa: S102 (our own code)
    return env["rows"]


def row_json(info: TableInfo):
    """``json(payload) -> bytes``: :func:`rows_json` for one row packet."""
    rows = rows_json(info)
    return lambda payload: rows((payload,))[0]


def _long(p: bytes, i: int) -> tuple[bytes, int]:
    """A value with a 2-, 3- or 8-byte length at ``p[i]``: (value, index after it)."""
    b = p[i]
    size = 2 if b == 252 else 3 if b == 253 else 8
    start = i + 1 + size
    end = start + int.from_bytes(p[i + 1:start], "little")
    return p[start:end], end


class ChunkReader:
    """Reads one table's chunks as change events on a given connection (the initial snapshot's, or an
    incremental one's).

    Args:
        info: the table.
    """

    def __init__(self, info: TableInfo):
        self.info = info
        self.json = rows_json(info)

    async def fetch(self, conn, after: list | None, limit: int | None) -> tuple[list[bytes], list | None]:
        """The chunk after key ``after`` (None: from the start) of at most ``limit`` rows (None: all): its row
        packets, and its last key (None when it is empty or there is no key).

        Raises:
            pymysql.err.Error: the server's error, or the connection's.
        """
        info = self.info
        packets, columns = await query_packets(conn, info.chunk_sql(after, limit, conn.escape))
        last = None
        if packets and info.key:
            values = _fields(packets[-1], columns)
            last = _key(info, [values[info.columns.index(k)] for k in info.key])
        return packets, last

    def changes(self, packets: list[bytes], source: dict, ts: int, first: int) -> list[dict]:
        """Row packets of :meth:`fetch` as ``op: "read"`` change dicts whose ``after`` is an
        :class:`orjson.Fragment` of the row's JSON, with ``source`` plus ``row`` (from ``first``)."""
        schema, table, fragment = self.info.schema, self.info.table, orjson.Fragment
        return [{"op": "read", "schema": schema, "table": table, "before": None, "after": fragment(text),
                 "ts": ts, "source": {**source, "row": index}} for index, text in enumerate(self.json(packets), first)]

    async def read(self, conn, after: list | None, limit: int | None, source: dict, ts: int,
                   first: int) -> tuple[list[dict], list | None]:
        """The chunk after key ``after`` (None: from the start) of at most ``limit`` rows (None: all) as
        ``op: "read"`` change dicts whose ``after`` is an :class:`orjson.Fragment` of the row's JSON, ``source``
        plus ``row`` (from ``first``); and the chunk's last key (None when it is empty or there is no key).

        Raises:
            pymysql.err.Error: the server's error, or the connection's.
        """
        packets, last = await self.fetch(conn, after, limit)
        return self.changes(packets, source, ts, first), last

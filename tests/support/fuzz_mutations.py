"""Byte-level mutations of binlog events for the fuzzer: light parsers of event bodies (to aim at
lengths, counts and bitmaps), MariaDB zlib and MySQL TRANSACTION_PAYLOAD rebuilders, and
:func:`mutate`, which applies a case's ops (plain tuples) to one event.

Positions in ops are taken modulo the current length, so every op applies to every event.
"""

from __future__ import annotations

import zlib

from binlogd.protocol.constants import EventType as ET


def packed_at(buf: bytes, pos: int) -> tuple[int, int]:
    first = buf[pos]
    if first < 0xFB:
        return first, pos + 1
    width = {0xFC: 2, 0xFD: 3, 0xFE: 8}.get(first, 0)
    return int.from_bytes(buf[pos + 1:pos + 1 + width], "little"), pos + 1 + width


def packed(value: int) -> bytes:
    if value < 0xFB:
        return bytes([value])
    if value < 1 << 16:
        return b"\xfc" + value.to_bytes(2, "little")
    if value < 1 << 24:
        return b"\xfd" + value.to_bytes(3, "little")
    return b"\xfe" + value.to_bytes(8, "little")


_ROWS_V2 = {ET.WRITE_ROWS, ET.UPDATE_ROWS, ET.DELETE_ROWS, ET.PARTIAL_UPDATE_ROWS}
_ROWS_V1 = {ET.WRITE_ROWS_V1, ET.UPDATE_ROWS_V1, ET.DELETE_ROWS_V1}
_ROWS_ALL = _ROWS_V1 | _ROWS_V2 | {ET.PRE_GA_WRITE_ROWS, ET.PRE_GA_UPDATE_ROWS, ET.PRE_GA_DELETE_ROWS}
_UPDATES = {ET.UPDATE_ROWS, ET.UPDATE_ROWS_V1, ET.PARTIAL_UPDATE_ROWS}
MARIADB_COMPRESSED = {ET.QUERY: ET.QUERY_COMPRESSED,
                       ET.WRITE_ROWS_V1: ET.WRITE_ROWS_COMPRESSED_V1, ET.UPDATE_ROWS_V1: ET.UPDATE_ROWS_COMPRESSED_V1,
                       ET.DELETE_ROWS_V1: ET.DELETE_ROWS_COMPRESSED_V1, ET.WRITE_ROWS: ET.WRITE_ROWS_COMPRESSED,
                       ET.UPDATE_ROWS: ET.UPDATE_ROWS_COMPRESSED, ET.DELETE_ROWS: ET.DELETE_ROWS_COMPRESSED}


def _rows_layout(tc: int, body: bytes, post_len: int) -> tuple[list[tuple[int, int]], int]:
    """Regions (bitmaps, first row's NULL bitmap) of a rows body, and where the row data starts."""
    id_size = 4 if post_len == 6 else 6
    pos = id_size + 2
    regions = [(0, pos)]
    if tc in _ROWS_V2:
        extra = int.from_bytes(body[pos:pos + 2], "little")
        regions.append((pos, pos + 2))
        pos += extra
    width_at = pos
    width, pos = packed_at(body, pos)
    regions.append((width_at, pos))
    nbytes = (width + 7) // 8
    regions.append((pos, pos + nbytes))
    present = int.from_bytes(body[pos:pos + nbytes], "little")
    pos += nbytes
    if tc in _UPDATES:
        regions.append((pos, pos + nbytes))
        pos += nbytes
    data_start = pos
    null_bytes = (bin(present).count("1") + (1 if tc in (20, 21, 22) else 0) + 7) // 8
    regions.append((pos, pos + max(null_bytes, 1)))
    return regions, data_start


def _table_map_regions(body: bytes, post_len: int) -> list[tuple[int, int]]:
    """Regions of a TABLE_MAP body: post-header, names, column count, types, metadata, NULL bitmap,
    optional metadata."""
    id_size = 4 if post_len == 6 else 6
    pos = id_size + 2
    regions = [(0, pos)]
    for _ in range(2):  # schema, table: length byte, name, NUL
        regions.append((pos, pos + 1))
        pos += 1 + body[pos] + 1
    ncols_at = pos
    ncols, pos = packed_at(body, pos)
    regions.append((ncols_at, pos))
    regions.append((pos, pos + ncols))
    pos += ncols
    if pos < len(body):
        meta_at = pos
        mlen, pos = packed_at(body, pos)
        regions.append((meta_at, pos + mlen))
        pos += mlen
        regions.append((pos, pos + (ncols + 7) // 8))
        pos += (ncols + 7) // 8
        if pos < len(body):
            regions.append((pos, len(body)))
    return regions


def aim_regions(tc: int, body: bytes, post_len: int) -> list[tuple[int, int]]:
    """Body regions worth aiming at (lengths, counts, bitmaps); always includes the early body."""
    out = [(0, min(len(body), 48))]
    try:
        if tc in _ROWS_ALL:
            out += _rows_layout(tc, body, post_len)[0]
        elif tc == ET.TABLE_MAP:
            out += _table_map_regions(body, post_len)
        elif tc == ET.QUERY:
            out += [(8, 9), (11, 13), (post_len, post_len + int.from_bytes(body[11:13], "little"))]
        elif tc == ET.TRANSACTION_PAYLOAD:
            out += [(0, min(len(body), 32))]
        elif tc in (ET.USER_VAR, ET.BINLOG_CHECKPOINT):
            out += [(0, 4)]
        elif tc == ET.PREVIOUS_GTIDS:
            out += [(0, 8), (24, 32)]
        elif tc == ET.FORMAT_DESCRIPTION:
            out += [(0, 2), (56, 57), (57, len(body))]
    except (IndexError, ValueError):
        pass
    return [(a, min(b, len(body))) for a, b in out if 0 <= a < min(b, len(body))]


# ==================================================================================== mutations
#
# A case is (file, event index, ops); ops are plain tuples applied in order by mutate(), so a case
# printed by hypothesis can be pasted into an @example. Positions are taken modulo the current
# length, so every op applies to every event.


def _mariadb_compress(tc: int, body: bytes, post_len: int) -> tuple[int, bytes]:
    """The MariaDB *_COMPRESSED form of a QUERY or rows body (zlib after a size header)."""
    if tc == ET.QUERY:
        split = post_len + int.from_bytes(body[11:13], "little") + body[8] + 1
    else:
        split = _rows_layout(tc, body, post_len)[1]
    plain = body[split:]
    size = len(plain).to_bytes(4, "big").lstrip(b"\0") or b"\0"
    return MARIADB_COMPRESSED[tc], body[:split] + bytes([0x80 | len(size)]) + size + zlib.compress(plain)


def _split_payload(body: bytes) -> tuple[dict[int, int], bytes]:
    fields, pos = {}, 0
    while pos < len(body):
        ftype, pos = packed_at(body, pos)
        if ftype == 0:
            break
        flen, pos = packed_at(body, pos)
        fields[ftype], _ = packed_at(body[pos:pos + flen], 0)
        pos += flen
    return fields, body[pos:]


def build_payload(inner: bytes, compress: bool) -> bytes:
    if compress:
        import zstandard

        payload, ctype = zstandard.ZstdCompressor().compress(inner), 0
    else:
        payload, ctype = inner, 255
    out = b""
    for ftype, value in ((2, ctype), (3, len(inner)), (1, len(payload))):
        enc = packed(value)
        out += packed(ftype) + packed(len(enc)) + enc
    return out + b"\x00" + payload


def _split_events(stream: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos + 19 <= len(stream):
        length = int.from_bytes(stream[pos + 9:pos + 13], "little")
        if length < 19:
            break
        out.append(stream[pos:pos + length])
        pos += length
    return out


def _apply_ops(header: bytearray, body: bytearray, ops) -> int | None:
    """Apply byte-level ops to (header, body) in place; returns an event_length override if any."""
    length_override = None
    for op in ops:
        kind = op[0]
        if kind == "set":       # ("set", pos, value): a byte anywhere (header then body)
            _, pos, value = op
            total = len(header) + len(body)
            if total:
                pos %= total
                (header if pos < len(header) else body)[pos if pos < len(header) else pos - len(header)] = value
        elif kind == "xor":     # ("xor", body_pos, mask)
            if body:
                body[op[1] % len(body)] ^= op[2]
        elif kind == "type":    # ("type", code)
            header[4] = op[1]
        elif kind == "typebit":  # ("typebit", bit)
            header[4] ^= 1 << op[1]
        elif kind == "int":     # ("int", body_pos, width, value): a little-endian integer
            _, pos, width, value = op
            if len(body) >= width:
                pos %= len(body) - width + 1
                body[pos:pos + width] = value.to_bytes(width, "little")
        elif kind == "raw":     # ("raw", body_pos, bytes): overwrite (e.g. a huge packed integer)
            if body:
                pos = op[1] % len(body)
                body[pos:pos + len(op[2])] = op[2]
        elif kind == "truncate":
            del body[op[1] % (len(body) + 1):]
        elif kind == "extend":
            body += op[1]
        elif kind == "insert":
            pos = op[1] % (len(body) + 1)
            body[pos:pos] = op[2]
        elif kind == "delete":
            if body:
                pos = op[1] % len(body)
                del body[pos:pos + op[2]]
        elif kind == "set_length":
            length_override = op[1]
        else:
            raise AssertionError(f"unknown op {op!r}")
    return length_override


def mutate(raw: bytes, ops, header_len: int, footer: int, post_len) -> bytes:
    """The event ``raw`` after ``ops``; event_length is fixed up unless an op sets it."""
    header = bytearray(raw[:header_len])
    body = bytearray(raw[header_len:len(raw) - footer])
    tail = raw[len(raw) - footer:] if footer else b""
    byte_ops = []
    for op in ops:
        if op[0] == "mariadb_compress":
            tc = header[4]
            if tc in MARIADB_COMPRESSED:
                try:
                    new_tc, new_body = _mariadb_compress(tc, bytes(body), post_len(tc))
                except (IndexError, ValueError):
                    continue
                header[4], body = new_tc, bytearray(new_body)
        elif op[0] == "inner":  # ("inner", index, ops, recompress): mutate an event inside a payload
            if header[4] != ET.TRANSACTION_PAYLOAD:
                continue
            fields, payload = _split_payload(bytes(body))
            if fields.get(2, 0) == 0:
                import zstandard

                payload = zstandard.ZstdDecompressor().decompress(payload, max_output_size=1 << 24)
            inner = _split_events(payload)
            if inner:
                k = op[1] % len(inner)
                ev = inner[k]
                inner[k] = mutate(ev, op[2], 19, 0, post_len)
            body = bytearray(build_payload(b"".join(inner), op[3]))
        else:
            byte_ops.append(op)
    override = _apply_ops(header, body, byte_ops)
    out = bytearray(header + body + tail)
    if len(out) >= 13:
        out[9:13] = ((len(out) if override is None else override) & 0xFFFFFFFF).to_bytes(4, "little")
    return bytes(out)


"""Rows events (v0, v1, v2, PARTIAL_UPDATE, MariaDB compressed): framing and lazy row decoding."""

from __future__ import annotations

import struct

from . import events as E
from .bodies import mariadb_uncompress
from .constants import EventType as ET
from .errors import EventDecodeError
from .primitives import U16, need, packed_int, packed_len, take

TYPE_CHECKING = False  # typing is not imported at run time
if TYPE_CHECKING:
    from .rowcodec import TableCodec

_KIND = {}
for _t in (ET.PRE_GA_WRITE_ROWS, ET.WRITE_ROWS_V1, ET.WRITE_ROWS, ET.WRITE_ROWS_COMPRESSED_V1,
           ET.WRITE_ROWS_COMPRESSED):
    _KIND[_t] = "insert"
for _t in (ET.PRE_GA_UPDATE_ROWS, ET.UPDATE_ROWS_V1, ET.UPDATE_ROWS, ET.PARTIAL_UPDATE_ROWS,
           ET.UPDATE_ROWS_COMPRESSED_V1, ET.UPDATE_ROWS_COMPRESSED):
    _KIND[_t] = "update"
for _t in (ET.PRE_GA_DELETE_ROWS, ET.DELETE_ROWS_V1, ET.DELETE_ROWS, ET.DELETE_ROWS_COMPRESSED_V1,
           ET.DELETE_ROWS_COMPRESSED):
    _KIND[_t] = "delete"
ROWS_TYPES = frozenset(_KIND)
_V2 = frozenset({ET.WRITE_ROWS, ET.UPDATE_ROWS, ET.DELETE_ROWS, ET.PARTIAL_UPDATE_ROWS,
                 ET.WRITE_ROWS_COMPRESSED, ET.UPDATE_ROWS_COMPRESSED, ET.DELETE_ROWS_COMPRESSED})
_COMPRESSED = frozenset({ET.WRITE_ROWS_COMPRESSED_V1, ET.UPDATE_ROWS_COMPRESSED_V1, ET.DELETE_ROWS_COMPRESSED_V1,
                         ET.WRITE_ROWS_COMPRESSED, ET.UPDATE_ROWS_COMPRESSED, ET.DELETE_ROWS_COMPRESSED})
_PRE_GA = frozenset({ET.PRE_GA_WRITE_ROWS, ET.PRE_GA_UPDATE_ROWS, ET.PRE_GA_DELETE_ROWS})
_NO_PARTIAL: frozenset = frozenset()
STMT_END_F = 0x0001
_PRE_GA_UPDATE, _PARTIAL_UPDATE = int(ET.PRE_GA_UPDATE_ROWS), int(ET.PARTIAL_UPDATE_ROWS)  # plain ints: faster


def _post_header(h, body: memoryview, ctx) -> tuple[int, int, int]:
    """A rows event's table id, flags, and where the body goes on after them.

    Raises:
        EventDecodeError: the body is shorter than the table id and flags.
    """
    id_size = ctx.table_id_size(h.type_code)
    need(body, 0, id_size + 2, "rows post-header")
    return int.from_bytes(body[:id_size], "little"), U16.unpack_from(body, id_size)[0], id_size + 2


def undecoded_rows(h, body: memoryview, ctx) -> E.UndecodedRowsEvent:
    """A rows event's header and flags only (a decoder that takes no rows).

    Raises:
        EventDecodeError: the body is shorter than the table id and flags.
    """
    return E.UndecodedRowsEvent(h, _post_header(h, body, ctx)[1])


def decode_rows(h, body: memoryview, ctx) -> E.RowsEvent:
    """Frame a rows event; its rows are decoded on first access of ``.rows``.

    Raises:
        EventDecodeError: no TABLE_MAP seen for its table id, or a malformed frame.
    """
    # This runs once per rows event on every path: the bounds are checked inline (need() raises when one fails).
    tc = h.type_code
    end = len(body)
    id_size = ctx.table_id_size(tc)
    pos = id_size + 2
    if pos > end:
        need(body, 0, pos, "rows post-header")
    table_id = int.from_bytes(body[:id_size], "little")
    flags = body[id_size] | body[id_size + 1] << 8
    if tc in _V2:
        if pos + 2 > end:
            need(body, pos, 2, "rows extra data length")
        extra = body[pos] | body[pos + 1] << 8
        if extra < 2:
            raise EventDecodeError(f"rows extra data length {extra} < 2")
        if pos + extra > end:
            need(body, pos, extra, "rows extra data")
        pos += extra
    entry = ctx.tables.get(table_id)
    if entry is None:
        raise EventDecodeError(f"rows event for table id {table_id} with no TABLE_MAP before it")
    table_map, codec = entry
    if pos < end and body[pos] < 0xFB:
        width = body[pos]
        pos += 1
    else:
        width, pos = packed_len(body, pos)
    if width != len(codec.columns):
        raise EventDecodeError(f"rows event has {width} columns, TABLE_MAP of {table_map.schema}.{table_map.table} "
                               f"has {len(codec.columns)}")
    nbytes = (width + 7) // 8
    kind = _KIND[tc]
    two = kind == "update" and tc != _PRE_GA_UPDATE  # an update has the after image's bitmap too
    if pos + (2 * nbytes if two else nbytes) > end:
        need(body, pos, nbytes, "columns-present bitmap")
        need(body, pos + nbytes, nbytes, "columns-present bitmap (after image)")
    present_before = int.from_bytes(body[pos:pos + nbytes], "little")
    pos += nbytes
    present_after = None
    if two:
        present_after = int.from_bytes(body[pos:pos + nbytes], "little")
        pos += nbytes
    # Compressed images are inflated now (a bad zlib stream is an error of the event itself).
    # Plain images are copied to bytes only when the rows are read (indexing and slicing bytes is
    # much faster than memoryview in the row loop): a sink that never reads rows costs no copy.
    images = mariadb_uncompress(body[pos:]) if tc in _COMPRESSED else body[pos:]
    null_offset = 1 if tc in _PRE_GA else 0
    source = RowImages(codec, kind, images, present_before, present_after, tc == _PARTIAL_UPDATE, h, null_offset)
    return E.RowsEvent(h, kind, table_id, flags, table_map.schema, table_map.table, codec.labels, source)


class RowImages:
    """The undecoded rows of one rows event; calling it decodes them (``RowsEvent.rows``).

    Fields:
        codec: the table's :class:`protocol.rowcodec.TableCodec`.
        kind: "insert", "update" or "delete".
        data: the row images (inflated when the event was compressed).
        present_before, present_after: the columns-present bitmaps (LSB = column 1) of the
            (before) image and of an update's after image (None when the event has one bitmap).
        partial: a PARTIAL_UPDATE_ROWS event (its after images hold a partially updated JSON column as
            :class:`protocol.jsonb.JsonDiffs`).
        header: the event's header (for errors).
        null_offset: 1 for pre-GA rows (bit 0 of the null bitmap reserved), else 0.
    """

    __slots__ = ("codec", "kind", "data", "present_before", "present_after", "partial", "header", "null_offset")

    def __init__(self, codec: TableCodec, kind: str, data, present_before: int, present_after: int | None,
                 partial: bool, header, null_offset: int):
        self.codec, self.kind, self.data = codec, kind, data
        self.present_before, self.present_after, self.partial = present_before, present_after, partial
        self.header, self.null_offset = header, null_offset

    def __call__(self) -> list:
        """The decoded rows (see ``RowsEvent.rows``).

        Raises:
            EventDecodeError: a malformed row, named by its index and kind.
        """
        return _decode_rows(self.codec, self.kind, bytes(self.data), self.present_before, self.present_after,
                            self.partial, self.header, self.null_offset)


def _decode_rows(codec: TableCodec, kind: str, data: bytes, present_before: int,
                 present_after: int | None, partial: bool, h, null_offset: int) -> list:
    from .rowcodec import decode_rows as decode_images  # imported by then: the TABLE_MAP built the codec

    first = codec.image(present_before, null_offset)
    second = codec.image(present_after if present_after is not None else present_before, null_offset)
    out = []
    try:
        if not partial:
            decode_images(first, second if kind == "update" else None, data, out)
        else:
            pos, end = 0, len(data)
            while pos < end:
                start = pos
                before, pos = first(data, pos, _NO_PARTIAL)
                partial_cols, pos = _partial_columns(codec, data, pos)
                after, pos = second(data, pos, partial_cols)
                if pos == start:
                    raise EventDecodeError("row images are empty (no column present): the event cannot hold rows")
                out.append((before, after))
    except EventDecodeError as exc:
        raise EventDecodeError(f"row {len(out) + 1} of {kind}: {exc.args[0]}", h.pos, h.type_code) from exc
    except (struct.error, IndexError, ValueError, OverflowError) as exc:
        raise EventDecodeError(f"malformed row {len(out) + 1}: {exc}", h.pos, h.type_code) from exc
    return out


def _partial_columns(codec: TableCodec, data: memoryview, pos: int) -> tuple[frozenset, int]:
    """PARTIAL_UPDATE_ROWS: value_options, then one bit per JSON column of the table."""
    options, pos = packed_int(data, pos)
    if not options or not options & 1:
        return _NO_PARTIAL, pos
    njson = len(codec.json_columns)
    raw, pos = take(data, pos, (njson + 7) // 8, "partial JSON bitmap")
    bits = int.from_bytes(raw, "little")
    return frozenset(idx for k, idx in enumerate(codec.json_columns) if bits >> k & 1), pos

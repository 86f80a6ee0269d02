"""The one binlog event decoder shared by the daemon, the file tools and Spark.

A :class:`Decoder` holds what earlier events told it (the format description,
the checksum algorithm, the table maps) and turns one complete event's bytes
into a typed event. It does no I/O: callers split the stream into events
(:mod:`protocol.reader` for files and buffers) and feed them in order.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable

from . import bodies as B
from . import events as E
from . import speedups
from .constants import CHECKSUM_CRC32, LOG_EVENT_BINLOG_IN_USE_F
from .constants import EventType as ET
from .errors import ChecksumError, EventDecodeError, ProtocolError
from .primitives import HEADER_V1, HEADER_V4, U16, U32, crc32, need, packed_len
from .records import replace
from .rows import ROWS_TYPES, STMT_END_F, RowImages, decode_rows, undecoded_rows

try:  # Decoder.decode's frame check and rows_like in C, when built and not turned off (BINLOGD_PURE_PYTHON=1)
    from ._skim import frame as _frame_c
    from ._skim import rows_like as _rows_like_c
except ImportError:  # not built: _frame's Python checks do the same, and rows_like takes nothing
    _frame_c = _rows_like_c = None
if not speedups.ENABLED:
    _frame_c = _rows_like_c = None

TYPE_CHECKING = False  # typing is not imported at run time
if TYPE_CHECKING:  # imported at the first TABLE_MAP (binlogd info decodes none), and by decoders without rows
    from .rowcodec import TableCodec
    from .skim import SkimRun
    from .tablemap import TableSchema

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")
_FDE_FIXED = 2 + 50 + 4 + 1  # binlog version, server version, create timestamp, header length
_MAX_UNCOMPRESSED = 1 << 32

# Post-header lengths to use before any FORMAT_DESCRIPTION (v4) or for v1/v3 files.
_DEFAULT_POST_HEADER = {ET.QUERY: 13, ET.ROTATE: 8, ET.LOAD: 18, ET.NEW_LOAD: 18, ET.CREATE_FILE: 18,
                        ET.APPEND_BLOCK: 4, ET.EXEC_LOAD: 4, ET.DELETE_FILE: 4, ET.BEGIN_LOAD_QUERY: 4,
                        ET.EXECUTE_LOAD_QUERY: 26, ET.TABLE_MAP: 8, ET.INCIDENT: 2,
                        ET.PRE_GA_WRITE_ROWS: 8, ET.PRE_GA_UPDATE_ROWS: 8, ET.PRE_GA_DELETE_ROWS: 8,
                        ET.WRITE_ROWS_V1: 8, ET.UPDATE_ROWS_V1: 8, ET.DELETE_ROWS_V1: 8,
                        ET.WRITE_ROWS: 10, ET.UPDATE_ROWS: 10, ET.DELETE_ROWS: 10, ET.PARTIAL_UPDATE_ROWS: 10,
                        ET.GTID: 42, ET.ANONYMOUS_GTID: 42, ET.BINLOG_CHECKPOINT: 4, ET.MARIADB_GTID: 19,
                        ET.MARIADB_GTID_LIST: 4, ET.QUERY_COMPRESSED: 13,
                        ET.WRITE_ROWS_COMPRESSED_V1: 8, ET.UPDATE_ROWS_COMPRESSED_V1: 8,
                        ET.DELETE_ROWS_COMPRESSED_V1: 8, ET.WRITE_ROWS_COMPRESSED: 10,
                        ET.UPDATE_ROWS_COMPRESSED: 10, ET.DELETE_ROWS_COMPRESSED: 10}

# The pre-GA "a_drop" development trees of MySQL 5.1/5.2 numbered events 16-22 differently; the
# server maps them to today's numbers, and so do we (header.type_code is the mapped code).
_OLD_TYPE_NUMBERS = {16: ET.TABLE_MAP, 17: ET.PRE_GA_WRITE_ROWS, 18: ET.PRE_GA_UPDATE_ROWS,
                     19: ET.PRE_GA_DELETE_ROWS, 20: ET.XID, 21: ET.BEGIN_LOAD_QUERY, 22: ET.EXECUTE_LOAD_QUERY}
_OLD_TYPE_NUMBERS_INV = {v: k for k, v in _OLD_TYPE_NUMBERS.items()}
# The server's own test (Format_description_event, reading an FDE): the version strings of those trees,
# 5.1.[1-5]-a_drop5*, 5.1.4-a_drop6* and 5.2.[0-2]-a_drop6*. Nothing else: not 5.1.0-5.1.15 in general,
# not 5.1.1-alpha (released with both numberings), not 5.1.15-ndb-6.1.x (today's numbers).
_RENUMBERED_TREE = re.compile(r"5\.(?:1\.[1-5]-a_drop5|1\.4-a_drop6|2\.[0-2]-a_drop6)")


def renumbered_tree(version: str) -> bool:
    """True when a server of this version numbered event types 16-22 the pre-GA way (its FDE must list 22)."""
    return _RENUMBERED_TREE.match(version) is not None


# Post-header lengths of binlog v1/v3 (3.23, 4.0) by type 1..14; ROTATE's (8) is 0 in v1.
_V1_V3_POST_HEADER = bytes([56, 11, 0, 8, 0, 18, 0, 4, 4, 4, 4, 18, 0, 0])

_NOT_IN_PAYLOAD = frozenset({ET.TRANSACTION_PAYLOAD, ET.FORMAT_DESCRIPTION, ET.START_V3})
# Type codes decode() tests for every event, as plain ints (an IntEnum member lookup costs ~0.2 µs on 3.11).
_START_V3, _FORMAT_DESCRIPTION, _TABLE_MAP = int(ET.START_V3), int(ET.FORMAT_DESCRIPTION), int(ET.TABLE_MAP)
_TRANSACTION_PAYLOAD, _START_ENCRYPTION = int(ET.TRANSACTION_PAYLOAD), int(ET.START_ENCRYPTION)
_FORMATS = frozenset({ET.FORMAT_DESCRIPTION, ET.START_V3})
# What a decoder without rows passes as a bare Event: the rows events' context, which only rows decoding reads.
_ROW_CONTEXT = frozenset({ET.TABLE_MAP, ET.ANNOTATE_ROWS, ET.ROWS_QUERY})
_PAST_IN_TRANSACTION = ROWS_TYPES | _ROW_CONTEXT

SchemaSource = Callable[[str, str], "TableSchema | None"]


def version_tuple(version: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a server version string such as "10.11.19-MariaDB-log"; (0, 0, 0) when it
    does not start with one. The one parser of version strings: FDEs, ``SELECT VERSION()``, ``--version``."""
    m = _VERSION.match(version)
    return (int(m[1]), int(m[2]), int(m[3])) if m else (0, 0, 0)


def server_has_checksums(version: str) -> bool:
    """True when a server of this version writes the checksum algorithm into its FDE (MySQL 5.6.1+, MariaDB 5.3+)."""
    return version_tuple(version) >= ((5, 3, 0) if "mariadb" in version.lower() else (5, 6, 1))


def _zstd_bounded(data: bytes, size: int) -> bytes:
    """Decompress a zstd frame that must hold exactly ``size`` bytes, never producing more than
    ``size + 1`` (a corrupt frame header may claim gigabytes; a one-shot decompress would allocate them).

    Raises:
        EventDecodeError: bad zstd data, or not exactly ``size`` bytes.
    """
    import zstandard

    out = bytearray()
    try:
        with zstandard.ZstdDecompressor().stream_reader(data) as reader:
            while len(out) <= size:
                chunk = reader.read(min(1 << 20, size + 1 - len(out)))
                if not chunk:
                    break
                out += chunk
    except zstandard.ZstdError as exc:
        raise EventDecodeError(f"TRANSACTION_PAYLOAD zstd: {exc}") from exc
    if len(out) != size:
        raise EventDecodeError(f"TRANSACTION_PAYLOAD holds {len(out)}{'+' if len(out) > size else ''} bytes, "
                               f"its header says {size}")
    return bytes(out)


class Decoder:
    """Decodes complete events, keeping the state earlier events define.

    Args:
        checksum_alg: the checksum in force before a FORMAT_DESCRIPTION arrives
            (the daemon sets what it negotiated; files start with their FDE).
        verify_checksums: check CRC32 footers (default True).
        schema_source: ``(schema, table) -> TableSchema | None`` for column names
            when TABLE_MAP carries no optional metadata, and (asked even when it does) for
            the VECTOR columns MariaDB 11.7+ logs as binary VARCHARs.
        rows: False for readers that take no rows (the raw archive): rows events become
            :class:`protocol.events.UndecodedRowsEvent` (header and flags), and TABLE_MAP,
            ANNOTATE_ROWS and ROWS_QUERY bare :class:`protocol.events.Event`; every event's
            header, length and checksum are still checked.

    Fields:
        fde: the last FormatDescriptionEvent, or None.
        header_len: 19 (v3/v4) or 13 (v1).
        checksum_alg: 0, 1 or None.
        tables: table id → (TableMapEvent, TableCodec) of the current table maps.
    """

    def __init__(self, checksum_alg: int | None = None, verify_checksums: bool = True,
                 schema_source: SchemaSource | None = None, rows: bool = True):
        self.rows = rows
        self._skipped = frozenset() if rows else _ROW_CONTEXT
        self.fde: E.FormatDescriptionEvent | None = None
        self.header_len = 19
        self.checksum_alg = checksum_alg
        self.verify_checksums = verify_checksums
        self.schema_source = schema_source
        self.tables: dict[int, tuple[E.TableMapEvent, TableCodec]] = {}
        self.encrypted_at: int | None = None
        self._post_header = b""
        self._type_permutation: dict[int, int] = {}
        self._hidden_vectors = False  # MariaDB 11.7+: VECTOR columns are logged as binary VARCHARs
        self._table_cache: dict[bytes, list] = {}
        self._skim_table: tuple[bytes, bytes] | None = None  # (post-header lengths, skim table for them)
        # _skim.frame, or None to check every frame in Python (_frame); decode takes it only where both agree
        self._frame_c = _frame_c
        self._skim = None
        if not rows:
            from . import skim  # skim_run's check, for decoders without rows only

            self._skim = skim

    # ------------------------------------------------------------ state
    def post_header_len(self, type_code: int) -> int:
        """Post-header length of ``type_code`` per the current FDE (defaults before one)."""
        idx = type_code - 1
        if 0 <= idx < len(self._post_header):
            return self._post_header[idx]
        return _DEFAULT_POST_HEADER.get(type_code, 0)

    def table_id_size(self, type_code: int) -> int:
        """Bytes of the table id in a TABLE_MAP's or rows event's post-header: 4 where that post-header
        is 6 bytes long (early 5.1 servers), else 6."""
        return 4 if self.post_header_len(type_code) == 6 else 6

    # ------------------------------------------------------------ decoding
    def decode_header(self, data, pos: int = 0) -> E.EventHeader:
        """Parse only the common header of the event starting at ``data[0]``.

        Raises:
            ProtocolError: fewer bytes than a header, or an impossible event length.
        """
        if self.header_len == 13:
            if len(data) < 13:
                raise ProtocolError(f"event header needs 13 bytes, got {len(data)}", pos)
            ts, tc, sid, length = HEADER_V1.unpack_from(data, 0)
            header = E.EventHeader(ts, tc, sid, length, 0, 0, pos)
        else:
            if len(data) < 19:
                raise ProtocolError(f"event header needs 19 bytes, got {len(data)}", pos)
            header = E.EventHeader(*HEADER_V4.unpack_from(data, 0), pos)
            if self._type_permutation and header.type_code in self._type_permutation:
                header = replace(header, type_code=self._type_permutation[header.type_code])
        if header.event_length < self.header_len:
            raise ProtocolError(f"event length {header.event_length} is shorter than its header", pos)
        return header

    def _frame(self, view: memoryview, pos: int) -> tuple[E.EventHeader, int | None, int]:
        """Check the header, length, encryption state and checksum; return (header, algorithm, body end)."""
        header = self.decode_header(view, pos)
        if header.type_code == _START_V3 and self.fde is None:
            # A file's first event tells the header size: START_V3's body is 56 bytes, so a
            # 69-byte event has the 13-byte v1 header (whose length field sits at the same offset).
            self.header_len = 13 if header.event_length == 13 + 56 else 19
            header = self.decode_header(view, pos)
        if header.event_length != len(view):
            raise ProtocolError(f"{header.type_name} says {header.event_length} bytes, got {len(view)}", pos)
        if self.encrypted_at is not None:
            raise EventDecodeError(f"binlog is encrypted from offset {self.encrypted_at} on "
                                   "(START_ENCRYPTION); binlogd cannot decrypt files", pos, header.type_code)
        alg = self._fde_checksum(view) if header.type_code == _FORMAT_DESCRIPTION else self.checksum_alg
        end = len(view)
        if alg == CHECKSUM_CRC32:
            end -= 4
            if end < self.header_len:
                raise ProtocolError(f"{header.type_name} too short for its checksum", pos)
            if self.verify_checksums:
                self._verify_crc(view, header, pos)
        return header, alg, end

    @property
    def renumbered(self) -> bool:
        """True while the FORMAT_DESCRIPTION read is a pre-GA 5.1 one (``-a_drop``) whose event type codes are
        mapped to today's."""
        return bool(self._type_permutation)

    @property
    def crc_len(self) -> int:
        """The checksum bytes at the end of each event: 4 for CRC32, else 0."""
        return 4 if self.checksum_alg == CHECKSUM_CRC32 else 0

    def _plain_v4(self) -> bool:
        """Past an FDE of v4 (19-byte) headers, types as logged, not encrypted: where the C checks may take
        events (decode checks the same inline, on its hot path)."""
        return self.fde is not None and self.header_len == 19 and self.encrypted_at is None \
            and not self._type_permutation

    def skim_run(self, events: list, start: int, end: int, expect: int) -> SkimRun:
        """Check ``events[start:end]`` in one call while they are events a decoder without rows
        passes undecoded (rows events, TABLE_MAP, ANNOTATE_ROWS, ROWS_QUERY) and need nothing but
        their length, place and CRC32 checked; stop before any other (see :mod:`protocol.skim`).

        Only for ``rows=False`` decoders; every event taken is one :meth:`decode` would return as
        an UndecodedRowsEvent or a bare Event, and none of them changes this decoder's state.

        Args:
            expect: the stream position the first event must start at.
        Returns:
            A :class:`protocol.skim.SkimRun` (``stop == start`` when nothing was taken).
        """
        if self.rows or not self._plain_v4():
            from .skim import SkimRun

            return SkimRun(start, expect, 0, 0, {})
        if self._skim_table is None or self._skim_table[0] is not self._post_header:
            table = bytearray(256)
            for tc in _ROW_CONTEXT:
                table[tc] = 1
            for tc in ROWS_TYPES:
                table[tc] = 1 + self.table_id_size(tc) + 2  # table id and flags
            self._skim_table = (self._post_header, bytes(table))
        crc = self.crc_len
        return self._skim.skim_run(events, start, end, self._skim_table[1], crc,
                                   crc32 if crc and self.verify_checksums else None, expect)

    def rows_like(self, view: memoryview, pos: int, first: E.RowsEvent, limit: int,
                  statement_end: bool = False) -> tuple[int, int, bool]:
        """The events from ``pos`` on that :meth:`decode` would return as rows events just like ``first`` but
        for their rows: checked in one C call, without a Python object per event.

        Each taken event is whole in ``view``, holds rows, has ``first``'s timestamp, type, server id and
        flags, the same bytes between its header and its row images (table id, flags, extra data, width,
        columns-present bitmaps), and a good CRC32; none changes this decoder's state. With
        ``statement_end``, the last one taken may differ from ``first`` in its STMT_END_F flag, which
        ``first`` must not have. Its row images are ``view[p + head:p + length - crc]``, where ``head =
        first.header.event_length - crc - len(first.images.data)`` and ``crc`` is 4 for CRC32 checksums, else 0.

        Args:
            view: the whole file (or stream) ``first`` was decoded from, at offset ``first.header.pos``.
            limit: take no more events once this many bytes are taken.
        Returns:
            ``(stop, count, ends)``: the offset after the events taken, how many, and whether the last one
            ends its statement (``(pos, 0, False)`` for none, and always when the C extension is not built,
            for a compressed or partial event, or a decoder that renumbers types or is past a START_ENCRYPTION).
        """
        images = first.images
        if _rows_like_c is None or not self._plain_v4() or not isinstance(images, RowImages) or images.partial \
                or not isinstance(images.data, memoryview) or images.data.obj is not view.obj \
                or first.flags & STMT_END_F:
            return pos, 0, False
        crc = self.crc_len
        head = first.header.event_length - crc - len(images.data)
        ends_at = 19 + self.table_id_size(first.header.type_code) if statement_end else 0
        return _rows_like_c(view, pos, first.header.pos, head, ends_at, crc,
                            crc32 if crc and self.verify_checksums else None, limit)

    def past_row_context(self, view: memoryview, pos: int, stop: int) -> tuple[int, bool]:
        """Where the rows events, TABLE_MAPs, ANNOTATE_ROWS and ROWS_QUERY events from ``pos`` on end, read from
        their headers alone (no checksum, nothing decoded), taking none that ends after ``stop``: what a BEGIN
        transaction moves past without changing anything but its position (``PositionTracker.inside``).

        Returns:
            ``(end, cut)``: where they end, and whether one of them reaching past ``stop`` (or one whose length
            field is out of bounds) is next there. ``(pos, False)`` for a decoder before its FDE, past a
            START_ENCRYPTION, or that renumbers types.
        """
        if not self._plain_v4():
            return pos, False
        size = len(view)
        while size - pos >= 19 and view[pos + 4] in _PAST_IN_TRANSACTION:
            length = int.from_bytes(view[pos + 9:pos + 13], "little")
            if length < 19 or length > size - pos or pos + length > stop:
                return pos, True
            pos += length
        return pos, False

    def decode(self, data: bytes | memoryview, pos: int = 0) -> E.Event:
        """Decode one complete event (header, body and checksum: exactly ``event_length`` bytes).

        ``data`` must not change afterwards: row events decode their rows lazily from it.

        Args:
            data: the event's bytes.
            pos: where the event starts in its file or stream (for errors and ``header.pos``).
        Returns:
            The typed event (UnknownEvent for unknown type codes).
        Raises:
            ChecksumError, EventDecodeError, ProtocolError: each naming ``pos``.
        """
        view = memoryview(data)
        fields = None
        # The C check of _frame's common case: _plain_v4() inline (it returns None for FORMAT_DESCRIPTION,
        # START_V3 and any event _frame would reject).
        if self._frame_c is not None and self.fde is not None and self.header_len == 19 \
                and self.encrypted_at is None and not self._type_permutation:
            alg = self.checksum_alg
            crc_len = 4 if alg == CHECKSUM_CRC32 else 0
            fields = self._frame_c(view, crc_len, crc32 if crc_len and self.verify_checksums else None)
        if fields is not None:
            header = E.EventHeader(*fields, pos)
            end = len(view) - crc_len
        else:
            header, alg, end = self._frame(view, pos)
        tc = header.type_code
        body = view[self.header_len:end]
        try:
            if tc in ROWS_TYPES:
                return decode_rows(header, body, self) if self.rows else undecoded_rows(header, body, self)
            if tc in self._skipped:
                return E.Event(header)
            if tc == _TABLE_MAP:
                return self._table_map(header, body)
            if tc in _FORMATS:
                return self._format_description(header, body, alg)
            if tc == _TRANSACTION_PAYLOAD:
                return self._transaction_payload(header, body)
            if tc == _START_ENCRYPTION:
                self.encrypted_at = header.next_position or pos + header.event_length
            fn = _DISPATCH.get(tc)
            if fn is None:
                return E.UnknownEvent(header, bytes(body))
            return fn(header, body, self)
        except ProtocolError as exc:  # body decoders (and GTID sets) know body offsets only
            raise EventDecodeError(f"{header.type_name}: {exc.args[0]}", pos, tc) from exc
        except (struct.error, IndexError, ValueError, KeyError, OverflowError) as exc:
            raise EventDecodeError(f"{header.type_name}: malformed body ({exc})", pos, tc) from exc

    # ------------------------------------------------------------ checksums
    def _fde_checksum(self, view: memoryview) -> int | None:
        """An FDE carries its own checksum algorithm (servers since MySQL 5.6.1 / MariaDB 5.3)."""
        version = bytes(view[self.header_len + 2:self.header_len + 52]).split(b"\0", 1)[0].decode("ascii", "replace")
        if not server_has_checksums(version) or len(view) < self.header_len + _FDE_FIXED + 5:
            return None
        return view[len(view) - 5]

    def _verify_crc(self, view: memoryview, header: E.EventHeader, pos: int) -> None:
        expected = U32.unpack_from(view, len(view) - 4)[0]
        if header.type_code == _FORMAT_DESCRIPTION and header.flags & LOG_EVENT_BINLOG_IN_USE_F:
            raw = bytearray(view[:-4])
            raw[17] &= ~LOG_EVENT_BINLOG_IN_USE_F & 0xFF  # the server checksums the FDE with the flag clear
            actual = crc32(raw)
        else:
            actual = crc32(view[:-4])
        if actual != expected:
            raise ChecksumError(f"CRC32 mismatch in {header.type_name} event: stored 0x{expected:08x}, "
                                f"computed 0x{actual:08x}", pos)

    # ------------------------------------------------------------ stateful events
    def _format_description(self, header, body: memoryview, alg: int | None) -> E.FormatDescriptionEvent:
        need(body, 0, 56, "FORMAT_DESCRIPTION")
        binlog_version = U16.unpack_from(body, 0)[0]
        server_version = bytes(body[2:52]).split(b"\0", 1)[0].decode("ascii", "replace")
        created = U32.unpack_from(body, 52)[0]
        if header.type_code == ET.START_V3:
            header_len = 13 if binlog_version == 1 else 19
            post = _V1_V3_POST_HEADER[:3] + bytes([0 if binlog_version == 1 else 8]) + _V1_V3_POST_HEADER[4:]
        else:
            need(body, 56, 1, "FORMAT_DESCRIPTION header length")
            header_len = body[56]
            # Checksum-capable servers end the FDE with the algorithm byte and 4 checksum
            # bytes, written even when the algorithm is NONE (the CRC32 ones are already cut).
            post_end = len(body) if alg is None else len(body) - 1 - (0 if alg == CHECKSUM_CRC32 else 4)
            post = bytes(body[57:post_end])
            if header_len != 19:
                raise EventDecodeError(f"FORMAT_DESCRIPTION declares header length {header_len}, expected 19")
            self._type_permutation = _OLD_TYPE_NUMBERS if renumbered_tree(server_version) else {}
            if self._type_permutation:
                if len(post) != 22:  # the server rejects such an FDE too
                    raise EventDecodeError(f"FORMAT_DESCRIPTION of a {server_version} server lists {len(post)} "
                                           "event types; that pre-GA tree had 22")
                post = bytes(post[_OLD_TYPE_NUMBERS_INV.get(t, t) - 1] for t in range(1, len(post) + 1))
        self.header_len, self._post_header = header_len, post
        self._hidden_vectors = "mariadb" in server_version.lower() and version_tuple(server_version) >= (11, 7, 0)
        self.checksum_alg = alg
        self.tables.clear()
        event = E.FormatDescriptionEvent(header, binlog_version, server_version, created, header_len, post, alg)
        self.fde = event
        return event

    def _table_map(self, header, body: memoryview) -> E.TableMapEvent:
        """Decode a TABLE_MAP, reusing the compiled codec when the same map was seen before."""
        id_size = self.table_id_size(ET.TABLE_MAP)
        need(body, 0, id_size + 2, "TABLE_MAP post-header")
        table_id = int.from_bytes(body[:id_size], "little")
        flags = U16.unpack_from(body, id_size)[0]
        key = bytes(body[id_size + 2:])
        entry = self._table_cache.get(key)
        if entry is None:
            from .rowcodec import TableCodec  # the row decoders: only once a TABLE_MAP needs them
            from .tablemap import decode_table_map, may_hide_vectors

            mariadb = self.fde is not None and "mariadb" in self.fde.server_version.lower()
            _, _, schema, table, cols = decode_table_map(body, id_size, mariadb)
            base = tuple(cols)
            # [schema, table, base columns, columns, codec, schema source's answer, unnamed, may hide vectors]
            entry = [schema, table, base, base, TableCodec(base), None, any(c.name is None for c in base),
                     may_hide_vectors(base)]
            if len(self._table_cache) >= 4096:
                self._table_cache.clear()
            self._table_cache[key] = entry
        schema, table, base = entry[0], entry[1], entry[2]
        if self.schema_source is not None and (entry[6] or self._hidden_vectors and entry[7]):
            known = self.schema_source(schema, table)
            if known is not entry[5]:
                from .rowcodec import TableCodec
                from .tablemap import apply_schema

                try:
                    columns = apply_schema(base, known) if known is not None else base
                except EventDecodeError:
                    # The schema source describes another version of the table (it changed after
                    # this event was logged): the row values are still right, only unnamed (@N).
                    columns = base
                entry[3:6] = [columns, TableCodec(columns), known]
        event = E.TableMapEvent(header, table_id, flags, schema, table, entry[3])
        self.tables[table_id] = (event, entry[4])
        return event

    def _transaction_payload(self, header, body: memoryview) -> E.TransactionPayloadEvent:
        fields, pos = {}, 0
        while pos < len(body):
            ftype, pos = packed_len(body, pos)
            if ftype == 0:  # end mark: the payload follows
                break
            flen, pos = packed_len(body, pos)
            need(body, pos, flen, "TRANSACTION_PAYLOAD field")
            fields[ftype], _ = packed_len(body[pos:pos + flen], 0)
            pos += flen
        compression = fields.get(2, 0)
        payload = body[pos:]
        size = fields.get(3, len(payload))
        if compression == 0:
            if size > _MAX_UNCOMPRESSED:
                raise EventDecodeError(f"TRANSACTION_PAYLOAD claims {size} uncompressed bytes")
            raw = _zstd_bounded(bytes(payload), size)
        elif compression == 255:
            raw = bytes(payload)
        else:
            raise EventDecodeError(f"TRANSACTION_PAYLOAD compression type {compression} is unknown")
        inner, offsets = self._inner_events(raw, header.pos)
        return E.TransactionPayloadEvent(header, compression, fields.get(1, len(payload)), len(raw), tuple(inner),
                                         tuple(offsets))

    def _inner_events(self, raw: bytes, pos: int) -> tuple[list[E.Event], list[int]]:
        """The events inside a payload and their offsets in it. They carry no checksums; each keeps the
        payload's position."""
        saved, self.checksum_alg = self.checksum_alg, None
        try:
            out, offsets, off, view = [], [], 0, memoryview(raw)
            while off < len(view):
                inner = self.decode_header(view[off:], pos)
                if inner.type_code in _NOT_IN_PAYLOAD:
                    raise EventDecodeError(f"{inner.type_name} cannot be inside a TRANSACTION_PAYLOAD")
                length = inner.event_length
                if off + length > len(view):
                    raise EventDecodeError(f"event inside TRANSACTION_PAYLOAD runs past its end (inner offset {off})")
                out.append(self.decode(view[off:off + length], pos))
                offsets.append(off)
                off += length
            return out, offsets
        finally:
            self.checksum_alg = saved


_DISPATCH = {
    ET.QUERY: B.decode_query, ET.QUERY_COMPRESSED: B.decode_query, ET.EXECUTE_LOAD_QUERY: B.decode_query,
    ET.ROTATE: B.decode_rotate, ET.STOP: B.decode_stop, ET.XID: B.decode_xid, ET.INTVAR: B.decode_intvar,
    ET.RAND: B.decode_rand, ET.USER_VAR: B.decode_user_var, ET.INCIDENT: B.decode_incident,
    ET.HEARTBEAT: B.decode_heartbeat, ET.HEARTBEAT_V2: B.decode_heartbeat_v2,
    ET.GTID: B.decode_gtid, ET.ANONYMOUS_GTID: B.decode_gtid, ET.GTID_TAGGED: B.decode_gtid_tagged,
    ET.PREVIOUS_GTIDS: B.decode_previous_gtids, ET.ROWS_QUERY: B.decode_rows_query,
    ET.ANNOTATE_ROWS: B.decode_annotate_rows, ET.IGNORABLE: B.decode_ignorable,
    ET.BEGIN_LOAD_QUERY: B.decode_load_block, ET.APPEND_BLOCK: B.decode_load_block,
    ET.CREATE_FILE: B.decode_legacy_load, ET.LOAD: B.decode_legacy_load, ET.NEW_LOAD: B.decode_legacy_load,
    ET.EXEC_LOAD: B.decode_load_file, ET.DELETE_FILE: B.decode_load_file,
    ET.XA_PREPARE: B.decode_xa_prepare, ET.TRANSACTION_CONTEXT: B.decode_transaction_context,
    ET.VIEW_CHANGE: B.decode_view_change, ET.MARIADB_GTID: B.decode_mariadb_gtid,
    ET.MARIADB_GTID_LIST: B.decode_mariadb_gtid_list, ET.BINLOG_CHECKPOINT: B.decode_binlog_checkpoint,
    ET.START_ENCRYPTION: B.decode_start_encryption,
}

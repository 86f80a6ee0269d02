"""What a Spark task runs: binlog bytes (or the daemon's JSON lines) to column buffers.

This module imports neither pyspark nor the JVM: it turns one file range into
rows of the three shapes, through the one decoder (:mod:`protocol`). The data
source (:mod:`pipeline.source`) wraps the buffers into Arrow record batches or
tuples.

- ``events``: one row per event, payload events followed by their inner events
  (as ``binlogd dump --json`` prints them). ``gtid`` is the GTID of the
  transaction the event belongs to, on every event of it; ``xid`` is the
  transaction's XID (from its XID event, or the ``xid`` status variable of a DDL
  logged with one), on every event of the transaction once its end is seen.
- ``changes``: one row per row change, built by
  :func:`library.serialize.change_events` (the JSON-lines contract), with
  ``before``/``after`` as JSON text unless the caller's schema asks for more, and
  ``json_diffs`` (partial JSON updates, apart from ``after``) as JSON text or null.
- ``index``: one row per file, :func:`binlogd.protocol.fileinfo.describe`.

Transaction boundaries come from :class:`binlogd.protocol.position.PositionTracker`, the
same rules the daemon resumes by.
"""

from __future__ import annotations

import dataclasses
import json
import mmap
import os
import sys
from decimal import Decimal
from itertools import repeat
from typing import Iterator

from binlogd.library import storage
from binlogd.library.checkpointfile import Checkpoint, jsonl_committed
from binlogd.library.jsonrows import images_json, json_diffs_json
from binlogd.library.serialize import change_events, dumps, flatten, has_json_diffs
from binlogd.protocol import events as E
from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.errors import BinlogError, TruncatedError
from binlogd.protocol.fileinfo import BinlogInfo, describe
from binlogd.protocol.position import Position, PositionTracker
from binlogd.protocol.reader import EventReader, check_magic, event_bounds, iter_events

EVENTS_COLUMNS = ("file", "pos", "next_pos", "timestamp", "type", "server_id", "event_length", "gtid", "xid",
                  "inner")
CHANGES_COLUMNS = ("op", "schema", "table", "before", "after", "json_diffs", "ts", "gtid", "file", "pos", "row",
                   "server_id", "event_seq")
INDEX_COLUMNS = ("file", "size", "binlog_version", "server_version", "checksum", "begin_time", "end_time",
                 "next_file", "first_gtid", "last_gtid", "closed_cleanly", "method", "truncated_at")
CORRUPT = "_corrupt"
COLUMNS = {"events": EVENTS_COLUMNS, "changes": CHANGES_COLUMNS, "index": INDEX_COLUMNS}

_U64 = 1 << 64
_I63 = 1 << 63
_TXN_STARTS = frozenset({ET.GTID, ET.ANONYMOUS_GTID, ET.GTID_TAGGED, ET.MARIADB_GTID})


class CorruptFile(BinlogError):
    """A binlog (or JSON-lines) file that cannot be read past ``offset``.

    Fields:
        path: the file.
        offset: the byte offset the decoder names (None when it names none).
        reason: the decoder's message, without the offset.
    """

    def __init__(self, path: str, exc: BaseException):
        offset = getattr(exc, "offset", None)
        reason = exc.args[0] if isinstance(exc, BinlogError) and exc.args else str(exc)
        super().__init__(f"{path}: {reason}", offset)
        self.path, self.reason = path, reason


def _signed64(value: int | None) -> int | None:
    """A u64 as Spark's signed LongType (two's complement above 2**63-1; real XIDs never get there)."""
    return value - _U64 if value is not None and value >= _I63 else value


# --------------------------------------------------------------------------- files and event ranges


def mapped(path: str, size: int | None = None) -> memoryview:
    """The first ``size`` bytes of ``path`` (all of it by default), mmapped read-only."""
    with open(path, "rb") as fh:
        actual = os.fstat(fh.fileno()).st_size
        if actual == 0:
            return memoryview(b"")
        view = memoryview(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))
    return view if size is None or size >= actual else view[:size]


def is_remote(path: str) -> bool:
    """``path`` is an object-store URI (read with ranged requests, not mapped)."""
    return storage.is_remote(path)


_BLOCK = 4 << 20  # bytes per ranged read of an object: what a remote partition holds at most (plus one event)


def file_info(path: str) -> BinlogInfo:
    """:func:`binlogd.protocol.fileinfo.describe` of the file or object at ``path`` (it seeks: no full read)."""
    if is_remote(path):
        with storage.open_input(path) as fh:
            return describe(fh, path)
    with open(path, "rb") as fh:
        return describe(fh, path)


def remote_walk(path: str, start: int = 4, stop: int | None = None, fde: int = 4,
                partial_tail: bool = False, schema_source=None) -> Iterator[E.Event]:
    """:func:`walk` over an object-store URI, streamed in ranged reads of ``_BLOCK`` bytes: memory stays
    bounded whatever the object's size. Raises as :func:`walk` does, and StorageError."""
    with storage.open_input(path, block_size=_BLOCK) as fh:
        end = fh.size if stop is None else min(stop, fh.size)
        decoder = Decoder(schema_source=schema_source)
        if start > 4:  # prime with the events at 4 and fde, then read from start
            head = fh.read(fde + 19)
            if len(head) >= fde + 19:
                head += fh.read(fde + int.from_bytes(head[fde + 9:fde + 13], "little") - len(head))
            decoder = prime(memoryview(head), fde, schema_source)
            fh.seek(start)
        reader, at = EventReader(decoder, expect_magic=start <= 4, offset=start if start > 4 else 0), fh.tell()
        while at < end:
            chunk = fh.read(min(_BLOCK, end - at))
            if not chunk:
                break
            at += len(chunk)
            reader.feed(chunk)
            while (event := reader.next_event()) is not None:
                yield event
        if at == 0:
            check_magic(b"", 0)  # an empty object: truncated inside the magic
        if not partial_tail:
            reader.close()  # raises TruncatedError for bytes left inside an event (or the magic)


def prime(view, fde: int = 4, schema_source=None) -> Decoder:
    """A Decoder that has seen the file's first event and (relay logs) the FORMAT_DESCRIPTION at ``fde``."""
    check_magic(view)
    decoder = Decoder(schema_source=schema_source)
    for pos in (4, fde) if fde != 4 else (4,):
        length = event_bounds(view, pos, decoder.header_len)
        if length is None:
            raise TruncatedError("binlog ends inside an event", pos)
        decoder.decode(view[pos:pos + length], pos)
    return decoder


def walk(view, start: int = 4, stop: int | None = None, fde: int = 4,
         partial_tail: bool = False, schema_source=None) -> Iterator[E.Event]:
    """The events that start in ``[start, stop)`` of a binlog held in ``view``.

    ``start`` must be an event boundary; when it is past the first event the
    decoder is primed with the events at 4 and ``fde``. With ``partial_tail`` a
    last event cut off by the end of ``view`` ends the walk instead of raising.
    ``schema_source`` names the columns of TABLE_MAPs without names (see :class:`Decoder`).

    Raises:
        TruncatedError: the bytes end inside an event (naming its offset).
        ChecksumError, EventDecodeError, ProtocolError: from the decoder.
    """
    end = len(view) if stop is None else min(stop, len(view))
    if start <= 4:  # a whole file: exactly what ``binlogd dump`` runs
        try:
            yield from iter_events(view[:end], Decoder(schema_source=schema_source))
        except TruncatedError:
            if not partial_tail:
                raise
        return
    decoder, pos = prime(view, fde, schema_source), start
    while pos < end:
        length = event_bounds(view, pos, decoder.header_len)
        if length is None or pos + length > end:
            if partial_tail:
                return
            raise TruncatedError(f"binlog ends inside an event ({end - pos} bytes of it present)", pos)
        yield decoder.decode(view[pos:pos + length], pos)
        pos += length


# --------------------------------------------------------------------------- column buffers


class Rows:
    """Column buffers for one file range; :meth:`take` hands out the rows that are final."""

    columns: tuple[str, ...] = ()

    def __init__(self, file: str, corrupt_column: bool = False):
        self.file = file
        self.names = self.columns + ((CORRUPT,) if corrupt_column else ())
        self.cols: list[list] = [[] for _ in self.names]
        self.n = 0

    def ready(self) -> int:
        """How many buffered rows are final (the rest wait for their transaction's end)."""
        return self.n

    def take(self, count: int | None = None) -> list[list]:
        """Remove and return the first ``count`` rows (default: the final ones) as column lists."""
        count = self.ready() if count is None else count
        out = [col[:count] for col in self.cols]
        for col in self.cols:
            del col[:count]
        self.n -= count
        return out

    def finish(self) -> None:
        """The range is over: every buffered row becomes final."""

    def corrupt(self, message: str, offset: int | None) -> None:
        """Append the row that reports a corrupt file (``file``, ``pos`` = the offset, ``_corrupt``)."""
        self.finish()
        row = dict.fromkeys(self.names)
        row.update(file=self.file, _corrupt=message)
        if "pos" in row:
            row["pos"] = offset
        self._append([row[name] for name in self.names])

    def _append(self, values: list) -> None:
        for col, value in zip(self.cols, values):
            col.append(value)
        self.n += 1


class EventRows(Rows):
    """``events`` shape. Rows of an open transaction are held until its end fills in ``xid``."""

    columns = EVENTS_COLUMNS

    def __init__(self, file: str, corrupt_column: bool = False, start: int = 4):
        super().__init__(file, corrupt_column)
        self.tracker = PositionTracker(Position(file, start))
        self.txn_start: int | None = None  # buffer index of the open transaction's first row
        self.txn_xid: int | None = None
        self._extra = [None] if corrupt_column else []

    def ready(self) -> int:
        return self.n if self.txn_start is None else self.txn_start

    def take(self, count: int | None = None) -> list[list]:
        count = self.ready() if count is None else count
        out = super().take(count)
        if self.txn_start is not None:
            self.txn_start = max(0, self.txn_start - count)
        return out

    def add(self, event: E.Event) -> None:
        tracker = self.tracker
        gtid_before, was_open = tracker.gtid, tracker.in_transaction
        ended = tracker.observe(event)
        gtid = gtid_before if ended else tracker.gtid
        if (not was_open and (ended or tracker.in_transaction)) or event.header.type_code in _TXN_STARTS:
            self.txn_start, self.txn_xid = self.n, None
        xid = _xid_of(event)
        if xid is not None and self.txn_start is not None:
            self.txn_xid = xid
        file, extra, append = self.file, self._extra, self._append
        end = event.header.pos + event.header.event_length  # as dump --json: real offsets, inner events the payload's
        for index, item in enumerate(flatten(event)):
            h = item.header
            append([file, h.pos, end, h.timestamp, h.type_name, h.server_id, h.event_length, gtid,
                    _signed64(_own_xid(item)), None if index == 0 else index - 1, *extra])
        if ended:
            self._close_transaction()

    def _close_transaction(self) -> None:
        if self.txn_start is not None:
            if self.txn_xid is not None:
                xid_col = self.cols[8]
                value = _signed64(self.txn_xid)
                for i in range(self.txn_start, self.n):
                    xid_col[i] = value
            self.txn_start, self.txn_xid = None, None

    def finish(self) -> None:
        self.txn_start, self.txn_xid = None, None  # an unfinished transaction: no xid known


def _own_xid(event: E.Event) -> int | None:
    t = type(event)
    if t is E.XidEvent:
        return event.xid
    if t is E.QueryEvent:
        return event.status.get("xid")
    return None


def _xid_of(event: E.Event) -> int | None:
    """The XID an event carries: XID events, DDL logged with an xid, a payload's inner XID."""
    if type(event) is E.TransactionPayloadEvent:
        for inner in event.events:
            if type(inner) is E.XidEvent:
                return inner.xid
        return None
    return _own_xid(event)


class ChangeRows(Rows):
    """``changes`` shape: :func:`library.serialize.change_events` of every rows event.

    ``convert`` maps (before, after) to the column values (JSON text by default).
    """

    columns = CHANGES_COLUMNS

    def __init__(self, file: str, corrupt_column: bool = False, start: int = 4, convert=None):
        super().__init__(file, corrupt_column)
        self.tracker = PositionTracker(Position(file, start))
        self.convert = convert or json_text_pair
        self._extra = [None] if corrupt_column else []

    def add(self, event: E.Event) -> None:
        tracker = self.tracker
        gtid_before = tracker.gtid
        ended = tracker.observe(event)
        gtid = gtid_before if ended else tracker.gtid
        if isinstance(event, E.RowsEvent):
            self._rows(event, gtid, 0)
        elif type(event) is E.TransactionPayloadEvent:
            seq = 0
            for inner in event.events:
                if isinstance(inner, E.RowsEvent):
                    self._rows(inner, gtid, seq)
                    seq += 1

    def _rows(self, event: E.RowsEvent, gtid: str | None, seq: int) -> None:
        convert, file, extra, append = self.convert, self.file, self._extra, self._append
        if convert is json_text_pair:  # the images' JSON straight from the row images (library.jsonrows)
            h, op = event.header, event.kind
            images = images_json(event)
            if op == "update":
                befores, afters = images[0::2], images[1::2]
            else:
                befores, afters = (images, [None] * len(images)) if op == "delete" else ([None] * len(images), images)
            n = len(befores)
            diffs = json_diffs_json(event) if op == "update" and has_json_diffs(event) else repeat(None, n)
            columns = (repeat(op, n), repeat(event.schema, n), repeat(event.table, n), befores, afters, diffs,
                       repeat(h.timestamp, n), repeat(gtid, n), repeat(file, n), repeat(h.pos, n), range(n),
                       repeat(h.server_id, n), repeat(seq, n), *(repeat(x, n) for x in extra))
            for col, values in zip(self.cols, columns):  # a column at a time: CHANGES_COLUMNS' order
                col.extend(values)
            self.n += n
            return
        for ch in change_events(event, file, gtid):
            src = ch["source"]
            before, after = convert(ch["before"], ch["after"], ch)
            diffs = ch.get("json_diffs")
            append([ch["op"], ch["schema"], ch["table"], before, after, None if diffs is None else dumps(diffs),
                    ch["ts"], gtid, file, src["pos"], src["row"], src["server_id"], seq, *extra])


def json_text_pair(before, after, change=None):
    """The default ``before``/``after`` columns: the row images as JSON text (``dumps``), None stays null."""
    return (None if before is None else dumps(before), None if after is None else dumps(after))


# --------------------------------------------------------------------------- one partition


def read_binlog(path: str, rows: Rows, start: int = 4, stop: int | None = None, fde: int = 4,
                partial_tail: bool = False, skip_corrupt: bool = False,
                tail_error: tuple[str, int | None] | None = None,
                batch_rows: int = 8192, schema=None) -> Iterator[list[list]]:
    """Decode ``path`` from ``start`` to ``stop`` into ``rows``; yields column lists of final rows.

    A decode error raises :class:`CorruptFile` (naming the file and offset), or with
    ``skip_corrupt`` ends the file with a ``_corrupt`` row after the rows read before it.
    ``tail_error`` (message, offset: from the streaming planner) adds such a row after a clean range.
    ``schema`` (a :class:`binlogd.library.schema.SchemaTracker` at ``start``) names columns and follows the file's DDL.
    """
    try:
        name, lookup = os.path.basename(path), schema.lookup if schema is not None else None
        events = (remote_walk(path, start, stop, fde, partial_tail, lookup) if is_remote(path)
                  else walk(mapped(path, stop), start, stop, fde, partial_tail, lookup))
        for event in events:
            if schema is not None:
                schema.observe(event, name, event.header.pos + event.header.event_length)
            rows.add(event)
            if rows.n >= batch_rows and rows.ready():
                yield rows.take()
        rows.finish()
    except (BinlogError, ValueError) as exc:
        error = exc if isinstance(exc, CorruptFile) else CorruptFile(path, exc)
        if not skip_corrupt:
            raise error from exc
        print(f"binlog: skipping the rest of corrupt file {error}", file=sys.stderr)
        rows.corrupt(str(error), error.offset)
    if tail_error is not None:
        rows.corrupt(*tail_error)
    if rows.n:
        yield rows.take(rows.n)


def read_index(path: str, corrupt_column: bool = False, skip_corrupt: bool = False) -> list[list]:
    """One ``index`` row for ``path`` (:func:`file_info`), as single-value column lists."""
    extra = [None] if corrupt_column else []
    try:
        result = dataclasses.asdict(file_info(path))
    except BinlogError as exc:
        error = CorruptFile(path, exc)
        if not skip_corrupt:
            raise error from exc
        print(f"binlog: skipping corrupt file {error}", file=sys.stderr)
        row = [None] * len(INDEX_COLUMNS) + [str(error)]
        row[0] = path
        return [[v] for v in row]
    result["file"] = path
    return [[result[name]] for name in INDEX_COLUMNS] + [[v] for v in extra]


# --------------------------------------------------------------------------- the daemon's JSON lines

def is_jsonl(path: str) -> bool:
    return path.endswith(".jsonl")


def read_jsonl(path: str, rows: ChangeRows, stop: int | None = None, skip_corrupt: bool = False,
               batch_rows: int = 8192) -> Iterator[list[list]]:
    """Change events of a JSON-lines sink file, up to ``stop`` bytes, complete lines only.

    Values are parsed exactly (``parse_float=Decimal``) and re-serialised with
    :func:`library.serialize.dumps`, so ``before``/``after`` equal what the binlog
    path gives byte for byte. ``event_seq`` is rebuilt from the line order: within one
    (file, pos), a ``row`` that does not grow starts the next rows event of a payload.
    """
    convert, extra = rows.convert, rows._extra
    last_key, last_row, seq = None, -1, 0
    offset = 0
    try:
        with open(path, "rb") as fh:
            data = fh.read() if stop is None else fh.read(stop)
        end = data.rfind(b"\n") + 1  # a line without its newline is still being written
        for line in data[:end].splitlines():
            if not line.strip():
                offset += len(line) + 1
                continue
            try:
                ch = json.loads(line, parse_float=Decimal)
                src = ch["source"]
                key = (src["file"], src["pos"])
                row = src["row"]
            except (ValueError, KeyError, TypeError) as exc:
                raise BinlogError(f"line is not a change event ({exc})", offset) from exc
            if key == last_key and row <= last_row:
                seq += 1
            elif key != last_key:
                seq = 0
            last_key, last_row = key, row
            before, after = convert(ch.get("before"), ch.get("after"), ch)
            diffs = ch.get("json_diffs")
            rows._append([ch["op"], ch["schema"], ch["table"], before, after, None if diffs is None else dumps(diffs),
                          ch["ts"], src.get("gtid"),
                          src["file"], src["pos"], row, src.get("server_id"), seq, *extra])
            offset += len(line) + 1
            if rows.n >= batch_rows:
                yield rows.take()
    except (BinlogError, OSError) as exc:
        if isinstance(exc, OSError):
            raise
        error = CorruptFile(path, exc)
        if not skip_corrupt:
            raise error from exc
        print(f"binlog: skipping the rest of corrupt file {error}", file=sys.stderr)
        rows.corrupt(str(error), error.offset)
    if rows.n:
        yield rows.take(rows.n)


def committed_jsonl(checkpoint_path: str) -> tuple[int, int] | None:
    """(file index, committed offset) of a JSON-lines sink, from the daemon's checkpoint file (None when
    its sink is not a JSON-lines one).

    Raises:
        OSError: the file cannot be read.
        ValueError: it is not a checkpoint.
    """
    with open(checkpoint_path, "rb") as fh:
        raw = fh.read()
    try:
        return jsonl_committed(Checkpoint.parse(raw).sink)
    except ValueError as exc:
        raise ValueError(f"{checkpoint_path} is not a binlogd checkpoint: {exc}") from exc

"""The Spark data source "binlog" (PySpark Python Data Source API, batch and streaming).

::

    from binlogd.pipeline.source import BinlogDataSource
    spark.dataSource.register(BinlogDataSource)
    events  = spark.read.format("binlog").load("/archive/db1")                       # shape "events"
    changes = spark.read.format("binlog").option("shape", "changes").load(["/a/mysql-bin.0000*", "/b"])
    stream  = spark.readStream.format("binlog").option("shape", "changes").load("/archive/db1")

Options (names are case-insensitive):

- ``shape``: ``events`` (default), ``changes`` or ``index`` (one row per file, ``binlogd info``).
- ``corruptFiles``: ``fail`` (default): a file that cannot be decoded fails its task with the file and
  the offset named; ``skip``: the rows before the damage are kept and one more row reports the file,
  with ``pos`` = the offset and the message in the ``_corrupt`` column (added to the default schema
  only with ``skip``; select ``_corrupt IS NOT NULL`` to list them). The executor also logs a line.
- ``input``: ``auto`` (default: ``*.jsonl`` files are the daemon's JSON-lines output), ``binlog``,
  ``jsonl`` (changes shape only). ``daemonCheckpoint``: the daemon's checkpoint file; JSON lines
  after its committed sink offset (a transaction being written) are then left out.
- ``pathGlobFilter``: only files whose name matches (``mysql-bin.*``).
- ``partialTail``: ``error`` (default, as ``binlogd dump``) or ``ignore``: a last event cut off by the
  end of the file (a file being written) is left out in batch reads.
- ``arrow``: ``true`` (default): readers yield Arrow record batches; ``false``: Python tuples
  (slower; kept to measure, see bench/spark.py). ``batchRows``: rows per batch (default 8192).
- ``schemaHistory``: a schema history file (``binlogd schema build``, or the daemon's
  ``<checkpoint stem>.schema-history.jsonl``): names the columns of servers that log no names (MINIMAL/NO_LOG
  row metadata) as of each file's position, and follows each file's own DDL; a definition that does not fit
  the TABLE_MAP gives positional names (``@1``...), never wrong ones. A daemon's history records its source:
  a file another server wrote (its FORMAT_DESCRIPTION's flavour and server_id, its base name) fails the read
  with a ValueError naming both.
- batch only: ``maxPartitionBytes`` (default 128 MiB), ``openCostInBytes`` (4 MiB) and ``minPartitions``
  (default 1; :mod:`pipeline.jobs` passes the session's default parallelism): files are packed into input
  partitions as Spark packs the files of its own file sources (``spark.sql.files.*``), each file whole and
  counted with the open cost, up to ``min(maxPartitionBytes, max(openCostInBytes, total / minPartitions))``
  bytes: a task has a fixed cost (tens of milliseconds), which small files would pay once each.
- streaming only: ``maxFilesPerTrigger`` / ``maxBytesPerTrigger``.

Batch reads pack whole files into input partitions (above); streaming reads one partition per file with new
bytes. Every byte is decoded by
:mod:`protocol` (the decoder ``binlogd dump`` and the daemon use); see :mod:`pipeline.decode`.

Streaming offsets are ``{"files": {path: {"pos", "fde", "end"?, "error"?}}, "done": {stem: last}}``:
``pos`` is the end of the last complete transaction of the file (an open transaction and a
half-written last event are held back until complete), ``fde`` the FORMAT_DESCRIPTION in force there,
``end`` marks a file nothing more will come from (closed by ROTATE/STOP, or a later file of the same
server exists: then every complete event is read and a partial tail is corrupt), and files that ended
in an earlier batch fold into ``done`` (per directory and base name) to keep offsets small. Ranges
are computed from offsets alone, so a batch replayed from Spark's checkpoint reads the same bytes.
"""

from __future__ import annotations

import os
from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import BooleanType, DataType, IntegerType, LongType, StringType, StructField, StructType

from binlogd.library.checkpointfile import jsonl_index
from binlogd.library.schema import SchemaTracker
from binlogd.library.schema.history import load_history
from binlogd.protocol.errors import BinlogError

from . import decode as D
from .paths import option_paths, order_key, sized, stem

_TYPES: dict[str, DataType] = {
    # events
    "file": StringType(), "pos": LongType(), "next_pos": LongType(), "timestamp": LongType(),
    "type": StringType(), "server_id": LongType(), "event_length": LongType(), "gtid": StringType(),
    "xid": LongType(), "inner": IntegerType(),
    # changes
    "op": StringType(), "schema": StringType(), "table": StringType(), "before": StringType(),
    "after": StringType(), "json_diffs": StringType(), "ts": LongType(), "row": IntegerType(),
    "event_seq": IntegerType(),
    # index
    "size": LongType(), "binlog_version": IntegerType(), "server_version": StringType(),
    "checksum": StringType(), "begin_time": LongType(), "end_time": LongType(), "next_file": StringType(),
    "first_gtid": StringType(), "last_gtid": StringType(), "closed_cleanly": BooleanType(),
    "method": StringType(), "truncated_at": LongType(),
    D.CORRUPT: StringType(),
}

_CHOICES = {"shape": ("events", "changes", "index"), "corruptfiles": ("fail", "skip"),
            "input": ("auto", "binlog", "jsonl"), "partialtail": ("error", "ignore"), "arrow": ("true", "false")}


def default_schema(shape: str = "events", corrupt_column: bool = False) -> StructType:
    """The schema of a shape (``_corrupt`` last when ``corruptFiles=skip``)."""
    names = D.COLUMNS[shape] + ((D.CORRUPT,) if corrupt_column else ())
    return StructType([StructField(n, _TYPES[n], True) for n in names])


class Options:
    """The data source options, checked once on the driver (picklable, plain values)."""

    def __init__(self, raw):
        opts = {str(k).lower(): str(v) for k, v in dict(raw).items()}
        for key, allowed in _CHOICES.items():
            value = opts.get(key, allowed[0]).lower()
            if value not in allowed:
                raise ValueError(f"binlog: option {key} must be one of {', '.join(allowed)}, not {value!r}")
            opts[key] = value
        self.raw = opts
        self.shape = opts["shape"]
        self.skip_corrupt = opts["corruptfiles"] == "skip"
        self.input = opts["input"]
        self.partial_tail = opts["partialtail"] == "ignore"
        self.arrow = opts["arrow"] == "true"
        self.glob_filter = opts.get("pathglobfilter")
        self.daemon_checkpoint = opts.get("daemoncheckpoint")
        self.batch_rows = _positive(opts, "batchrows", 8192)
        self.max_files = _positive(opts, "maxfilespertrigger", None)
        self.max_bytes = _positive(opts, "maxbytespertrigger", None)
        self.max_partition_bytes = _positive(opts, "maxpartitionbytes", 128 << 20)
        self.open_cost = _positive(opts, "opencostinbytes", 4 << 20)
        self.min_partitions = _positive(opts, "minpartitions", 1)
        if self.max_files and self.max_bytes:
            raise ValueError("binlog: set maxFilesPerTrigger or maxBytesPerTrigger, not both")
        if self.input == "jsonl" and self.shape != "changes":
            raise ValueError("binlog: JSON-lines input has the changes shape only (option shape=changes)")
        self.schema_history = _schema_history(opts.get("schemahistory"))

    def paths(self) -> list[str]:
        return option_paths(self.raw)


def _schema_history(path: str | None):
    """Option schemaHistory's file (read once, on the driver): (path, its source lines, its entries), or None."""
    if path is None:
        return None
    try:
        return (path, *load_history(path))
    except (BinlogError, OSError) as exc:
        raise ValueError(f"binlog: option schemaHistory: {exc}") from exc


def _history_tracker(history: tuple, path: str) -> SchemaTracker:
    """A tracker of option schemaHistory's history for the binlog file ``path``: a history that records its
    source must be that file's server's (its FORMAT_DESCRIPTION's flavour and server_id, its base name).

    Raises:
        ValueError: it is another source's (naming the history, its source and the file's).
    """
    from binlogd.library import storage
    from binlogd.library.schema.identity import HEAD_BYTES, file_identity

    name, sources, entries = history
    tracker = SchemaTracker(entries, sources=sources, name=name)
    if sources:
        try:
            with storage.open_input(path) as fh:
                tracker.bind(file_identity(fh.read(HEAD_BYTES), os.path.basename(path)))
        except (BinlogError, OSError) as exc:
            raise ValueError(f"binlog: option schemaHistory: {exc}") from exc
    return tracker


def _positive(opts: dict, key: str, default):
    if key not in opts:
        return default
    try:
        value = int(opts[key])
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"binlog: option {key} must be a positive integer, not {opts[key]!r}")
    return value


class FilePartition(InputPartition):
    """One file (or, streaming, one byte range of it): ``kind`` is binlog, jsonl or index."""

    def __init__(self, path: str, kind: str, start: int = 4, stop: int | None = None, fde: int = 4,
                 tail_error: tuple[str, int | None] | None = None):
        super().__init__(path)
        self.path, self.kind, self.start, self.stop, self.fde = path, kind, start, stop, fde
        self.tail_error = tail_error

    def __repr__(self) -> str:
        return f"FilePartition({self.path!r}, {self.kind}, {self.start}, {self.stop})"


class FilePack(InputPartition):
    """Whole files read one after the other in one task (batch reads): ``parts``, FilePartitions in order."""

    def __init__(self, parts: list[FilePartition]):
        super().__init__([p.path for p in parts])
        self.parts = parts

    def __repr__(self) -> str:
        return f"FilePack({self.parts!r})"


def pack(parts: list[FilePartition], sizes: dict[str, int], opts: Options) -> list[FilePack]:
    """``parts`` in order, packed as Spark packs the files of a file source: each file counts its size plus
    ``openCostInBytes``, and a pack takes files while it stays within ``min(maxPartitionBytes,
    max(openCostInBytes, total / minPartitions))`` (a larger file is a pack of its own)."""
    total = sum(sizes.get(p.path, 0) + opts.open_cost for p in parts)
    limit = min(opts.max_partition_bytes, max(opts.open_cost, total // opts.min_partitions))
    out: list[list[FilePartition]] = []
    held = 0  # bytes (with open costs) of the last pack
    for part in parts:
        cost = sizes.get(part.path, 0) + opts.open_cost
        if not out or held + cost > limit:
            out.append([])
            held = 0
        out[-1].append(part)
        held += cost
    return [FilePack(group) for group in out]


class _Reader:
    """What batch and stream readers share: the output columns and ``read``."""

    def __init__(self, options: Options, schema: StructType):
        self.opts = options
        self.schema = schema
        shape = options.shape
        allowed = D.COLUMNS[shape] + (D.CORRUPT,)
        unknown = [f.name for f in schema.fields if f.name not in allowed]
        if unknown:
            raise ValueError(f"binlog: the {shape} shape has no column {', '.join(unknown)} "
                             f"(its columns: {', '.join(allowed)})")
        self.before_type = self.after_type = None
        if shape == "changes":
            by_name = {f.name: f.dataType for f in schema.fields}
            self.before_type, self.after_type = by_name.get("before"), by_name.get("after")
            from .convert import pair_converter
            pair_converter(self.before_type or StringType(), self.after_type or StringType())  # check early

    # ---------------------------------------------------------------- executor side
    def _rows(self, path: str, start: int = 4):
        """Column buffers for one file (always with ``_corrupt``; the schema picks the columns)."""
        if self.opts.shape == "events":
            return D.EventRows(path, corrupt_column=True, start=start)
        convert = None
        if any(t is not None and not isinstance(t, StringType) for t in (self.before_type, self.after_type)):
            from .convert import pair_converter
            convert = pair_converter(self.before_type or StringType(), self.after_type or StringType())
        return D.ChangeRows(path, corrupt_column=True, start=start, convert=convert)

    def read(self, partition: FilePartition | FilePack) -> Iterator:
        for part in partition.parts if isinstance(partition, FilePack) else (partition,):
            yield from self._read_file(part)

    def _read_file(self, partition: FilePartition) -> Iterator:
        opts = self.opts
        if partition.kind == "index":
            chunks = iter([D.read_index(partition.path, corrupt_column=True, skip_corrupt=opts.skip_corrupt)])
            names = D.INDEX_COLUMNS + (D.CORRUPT,)
        elif partition.kind == "jsonl":
            rows = self._rows(partition.path)
            chunks = D.read_jsonl(partition.path, rows, partition.stop, opts.skip_corrupt, opts.batch_rows)
            names = rows.names
        else:
            rows = self._rows(partition.path, partition.start)
            schema = None
            if opts.schema_history is not None:  # names columns where TABLE_MAPs carry none
                schema = _history_tracker(opts.schema_history, partition.path)
                schema.start_at(os.path.basename(partition.path), partition.start)
            chunks = D.read_binlog(partition.path, rows, partition.start, partition.stop, partition.fde,
                                   opts.partial_tail, opts.skip_corrupt, partition.tail_error, opts.batch_rows,
                                   schema)
            names = rows.names
        index = {n: i for i, n in enumerate(names)}
        picks = [index[f.name] for f in self.schema.fields]
        if opts.arrow:
            yield from self._arrow(chunks, picks)
        else:
            yield from self._tuples(chunks, picks)

    def _arrow(self, chunks, picks):
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema, to_arrow_type

        target = to_arrow_schema(self.schema, timezone="UTC")
        build = []
        for field, arrow_field in zip(self.schema.fields, target):
            ours = _TYPES[field.name]
            if field.name in ("before", "after") or field.dataType == ours:
                build.append((arrow_field.type, None))
            else:
                build.append((to_arrow_type(ours, timezone="UTC"), arrow_field.type))
        for cols in chunks:
            arrays = []
            for pick, (typ, cast) in zip(picks, build):
                arr = pa.array(cols[pick], type=typ)
                if cast is not None:
                    if pa.types.is_timestamp(cast) and pa.types.is_integer(typ):  # unix seconds
                        arr = arr.cast(pa.timestamp("s", tz=cast.tz))
                    arr = arr.cast(cast)
                arrays.append(arr)
            yield pa.RecordBatch.from_arrays(arrays, schema=target)

    def _tuples(self, chunks, picks):
        text = {i for i, f in enumerate(self.schema.fields)
                if f.name in ("before", "after", "json_diffs") and isinstance(f.dataType, StringType)}
        for cols in chunks:
            selected = [cols[p] for p in picks]
            for i in text:
                selected[i] = [None if v is None else v.decode() for v in selected[i]]
            yield from zip(*selected)


def _kind(opts: Options, files: list[str]) -> str:
    if opts.shape == "index":
        return "index"
    if opts.input != "auto":
        return opts.input
    jsonl = [D.is_jsonl(p) for p in files]
    if any(jsonl) and not all(jsonl):
        raise ValueError("binlog: the paths mix JSON-lines (*.jsonl) and binlog files; set option input")
    if all(jsonl) and files and opts.shape != "changes":
        raise ValueError("binlog: JSON-lines input has the changes shape only (option shape=changes)")
    return "jsonl" if files and all(jsonl) else "binlog"


class BinlogBatchReader(_Reader, DataSourceReader):
    """``spark.read.format("binlog")``: whole files packed into partitions (:func:`pack`), each read up to
    its size at planning time."""

    def partitions(self) -> list[FilePack]:
        files = sized(self.opts.paths(), self.opts.glob_filter)
        if not files:
            raise FileNotFoundError(f"binlog: no files in {', '.join(self.opts.paths())}")
        kind = _kind(self.opts, list(files))
        if kind == "jsonl":
            return pack(self._jsonl_partitions(list(files)), files, self.opts)
        return pack([FilePartition(p, kind, 4, size if kind == "binlog" else None) for p, size in files.items()],
                    files, self.opts)

    def _jsonl_partitions(self, files: list[str]) -> list[FilePartition]:
        committed = D.committed_jsonl(self.opts.daemon_checkpoint) if self.opts.daemon_checkpoint else None
        out = []
        for path in files:
            stop = os.path.getsize(path)
            index = jsonl_index(os.path.basename(path))
            if committed is not None and index is not None:
                committed_index, offset = committed
                if index == committed_index:
                    stop = offset
                elif index > committed_index:
                    continue  # written after the last commit: nothing in it is committed
            out.append(FilePartition(path, "jsonl", 0, stop))
        return out


class BinlogStreamReader(_Reader, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("binlog")`` over a directory that keeps growing (the daemon's archive)."""

    def __init__(self, options: Options, schema: StructType):
        super().__init__(options, schema)
        if options.shape == "index" or options.input == "jsonl":
            raise ValueError("binlog: streaming reads binlog files (shape events or changes)")
        self._target: dict[str, int] | None = None
        self._latest: dict | None = None

    def initialOffset(self) -> dict:
        return {"files": {}, "done": {}}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_files:
            return ReadMaxFiles(self.opts.max_files)
        if self.opts.max_bytes:
            return ReadMaxBytes(self.opts.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._listing()

    def reportLatestOffset(self) -> dict | None:
        return self._latest

    def _listing(self) -> dict[str, int]:
        """The binlog files now -> their sizes (one listing; new objects in a store are new files)."""
        return {p: n for p, n in sized(self.opts.paths(), self.opts.glob_filter).items() if not D.is_jsonl(p)}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        sizes = self._target if self._target is not None else self._listing()
        files = list(sizes)
        done = dict(start.get("done", {}))
        entries = {k: dict(v) for k, v in start.get("files", {}).items()}
        max_files = limit.max_files if isinstance(limit, ReadMaxFiles) else None
        budget = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        last_of_stem: dict[str, tuple] = {}
        for path in files:
            key = _stem_key(path)
            last_of_stem[key] = max(last_of_stem.get(key, ()), order_key(path))
        progressed = 0
        for path in files:
            key = _stem_key(path)
            if key in done and order_key(path) <= order_key(done[key]):
                continue
            entry = entries.get(path, {"pos": 4, "fde": 4})
            if entry.get("end"):
                continue
            if (max_files is not None and progressed >= max_files) or (budget is not None and budget <= 0):
                break
            final = order_key(path) < last_of_stem[key]
            size = sizes[path]
            new = _scan(path, entry, size, final, budget, self.opts.skip_corrupt)
            if new != entry:
                progressed += 1
                if budget is not None:
                    budget -= new["pos"] - entry["pos"]
                entries[path] = new
        if progressed:
            _fold(done, entries, start.get("files", {}))
        self._latest = {"files": entries, "done": done}
        return self._latest

    def partitions(self, start: dict, end: dict) -> list[FilePartition]:
        before, done = start.get("files", {}), start.get("done", {})
        out = []
        for path in sorted(end.get("files", {}), key=order_key):
            e = end["files"][path]
            key = _stem_key(path)
            if path not in before and key in done and order_key(path) <= order_key(done[key]):
                continue
            s = before.get(path, {"pos": 4, "fde": 4})
            error = (e["error"], e.get("error_pos")) if e.get("error") and not s.get("error") else None
            if e["pos"] > s["pos"] or error:
                out.append(FilePartition(path, "binlog", s["pos"], e["pos"], s["fde"], error))
        return out

    def commit(self, end: dict) -> None:
        pass


def _stem_key(path: str) -> str:
    directory, base = stem(path)
    return os.path.join(directory, base)


def _fold(done: dict, entries: dict, previous: dict) -> None:
    """Fold into ``done`` the leading files of each stem that had ended already in ``previous``."""
    by_stem: dict[str, list[str]] = {}
    for path in sorted(entries, key=order_key):
        by_stem.setdefault(_stem_key(path), []).append(path)
    for key, paths in by_stem.items():
        for path in paths:
            if not (previous.get(path, {}).get("end") and entries[path].get("end")):
                break
            done[key] = path
            del entries[path]


def _scan(path: str, entry: dict, size: int, final: bool, budget: int | None, skip_corrupt: bool) -> dict:
    """The file's next offset entry: how far its complete transactions reach now (driver side).

    Decodes events (not rows) from ``entry["pos"]`` up to ``size``; the boundary rules are the
    daemon's (:class:`binlogd.protocol.position.PositionTracker`). A file closed by ROTATE/STOP (found by
    seeking from the end, :func:`decode.file_info`) is taken whole without a walk. A
    ``final`` file (a later one exists) gives every complete event; a partial tail is corrupt.
    """
    from binlogd.protocol.constants import EventType as ET
    from binlogd.protocol.errors import BinlogError, TruncatedError
    from binlogd.protocol.position import Position, PositionTracker
    from binlogd.protocol.reader import event_bounds

    pos, fde = entry["pos"], entry["fde"]
    if size <= pos:
        return {**entry, "end": True} if final and size == pos else entry
    if size < 4 + 19 and not final:
        return entry  # a file being created: not even its first event yet
    boundary, boundary_fde = pos, fde
    if D.is_remote(path):  # an object is written whole, once: complete (a truncated one fails when read)
        return {"pos": size, "fde": fde, "end": True}
    try:
        if pos == 4 and (budget is None or budget >= size) and os.path.getsize(path) == size:
            if D.file_info(path).method == "seek":
                return {"pos": size, "fde": fde, "end": True}
        view = D.mapped(path, size)
        decoder = D.prime(view, fde)
        tracker = PositionTracker(Position(path, pos))
        p, current_fde, closed = pos, fde, False
        while p < size:
            length = event_bounds(view, p, decoder.header_len)
            if length is None:
                break
            event = decoder.decode(view[p:p + length], p)
            if event.header.type_code in (ET.FORMAT_DESCRIPTION, ET.START_V3):
                current_fde = p
            tracker.observe(event)
            p += length
            if not tracker.in_transaction:
                boundary, boundary_fde = p, current_fde
                closed = event.header.type_code in (ET.ROTATE, ET.STOP)
                if budget is not None and boundary - pos >= budget:
                    return {"pos": boundary, "fde": boundary_fde}
        if not final:
            return {"pos": boundary, "fde": boundary_fde, **({"end": True} if closed else {})}
        if p < size:
            boundary, boundary_fde = p, current_fde
            raise TruncatedError(f"binlog ends inside an event ({size - p} bytes of it present), and a later "
                                 "file exists", p)
        return {"pos": p, "fde": current_fde, "end": True}
    except BinlogError as exc:
        error = D.CorruptFile(path, exc)
        if not skip_corrupt:
            raise error from exc
        return {"pos": boundary, "fde": boundary_fde, "end": True, "error": str(error), "error_pos": error.offset}


class BinlogDataSource(DataSource):
    """The "binlog" data source: ``spark.dataSource.register(BinlogDataSource)``.

    It must be importable on the executors as ``pipeline.source.BinlogDataSource``:
    install binlogd there, or ship ``python -m binlogd.pipeline zip`` with ``--py-files``.
    """

    @classmethod
    def name(cls) -> str:
        return "binlog"

    def schema(self) -> StructType:
        opts = Options(self.options)
        return default_schema(opts.shape, opts.skip_corrupt)

    def reader(self, schema: StructType) -> BinlogBatchReader:
        return BinlogBatchReader(Options(self.options), schema)

    def streamReader(self, schema: StructType) -> BinlogStreamReader:
        return BinlogStreamReader(Options(self.options), schema)

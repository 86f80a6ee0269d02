"""``binlogd sql``: its options and its run.

Exit codes (as ``dump``'s): 0 success; 1 the input cannot be turned into SQL that is sure to be right
(not a binlog, truncated, corrupt, a missing file or a gap in the sequence, a table without column
names, an unsafe flashback, an INCIDENT in the range, LOAD DATA without --load-dir), with one line on
stderr naming the file and position; 2 usage error. A replay is written as it is made; after an error
its output ends with the last whole transaction before it (a transaction the error cut is followed by
ROLLBACK); a flashback writes nothing unless it can write everything. Corrections of the range (a start
or stop inside a transaction) are reported on stderr.
"""

from __future__ import annotations

import argparse
import sys

from binlogd.cli.schemacmd import dump_tracker
from binlogd.cli.sqlout.groups import Range, parse_gtids, select
from binlogd.cli.sqlout.render import Filters, Renderer
from binlogd.library.schema.history import SchemaTracker
from binlogd.library.schema.model import TableDef
from binlogd.library.sqlwriter import native
from binlogd.library.sqlwriter.sqlerrors import SqlOutError
from binlogd.protocol.errors import BinlogError

EXIT_OK, EXIT_BAD_INPUT, EXIT_USAGE = 0, 1, 2
_FLUSH_BYTES = 1 << 20


def _gtids(text: str):
    try:
        return parse_gtids(text)
    except SqlOutError as exc:
        raise argparse.ArgumentTypeError(str(exc))


def _table(text: str) -> tuple[str, str]:
    db, dot, table = text.partition(".")
    if not dot or not db or not table:
        raise argparse.ArgumentTypeError(f"--table needs DB.TABLE, got {text!r}")
    return db, table


def add_arguments(p: argparse.ArgumentParser, datetime_type) -> None:
    """The options of ``binlogd sql`` (``datetime_type`` parses a datetime as ``dump`` does)."""
    p.add_argument("files", nargs="+", help="binlog files of one server, in order (a missing one is an error)")
    p.add_argument("--start-position", type=int, help="first event offset in the first file")
    p.add_argument("--stop-position", type=int, help="stop before the event at or after this offset in the last file")
    p.add_argument("--start-datetime", type=datetime_type, help="skip transactions before this time (UTC)")
    p.add_argument("--stop-datetime", type=datetime_type,
                   help="stop at the first transaction that commits at or after this time (UTC)")
    p.add_argument("--include-gtids", type=_gtids, metavar="SET",
                   help="only these transactions: a MySQL GTID set, or MariaDB D-S-N / D-S-FIRST-LAST, comma separated")
    p.add_argument("--database", action="append", default=[], metavar="DB",
                   help="only row changes in DB and statements whose default database is DB (repeatable)")
    p.add_argument("--table", action="append", default=[], type=_table, metavar="DB.TABLE",
                   help="only row changes of this table (repeatable)")
    p.add_argument("--flashback", action="store_true",
                   help="write the inverse of the row changes, newest transaction first")
    p.add_argument("--skip-unsafe", action="store_true",
                   help="flashback: leave out (and report) DDL and partial row images instead of failing")
    p.add_argument("--keep-gtids", action="store_true",
                   help="replay under the original GTIDs (MariaDB gtid_seq_no, MySQL GTID_NEXT)")
    p.add_argument("--load-dir", metavar="DIR",
                   help="write the files of LOAD DATA statements here; the client reads them (--local-infile=1)")
    p.add_argument("--schema-history", metavar="FILE",
                   help="a schema history naming the columns of binlogs written without binlog_row_metadata=FULL "
                        "(the DDL in the files is followed in any case)")


def _history_key(tracker: SchemaTracker):
    """The primary key a schema history records for a table whose definition has these column names."""
    def primary_key(schema: str, table: str, names: tuple) -> tuple:
        definition = tracker.definition(schema, table)
        if isinstance(definition, TableDef) and tuple(c.name for c in definition.columns) == names:
            return definition.primary_key
        return ()
    return primary_key


def _notice(message: str) -> None:
    print(f"binlogd sql: {message}", file=sys.stderr)


class _Output:
    """Lines to stdout, in chunks of about 1 MiB, each followed by a newline. A line is a str (surrogate-escaped
    text turns back into the logged bytes), bytes (UTF-8 lines made so, such as the C writer's) or a tuple of
    bytes-like pieces of one line (:func:`.native.comment`'s). ``header`` goes before the first lines written:
    an input that fails before any writes nothing at all.

    Fields: started (the header is out, or on its way).
    """

    def __init__(self, header: str) -> None:
        self.chunks: list = []
        self.size = 0
        self.header = header
        self.started = False

    def write(self, lines: list) -> None:
        if not self.started:
            self.started = True
            lines = [self.header, *lines]
        chunks = self.chunks
        for line in lines:
            kind = type(line)
            if kind is tuple:
                chunks += line
                self.size += sum(map(len, line))
            else:
                chunks.append(line if kind is bytes else line.encode("utf-8", "surrogateescape"))
                self.size += len(line)
            chunks.append(b"\n")
        if self.size >= _FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.chunks:
            sys.stdout.buffer.writelines(self.chunks)  # a long line goes out without a copy
            self.chunks, self.size = [], 0
        sys.stdout.buffer.flush()


def run(args) -> int:
    """Run ``binlogd sql`` with parsed options; returns the exit code."""
    if args.keep_gtids and args.flashback:
        print("binlogd sql: --keep-gtids cannot be used with --flashback (an undo is a new transaction)",
              file=sys.stderr)
        return EXIT_USAGE
    if args.skip_unsafe and not args.flashback:
        print("binlogd sql: --skip-unsafe applies to --flashback only", file=sys.stderr)
        return EXIT_USAGE
    rng = Range(args.start_position, args.stop_position, args.start_datetime, args.stop_datetime, args.include_gtids)
    try:
        tracker = dump_tracker(args.schema_history, args.files[0], None)
    except (BinlogError, OSError) as exc:
        print(f"binlogd sql: {args.schema_history}: {exc.strerror if isinstance(exc, OSError) else exc}",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    renderer = Renderer(Filters(frozenset(args.database), frozenset(args.table)), args.keep_gtids,
                        args.skip_unsafe, _notice, _history_key(tracker), args.load_dir)
    native.keep_freed_memory()  # each output block on memory already touched: no page faults
    mode = "flashback" if args.flashback else "replay"
    out = _Output(f"-- binlogd sql {mode} of {' '.join(args.files)}")
    try:
        for path in args.files:  # every input opens before anything is written
            open(path, "rb").close()
        groups = select(args.files, rng, _notice, tracker, runs=native.speedups_enabled())
        if args.flashback:
            undo = [lines for g in groups if (lines := renderer.flashback(g))]
            out.write(renderer.flashback_preamble())
            for lines in reversed(undo):
                out.write(lines)
        else:
            for g in groups:
                renderer.replay(g, out.write)
    except (BinlogError, OSError) as exc:
        if not args.flashback:
            if renderer.partial:  # the transaction the error cut: the client must not keep any of it
                out.write(["ROLLBACK;"])
            if out.started:
                out.flush()
        message = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        where = f"{exc.filename}: " if isinstance(exc, OSError) and exc.filename else ""
        print(f"binlogd sql: {where}{message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    out.write([])  # the header of an input without a transaction
    out.flush()
    return EXIT_OK

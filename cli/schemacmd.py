"""Command-line side of the schema history: ``binlogd schema build`` and the tracker ``binlogd dump`` uses.

``binlogd schema build FILE… --out HISTORY [--seed SQL]`` reads binlog files in order, follows their
DDL and writes the history they describe. ``--seed``: a file of ``SHOW CREATE TABLE`` /
``CREATE DATABASE`` statements, ``USE db;`` allowed, describing the tables as they were before the
first file. ``--out -`` is standard output; a path is written by :func:`binlogd.library.atomicfile.replace`,
which follows symlinks and never replaces a special file. Exit codes: 0 written; 1 bad input (a binlog,
the seed or a history that cannot be read, or an output that cannot be written, naming it); 2 usage.
"""

from __future__ import annotations

import argparse
import mmap
import os
import sys

from binlogd.library import atomicfile
from binlogd.library.schema.changes import Unparsed
from binlogd.library.schema.history import Entry, SchemaHistoryError, SchemaTracker, load_history
from binlogd.library.schema.readddl import read_ddl
from binlogd.library.schema.sqltext import expand_comments, split_statements
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.errors import BinlogError
from binlogd.protocol.reader import iter_events

EXIT_OK, EXIT_BAD_INPUT = 0, 1


def _warn(message: str) -> None:
    print(f"binlogd: {message}", file=sys.stderr)


def dump_tracker(history: str | None, first_file: str, start: int | None) -> SchemaTracker:
    """The tracker ``binlogd dump`` names columns with: empty, or a saved history applied up to the
    first file's start position (its later entries are applied as the dump reaches them). A history that
    records its source must be the files' server's (each file's FORMAT_DESCRIPTION: flavour, server_id;
    its base name); its positions are then those of that server's epoch.

    Raises:
        SchemaHistoryError: the history cannot be read, or it belongs to another source (naming both).
        OSError: the history cannot be read.
    """
    if not history:
        tracker = SchemaTracker(warn=_warn)
    else:
        from binlogd.library.schema.identity import HEAD_BYTES, file_identity

        sources, entries = load_history(history)
        tracker = SchemaTracker(entries, warn=_warn, sources=sources, name=history)
        from binlogd.library import storage

        # a pipe or standard input is not read twice: it is checked at its FORMAT_DESCRIPTION
        if sources and (storage.is_remote(first_file) or os.path.isfile(first_file)):
            with storage.open_input(first_file) as fh:
                tracker.bind(file_identity(fh.read(HEAD_BYTES), os.path.basename(first_file)))
    tracker.start_at(os.path.basename(first_file), start or 4)
    return tracker


def seed_entries(tracker: SchemaTracker, text: str, file: str, pos: int) -> list[Entry]:
    """Apply a seed (SQL statements: CREATE DATABASE, CREATE TABLE as SHOW CREATE TABLE prints it, USE)
    as the state at ``file:pos``; return its history entries.

    Raises:
        SchemaHistoryError: a statement of the seed cannot be parsed (naming it).
    """
    db, out = "", []
    for statement in split_statements(text):
        words = expand_comments(statement).split(None, 1)
        if words and words[0].upper() == "USE" and len(words) == 2:
            db = words[1].strip().strip("`")
            continue
        for change in read_ddl(statement, db):
            if isinstance(change, Unparsed):
                raise SchemaHistoryError(f"seed statement not understood ({change.reason}): {statement[:120]}")
            before = dict(tracker.catalog.databases)
            for state in tracker.catalog.apply(change).values():
                if not isinstance(state, str):
                    out.append(tracker.record(state, file, pos, "seed"))
            for schema, charset in tracker.catalog.databases.items():
                if before.get(schema, ...) != charset:
                    out.append(tracker.record_database(schema, charset, file, pos, "seed"))
    return out


def file_entries(tracker: SchemaTracker, path: str) -> list[Entry]:
    """The history entries the DDL of one binlog file makes, following it with ``tracker``.

    Raises:
        BinlogError: the file is not a readable binlog (naming the offset).
        OSError: it cannot be read.
    """
    name, out = os.path.basename(path), []
    with open(path, "rb") as fh:
        data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(fh.fileno()).st_size else b""
    for event in iter_events(data, Decoder(rows=False)):
        out.extend(tracker.observe(event, name))
    return out


def cmd_schema(args) -> int:
    """``binlogd schema build``: write the history of ``args.files`` (after ``args.seed``) to ``args.out``."""
    tracker, entries, where = SchemaTracker(warn=_warn), [], args.seed
    try:
        if args.seed:
            with open(args.seed, encoding="utf-8") as fh:
                seed = fh.read()
            entries = seed_entries(tracker, seed, os.path.basename(args.files[0]), 4)
        for where in args.files:
            entries.extend(file_entries(tracker, where))
    except (BinlogError, OSError, UnicodeDecodeError) as exc:
        message = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        print(f"binlogd: {where}: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    data = b"".join(e.to_json() for e in entries)
    try:
        if args.out == "-":
            for at in range(0, len(data), 1 << 16):  # a pipe closed early fails the next write, not a huge one
                sys.stdout.buffer.write(data[at:at + (1 << 16)])
            sys.stdout.buffer.flush()
        else:
            atomicfile.replace(args.out, data)
    except BrokenPipeError:
        raise  # standard output's reader has gone (--out /dev/stdout | head): main() ends quietly
    except OSError as exc:
        print(f"binlogd: {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    tables = {(e.schema, e.table) for e in entries if e.table is not None}
    where = "standard output" if args.out == "-" else args.out
    print(f"binlogd: {len(entries)} entries for {len(tables)} tables written to {where}", file=sys.stderr)
    return EXIT_OK


def add_parser(sub) -> None:
    """Register ``schema build`` on the CLI's subparsers."""
    p = sub.add_parser("schema", help="schema history: column names at every binlog position")
    schema_sub = p.add_subparsers(dest="schema_command", required=True)
    b = schema_sub.add_parser("build", help="build a schema history from binlog files (their DDL)",
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("files", nargs="+", help="binlog files, oldest first")
    b.add_argument("--out", required=True, metavar="FILE",
                   help="the history file to write (JSON lines), replaced atomically (a temp file beside it, then a "
                   "rename); - is standard output. A symlink is followed: its target is replaced and the link "
                   "stays. A FIFO or a device (/dev/stdout) is written to, never replaced. A directory, a socket "
                   "or a block device is refused (exit 1)")
    b.add_argument("--seed", help="SQL file of SHOW CREATE TABLE statements: the tables before the first file")
    b.set_defaults(func=cmd_schema)

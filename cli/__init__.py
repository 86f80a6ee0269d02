"""The ``binlogd`` command line: ``info``, ``dump``, ``run``, ``demo``, ``spark``.

Exit codes of info/dump/sql: 0 success; 1 the input is bad (not a binlog, truncated,
corrupt, unreadable); 2 usage error. ``run`` uses the codes in
:mod:`daemon.service` (0 stopped, 2 config, 3 auth, 4 unreachable, 5 binlog
missing (ERR 1236), 6 primary misconfigured, 7 undecodable stream, 8 checkpoint
or sink unusable); 130 interrupted.
"""

from __future__ import annotations

import gc
import os
import sys

from binlogd.library.lazyjson import orjson
from binlogd.protocol.errors import BinlogError

# Each command imports what it needs when it runs (``binlogd info`` starts in tens of milliseconds), and so
# does main() for the parser: importing this module takes about a millisecond, and a Ctrl-C after it
# (imports included) exits 130 without a traceback.
EXIT_OK, EXIT_BAD_INPUT, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _datetime(text: str) -> int:
    """``YYYY-MM-DD HH:MM:SS`` (UTC unless an offset is given) as unix seconds."""
    import argparse
    from datetime import datetime, timezone

    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a datetime: {text!r} (use 'YYYY-MM-DD HH:MM:SS')")
    return int((dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)).timestamp())


class StdoutClosed(Exception):
    """Standard output was closed by its reader (``binlogd dump FILE | head``): not an input error, so not an
    OSError that a command's input handling could take; main() ends the command quietly with exit 0."""


def _out(data: bytes) -> None:
    """Write ``data`` to standard output. Raises: StdoutClosed when the reader has gone (EPIPE)."""
    try:
        sys.stdout.buffer.write(data)
    except BrokenPipeError as exc:
        raise StdoutClosed() from exc


def _utc(seconds: int | None) -> str:
    """Unix seconds as ``YYYY-MM-DD HH:MM:SS+00:00`` (what --start-datetime and --stop-datetime take); '' for None."""
    if seconds is None:
        return ""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(" ")


def _store_arguments(p) -> None:
    """``--endpoint``, ``--region`` and ``--path-style``: how ``info``/``dump`` reach an object store."""
    p.add_argument("--endpoint", help="an S3-compatible store's URL (default: AWS_ENDPOINT_URL)")
    p.add_argument("--region", help="the bucket's region (default: the AWS profile or AWS_DEFAULT_REGION)")
    p.add_argument("--path-style", action="store_true", help="address buckets as ENDPOINT/BUCKET/KEY")


def _configure_store(args) -> None:
    if args.endpoint or args.region or args.path_style:
        from binlogd.library import storage

        storage.configure(storage.Options(args.endpoint, args.region, args.path_style))


def cmd_info(args) -> int:
    from binlogd.cli import filetools
    from binlogd.protocol.records import asdict

    _configure_store(args)
    if args.json:
        orjson()  # only for --json (main() leaves it to info and sql)
    status = EXIT_OK
    for path in args.files:
        try:
            result, bytes_read = filetools.measured_info(path)
        except (BinlogError, OSError) as exc:
            _error(path, exc)
            status = EXIT_BAD_INPUT
            continue
        report = dict(asdict(result), bytes_read=bytes_read)
        if args.json:
            from binlogd.library.serialize import dumps

            _out(dumps(report) + b"\n")
        else:  # begin_time and end_time as UTC datetimes here; --json keeps unix seconds
            width = max(len(key) for key in report)
            for key, value in report.items():
                if key in ("begin_time", "end_time"):
                    value = _utc(value)
                _out(f"{key:<{width}}  {'' if value is None else value}\n".encode())
            _out(b"\n")
    return status


def cmd_dump(args) -> int:
    from binlogd.cli import filetools
    from binlogd.cli.schemacmd import dump_tracker
    from binlogd.cli.textformat import format_event
    from binlogd.library.jsonrows import event_json
    from binlogd.library.serialize import flatten

    _configure_store(args)
    try:  # names the columns of MINIMAL/NO_LOG metadata from the DDL the files hold (and a saved history)
        schema = dump_tracker(args.schema_history, args.files[0], args.start_position)
    except (BinlogError, OSError) as exc:
        _error(args.schema_history, exc)
        return EXIT_BAD_INPUT
    last = len(args.files) - 1
    for index, path in enumerate(args.files):
        name = os.path.basename(path)
        start = args.start_position if index == 0 else None  # as mysqlbinlog: in the first file, and
        stop = args.stop_position if index == last else None  # in the last one
        try:
            for event in filetools.dump_events(path, start, stop, schema.lookup):
                schema.observe(event, name)
                ts = event.header.timestamp
                if args.stop_datetime is not None and ts >= args.stop_datetime and ts:
                    break
                if args.start_datetime is not None and ts < args.start_datetime:
                    continue
                end = event.header.pos + event.header.event_length  # inner payload events share it
                for item in flatten(event):
                    if args.json:
                        _out(event_json(item, path, end) + b"\n")
                    else:
                        _out(format_event(item).encode("utf-8", "backslashreplace") + b"\n")
        except filetools.StartPositionError as exc:
            _error(path, exc)
            return EXIT_USAGE
        except (BinlogError, OSError) as exc:
            sys.stdout.flush()
            _error(path, exc)
            return EXIT_BAD_INPUT
    return EXIT_OK


def cmd_run(args) -> int:
    from binlogd.daemon.config import ConfigError, load_config
    from binlogd.daemon.operations.logs import setup_logging
    from binlogd.daemon.service import EXIT_CONFIG, Daemon

    overrides = {}
    for item in args.set or ():
        key, sep, value = item.partition("=")
        if not sep:
            print(f"binlogd: --set needs section.key=value, got {item!r}", file=sys.stderr)
            return EXIT_USAGE
        overrides[key.strip()] = value
    try:
        config = load_config(args.config, overrides=overrides)
    except ConfigError as exc:
        print(f"binlogd: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.config is None and not _source_given(overrides):
        print("binlogd: run needs a source: --config FILE (see config.example.toml), BINLOGD_SOURCE__HOST (and the "
              "other BINLOGD_SOURCE__ settings) or --set source.host=HOST; it never assumes one", file=sys.stderr)
        return EXIT_CONFIG
    log = setup_logging(config.log.format, config.log.level)
    _say_missing_fast_paths(log.warning)
    _no_core_dumps(log)
    import warnings

    # the server's notes on the daemon's own statements (a deprecated variable read, on MySQL 9) are not the
    # user's to act on, and would be stderr lines that are not log lines
    warnings.filterwarnings("ignore", module=r"aiomysql\.")
    if "source.password" in (key.strip().lower() for key in overrides):
        log.warning("source.password was given with --set: other users can read it in the process list; "
                    "use source.password_file or BINLOGD_SOURCE__PASSWORD")
    from binlogd.cli.signals import run_loop, run_with_signals

    return run_loop(lambda: run_with_signals(Daemon(config, log), log))


def _source_given(overrides: dict) -> bool:
    """Whether a source setting is in the environment (``BINLOGD_SOURCE__*``) or among ``--set``'s ``overrides``."""
    return any(k.upper().startswith("BINLOGD_SOURCE__") for k in os.environ) or \
        any(k.strip().lower().startswith("source.") for k in overrides)


def _say_missing_fast_paths(say) -> None:
    """``say(line)`` once when a C extension failed to import (not when BINLOGD_PURE_PYTHON turned them off)."""
    from binlogd.protocol.speedups import missing_message

    line = missing_message()
    if line:
        say(line)


def _no_core_dumps(log) -> None:
    """Keep the password out of core dumps: RLIMIT_CORE 0 and, on Linux, PR_SET_DUMPABLE 0 (which also
    keeps other processes of the same user from reading this one's memory). Logs a warning when refused."""
    import resource

    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (OSError, ValueError) as exc:
        log.warning("cannot turn core dumps off (RLIMIT_CORE): %s", exc)
    if sys.platform == "linux":
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE = 4
            log.warning("cannot turn core dumps off (prctl PR_SET_DUMPABLE): %s", os.strerror(ctypes.get_errno()))


def cmd_demo(args) -> int:
    from binlogd.cli.demo import run_demo

    return run_demo(args)


def _error(path: str, exc: BaseException) -> None:
    message = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    prefix = "" if message.startswith(f"{path}: ") else f"{path}: "  # storage errors name their URI
    print(f"binlogd: {prefix}{message}", file=sys.stderr)


def build_parser(command: str | None = None):
    """The CLI's ``argparse.ArgumentParser``; when ``command`` is one of its commands, with that command's
    parser alone (building the others, and importing what they need, would be much of its start)."""
    import argparse

    parser = argparse.ArgumentParser(prog="binlogd", description="MySQL/MariaDB binlog decoder and CDC daemon",
                                     formatter_class=_help_formatter())
    parser.add_argument("--version", action=_version_action(), help="print binlogd's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_parser_class())
    for name, add in _PARSERS.items():
        if command == name or command not in _PARSERS:
            add(sub)
    return parser


def _help_formatter():
    """argparse's ArgumentDefaultsHelpFormatter, but silent where the default says nothing (None, False, an
    empty list) or the help text already names it."""
    import argparse

    class Formatter(argparse.ArgumentDefaultsHelpFormatter):
        def _get_help_string(self, action):
            text = action.help or ""
            if action.default in (None, False, [], argparse.SUPPRESS) or "default" in text:
                return text
            return super()._get_help_string(action)

    return Formatter


def _parser_class():
    """The subcommands' parser class: an ArgumentParser whose help shows the defaults (see _help_formatter)."""
    import argparse

    formatter = _help_formatter()

    class Parser(argparse.ArgumentParser):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("formatter_class", formatter)
            super().__init__(*args, **kwargs)

    return Parser


def _version_action():
    """``--version``: prints ``binlogd VERSION`` (the installed distribution's) and exits 0."""
    import argparse

    class Version(argparse.Action):
        def __init__(self, option_strings, dest, help=None):
            super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

        def __call__(self, parser, namespace, values, option_string=None):
            from importlib.metadata import PackageNotFoundError, version

            try:
                text = version("binlogd")
            except PackageNotFoundError:
                text = "unknown (not installed)"
            print(f"binlogd {text}")
            parser.exit()

    return Version


def _info_parser(sub) -> None:
    p = sub.add_parser("info", help="describe binlog files (begin/end time, GTIDs, next file) by seeking")
    p.add_argument("files", nargs="+")
    p.add_argument("--json", action="store_true", help="one JSON object per file")
    _store_arguments(p)
    p.set_defaults(func=cmd_info)


def _dump_parser(sub) -> None:
    p = sub.add_parser("dump", help="print decoded events")
    p.add_argument("files", nargs="+", help="binlog files, pipes or FIFOs; - is standard input")
    p.add_argument("--json", action="store_true", help="one JSON object per event")
    p.add_argument("--start-position", type=int,
                   help="first event offset in the first file: an event boundary, else a usage error (exit 2) "
                   "naming the nearest (default: the first event)")
    p.add_argument("--stop-position", type=int,
                   help="stop before the event at or after this offset in the last file (default: the end)")
    p.add_argument("--start-datetime", type=_datetime, help="skip events before this time (UTC; default: none)")
    p.add_argument("--stop-datetime", type=_datetime,
                   help="stop at the first event at or after this time (UTC; default: none)")
    p.add_argument("--schema-history", metavar="FILE",
                   help="a schema history (binlogd schema build, or the daemon's) naming columns before the files' DDL "
                   "(default: none)")
    _store_arguments(p)
    p.set_defaults(func=cmd_dump)


def _schema_parser(sub) -> None:
    from binlogd.cli import schemacmd as schema_cli

    schema_cli.add_parser(sub)


def _sql_parser(sub) -> None:
    from binlogd.cli.sqlout import command

    p = sub.add_parser("sql", help="SQL to replay binlogs (point-in-time recovery) or undo their row changes")
    command.add_arguments(p, _datetime)
    p.set_defaults(func=command.run)


def _run_parser(sub) -> None:
    p = sub.add_parser("run", help="the daemon: tail a primary, write change events, serve /metrics")
    p.add_argument("--config", help="TOML file (see config.example.toml); BINLOGD_SECTION__KEY env vars override it; "
                   "without it a BINLOGD_SOURCE__ variable or --set source.… must name the source")
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override one config key")
    p.set_defaults(func=cmd_run)


def _spark_parser(sub) -> None:
    sub.add_parser("spark", add_help=False, help="Spark jobs: index, changes, zip (needs binlogd[spark])")


def _demo_parser(sub) -> None:
    p = sub.add_parser("demo", help="throwaway MariaDB + a trickle of changes + the daemon tailing it")
    p.add_argument("--seconds", type=float, default=0, help="stop after this long (default: until Ctrl-C)")
    p.add_argument("--rate", type=float, default=5.0, help="transactions per second to write")
    p.set_defaults(func=cmd_demo)


#: Each command's parser, added to the subparsers in this order.
_PARSERS = {"info": _info_parser, "dump": _dump_parser, "schema": _schema_parser, "sql": _sql_parser,
            "run": _run_parser, "spark": _spark_parser, "demo": _demo_parser}


def info_args(argv: list[str]):
    """``info [--json] FILE…`` with no other option, parsed without argparse (importing it and building the
    parsers is a good part of ``binlogd info``'s start): the arguments argparse would give; None for any
    other command line, which argparse parses (and reports the errors of)."""
    files = [a for a in argv[1:] if a != "--json"]
    if argv[:1] != ["info"] or not files or any(a.startswith("-") and a != "-" for a in files):
        return None
    from types import SimpleNamespace

    return SimpleNamespace(command="info", files=files, json=len(files) < len(argv) - 1, endpoint=None, region=None,
                           path_style=False, func=cmd_info)


def _parse(argv: list[str], whole_process: bool):
    """The parsed command line, with the garbage collector off meanwhile: the command's imports, most of
    a short command's start, make many objects and no garbage, and each collection would walk them all.
    When main() is the whole process (``whole_process``), what they made is then frozen (``gc.freeze``),
    so that no later collection walks it either."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        return info_args(argv) or build_parser(argv[0] if argv else None).parse_args(argv)
    finally:
        if whole_process:
            gc.freeze()
        if was_on:
            gc.enable()


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code. Ctrl-C at any point (imports included) exits 130 quietly."""
    whole_process, argv = argv is None, sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["demo"] and whole_process:  # SIGTERM from here on exits through its cleanup (temp dirs)
            from binlogd.cli.localserver import terminate_exits

            terminate_exits()
        if argv[:1] not in (["info"], ["sql"]):  # info and sql import it when they need it
            orjson()
        if argv[:1] == ["spark"]:  # its own parser: binlogd spark index|changes|zip …
            from binlogd.pipeline.__main__ import main as spark_main

            return spark_main(argv[1:], prog="binlogd spark")
        args = _parse(argv, whole_process)
        if argv[:1] in (["dump"], ["sql"]):  # run says it in its log
            _say_missing_fast_paths(lambda line: print(f"binlogd: {line}", file=sys.stderr))
        return args.func(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except RuntimeError as exc:
        # A Ctrl-C while a class is being made (a dataclass field's __set_name__, during an import) comes
        # wrapped by Python as the cause of a RuntimeError.
        if isinstance(exc.__cause__, KeyboardInterrupt):
            return EXIT_INTERRUPTED
        if isinstance(exc.__cause__, SystemExit):  # the same for SIGTERM's exit (terminate_exits)
            raise exc.__cause__ from None
        raise
    except (StdoutClosed, BrokenPipeError):  # the reader of standard output has gone (`| head`): as head expects
        _stdout_to_devnull()
        return EXIT_OK


def _stdout_to_devnull() -> None:
    """Point standard output at /dev/null, so that the interpreter's flush at exit finds no broken pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())

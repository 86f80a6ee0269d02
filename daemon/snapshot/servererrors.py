"""The snapshots' server errors: the codes they act on, and a connection's error as a SourceError.

Both snapshots (:mod:`.initial`, :mod:`.incremental`) read on admin connections of their own; what such a
connection raises (PyMySQL's errors, OSError) becomes a :class:`SourceError` here: fatal when retrying cannot
help (a privilege is missing), else retried by a new session.
"""

from __future__ import annotations

from binlogd.daemon.replication.connection import SourceError

ER_TABLE_DEF_CHANGED = 1412   # the table's definition changed after the read view opened
ER_NO_SUCH_TABLE = 1146
DENIED = (1044, 1045, 1142, 1143, 1227)   # access denied to a database, table, column, or a privilege
LOST = (2006, 2013, 2003, 2055)           # the connection was lost or could not be made


def error_code(exc: BaseException) -> int:
    """The server's error code of a PyMySQL error (its first argument), 0 when it has none."""
    args = getattr(exc, "args", None)
    return args[0] if args and isinstance(args[0], int) else 0


def is_server_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a PyMySQL error or an OSError: a connection's or server's, for :func:`server_error`."""
    import pymysql

    return isinstance(exc, (pymysql.err.MySQLError, OSError))


def server_error(exc: BaseException, doing: str) -> SourceError:
    """A PyMySQL/OS error of a snapshot's connection as a SourceError.

    Args:
        exc: the error; doing: what the snapshot was doing, for the message.
    Returns:
        Kind ``"misconfigured"`` (fatal) for access denied; ``"connection"`` for a lost connection, an OSError
        or an error without a code; ``"server"`` for any other server error.
    """
    code = error_code(exc)
    if code in DENIED:
        return SourceError("misconfigured", f"snapshot: {doing}: {exc.args[-1]} (the user needs SELECT on the "
                           "tables it reads, and RELOAD on MySQL)", fatal=True)
    kind = "connection" if code in LOST or isinstance(exc, OSError) or not code else "server"
    return SourceError(kind, f"snapshot: {doing}: {exc}")

"""The same question to a real server in its flavour's SQL, and skips where one flavour lacks a feature.

A ``server`` is anything with ``flavor`` ("mariadb" or "mysql") and ``version`` (a LocalServer, the
``server_binaries`` fixture, a container server); SQL helpers also need its ``sql(statement)``.

- :func:`skip_unless_flavour`: skip the test where ``server`` is not of the flavour that has the feature;
- :func:`binlog_status`: the binlog's end, ``SHOW MASTER STATUS`` (MariaDB, MySQL before 8.2) or
  ``SHOW BINARY LOG STATUS`` (MySQL 8.2 and later);
- :func:`status_statement`: which of the two, from a connection's server version;
- :func:`gtid_position`: the GTIDs the binlog holds, ``@@gtid_binlog_pos`` (MariaDB) or ``@@gtid_executed`` (MySQL).
"""

from __future__ import annotations

import pytest

from binlogd.protocol.decoder import version_tuple

__all__ = ["binlog_status", "gtid_position", "is_mysql", "skip_unless_flavour", "status_statement"]

_NAMES = {"mariadb": "MariaDB", "mysql": "MySQL"}


def is_mysql(server) -> bool:
    """Whether ``server`` is Oracle MySQL (or Percona), not MariaDB."""
    return server.flavor == "mysql"


def skip_unless_flavour(server, flavour: str, feature: str) -> None:
    """Skip the running test unless ``server``'s flavour is ``flavour``; the reason says that ``feature``
    (e.g. "BINLOG_GTID_POS()") exists on that flavour only."""
    if server.flavor != flavour:
        pytest.skip(f"{feature} is {_NAMES[flavour]}'s: {_NAMES.get(server.flavor, server.flavor)} has none")


def binlog_status(server) -> tuple[str, int]:
    """(file, position) of the end of ``server``'s binlog."""
    row = server.sql("SHOW BINARY LOG STATUS" if is_mysql(server) and version_tuple(server.version) >= (8, 2, 0)
                     else "SHOW MASTER STATUS")[0]
    return str(row[0]), int(row[1])


def status_statement(server_info: str) -> str:
    """The statement that shows the binlog's end on a server whose handshake version is ``server_info``."""
    if "mariadb" not in server_info.lower() and version_tuple(server_info) >= (8, 2, 0):
        return "SHOW BINARY LOG STATUS"
    return "SHOW MASTER STATUS"


def gtid_position(server) -> str:
    """The GTIDs ``server``'s binlog holds: MariaDB's GTID list (one per domain) or MySQL's GTID set."""
    var = "@@global.gtid_executed" if is_mysql(server) else "@@global.gtid_binlog_pos"
    return str(server.sql(f"SELECT {var}")[0][0] or "").replace("\n", "")

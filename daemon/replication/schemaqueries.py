"""The primary's own account of its tables: :class:`ServerSchema`, on an admin connection of its own.

The daemon's schema history (:mod:`binlogd.daemon.replication.serverschema`) asks it for definitions
(``SHOW CREATE TABLE``; a seed's many at once from information_schema on MySQL 8.0+), the tables a seed
covers, the server's position and GTID state, and the DDL logged since a position (``SHOW BINLOG EVENTS``); it
never runs inside the stream's read loop.
"""

from __future__ import annotations

import time

from binlogd.library.schema import TableDef
from binlogd.library.schema.catalog import Catalog
from binlogd.library.schema.history import position_key
from binlogd.library.schema.model import ColumnDef, charset_name
from binlogd.library.schema.readddl import read_ddl
from binlogd.protocol.decoder import version_tuple
from binlogd.protocol.records import replace

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")
SCAN_LIMIT = 200_000     # binlog events SHOW BINLOG EVENTS may list to prove no DDL named a table


def server_errors() -> tuple:
    import pymysql

    return pymysql.err.Error, OSError



def _definition(create: str, schema: str, table: str) -> TableDef | None:
    """The table a CREATE TABLE statement (unqualified, for ``schema``) defines; None when it is not understood."""
    from binlogd.library.schema.changes import CreateTable

    changes = read_ddl(create, schema)
    if len(changes) != 1 or not isinstance(changes[0], CreateTable):
        return None
    state = Catalog().apply(changes[0]).get((schema, table))
    return state if isinstance(state, TableDef) else None


def _read_columns(specs: list[str]) -> dict[str, ColumnDef | None]:
    """Column definitions without a name (``varchar(20) CHARACTER SET utf8mb4 NOT NULL``) read as the columns of
    a CREATE TABLE are (their character sets given, so no table's default applies): all in one statement by
    :mod:`~binlogd.library.schema.fastddl`, else each by itself (:func:`read_ddl`); None where one is not read."""
    from binlogd.library.schema import fastddl

    if not specs:
        return {}
    # the statement is made here, without comments: fastddl reads it as read_ddl would (ddl_text leaves it)
    changes = fastddl.parse("CREATE TABLE `c` (" + ", ".join(f"`c{i}` {s}" for i, s in enumerate(specs)) + ")", "d")
    table = Catalog().apply(changes[0]).get(("d", "c")) if changes is not None else None
    if isinstance(table, TableDef) and len(table.columns) == len(specs):
        return dict(zip(specs, table.columns))
    out = {}
    for spec in specs:
        made = _definition(f"CREATE TABLE `c` (`c` {spec})", "d", "c")
        out[spec] = made.columns[0] if made is not None and len(made.columns) == 1 else None
    return out


def _split_use(info: str) -> tuple[str, str]:
    """SHOW BINLOG EVENTS' Info of a QUERY event, ``use `db`; statement`` → (db, statement)."""
    if info.startswith("use `"):
        end = info.find("`; ")
        if end > 0:
            return info[5:end].replace("``", "`"), info[end + 3:]
    return "", info


class ServerSchema:
    """The primary's own account of its tables, on a connection of its own (never the stream's).

    Args:
        connect: an async callable returning a fresh aiomysql connection.
    Fields:
        answered: monotonic time of the server's last answer (the daemon's watchdog counts a seed's queries as
            progress).
    """

    def __init__(self, connect):
        self._connect = connect
        self._conn = None
        self._mysql: tuple[int, ...] | None = None   # MySQL's version, () on MariaDB: asked once per server
        self.answered = 0.0

    async def reconnect(self, connect) -> None:
        """Ask the server ``connect`` reaches from now on (the daemon's current source, at every session):
        the connection open now is closed."""
        await self.close()
        self._connect = connect
        self._mysql = None

    async def _query(self, sql: str, args=None) -> list[tuple]:
        """Run one query (reconnecting once after a lost connection).

        Raises:
            pymysql.err.Error, OSError: the query failed twice, or the server refused it.
        """
        import pymysql

        attempt = 1
        while True:
            try:
                if self._conn is None:
                    self._conn = await self._connect()
                async with self._conn.cursor() as cur:
                    await cur.execute(sql, args)
                    rows = list(await cur.fetchall())
                self.answered = time.monotonic()
                return rows
            except (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError):
                self._conn = None
                if attempt == 2:
                    raise
                attempt = 2

    async def create_table(self, schema: str, table: str) -> TableDef | None:
        """The table as ``SHOW CREATE TABLE`` describes it now; None when it is gone or not understood."""
        import pymysql

        try:
            rows = await self._query(f"SHOW CREATE TABLE `{schema.replace('`', '``')}`.`{table.replace('`', '``')}`")
        except pymysql.err.ProgrammingError:   # no such table (dropped since), or a view
            return None
        if not rows or len(rows[0]) < 2:
            return None
        return _definition(rows[0][1], schema, table)

    async def definitions(self, names: list[tuple[str, str]]) -> dict[tuple[str, str], TableDef | None]:
        """Each table's definition now, as :meth:`create_table` gives it (None: gone, or not understood).

        MySQL 8.0+ keeps definitions in its data dictionary and answers ``SHOW CREATE TABLE`` at about 1 ms a
        table (2-3 times MariaDB's): there the columns, primary keys and default character sets of all the
        tables come from three information_schema queries, and each distinct column (its type as the server writes
        it, character set, nullability) is read once, as a column of a CREATE TABLE (:func:`_read_columns`); a
        table with a column not read so is asked with ``SHOW CREATE TABLE``. Elsewhere: ``SHOW CREATE TABLE`` of
        each table.

        Raises:
            pymysql.err.Error, OSError: the server refused a query or the connection was lost.
        """
        if not names:
            return {}
        if not await self._has_dictionary():
            return {name: await self.create_table(*name) for name in names}
        schemas = sorted({schema for schema, _ in names})
        among = "TABLE_SCHEMA IN (" + ", ".join(["%s"] * len(schemas)) + ")"
        columns: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for schema, table, column, type_text, nullable, charset in await self._query(
                "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, CHARACTER_SET_NAME "
                f"FROM information_schema.COLUMNS WHERE {among} ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION",
                schemas):
            spec = type_text + (f" CHARACTER SET {charset}" if charset else "") + (" NOT NULL" if nullable == "NO"
                                                                                   else "")
            columns.setdefault((schema, table), []).append((column, spec))
        keys: dict[tuple[str, str], list[str]] = {}
        for schema, table, column in await self._query(
                "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
                f"WHERE INDEX_NAME = 'PRIMARY' AND {among} ORDER BY TABLE_SCHEMA, TABLE_NAME, SEQ_IN_INDEX", schemas):
            keys.setdefault((schema, table), []).append(column)
        charsets = {(schema, table): charset_name(charset) for schema, table, charset in await self._query(
            "SELECT t.TABLE_SCHEMA, t.TABLE_NAME, c.CHARACTER_SET_NAME FROM information_schema.TABLES t "
            "JOIN information_schema.COLLATION_CHARACTER_SET_APPLICABILITY c ON c.COLLATION_NAME = t.TABLE_COLLATION "
            f"WHERE t.{among}", schemas)}
        read = _read_columns(sorted({spec for name in names for _, spec in columns.get(name, ())}))
        out = {}
        for name in names:
            if name not in columns:
                out[name] = None
            elif all(read[spec] is not None for _, spec in columns[name]):
                out[name] = TableDef(*name, tuple(replace(read[spec], name=column) for column, spec in columns[name]),
                                     tuple(keys.get(name, ())), charsets.get(name))
            else:
                out[name] = await self.create_table(*name)
        return out

    async def _mysql_version(self) -> tuple[int, ...]:
        """The server's version when it is Oracle MySQL (or Percona Server), () on MariaDB; asked once per server."""
        if self._mysql is None:
            version, comment = (await self._query("SELECT VERSION(), @@version_comment"))[0]
            self._mysql = () if "mariadb" in f"{version} {comment}".lower() else version_tuple(str(version))
        return self._mysql

    async def _has_dictionary(self) -> bool:
        """Whether the server is MySQL 8.0 or later (table definitions in a data dictionary)."""
        return await self._mysql_version() >= (8, 0, 0)

    async def tables(self, selected) -> tuple[dict[str, str | None], list[tuple[str, str]]]:
        """(database → default charset, [(schema, table)] of base tables) outside the system schemas,
        for which ``selected(schema, table)`` is true."""
        skip = ", ".join(f"'{s}'" for s in SYSTEM_SCHEMAS)
        dbs = {name: charset_name(cs) for name, cs in await self._query(
            f"SELECT SCHEMA_NAME, DEFAULT_CHARACTER_SET_NAME FROM information_schema.SCHEMATA "
            f"WHERE SCHEMA_NAME NOT IN ({skip})")}
        names = [(s, t) for s, t in await self._query(
            f"SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' "
            f"AND TABLE_SCHEMA NOT IN ({skip}) ORDER BY TABLE_SCHEMA, TABLE_NAME") if selected(s, t)]
        return dbs, names

    async def position(self) -> tuple[str, int]:
        """The primary's current binlog file and position (``SHOW MASTER STATUS``; on MySQL 8.2+, where it is
        deprecated and from 8.4 gone, ``SHOW BINARY LOG STATUS``)."""
        new = await self._mysql_version() >= (8, 2, 0)
        rows = await self._query("SHOW BINARY LOG STATUS" if new else "SHOW MASTER STATUS")
        return str(rows[0][0]), int(rows[0][1])

    async def ddl_tables_since(self, file: str, pos: int, until: tuple[str, int] | None = None,
                               limit: int = SCAN_LIMIT) -> set | None:
        """The tables DDL logged from ``file:pos`` to ``until`` (a (file, pos), excluded; default: the end of the
        binlog) names (``(db, "*")``: a whole database); None when that is not known (an unreadable statement,
        or more than ``limit`` events)."""
        from binlogd.library.schema.changes import tables_named

        files = [str(r[0]) for r in await self._query("SHOW BINARY LOGS")]
        end = position_key(*until) if until is not None else None
        names, seen = set(), 0
        for name in files:
            if position_key(name, 0) < position_key(file, 0):
                continue
            if end is not None and position_key(name, 0) > end:
                break
            start, skip = (pos if name == file else 4), 0
            while True:
                rows = await self._query(f"SHOW BINLOG EVENTS IN %s FROM {int(start)} LIMIT {skip}, 1000", (name,))
                for row in rows:
                    if end is not None and position_key(name, int(row[1])) >= end:
                        return names
                    if str(row[2]).startswith("Query"):
                        db, statement = _split_use(str(row[5] or ""))
                        for change in read_ddl(statement, db):
                            touched = tables_named(change)
                            if touched is None:
                                return None
                            names |= touched
                seen += len(rows)
                if seen > limit:
                    return None
                if len(rows) < 1000:
                    break
                start, skip = int(rows[-1][1]), 1
        return names

    async def stream_facts(self, flavor: str) -> tuple[str, str]:
        """(the current binlog file's name, the server's GTID state): MariaDB ``@@gtid_binlog_state`` and
        ``@@gtid_slave_pos`` (comma-joined), MySQL ``@@gtid_executed``.

        Raises:
            pymysql.err.Error, OSError: the server refused a query or the connection was lost.
        """
        file, _ = await self.position()
        if flavor == "mariadb":
            rows = await self._query("SELECT @@global.gtid_binlog_state, @@global.gtid_slave_pos")
            state = ",".join(str(v) for v in rows[0] if v)
        else:
            state = str((await self._query("SELECT @@global.gtid_executed"))[0][0] or "")
        return file, state.replace("\n", "")

    async def gtid_file(self, flavor: str, gtids: str) -> str | None:
        """The newest binlog file that starts at or before the GTID position ``gtids`` (a stream resuming there
        reads from that file on), by each file's Gtid_list (MariaDB) or Previous_gtids (MySQL) event; None
        when no file does, or ``gtids`` is empty.

        Raises:
            pymysql.err.Error, OSError: the server refused a query or the connection was lost.
        """
        if not gtids:
            return None
        files = [str(r[0]) for r in await self._query("SHOW BINARY LOGS")]
        for name in reversed(files):
            for row in await self._query("SHOW BINLOG EVENTS IN %s LIMIT 4", (name,)):
                kind, info = str(row[2]), str(row[5] or "")
                if kind == "Gtid_list":
                    if _mariadb_at_or_before(info.strip("[] "), gtids):
                        return name
                    break
                if kind == "Previous_gtids":
                    if int((await self._query("SELECT GTID_SUBSET(%s, %s)", (info, gtids)))[0][0]):
                        return name
                    break
        return None

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _mariadb_at_or_before(start: str, gtids: str) -> bool:
    """True when a binlog state ``start`` (``d-s-n,…``) is at or before the GTID list ``gtids`` in every
    domain ``gtids`` names (sequence numbers of a domain only grow)."""
    def by_domain(text: str) -> dict[int, int]:
        out: dict[int, int] = {}
        for part in text.replace(" ", "").split(","):
            if part:
                d, _, n = part.split("-")
                out[int(d)] = max(int(n), out.get(int(d), -1))
        return out

    want = by_domain(gtids)
    return all(n <= want[d] for d, n in by_domain(start).items() if d in want)

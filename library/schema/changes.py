"""The change records :func:`binlogd.library.schema.ddl.parse` returns: what a DDL statement does to tables' columns.

Plain frozen records (:func:`binlogd.protocol.records.record`; no sqlglot types): :mod:`binlogd.library.schema.catalog`
applies them.
"""

from __future__ import annotations

from binlogd.protocol.records import record

from .model import ColumnDef

Name = tuple[str, str]  # (schema, table)


@record
class CreateTable:
    """CREATE TABLE: ``columns`` (charsets only where the statement gives them), or ``like`` another table."""

    name: Name
    columns: tuple[ColumnDef, ...] = ()
    primary_key: tuple[str, ...] = ()
    charset: str | None = None
    like: Name | None = None
    if_not_exists: bool = False


@record
class AddColumn:
    """ADD COLUMN: ``position`` None for last, "" for FIRST, else the column it comes AFTER."""

    column: ColumnDef
    position: str | None = None
    if_not_exists: bool = False


@record
class ChangeColumn:
    """CHANGE old new-definition / MODIFY (old == column.name)."""

    old: str
    column: ColumnDef
    position: str | None = None
    if_exists: bool = False


@record
class DropColumn:
    """DROP COLUMN."""

    name: str
    if_exists: bool = False


@record
class RenameColumn:
    """RENAME COLUMN old TO new."""

    old: str
    new: str


@record
class RenameTo:
    """RENAME TO (within ALTER TABLE): the table's new name."""

    name: Name


@record
class Charset:
    """DEFAULT CHARSET (``convert`` False: new columns only) or CONVERT TO CHARACTER SET (every text column)."""

    charset: str | None
    convert: bool = False


@record
class PrimaryKey:
    """ADD PRIMARY KEY (columns) / DROP PRIMARY KEY (no columns)."""

    columns: tuple[str, ...] = ()


@record
class AlterTable:
    """ALTER TABLE: its ``actions`` (the other change records of this module), in order."""

    name: Name
    actions: tuple


@record
class RenameTables:
    """RENAME TABLE: (old, new) pairs, applied in order."""

    pairs: tuple[tuple[Name, Name], ...]


@record
class DropTables:
    """DROP TABLE."""

    names: tuple[Name, ...]


@record
class CreateDatabase:
    """CREATE DATABASE (or SCHEMA)."""

    name: str
    charset: str | None = None
    if_not_exists: bool = False


@record
class AlterDatabase:
    """ALTER DATABASE: its new default charset."""

    name: str
    charset: str | None


@record
class DropDatabase:
    """DROP DATABASE (or SCHEMA)."""

    name: str


@record
class Unparsed:
    """A DDL statement that could not be read; ``names`` are the tables it mentions (empty: unknown)."""

    names: tuple[Name, ...]
    reason: str


def tables_named(change) -> set[Name] | None:
    """The tables a change record touches; ``(db, "*")`` stands for every table of a database. None for an
    unparsed statement whose tables could not be found (it may touch any table)."""
    if isinstance(change, CreateTable):
        return {change.name}
    if isinstance(change, AlterTable):
        return {change.name} | {a.name for a in change.actions if isinstance(a, RenameTo)}
    if isinstance(change, RenameTables):
        return {name for pair in change.pairs for name in pair}
    if isinstance(change, DropTables):
        return set(change.names)
    if isinstance(change, (CreateDatabase, AlterDatabase, DropDatabase)):
        return {(change.name, "*")}
    return set(change.names) or None

"""The change records :func:`binlogd.schema.ddl.parse` returns: what a DDL statement does to tables' columns.

Plain frozen dataclasses (no sqlglot types): :mod:`binlogd.schema.catalog` applies them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import ColumnDef

Name = tuple[str, str]  # (schema, table)


@dataclass(frozen=True)
class CreateTable:
    """CREATE TABLE: ``columns`` (charsets only where the statement gives them), or ``like`` another table."""

    name: Name
    columns: tuple[ColumnDef, ...] = ()
    primary_key: tuple[str, ...] = ()
    charset: str | None = None
    like: Name | None = None
    if_not_exists: bool = False


@dataclass(frozen=True)
class AddColumn:
    column: ColumnDef
    position: str | None = None   # None: last; "" : FIRST; else AFTER that column
    if_not_exists: bool = False


@dataclass(frozen=True)
class ChangeColumn:
    """CHANGE old new-definition / MODIFY (old == column.name)."""

    old: str
    column: ColumnDef
    position: str | None = None
    if_exists: bool = False


@dataclass(frozen=True)
class DropColumn:
    name: str
    if_exists: bool = False


@dataclass(frozen=True)
class RenameColumn:
    old: str
    new: str


@dataclass(frozen=True)
class RenameTo:
    name: Name


@dataclass(frozen=True)
class Charset:
    """DEFAULT CHARSET (``convert`` False: new columns only) or CONVERT TO CHARACTER SET (every text column)."""

    charset: str | None
    convert: bool = False


@dataclass(frozen=True)
class PrimaryKey:
    """ADD PRIMARY KEY (columns) / DROP PRIMARY KEY (no columns)."""

    columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class AlterTable:
    name: Name
    actions: tuple


@dataclass(frozen=True)
class RenameTables:
    pairs: tuple[tuple[Name, Name], ...]


@dataclass(frozen=True)
class DropTables:
    names: tuple[Name, ...]


@dataclass(frozen=True)
class CreateDatabase:
    name: str
    charset: str | None = None
    if_not_exists: bool = False


@dataclass(frozen=True)
class AlterDatabase:
    name: str
    charset: str | None


@dataclass(frozen=True)
class DropDatabase:
    name: str


@dataclass(frozen=True)
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

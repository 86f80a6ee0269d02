"""The tables and databases at one point of a binlog stream, moved forward by parsed DDL.

:meth:`Catalog.apply` takes one change record from :mod:`binlogd.library.schema.ddl` and returns what it
did to each table: a new :class:`TableDef`, ``UNKNOWN`` (a statement touched it in a way that
could not be followed) or ``DROPPED``.
"""

from __future__ import annotations

from binlogd.protocol.records import replace

from .model import BLOB_PACK, CHAR_TYPES, ColumnDef, TableDef, mbmaxlen, sized_text

TYPE_CHECKING = False  # typing is not imported at run time
if TYPE_CHECKING:  # the change records come with the DDL parser, imported at the first DDL statement
    from . import changes as D

Name = tuple[str, str]
UNKNOWN = "unknown"
DROPPED = "dropped"
_BLOB_BYTES = {1: 255, 2: 65535, 3: 16777215, 4: (1 << 32) - 1}


class CatalogError(Exception):
    """A change that does not fit the definition it applies to (the definition is stale or incomplete)."""


class Catalog:
    """Definitions of tables (``UNKNOWN`` when a DDL could not be followed) and databases' default charsets.

    Fields:
        tables: (schema, table) → TableDef or UNKNOWN.
        databases: schema → default character set (None when unknown).
    """

    def __init__(self) -> None:
        self.tables: dict[Name, TableDef | str] = {}
        self.databases: dict[str, str | None] = {}

    def set(self, name: Name, state: TableDef | str) -> None:
        """Record a table's state (a definition, UNKNOWN or DROPPED)."""
        if state == DROPPED:
            self.tables.pop(name, None)
        else:
            self.tables[name] = state

    def apply(self, change, server_charset: str | None = None) -> dict[Name, TableDef | str]:
        """Apply one change record.

        Args:
            change: a record from :func:`binlogd.library.schema.ddl.parse`.
            server_charset: the statement's character_set_server (CREATE DATABASE's default).
        Returns:
            The tables whose state changed → their new state (TableDef, UNKNOWN or DROPPED).
        """
        from . import changes as D

        out: dict[Name, TableDef | str] = {}
        if isinstance(change, D.CreateDatabase):
            if not (change.if_not_exists and change.name in self.databases):
                self.databases[change.name] = change.charset or server_charset
        elif isinstance(change, D.AlterDatabase):
            if change.charset:
                self.databases[change.name] = change.charset
        elif isinstance(change, D.DropDatabase):
            self.databases.pop(change.name, None)
            out = {name: DROPPED for name in self.tables if name[0] == change.name}
        elif isinstance(change, D.DropTables):
            out = dict.fromkeys(change.names, DROPPED)
        elif isinstance(change, D.RenameTables):
            for old, new in change.pairs:  # in order: RENAME TABLE a TO tmp, b TO a, tmp TO b swaps
                state = out.get(old, self.tables.get(old, UNKNOWN))
                if isinstance(state, TableDef):
                    state = replace(state, schema=new[0], table=new[1])
                out[old], out[new] = DROPPED, UNKNOWN if state == DROPPED else state
        elif isinstance(change, D.CreateTable):
            if not (change.if_not_exists and change.name in self.tables):
                out = {change.name: self._create(change)}
        elif isinstance(change, D.AlterTable):
            out = self._alter(change)
        elif isinstance(change, D.Unparsed):
            out = dict.fromkeys(change.names or list(self.tables), UNKNOWN)
        for name, state in out.items():
            self.set(name, state)
        return out

    # ------------------------------------------------------------ CREATE

    def _create(self, change: D.CreateTable) -> TableDef | str:
        schema, table = change.name
        if change.like is not None:
            source = self.tables.get(change.like)
            return replace(source, schema=schema, table=table) if isinstance(source, TableDef) else UNKNOWN
        charset = change.charset or self.databases.get(schema)
        columns = tuple(_resolve(c, charset) for c in change.columns)
        return TableDef(schema, table, columns, change.primary_key, charset)

    # ------------------------------------------------------------ ALTER

    def _alter(self, change: D.AlterTable) -> dict[Name, TableDef | str]:
        from . import changes as D

        name = change.name
        current = self.tables.get(name, UNKNOWN)
        renames = [a.name for a in change.actions if isinstance(a, D.RenameTo)]
        target = renames[-1] if renames else name
        if target[0] == "":
            target = (name[0], target[1])
        out: dict[Name, TableDef | str] = {name: DROPPED} if target != name else {}
        if not isinstance(current, TableDef):
            out[target] = UNKNOWN
            return out
        try:
            table = current
            for action in change.actions:
                table = _alter_action(table, action)
            out[target] = replace(table, schema=target[0], table=target[1])
        except CatalogError:
            out[target] = UNKNOWN
        return out


def _resolve(col: ColumnDef, charset: str | None) -> ColumnDef:
    """A column as the server stores it: its charset filled from the table's, TEXT(n) sized."""
    if col.type in CHAR_TYPES and col.charset is None and charset is not None:
        col = replace(col, charset=charset)
    return sized_text(col, col.charset)


def _place(columns: list[ColumnDef], col: ColumnDef, position: str | None) -> None:
    if position is None:
        columns.append(col)
    elif position == "":
        columns.insert(0, col)
    else:
        low = position.lower()
        for i, c in enumerate(columns):
            if c.name.lower() == low:
                columns.insert(i + 1, col)
                return
        raise CatalogError(f"AFTER {position}: no such column")


def _converted(col: ColumnDef, charset: str) -> ColumnDef:
    """CONVERT TO CHARACTER SET: text columns take the new charset; TEXT types grow to keep their characters."""
    if col.type not in CHAR_TYPES or col.charset == "binary":
        return col
    if col.type in BLOB_PACK and col.charset is not None:
        chars = _BLOB_BYTES[BLOB_PACK[col.type]] // mbmaxlen(col.charset)
        size = chars * mbmaxlen(charset)
        pack = next(p for p in (1, 2, 3, 4) if size <= _BLOB_BYTES[p])
        kind = {1: "tinytext", 2: "text", 3: "mediumtext", 4: "longtext"}[max(pack, BLOB_PACK[col.type])]
        return replace(col, type=kind, charset=charset)
    return replace(col, charset=charset)


def _alter_action(table: TableDef, action) -> TableDef:
    from . import changes as D

    columns = list(table.columns)
    pk = list(table.primary_key)
    if isinstance(action, D.AddColumn):
        if table.column_index(action.column.name) is not None:
            if action.if_not_exists:
                return table
            raise CatalogError(f"ADD COLUMN {action.column.name}: it exists")
        _place(columns, _resolve(action.column, table.charset), action.position)
    elif isinstance(action, (D.ChangeColumn, D.DropColumn, D.RenameColumn)):
        old = action.name if isinstance(action, D.DropColumn) else action.old
        idx = table.column_index(old)
        if idx is None:
            if getattr(action, "if_exists", False):
                return table
            raise CatalogError(f"no column {old}")
        col = columns.pop(idx)
        if isinstance(action, D.DropColumn):
            pk = [p for p in pk if p.lower() != old.lower()]
        else:
            new = (replace(col, name=action.new) if isinstance(action, D.RenameColumn)
                   else _resolve(action.column, table.charset))
            if new.name.lower() in {p.lower() for p in pk} - {old.lower()} or (
                    new.name.lower() != old.lower() and table.column_index(new.name) is not None):
                raise CatalogError(f"column {new.name} exists")
            if old.lower() in {p.lower() for p in pk}:
                new = replace(new, nullable=False)
            pk = [new.name if p.lower() == old.lower() else p for p in pk]
            position = getattr(action, "position", None)
            if position is None:
                columns.insert(idx, new)
            else:
                _place(columns, new, position)
    elif isinstance(action, D.Charset):
        if action.convert and action.charset:
            columns = [_converted(c, action.charset) for c in columns]
        return replace(table, columns=tuple(columns), charset=action.charset or table.charset)
    elif isinstance(action, D.PrimaryKey):
        pk = list(action.columns)
        low = {p.lower() for p in pk}
        columns = [replace(c, nullable=False) if c.name.lower() in low else c for c in columns]
    elif isinstance(action, D.RenameTo):
        return table
    return replace(table, columns=tuple(columns), primary_key=tuple(pk))

"""DDL statements from QUERY events as plain change records, parsed with sqlglot's MySQL dialect.

:func:`parse` reads a statement (:func:`binlogd.library.schema.readddl.read_ddl` calls it when the fast parser
cannot); nothing outside this module sees a sqlglot type. It returns
the changes a statement makes to tables' columns (``CreateTable``, ``AlterTable``, ``RenameTables``,
``DropTables``, ``CreateDatabase``, ``AlterDatabase``, ``DropDatabase``), nothing for statements that
change no columns (DML, indexes, comments, engine, partitions, views, users ...), and ``Unparsed``
(naming the tables it mentions, when they can be found) for a DDL statement it cannot read; the
records are in :mod:`binlogd.library.schema.changes`.

Before parsing, executable comments are expanded as the server that logged the statement did
(:mod:`binlogd.library.schema.sqltext`). sqlglot's MySQL dialect lacks a few MariaDB/MySQL forms
(several ALTER clauses, RENAME TABLE, ALTER DATABASE, some type names); those are read clause by
clause with its tokenizer.
"""

from __future__ import annotations

import logging

from sqlglot import exp
from sqlglot.dialects.mysql import MySQL
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType as TT

from binlogd.protocol.records import replace

from .changes import (
    AddColumn,
    AlterDatabase,
    AlterTable,
    ChangeColumn,
    Charset,
    CreateDatabase,
    CreateTable,
    DropColumn,
    DropDatabase,
    DropTables,
    PrimaryKey,
    RenameColumn,
    RenameTables,
    RenameTo,
    Unparsed,
)
from .model import BLOB_PACK, ColumnDef, charset_name
from .sqltext import ddl_text


class _Dialect(MySQL):
    """MySQL's dialect plus the type names MariaDB and MySQL accept that sqlglot does not map."""

    class Tokenizer(MySQL.Tokenizer):
        COMMANDS = MySQL.Tokenizer.COMMANDS - {TT.RENAME}  # RENAME TABLE is read here, not kept as one string
        KEYWORDS = {
            **MySQL.Tokenizer.KEYWORDS,
            **dict.fromkeys(("POINT", "LINESTRING", "POLYGON", "MULTIPOINT", "MULTILINESTRING", "MULTIPOLYGON",
                             "GEOMETRYCOLLECTION", "GEOMCOLLECTION"), TT.GEOMETRY),
            "INET6": TT.IPV6, "INET4": TT.IPV4, "MIDDLEINT": TT.MEDIUMINT, "INT1": TT.TINYINT, "INT2": TT.SMALLINT,
            "INT3": TT.MEDIUMINT, "INT4": TT.INT, "INT8": TT.BIGINT, "LONG": TT.MEDIUMTEXT,
            "LONG VARCHAR": TT.MEDIUMTEXT, "LONG VARBINARY": TT.MEDIUMBLOB, "NATIONAL VARCHAR": TT.NVARCHAR,
            "NATIONAL CHAR": TT.NCHAR, "REAL": TT.DOUBLE,
        }


_DIALECT = _Dialect()
Name = tuple[str, str]  # (schema, table)


class _Unsupported(Exception):
    """A statement (or clause) this module cannot turn into changes."""

# sqlglot logs a warning for every statement it falls back to reading as an opaque command; here that is
# an expected outcome (handled clause by clause, or reported once as unparsed DDL), not news for the log.
logging.getLogger("sqlglot").setLevel(logging.ERROR)


# ------------------------------------------------------------------ entry point

def parse(sql: str, default_db: str = "", sql_mode: int = 0, server_version: str = "") -> list:
    """The changes a QUERY event's statement makes to table columns.

    Args:
        sql: the statement text.
        default_db: the QUERY event's default database, for unqualified names.
        sql_mode: the QUERY event's sql_mode (with ANSI_QUOTES, "..." quotes identifiers).
        server_version: the FDE's server version (which executable comments run).
    Returns:
        A list of change records; empty for statements that change no columns; ``[Unparsed]`` for a
        DDL statement that could not be read. Never raises for any input text.
    """
    text = ddl_text(sql, sql_mode, server_version)
    return [] if text is None else parse_text(text, default_db)


def parse_text(text: str, default_db: str = "") -> list:
    """:func:`parse` of a statement's :func:`~.sqltext.ddl_text` (its text as the server ran it)."""
    try:
        tokens = _DIALECT.tokenize(text)
    except SqlglotError as exc:
        return [Unparsed((), f"cannot tokenize: {_first_line(exc)}")]
    try:
        return _statement(text, tokens, default_db)
    except (_Unsupported, SqlglotError, ValueError, TypeError, AttributeError, IndexError) as exc:
        return [Unparsed(_mentioned_tables(tokens, default_db), _first_line(exc))]


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def _words(tokens, start: int = 0, count: int = 3) -> list[str]:
    """The first word of each of ``count`` tokens from ``start``, upper-cased (PARTITION BY is one token)."""
    return [(t.text.split() or [""])[0].upper() for t in tokens[start:start + count]]


def _statement(text: str, tokens, db: str) -> list:
    words = _words(tokens, 0, 4)
    head = words[0]
    if head == "ALTER":
        if words[1] in ("ONLINE", "IGNORE"):
            text = "ALTER " + text[tokens[2].start:]
            return _statement(text, _DIALECT.tokenize(text), db)
        if words[1] == "TABLE":
            return [_alter_table(text, tokens, db)]
        if words[1] in ("DATABASE", "SCHEMA"):
            return [_alter_database(tokens, db)]
        return []
    if head == "RENAME":
        return [_rename_tables(tokens, db)] if words[1] == "TABLE" else []
    if head == "TRUNCATE":
        return []
    kinds = [w for w in words[1:4] if w in ("TABLE", "DATABASE", "SCHEMA")]
    if not kinds:
        return []  # CREATE/DROP INDEX, VIEW, TRIGGER, PROCEDURE, USER, SEQUENCE ...: no table columns
    if "TEMPORARY" in words[1:3]:
        return []  # temporary tables are not in the row events of other sessions' transactions
    tree = _DIALECT.parse(text)[0]
    if head == "DROP":
        if not isinstance(tree, exp.Drop):
            raise _Unsupported(f"DROP parsed as {type(tree).__name__}")
        if kinds[0] == "TABLE":
            return [DropTables(tuple(_table_name(t, db) for t in tree.args["tables"]))]
        return [DropDatabase(_schema_name(tree.args["tables"][0]))]
    if not isinstance(tree, exp.Create):
        raise _Unsupported(f"CREATE parsed as {type(tree).__name__}")
    if kinds[0] == "TABLE":
        return [_create_table(tree, db)]
    return [CreateDatabase(_schema_name(tree.this), _charset_of_properties(tree.args.get("properties")),
                           bool(tree.args.get("exists")))]


# ------------------------------------------------------------------ names


def _schema_name(node: exp.Table) -> str:
    """A database's name in CREATE/DROP DATABASE (sqlglot puts SCHEMA's in ``db``)."""
    return node.name or node.args["db"].name


def _table_name(node: exp.Expression, db: str) -> Name:
    if isinstance(node, exp.Schema):
        node = node.this
    if not isinstance(node, exp.Table) or not node.name:
        raise _Unsupported(f"expected a table name, got {node.sql(dialect=_DIALECT)!r}")
    return (node.args["db"].name if node.args.get("db") else db), node.name


def _token_names(tokens, i: int, db: str) -> tuple[Name, int]:
    """A possibly qualified name starting at ``tokens[i]``; (name, index after it)."""
    first = tokens[i].text
    if i + 2 < len(tokens) and tokens[i + 1].token_type == TT.DOT:
        return (first, tokens[i + 2].text), i + 3
    return (db, first), i + 1


def _mentioned_tables(tokens, db: str) -> tuple[Name, ...]:
    """Tables named after TABLE, LIKE and TO (and after commas in RENAME and DROP), for statements that
    cannot be parsed."""
    names, i, lists = [], 0, _words(tokens, 0, 1) in (["RENAME"], ["DROP"])
    while i < len(tokens) - 1:
        word = tokens[i].text.upper()
        i += 1
        if word in ("TABLE", "LIKE", "TO") or (word == "," and lists):
            while i < len(tokens) - 1 and tokens[i].text.upper() in ("IF", "NOT", "EXISTS"):
                i += 1
            if tokens[i].token_type in (TT.VAR, TT.IDENTIFIER):
                name, i = _token_names(tokens, i, db)
                names.append(name)
    return tuple(dict.fromkeys(names))


# ------------------------------------------------------------------ CREATE TABLE


def _create_table(tree: exp.Create, db: str) -> CreateTable:
    exists = bool(tree.args.get("exists"))
    props = tree.args.get("properties")
    like = props.find(exp.LikeProperty) if props else None
    if like is not None:
        return CreateTable(_table_name(tree.this, db), like=_table_name(like.this, db), if_not_exists=exists)
    if not isinstance(tree.this, exp.Schema):
        raise _Unsupported("CREATE TABLE without a column list (AS SELECT in statement format)")
    if tree.args.get("expression") is not None:
        raise _Unsupported("CREATE TABLE ... SELECT in statement format: the selected columns are not in the text")
    columns, pk = [], []
    for item in tree.this.expressions:
        if isinstance(item, exp.ColumnDef):
            col, is_pk = _column(item)
            columns.append(col)
            if is_pk:
                pk.append(col.name)
        elif isinstance(item, exp.PrimaryKey) or (isinstance(item, exp.Constraint) and item.find(exp.PrimaryKey)):
            pk = _key_columns(item.find(exp.PrimaryKey) if isinstance(item, exp.Constraint) else item)
    columns = _not_null(columns, pk)
    return CreateTable(_table_name(tree.this, db), tuple(columns), tuple(pk), _charset_of_properties(props),
                       if_not_exists=exists)


def _not_null(columns: list[ColumnDef], pk) -> list[ColumnDef]:
    low = {p.lower() for p in pk}
    return [replace(c, nullable=False) if c.name.lower() in low else c for c in columns]


def _key_columns(node) -> list[str]:
    out = []
    for e in node.expressions:
        ident = e if isinstance(e, exp.Identifier) else e.find(exp.Identifier)
        if ident is not None:
            out.append(ident.name)
    return out


def _charset_of_properties(props) -> str | None:
    if props is None:
        return None
    charset = props.find(exp.CharacterSetProperty)
    collate = props.find(exp.CollateProperty)
    return charset_name(charset.this.name) if charset else charset_name(collate.this.name) if collate else None


# ------------------------------------------------------------------ column types

_INTS = {"TINYINT": "tinyint", "SMALLINT": "smallint", "MEDIUMINT": "mediumint", "INT": "int", "BIGINT": "bigint"}
_SIMPLE = {"YEAR": "year", "DATE": "date", "JSON": "json", "GEOMETRY": "geometry", "IPV6": "inet6",
           "IPV4": "inet4", "UUID": "uuid", "TIME": "time", "DATETIME": "datetime", "TIMESTAMP": "timestamp",
           "TIMESTAMPTZ": "timestamp", "TIMESTAMPLTZ": "timestamp", "CHAR": "char", "NCHAR": "char",
           "VARCHAR": "varchar", "NVARCHAR": "varchar", "BINARY": "binary", "VARBINARY": "varbinary", "BIT": "bit",
           "ENUM": "enum", "SET": "set", "VECTOR": "vector", **{k.upper(): k for k in BLOB_PACK}}


def _params(dt: exp.DataType) -> list[int]:
    return [int(p.this.this if isinstance(p, exp.DataTypeParam) else p.this) for p in dt.expressions]


def _column(node: exp.ColumnDef) -> tuple[ColumnDef, bool]:
    """A ColumnDef and whether the column is declared PRIMARY KEY."""
    dt = node.args.get("kind")
    if not isinstance(dt, exp.DataType):
        raise _Unsupported(f"column {node.name} has no type")
    name = dt.this.value
    unsigned = name.startswith("U") and name[1:] in (*_INTS, "DECIMAL", "DOUBLE", "FLOAT")
    base = name[1:] if unsigned else name
    fields: dict = {"unsigned": unsigned}
    charset = collate = None
    nullable, pk = True, False
    for con in node.args.get("constraints") or ():
        kind = con.args.get("kind")
        if isinstance(kind, exp.CharacterSetColumnConstraint):
            charset = charset_name(kind.this.name)
        elif isinstance(kind, exp.CollateColumnConstraint):
            collate = charset_name(kind.this.name)
        elif isinstance(kind, exp.DefaultColumnConstraint) and isinstance(kind.this, exp.Collate):
            # `DEFAULT 'x' COLLATE c`: the server takes c as the column's collation, sqlglot as the value's
            collate = charset_name(kind.this.expression.name)
        elif isinstance(kind, exp.NotNullColumnConstraint):
            nullable = bool(kind.args.get("allow_null"))
        elif isinstance(kind, exp.PrimaryKeyColumnConstraint):
            pk, nullable = True, False
        elif isinstance(kind, exp.ZeroFillColumnConstraint):
            fields["unsigned"] = True
    if base in ("ENUM", "SET"):
        fields["values"] = tuple(str(p.this) for p in dt.expressions)
        params = []
    else:
        params = _params(dt)
    if base in _INTS:
        kind = _INTS[base]
    elif base == "BOOLEAN":
        kind = "tinyint"
    elif base == "SERIAL":
        kind, fields["unsigned"], nullable = "bigint", True, False
    elif base == "DECIMAL":
        kind = "decimal"
        fields["precision"] = params[0] if params else 10
        fields["scale"] = params[1] if len(params) > 1 else 0
    elif base == "FLOAT":
        kind = "double" if (len(params) == 1 and params[0] > 24) else "float"
    elif base == "DOUBLE":
        kind = "double"
    elif base in ("TEXT", "BLOB") and params:
        kind = base.lower()
        fields["length"] = params[0]
    elif base in _SIMPLE:
        kind = _SIMPLE[base]
        if kind in ("time", "datetime", "timestamp"):
            fields["precision"] = params[0] if params else 0
        elif kind in ("char", "varchar", "binary", "varbinary", "bit"):
            fields["length"] = params[0] if params else (None if kind in ("varchar", "varbinary") else 1)
            if fields["length"] is None:
                raise _Unsupported(f"{kind} column {node.name} without a length")
        elif kind == "vector":
            fields["dimensions"] = params[0] if params else None
    else:
        raise _Unsupported(f"column type {name} of {node.name}")
    if base in ("NCHAR", "NVARCHAR"):
        charset = "utf8mb3"
    if kind in ("binary", "varbinary") or kind.endswith("blob"):
        charset = "binary"
    if kind in ("char", "varchar") and charset == "binary":
        kind = "binary" if kind == "char" else "varbinary"
    col = ColumnDef(node.name, kind, nullable=nullable, charset=charset or collate, **fields)
    return col, pk


# ------------------------------------------------------------------ ALTER TABLE


def _split_clauses(text: str, tokens, start: int) -> list[str]:
    """The statement's text from ``tokens[start]`` on, split at commas outside parentheses."""
    clauses, depth, begin = [], 0, start
    for i in range(start, len(tokens)):
        tt = tokens[i].token_type
        depth += (tt == TT.L_PAREN) - (tt == TT.R_PAREN)
        if tt == TT.COMMA and depth == 0:
            clauses.append(text[tokens[begin].start:tokens[i - 1].end + 1])
            begin = i + 1
    if begin < len(tokens):
        clauses.append(text[tokens[begin].start:tokens[-1].end + 1])
    return clauses


# First words of ALTER TABLE clauses that leave the columns as they are.
_NO_COLUMN_CHANGE = frozenset({
    "PARTITION", "COALESCE", "REORGANIZE", "EXCHANGE", "ANALYZE", "CHECK", "OPTIMIZE", "REBUILD", "REPAIR",
    "REMOVE", "DISCARD", "IMPORT", "ALGORITHM", "LOCK", "FORCE", "ENGINE", "COMMENT", "ENABLE", "DISABLE",
    "AUTO_INCREMENT", "ROW_FORMAT", "ORDER", "KEY_BLOCK_SIZE", "STATS_PERSISTENT", "STATS_AUTO_RECALC",
    "STATS_SAMPLE_PAGES", "PACK_KEYS", "CHECKSUM", "DELAY_KEY_WRITE", "MAX_ROWS", "MIN_ROWS", "AVG_ROW_LENGTH",
    "PAGE_CHECKSUM", "PAGE_COMPRESSED", "PAGE_COMPRESSION_LEVEL", "TRANSACTIONAL", "ENCRYPTED", "ENCRYPTION_KEY_ID",
    "COMPRESSION", "INSERT_METHOD", "UNION", "TABLESPACE", "DATA", "INDEX", "SECONDARY_ENGINE", "WAIT", "NOWAIT",
    "IETF_QUOTES", "SEQUENCE", "WITH", "WITHOUT", "VALIDATION", "TRUNCATE", "UPGRADE"})
_INDEX_WORDS = frozenset({"INDEX", "KEY", "UNIQUE", "FULLTEXT", "SPATIAL", "CONSTRAINT", "FOREIGN", "CHECK",
                          "PARTITION", "VECTOR"})


def _alter_table(text: str, tokens, db: str) -> AlterTable:
    at = 4 if _words(tokens, 2, 2) == ["IF", "EXISTS"] else 2
    name, i = _token_names(tokens, at, db)
    actions = []
    for clause in _split_clauses(text, tokens, i) if i < len(tokens) else ():
        actions.extend(_alter_clause(clause, db))
    return AlterTable(name, tuple(actions))


def _alter_clause(clause: str, db: str) -> list:
    tokens = _DIALECT.tokenize(clause)
    words = _words(tokens, 0, 5)
    first = words[0]
    if first == "DROP" and words[1:3] == ["PRIMARY", "KEY"]:
        return [PrimaryKey(())]
    if first in _NO_COLUMN_CHANGE or (first in ("ADD", "DROP") and words[1:2] and words[1] in _INDEX_WORDS
                                      and "PRIMARY" not in words):
        return []
    if first == "RENAME" and len(tokens) > 1 and words[1] in ("INDEX", "KEY"):
        return []
    if first == "RENAME" and words[1] != "COLUMN":
        at = 2 if words[1] in ("TO", "AS") else 1
        return [RenameTo(_token_names(tokens, at, db)[0])]
    if first == "CONVERT":
        return [Charset(_charset_after(tokens, 2), convert=True)]
    if first in ("DEFAULT", "CHARACTER", "CHARSET", "COLLATE"):
        return [Charset(_charset_after(tokens, 0))]
    if first == "ALTER":
        return []  # ALTER [COLUMN] c SET DEFAULT / DROP DEFAULT / [NOT] INVISIBLE, ALTER INDEX
    if first == "ADD" and (words[1:2] == ["("] or words[1:3] == ["COLUMN", "("]):
        inner = clause[clause.index("("):]
        tree = _DIALECT.parse(f"CREATE TABLE _t {inner}")[0]
        return [AddColumn(_column(c)[0]) for c in tree.this.expressions if isinstance(c, exp.ColumnDef)]
    tree = _DIALECT.parse(f"ALTER TABLE _t {clause}")[0]
    if not isinstance(tree, exp.Alter):
        raise _Unsupported(f"ALTER TABLE clause not understood: {clause[:80]!r}")
    out = []
    for action in tree.args.get("actions") or ():
        out.append(_alter_action(action))
    return [a for a in out if a is not None]


def _charset_after(tokens, start: int) -> str | None:
    """The character set named by ``[DEFAULT] CHARACTER SET [=] x [COLLATE [=] y]`` from ``tokens[start]``."""
    words = [t.text for t in tokens[start:] if t.token_type != TT.EQ]
    upper = [w.upper() for w in words]
    for key in ("CHARSET", "SET"):
        if key in upper and upper.index(key) + 1 < len(words):
            return charset_name(words[upper.index(key) + 1])
    if "COLLATE" in upper and upper.index("COLLATE") + 1 < len(words):
        return charset_name(words[upper.index("COLLATE") + 1])
    raise _Unsupported("character set clause without a character set")


def _position(col: exp.ColumnDef) -> str | None:
    pos = col.args.get("position")
    if pos is None:
        return None
    if str(pos.args.get("position")).upper() == "FIRST":
        return ""
    return pos.this.name


def _alter_action(action):
    if isinstance(action, exp.ColumnDef):
        col, _ = _column(action)
        return AddColumn(col, _position(action), bool(action.args.get("exists")))
    if isinstance(action, exp.ModifyColumn):
        cdef = action.this
        col, _ = _column(cdef)
        old = action.args.get("rename_from")
        return ChangeColumn(old.name if old is not None else col.name, col, _position(cdef))
    if isinstance(action, exp.RenameColumn):
        return RenameColumn(action.this.name, action.args["to"].name)
    if isinstance(action, exp.Drop) and str(action.args.get("kind")).upper() == "COLUMN":
        names = [t.name for t in action.args.get("tables") or ()]
        if len(names) != 1:
            raise _Unsupported("DROP COLUMN of several columns")
        return DropColumn(names[0], bool(action.args.get("exists")))
    if isinstance(action, exp.AddConstraint):
        pk = action.find(exp.PrimaryKey)
        return PrimaryKey(tuple(_key_columns(pk))) if pk is not None else None
    if isinstance(action, exp.DropPrimaryKey):
        return PrimaryKey(())
    if isinstance(action, (exp.AlterColumn, exp.RenameIndex, exp.ForceProperty)) or (
            isinstance(action, exp.Drop) and str(action.args.get("kind")).upper() != "COLUMN"):
        return None
    raise _Unsupported(f"ALTER TABLE action {type(action).__name__}")


# ------------------------------------------------------------------ RENAME TABLE, ALTER DATABASE


def _rename_tables(tokens, db: str) -> RenameTables:
    pairs, i = [], 2
    while i < len(tokens):
        old, i = _token_names(tokens, i, db)
        if i >= len(tokens) or tokens[i].text.upper() != "TO":
            raise _Unsupported("RENAME TABLE: expected TO")
        new, i = _token_names(tokens, i + 1, db)
        pairs.append((old, new))
        if i < len(tokens):
            if tokens[i].token_type != TT.COMMA:
                if tokens[i].text.upper() in ("WAIT", "NOWAIT"):
                    break
                raise _Unsupported(f"RENAME TABLE: unexpected {tokens[i].text!r}")
            i += 1
    return RenameTables(tuple(pairs))


def _alter_database(tokens, db: str) -> AlterDatabase:
    i = 2
    if i < len(tokens) and tokens[i].token_type in (TT.VAR, TT.IDENTIFIER) and tokens[i].text.upper() not in (
            "DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "COMMENT", "UPGRADE", "READ", "ENCRYPTION"):
        db, i = tokens[i].text, i + 1
    upper = _words(tokens, i, 4)
    if not any(w in ("CHARACTER", "CHARSET", "COLLATE") for w in upper):
        return AlterDatabase(db, None)
    return AlterDatabase(db, _charset_after(tokens, i))

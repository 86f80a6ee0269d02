"""A fast path for the two DDL statements nearly every stream starts with, read without sqlglot.

Importing sqlglot costs 70-100 ms; a CDC start whose backlog holds nothing but ``CREATE DATABASE d`` and a
plain ``CREATE TABLE`` should not pay it. :func:`parse` reads exactly these forms by hand:

- ``CREATE DATABASE|SCHEMA [IF NOT EXISTS] name [[DEFAULT] CHARACTER SET|CHARSET [=] x] [[DEFAULT] COLLATE
  [=] y]``;
- ``CREATE TABLE [IF NOT EXISTS] [db.]name (...) [options]`` with column definitions of the usual types and
  attributes, ``[CONSTRAINT [c]] PRIMARY KEY (...)``, ``KEY|INDEX|UNIQUE|FULLTEXT`` and plain ``FOREIGN
  KEY ... REFERENCES`` clauses, and the ENGINE, AUTO_INCREMENT, charset, collation, COMMENT and ROW_FORMAT
  table options,

and gives exactly the change records :func:`binlogd.library.schema.ddl.parse` gives for them (the reference twin;
tests/unit/test_schema_fastddl.py compares the two on every such statement of the corpus and on generated
ones). It reads the text :func:`binlogd.library.schema.sqltext.ddl_text` made, as ``ddl.parse`` does: comments are
gone, executable ones opened as the logging server ran them, ANSI_QUOTES identifiers backquoted. Anything
else, or anything it is not sure of, gives None, and :func:`~binlogd.library.schema.readddl.read_ddl` falls back to
sqlglot: any word or character it does not know, unquoted identifiers that are keywords to sqlglot, double quotes,
escapes other than ``\'``, ``\"`` and ``\\`` in ENUM/SET values, generated columns, CHECK (but for a column's
``CHECK (json_valid(column))``, which MariaDB shows for a JSON column), partitions,
LIKE, SELECT, index options, a DEFAULT that is not a plain literal or CURRENT_TIMESTAMP, a COLLATE right
after a DEFAULT (which sqlglot parses as part of the value; ddl.parse takes it as the column's) ...
"""

from __future__ import annotations

import re

from binlogd.protocol.records import replace

from .changes import CreateDatabase, CreateTable
from .model import ColumnDef, charset_name

# Unquoted words that are never taken as identifiers here: sqlglot's MySQL keywords, the words its parser
# reads as constraints or properties (test_schema_fastddl checks this list still holds them all), and this
# module's own.
_RESERVED = frozenset("""
ALGORITHM ALL ALLOWED_VALUES ALTER ANALYZE AND ANTI ANY APPLY ARRAY AS ASC ASCII ASOF AUTO AUTOINCREMENT
AUTO_INCREMENT BACKUP BEGIN BETWEEN BIGDECIMAL BIGINT BIGNUM BIGNUMERIC BINARY BIT BLOB BLOCKCOMPRESSION BOOL
BOOLEAN BPCHAR BUCKET BY BYTE BYTEA CACHE CALL CALLED CASE CASESPECIFIC CHAR CHARACTER CHARSET CHECK CHECKSUM
CLOB CLUSTER CLUSTERED COLLATE COLUMN COMMENT COMMIT COMPRESS CONNECT CONNECT_BY_ROOT CONSTRAINT CONTAINS COPY
CREATE CROSS CUBE CURRENT_CATALOG CURRENT_DATE CURRENT_SCHEMA CURRENT_TIME CURRENT_TIMESTAMP CURRENT_USER
DATABASE DATABLOCKSIZE DATA_DELETION DATE DATEMULTIRANGE DATERANGE DATETIME DEC DECFLOAT DECIMAL DECIMAL128
DECIMAL256 DECIMAL32 DECIMAL64 DEFAULT DEFINER DELETE DESC DESCRIBE DETERMINISTIC DISTINCT DISTINCTROW DISTKEY
DISTRIBUTE DISTRIBUTED DISTSTYLE DIV DOUBLE DROP DUPLICATE DYNAMIC ELSE EMPTY ENCODE END ENGINE ENUM ENVIRONMENT
EPHEMERAL ESCAPE EXCEPT EXCLUDE EXECUTE EXISTS EXPLAIN EXTERNAL FALLBACK FALSE FETCH FILE FILTER FIRST FIXED
FLOAT FLOAT4 FLOAT8 FOR FORCE FOREIGN FORMAT FREESPACE FROM FULL FULLTEXT FUNCTION GENERATED GEOGRAPHY
GEOMCOLLECTION GEOMETRY GEOMETRYCOLLECTION GLOB GLOBAL GRANT GROUP GROUPING HANDLER HAVING HEAP HUGEINT ICEBERG
IDENTITY IF IGNORE ILIKE IMMUTABLE IN INDEX INET INET4 INET6 INHERITS INLINE INNER INPUT INSERT INT INT1 INT128
INT16 INT2 INT256 INT3 INT32 INT4 INT4MULTIRANGE INT4RANGE INT64 INT8 INT8MULTIRANGE INT8RANGE INTEGER INTERSECT
INTERVAL INTO INVISIBLE IS ISNULL JOIN JOURNAL JSON JSONB KEEP KEY KILL LANGUAGE LATERAL LAYOUT LEFT LIFETIME
LIKE LIMIT LINESTRING LIST LOAD LOCALTIME LOCALTIMESTAMP LOCATION LOCK LOCKING LOG LONG LONGBLOB LONGTEXT
LONGVARCHAR MAP MATERIALIZED MEDIUMBLOB MEDIUMINT MEDIUMTEXT MEMBER MERGE MERGEBLOCKRATIO MIDDLEINT MOD MODIFIES
MULTILINESTRING MULTIPOINT MULTIPOLYGON MULTISET NAMESPACE NATIONAL NATURAL NCHAR NEXT NO NONCLUSTERED NOT
NOTNULL NULL NULLABLE NUMBER NUMERIC NUMMULTIRANGE NUMRANGE NVARCHAR NVARCHAR2 OBJECT OF OFFSET ON OPERATOR
OPTIMIZE OR ORDER ORDINALITY OUT OUTER OUTPUT OVER OVERLAPS OVERWRITE PARTITION PARTITIONED PARTITIONED_BY PATH
PERCENT PERIOD PIVOT POINT POLYGON PRAGMA PRECISION PREPARE PRIMARY PROCEDURE QUALIFY RANGE READS REAL RECURSIVE
REF REFERENCES REGEXP RELEASE REMOTE RENAME REPLACE RETURNING RETURNS REVOKE RIGHT RLIKE ROLLBACK ROLLUP ROW ROWS
ROW_FORMAT SAMPLE SAVEPOINT SCHEMA SECURE SECURITY SELECT SEMI SEPARATOR SEQUENCE SERIAL SESSION SESSION_USER SET
SETS SETTINGS SHARING SHORT SHOW SIGNED SIMILAR SMALLINT SOME SORT SORTKEY SOURCE SPATIAL SQL STABLE START STORED
STR STRAIGHT_JOIN STREAMING STRICT STRING STRUCT SYSTEM_VERSIONING TABLE TABLES TABLESAMPLE TBLPROPERTIES TEMP
TEMPORARY TEXT THEN TIME TIMESTAMP TIMESTAMPLTZ TIMESTAMPNTZ TIMESTAMPTZ TIMESTAMP_LTZ TIMESTAMP_NTZ TIMETZ
TIME_NS TINYBLOB TINYINT TINYTEXT TITLE TO TRANSFORM TRANSIENT TRIGGER TRUE TRUNCATE TSMULTIRANGE TSRANGE
TSTZMULTIRANGE TSTZRANGE TTL UHUGEINT UINT UINT128 UINT256 UNCACHE UNICODE UNION UNIQUE UNKNOWN UNLOCK UNLOGGED
UNNEST UNPIVOT UNSIGNED UPDATE UPPERCASE USE USING UUID VACUUM VALUES VARBINARY VARCHAR VARCHAR2 VARIANT VARYING
VECTOR VIEW VOLATILE WHEN WHERE WINDOW WITH XOR YEAR ZEROFILL _ARMSCII8 _ASCII _BIG5 _BINARY _CP1250 _CP1251
_CP1256 _CP1257 _CP850 _CP852 _CP866 _CP932 _DEC8 _EUCJPMS _EUCKR _GB18030 _GB2312 _GBK _GEOSTD8 _GREEK _HEBREW
_HP8 _KEYBCS2 _KOI8R _KOI8U _LATIN1 _LATIN2 _LATIN5 _LATIN7 _MACCE _MACROMAN _SJIS _SWE7 _TIS620 _UCS2 _UJIS
_UTF16 _UTF16LE _UTF32 _UTF8 _UTF8MB3 _UTF8MB4
ENGINE ROW_FORMAT INVISIBLE ZEROFILL SIGNED UNSIGNED INTEGER DOUBLE PRECISION REAL DECIMAL NUMERIC SERIAL
""".split())

_TOKEN = re.compile(r"[ \t\r\n]+|([A-Za-z_][A-Za-z0-9_]*)|`((?:[^`]|``)+)`|'((?:[^'\\]|''|\\.)*)'|(\d+)"
                    r"|([(),.=-])|(.)", re.S)
_WORD, _IDENT, _STRING, _NUMBER, _PUNCT, _OTHER = range(1, 7)
_VALUE_ESCAPE = re.compile(r"''|\\(.)", re.S)
_BACKSLASH = re.compile(r"\\(.)", re.S)

# Type word: (kind, how many parameters it may have, signedness words allowed, ZEROFILL allowed).
_INTS = {"TINYINT": "tinyint", "SMALLINT": "smallint", "MEDIUMINT": "mediumint", "INT": "int",
         "INTEGER": "int", "BIGINT": "bigint"}
_TYPES = {
    **{word: (kind, (0, 1), True, True) for word, kind in _INTS.items()},
    "BOOL": ("tinyint", (0, 1), False, False), "BOOLEAN": ("tinyint", (0, 1), False, False),
    "DECIMAL": ("decimal", (0, 1, 2), True, True), "NUMERIC": ("decimal", (0, 1, 2), True, True),
    "FLOAT": ("float", (0, 1, 2), False, True), "DOUBLE": ("double", (0, 2), True, True),
    "REAL": ("double", (0, 2), True, True), "BIT": ("bit", (0, 1), False, False),
    "DATE": ("date", (0,), False, False), "YEAR": ("year", (0, 1), False, False),
    "TIME": ("time", (0, 1), False, False), "DATETIME": ("datetime", (0, 1), False, False),
    "TIMESTAMP": ("timestamp", (0, 1), False, False),
    "CHAR": ("char", (0, 1), False, False), "VARCHAR": ("varchar", (1,), False, False),
    "BINARY": ("binary", (0, 1), False, False), "VARBINARY": ("varbinary", (1,), False, False),
    "TEXT": ("text", (0, 1), False, False), "BLOB": ("blob", (0, 1), False, False),
    **{w: (w.lower(), (0,), False, False) for w in ("TINYTEXT", "MEDIUMTEXT", "LONGTEXT", "TINYBLOB",
                                                     "MEDIUMBLOB", "LONGBLOB", "JSON", "GEOMETRY", "INET6",
                                                     "INET4", "UUID")},
    "POINT": ("geometry", (0,), False, False),
    "VECTOR": ("vector", (0, 1), False, False), "SERIAL": ("bigint", (0,), False, False),
    "ENUM": ("enum", (), False, False), "SET": ("set", (), False, False),
}
_TEXTUAL = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"})
_CHARSET_KEYWORDS = frozenset({"BINARY"})  # charset names that are keywords and still read as names
# What may follow a DEFAULT value (anything else, e.g. a COLLATE sqlglot parses as part of the value, falls back).
_AFTER_DEFAULT = frozenset({",", ")", "NOT", "NULL", "AUTO_INCREMENT", "COMMENT", "PRIMARY", "UNIQUE", "ON",
                            "INVISIBLE", "CHARACTER", "CHARSET", "CHECK"})
_AFTER_KEY = frozenset({",", ")", "NOT", "NULL", "AUTO_INCREMENT", "COMMENT", "DEFAULT", "INVISIBLE", "UNIQUE",
                        "PRIMARY"})
_ROW_FORMATS = frozenset({"DEFAULT", "DYNAMIC", "FIXED", "COMPRESSED", "REDUNDANT", "COMPACT", "PAGE"})
_FK_ACTIONS = (("RESTRICT",), ("CASCADE",), ("SET", "NULL"), ("NO", "ACTION"), ("SET", "DEFAULT"))


class _No(Exception):
    """Not a statement this module reads: the caller falls back to sqlglot."""


def parse(text: str, default_db: str = "") -> list | None:
    """The changes of a plain CREATE DATABASE or CREATE TABLE, exactly as :func:`binlogd.library.schema.ddl.parse`
    gives them, or None for any statement (or detail) this fast path does not read.

    Args:
        text: the statement as its server ran it (:func:`binlogd.library.schema.sqltext.ddl_text`'s result).
        default_db: the QUERY event's default database, for an unqualified table name.
    """
    try:
        return [_Parser(_tokens(text)).statement(default_db)]
    except (_No, ValueError, IndexError):
        return None


def _tokens(text: str) -> list[tuple[int, str, int]]:
    """(kind, text, start) of each token; white space dropped."""
    out = []
    for m in _TOKEN.finditer(text):
        kind = m.lastindex
        if kind is None:
            continue  # white space
        if kind == _OTHER:
            raise _No(m[0])
        out.append((kind, m[kind], m.start()))
    return out


class _Parser:
    def __init__(self, tokens: list[tuple[int, str, int]]):
        self.tokens = tokens
        # Each token's upper-cased text if it is a word or punctuation, else ""; "" past the end.
        self.words = [text.upper() if kind in (_WORD, _PUNCT) else "" for kind, text, _ in tokens] + [""] * 4
        self.i = 0

    # ------------------------------------------------------------ tokens

    def peek(self, ahead: int = 0) -> str:
        """The upper-cased text of a word or punctuation token ahead ("" for others and at the end)."""
        return self.words[self.i + ahead]

    def take(self, *words: str) -> bool:
        """Consume ``words`` (upper-case words or punctuation) when they come next."""
        i, n = self.i, len(words)
        if self.words[i] == words[0] and (n == 1 or tuple(self.words[i:i + n]) == words):
            self.i += n
            return True
        return False

    def expect(self, *words: str) -> None:
        if not self.take(*words):
            raise _No(" ".join(words))

    def next(self, kind: int) -> str:
        if self.i >= len(self.tokens) or self.tokens[self.i][0] != kind:
            raise _No(f"token kind {kind}")
        self.i += 1
        return self.tokens[self.i - 1][1]

    def ident(self) -> str:
        """A backquoted identifier, or an unquoted one that is no keyword."""
        kind, text, _ = self.tokens[self.i] if self.i < len(self.tokens) else (0, "", 0)
        if kind == _IDENT:
            self.i += 1
            return text.replace("``", "`")
        if kind == _WORD and text.upper() not in _RESERVED:
            self.i += 1
            return text
        raise _No("identifier")

    def number(self) -> int:
        return int(self.next(_NUMBER))

    def charset_word(self) -> str:
        """A character set or collation name: an unquoted word."""
        word = self.next(_WORD)
        if word.upper() in _RESERVED and word.upper() not in _CHARSET_KEYWORDS:
            raise _No("charset")
        return word

    def end(self) -> bool:
        return self.i >= len(self.tokens)

    # ------------------------------------------------------------ statements

    def statement(self, db: str):
        self.expect("CREATE")
        if self.take("TABLE"):
            return self.create_table(db)
        if not (self.take("DATABASE") or self.take("SCHEMA")):
            raise _No("CREATE what")
        exists = self.take("IF", "NOT", "EXISTS")
        name = self.ident()
        charset, collate = self.options(database=True)
        return CreateDatabase(name, _charset(charset, collate), exists)

    def options(self, database: bool = False) -> tuple[str | None, str | None]:
        """Table (or database) options to the end; (charset, collation) as written."""
        charset = collate = None
        seen = set()
        while not self.end():
            default = self.take("DEFAULT")
            if self.take("CHARSET") or self.take("CHARACTER", "SET"):
                option = "CHARSET"
            elif self.take("COLLATE"):
                option = "COLLATE"
            elif default or database:
                raise _No("database option")
            else:
                option = self.peek()
                self.i += 1
            if option in seen:
                raise _No(f"{option} twice")
            seen.add(option)
            self.take("=")
            if option == "CHARSET":
                charset = self.charset_word()
            elif option == "COLLATE":
                collate = self.charset_word()
            elif option == "ENGINE":
                self.ident()
            elif option == "AUTO_INCREMENT":
                self.number()
            elif option == "COMMENT":
                self.next(_STRING)
            elif option == "ROW_FORMAT":
                if self.peek() not in _ROW_FORMATS:
                    raise _No("row format")
                self.i += 1
            else:
                raise _No(f"table option {option}")
        return charset, collate

    def create_table(self, db: str) -> CreateTable:
        exists = self.take("IF", "NOT", "EXISTS")
        name = self.ident()
        if self.take("."):
            db, name = name, self.ident()
        self.expect("(")
        columns, pk = [], []
        while True:
            column, key = self.item()
            if column is not None:
                columns.append(column)
                if key:
                    pk.append(column.name)
            elif key is not None:
                pk = key
            if self.take(")"):
                break
            self.expect(",")
        charset, collate = self.options()
        low = {p.lower() for p in pk}
        defs = tuple(replace(c, nullable=False) if c.name.lower() in low else c for c in columns)
        return CreateTable((db, name), defs, tuple(pk), _charset(charset, collate), if_not_exists=exists)

    # ------------------------------------------------------------ the items between the parentheses

    def item(self) -> tuple[ColumnDef | None, object]:
        """One column or key clause: (ColumnDef, declared PRIMARY KEY) for a column, (None, its columns)
        for a PRIMARY KEY clause, (None, None) for other keys."""
        word = self.peek()
        if word == "CONSTRAINT":
            self.i += 1
            if self.peek() not in ("PRIMARY", "UNIQUE", "FOREIGN"):
                self.ident()
            word = self.peek()
            if word not in ("PRIMARY", "UNIQUE", "FOREIGN"):
                raise _No("constraint")
        if word == "PRIMARY":
            self.expect("PRIMARY", "KEY")
            return None, self.key_parts(primary=True)
        if word in ("KEY", "INDEX", "UNIQUE", "FULLTEXT"):
            self.i += 1
            if word in ("UNIQUE", "FULLTEXT"):
                self.take("KEY") or self.take("INDEX")
            if self.peek() != "(":
                self.ident()
            self.key_parts()
            return None, None
        if word == "FOREIGN":
            self.foreign_key()
            return None, None
        return self.column()

    def key_parts(self, primary: bool = False) -> list[str]:
        self.expect("(")
        names = []
        while True:
            names.append(self.ident())
            if self.take("("):
                self.number()
                self.expect(")")
            if not primary:
                self.take("ASC") or self.take("DESC")
            if self.take(")"):
                return names
            self.expect(",")

    def foreign_key(self) -> None:
        self.expect("FOREIGN", "KEY")
        if self.peek() != "(":
            self.ident()
        self.key_parts()
        self.expect("REFERENCES")
        self.ident()
        if self.take("."):
            self.ident()
        self.key_parts()
        seen = set()
        while self.peek() == "ON" and self.peek(1) in ("DELETE", "UPDATE") and self.peek(1) not in seen:
            seen.add(self.peek(1))
            self.i += 2
            if not any(self.take(*action) for action in _FK_ACTIONS):
                raise _No("foreign key action")

    # ------------------------------------------------------------ a column

    def column(self) -> tuple[ColumnDef, bool]:
        name = self.ident()
        word = self.peek()
        if word not in _TYPES:
            raise _No(f"type {word}")
        self.i += 1
        kind, counts, signs, zerofill = _TYPES[word]
        if word == "DOUBLE":
            self.take("PRECISION")
        fields: dict = {"unsigned": False}
        values = params = None
        if kind in ("enum", "set"):
            values = self.values()
        elif self.take("("):
            params = [self.number()]
            while self.take(","):
                params.append(self.number())
            self.expect(")")
        if values is None and len(params or ()) not in counts:
            raise _No(f"{word} parameters")
        if signs and (self.take("UNSIGNED") or self.take("SIGNED")):
            fields["unsigned"] = self.tokens[self.i - 1][1].upper() == "UNSIGNED"
        if zerofill and self.take("ZEROFILL"):
            fields["unsigned"] = True
        charset = collate = None
        nullable, pk = True, False
        while self.peek() not in (",", ")"):
            if self.take("NOT", "NULL"):
                nullable = False
            elif self.take("NULL"):
                nullable = True
            elif self.take("PRIMARY", "KEY"):
                pk, nullable = True, False
                self.after_key()
            elif self.take("UNIQUE"):
                self.take("KEY")
                self.after_key()
            elif self.take("AUTO_INCREMENT") or self.take("INVISIBLE") or (kind in _TEXTUAL and self.take("BINARY")):
                pass  # BINARY: the charset's _bin collation
            elif self.take("COMMENT"):
                self.next(_STRING)
            elif self.take("DEFAULT"):
                self.default()
            elif self.take("CHECK", "(", "JSON_VALID", "("):   # MariaDB's JSON: LONGTEXT with this CHECK
                if self.ident() != name:
                    raise _No("CHECK of another column")
                self.expect(")", ")")
            elif self.take("ON", "UPDATE"):
                self.current_timestamp()
            elif kind in _TEXTUAL and (self.take("CHARACTER", "SET") or self.take("CHARSET")):
                charset = charset_name(self.charset_word())
            elif kind in _TEXTUAL and self.take("COLLATE"):
                collate = charset_name(self.charset_word())
            else:
                raise _No(f"column attribute {self.peek()}")
        if values is not None:
            fields["values"] = values
        elif kind == "decimal":
            fields["precision"] = params[0] if params else 10
            fields["scale"] = params[1] if params and len(params) > 1 else 0
        elif kind == "float":
            kind = "double" if (params and len(params) == 1 and params[0] > 24) else "float"
        elif kind in ("text", "blob") and params:
            fields["length"] = params[0]
        elif kind in ("time", "datetime", "timestamp"):
            fields["precision"] = params[0] if params else 0
        elif kind in ("char", "varchar", "binary", "varbinary", "bit"):
            fields["length"] = params[0] if params else 1
        elif kind == "vector":
            fields["dimensions"] = params[0] if params else None
        if word == "SERIAL":
            fields["unsigned"], nullable = True, False
        if kind in ("binary", "varbinary") or kind.endswith("blob"):
            charset = "binary"
        if kind in ("char", "varchar") and charset == "binary":
            kind = "binary" if kind == "char" else "varbinary"
        return ColumnDef(name, kind, nullable=nullable, charset=charset or collate, **fields), pk

    def after_key(self) -> None:
        """What may follow a column's PRIMARY KEY or UNIQUE [KEY] (sqlglot reads ON ... and a name after it)."""
        if self.peek() not in _AFTER_KEY:
            raise _No("after a column key")

    def values(self) -> tuple[str, ...]:
        """ENUM/SET ('a', 'b''c', ...)."""
        self.expect("(")
        out = [_value(self.next(_STRING))]
        while self.take(","):
            out.append(_value(self.next(_STRING)))
        self.expect(")")
        return tuple(out)

    def default(self) -> None:
        """A DEFAULT value: a string, a number, NULL, TRUE, FALSE or CURRENT_TIMESTAMP[([n])]."""
        kind = self.tokens[self.i][0] if not self.end() else 0
        if kind == _STRING:
            self.i += 1
        elif self.take("-") or kind == _NUMBER:
            self.number()
            if self.peek() == ".":  # a decimal point between digits, nothing around it
                start = self.tokens[self.i][2]
                if self.tokens[self.i - 1][2] + len(self.tokens[self.i - 1][1]) != start or (
                        self.i + 1 >= len(self.tokens) or self.tokens[self.i + 1][2] != start + 1):
                    raise _No("decimal point")
                self.i += 1
                self.number()
        elif not (self.take("NULL") or self.take("TRUE") or self.take("FALSE")):
            self.current_timestamp()
        if self.peek() not in _AFTER_DEFAULT:
            raise _No("after DEFAULT")

    def current_timestamp(self) -> None:
        self.expect("CURRENT_TIMESTAMP")
        if self.take("("):
            if not self.take(")"):
                self.number()
                self.expect(")")


def _value(raw: str) -> str:
    """An ENUM/SET value's text: '' and the backslash escapes of quotes and backslash undone."""
    if "\\" in raw and any(m[1] not in "'\"\\" for m in _BACKSLASH.finditer(raw)):
        raise _No("escape in a value")  # \n, \t, \0, \% ...: left to sqlglot
    return _VALUE_ESCAPE.sub(lambda m: m[1] if m[1] is not None else "'", raw)


def _charset(charset: str | None, collate: str | None) -> str | None:
    """A table's or database's default character set from its options (the charset's, else the collation's)."""
    return charset_name(charset) if charset else charset_name(collate) if collate else None


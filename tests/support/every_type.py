"""The every-type table: one table holding every column type MariaDB writes into row events.

:func:`run_scenario` creates it on a server, writes, updates and deletes rows between two
``FLUSH BINARY LOGS``, and returns what the server stored (:class:`Scenario`); the tests compare
the decoded binlog with it.
"""

from __future__ import annotations

import base64
import datetime as dt
import random
import struct
import uuid
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

# Row event type codes (MariaDB writes v1 row events; with log_bin_compress the compressed v1 ones).
PLAIN_ROW_TYPES = {23, 24, 25, 30, 31, 32}            # WRITE/UPDATE/DELETE_ROWS (v1, v2)
COMPRESSED_ROW_TYPES = {166, 167, 168, 169, 170, 171}  # MariaDB *_ROWS_COMPRESSED(_V1)


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Col:
    name: str
    ddl: str
    kind: str               # int decimal float double bit year date time datetime timestamp text binary enum set
    unsigned: bool = False
    fsp: int = 0
    charset: str = "utf-8"  # Python codec of a text column's charset (MariaDB latin1 is cp1252)
    members: tuple[str, ...] = ()   # ENUM / SET value names
    pad: int = 0            # BINARY(n): n


ENUM2 = tuple(f"v{i}" for i in range(300))          # > 255 members: a 2-byte ENUM
SET9 = tuple("abcdefghi")                            # 9 members: a 2-byte SET

COLUMNS: tuple[Col, ...] = (
    Col("id", "INT NOT NULL PRIMARY KEY", "int"),
    Col("ti", "TINYINT", "int"), Col("tiu", "TINYINT UNSIGNED", "int", unsigned=True),
    Col("si", "SMALLINT", "int"), Col("siu", "SMALLINT UNSIGNED", "int", unsigned=True),
    Col("mi", "MEDIUMINT", "int"), Col("miu", "MEDIUMINT UNSIGNED", "int", unsigned=True),
    Col("i", "INT", "int"), Col("iu", "INT UNSIGNED", "int", unsigned=True),
    Col("bi", "BIGINT", "int"), Col("biu", "BIGINT UNSIGNED", "int", unsigned=True),
    Col("d12", "DECIMAL(12,4)", "decimal"), Col("d65", "DECIMAL(65,30)", "decimal"),
    Col("d10", "DECIMAL(10,0) UNSIGNED", "decimal"),
    Col("f", "FLOAT", "float"), Col("dbl", "DOUBLE", "double"),
    Col("b1", "BIT(1)", "bit"), Col("b17", "BIT(17)", "bit"), Col("b64", "BIT(64)", "bit"),
    Col("y", "YEAR", "year"), Col("dt", "DATE", "date"),
    Col("t0", "TIME(0)", "time", fsp=0), Col("t2", "TIME(2)", "time", fsp=2),
    Col("t3", "TIME(3)", "time", fsp=3), Col("t6", "TIME(6)", "time", fsp=6),
    Col("dtm0", "DATETIME(0)", "datetime", fsp=0), Col("dtm2", "DATETIME(2)", "datetime", fsp=2),
    Col("dtm6", "DATETIME(6)", "datetime", fsp=6),
    Col("ts0", "TIMESTAMP(0) NULL DEFAULT NULL", "timestamp", fsp=0),
    Col("ts3", "TIMESTAMP(3) NULL DEFAULT NULL", "timestamp", fsp=3),
    Col("ts6", "TIMESTAMP(6) NULL DEFAULT NULL", "timestamp", fsp=6),
    Col("c10", "CHAR(10) CHARACTER SET utf8mb4", "text"),
    Col("vc", "VARCHAR(300) CHARACTER SET utf8mb4", "text"),
    Col("vl", "VARCHAR(40) CHARACTER SET latin1", "text", charset="cp1252"),
    # BINARY(n): SELECT gives the value padded with 0x00 to n bytes; the row image stores it with the
    # trailing 0x00 stripped, so the decoder has to pad it back (TABLE_MAP metadata has n).
    Col("bn", "BINARY(4)", "binary", pad=4), Col("vb", "VARBINARY(20)", "binary"),
    Col("tt", "TINYTEXT", "text"), Col("tx", "TEXT", "text"),
    Col("mt", "MEDIUMTEXT", "text"), Col("lt", "LONGTEXT", "text"),
    Col("tb", "TINYBLOB", "binary"), Col("bl", "BLOB", "binary"),
    Col("mb", "MEDIUMBLOB", "binary"), Col("lb", "LONGBLOB", "binary"),
    Col("e", "ENUM('red','green','blue')", "enum", members=("red", "green", "blue")),
    Col("e2", "ENUM(" + ",".join(f"'{m}'" for m in ENUM2) + ")", "enum", members=ENUM2),
    Col("st", "SET(" + ",".join(f"'{m}'" for m in SET9) + ")", "set", members=SET9),
    Col("j", "JSON", "text"),          # MariaDB: LONGTEXT + CHECK(json_valid): the text itself
    Col("g", "GEOMETRY", "binary"), Col("p", "POINT", "binary"),
)
BY_NAME = {c.name: c for c in COLUMNS}
INDEX = {c.name: i for i, c in enumerate(COLUMNS)}


class Raw(str):
    """An SQL expression written into the statement as is (not a bound parameter)."""


_rng = random.Random(20261122)
BIG_BLOB = _rng.randbytes(1 << 20)                         # ~1 MiB, every byte value
ALL_BYTES = bytes(range(256))

ROW_MIN = dict(
    id=1, ti=-128, tiu=0, si=-32768, siu=0, mi=-8388608, miu=0, i=-2147483648, iu=0,
    bi=-9223372036854775808, biu=0,
    d12=Raw("-99999999.9999"), d65=Raw("-" + "9" * 35 + "." + "9" * 30), d10=Raw("0"),
    f=Raw("-1.17549e-38"), dbl=Raw("-1.7976931348623157e308"),
    b1=Raw("b'0'"), b17=Raw("b'0'"), b64=Raw("b'0'"), y=1901, dt="0001-01-01",
    t0="-838:59:59", t2="-838:59:59.99", t3="-838:59:59.999", t6="-838:59:59.999999",
    dtm0="0001-01-01 00:00:00", dtm2="0001-01-01 00:00:00.01", dtm6="0001-01-01 00:00:00.000001",
    ts0="1970-01-01 00:00:01", ts3="1970-01-01 00:00:01.001", ts6="1970-01-01 00:00:01.000001",
    c10="", vc="", vl="", bn=b"\x00\x00\x00\x00", vb=b"", tt="", tx="", mt="", lt="",
    tb=b"", bl=b"", mb=b"", lb=b"", e="red", e2="v0", st="", j="{}",
    g=Raw("ST_GeomFromText('POINT(0 0)')"), p=Raw("POINT(-180, -90)"),
)
ROW_MAX = dict(
    id=2, ti=127, tiu=255, si=32767, siu=65535, mi=8388607, miu=16777215, i=2147483647,
    iu=4294967295, bi=9223372036854775807, biu=18446744073709551615,
    d12=Raw("99999999.9999"), d65=Raw("9" * 35 + "." + "9" * 30), d10=Raw("9999999999"),
    f=Raw("1e38"), dbl=Raw("1.7976931348623157e308"),
    b1=Raw("b'1'"), b17=Raw("b'11111111111111111'"), b64=Raw("b'" + "1" * 64 + "'"),
    y=2155, dt="9999-12-31",
    t0="838:59:59", t2="838:59:59.99", t3="838:59:59.999", t6="838:59:59.999999",
    dtm0="9999-12-31 23:59:59", dtm2="9999-12-31 23:59:59.99", dtm6="9999-12-31 23:59:59.999999",
    ts0="2038-01-19 03:14:07", ts3="2038-01-19 03:14:07.999", ts6="2038-01-19 03:14:07.999999",
    c10="ＡＢ日本😀éxyz!", vc="é漢字😀" * 75, vl="café € Ü", bn=b"\xde\xad\xbe\xef",
    vb=ALL_BYTES[:10] + ALL_BYTES[-10:],
    tt="é" * 127 + "x", tx="汉" * 21845, mt="😀" * 20000, lt="日本語テキスト" * 10000,
    tb=ALL_BYTES[:255], bl=(ALL_BYTES * 256)[:65535], mb=ALL_BYTES * 400, lb=ALL_BYTES * 2000,
    e="blue", e2="v299", st="a,b,c,d,e,f,g,h,i",
    j='{"k": [1, 2.5, -3e10, "ü😀", null, true, false, {"n": {"m": [[], {}]}}], "q": "a\\"b"}',
    g=Raw("ST_GeomFromText('POLYGON((0 0,10 0,10 10,0 10,0 0),(2 2,3 2,3 3,2 2))', 4326)"),
    p=Raw("POINT(1.5, -2.25)"),
)
ROW_MIXED = dict(
    id=3, ti=0, tiu=1, si=-1, siu=32768, mi=-1, miu=8388608, i=-1, iu=2147483648,
    bi=-1, biu=9223372036854775808,
    d12=Raw("-0.0001"), d65=Raw("0.000000000000000000000000000001"), d10=Raw("42"),
    f=Raw("3.14159"), dbl=Raw("0.1e0 + 0.2e0"),
    b1=Raw("b'1'"), b17=Raw("b'10000000000000001'"), b64=Raw("0x8000000000000001"),
    y=0, dt="0000-00-00",
    t0="00:00:00", t2="-00:00:01.5", t3="-00:00:01.5", t6="-00:00:01.5",
    dtm0="0000-00-00 00:00:00", dtm2="2024-02-29 12:34:56.7", dtm6="2024-02-29 12:34:56.5",
    ts0="0000-00-00 00:00:00", ts3="2024-02-29 12:34:56.5", ts6="2024-02-29 12:34:56.000001",
    c10="ab  ", vc="it's a \\ backslash, 'quotes', \"dq\", \ttab\nnewline\r\x00nul", vl="é",
    bn=b"ab", vb=b"\x00", tt="a\x00b", tx="{\"not\": json}", mt="\U0001F600", lt="ümlaut",
    tb=b"\x00", bl=b"'\\", mb=b"\xff" * 3, lb=b"tiny", e="", e2="v255", st="a,i",
    j='[1, "two", 3.0, null, true, false, {"x": "ÿ"}, [[[]]]]',
    g=Raw("ST_GeomFromText('LINESTRING(0 0, 1 1, 2 1)')"), p=Raw("POINT(0, 0)"),
)
ROW_NULLS = dict({c.name: None for c in COLUMNS[1:]}, id=4)
ROW_BIG = dict(
    ROW_MIXED, id=5, ts0="2021-06-01 12:00:00", ts3="2021-06-01 12:00:00.5",
    ts6="2021-06-01 12:00:00.123456", dtm0="2021-06-01 12:00:00", dt="2021-06-01",
    lb=BIG_BLOB, mb=BIG_BLOB[:100_000], bl=BIG_BLOB[:65535], tb=BIG_BLOB[:255],
    lt="长" * 300_000, j='"just a string"', y=2000, e="green", st="",
)
ROW_WEST = dict(ROW_MIN, id=6, ts0="2021-01-01 00:00:00", ts3="2021-12-31 20:00:00.25",
                ts6="2021-12-31 23:59:59.999999", j="null", vc="west")

# FLOAT at ±FLT_MAX (and DOUBLE at the smallest normal) in rows of their own, so that a decoder failing
# on them does not hide what the other rows say.
ROW_FLT_MAX = dict({c.name: None for c in COLUMNS[1:]}, id=7, f=Raw("3.40282e38"), dbl=Raw("5e-324"))
ROW_FLT_MIN = dict({c.name: None for c in COLUMNS[1:]}, id=8, f=Raw("-3.40282e38"),
                   dbl=Raw("-2.2250738585072014e-308"))

# (session time zone, row): the binlog holds TIMESTAMP values in UTC whatever the session's zone.
INSERTS = [("+00:00", [ROW_MIN, ROW_MAX]), ("+00:00", [ROW_MIXED]), ("+00:00", [ROW_NULLS]),
           ("+05:30", [ROW_BIG]), ("-08:00", [ROW_WEST]), ("+00:00", [ROW_FLT_MAX]),
           ("+00:00", [ROW_FLT_MIN])]
# Independent expectations for the TIMESTAMPs written in non-UTC sessions (ts0, ts3, ts6).
UTC_EXPECTED = {
    5: ("2021-06-01 06:30:00", "2021-06-01 06:30:00.500", "2021-06-01 06:30:00.123456"),
    6: ("2021-01-01 08:00:00", "2022-01-01 04:00:00.250", "2022-01-01 07:59:59.999999"),
}

NEW_ROW1 = dict(ROW_MAX)
del NEW_ROW1["id"]
NEW_ROW1.update(lb=b"small now", mt="m", lt="l", tx="t", bl=b"b", mb=b"m")
NEW_ROW4 = {k: v for k, v in ROW_MIXED.items() if k != "id"}
NEW_ROW3 = {c.name: None for c in COLUMNS[1:] if c.name not in ("ti", "ts0", "vc")}
NEW_ROW3.update(ts0="2021-01-01 00:00:00")   # written in a -08:00 session: 08:00:00 UTC
# (session time zone, SET assignments, WHERE)
UPDATES = [("+00:00", NEW_ROW1, "id = 1"), ("+00:00", NEW_ROW4, "id = 4"),
           ("-08:00", NEW_ROW3, "id = 3"),
           ("+00:00", {"vc": Raw("CONCAT(vc, '✓')"), "ti": Raw("ti + 1")}, "id IN (5, 6)")]
UPDATED_IDS = [1, 4, 3, 5, 6]
DELETES = ["id IN (2, 5)", "id = 4"]
DELETED_IDS = [2, 5, 4]
INSERTED_IDS = [1, 2, 3, 4, 5, 6, 7, 8]


# --------------------------------------------------------------------------- SELECT → JSON form


def _float32_shortest(x: float) -> float:
    """The shortest decimal that reads back as the same float32 (DESIGN: FLOAT)."""
    bits = struct.pack("<f", x)
    for digits in range(1, 10):
        candidate = float(f"{x:.{digits}g}")
        try:
            if struct.pack("<f", candidate) == bits:
                return candidate
        except OverflowError:   # near FLT_MAX a short candidate (3.403e38) is beyond float32
            continue
    raise AssertionError(f"no float32 round trip for {x!r}")


def _fraction(usec: int, fsp: int) -> str:
    return ("." + f"{usec:06d}"[:fsp]) if fsp else ""


def _time_text(td: dt.timedelta, fsp: int) -> str:
    usec = td // dt.timedelta(microseconds=1)
    sign = "-" if usec < 0 else ""
    seconds, frac = divmod(abs(usec), 1_000_000)
    hours, rest = divmod(seconds, 3600)
    return f"{sign}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}{_fraction(frac, fsp)}"


def _unix_to_utc_text(value, fsp: int) -> str:
    """``UNIX_TIMESTAMP(col)`` (int or Decimal) as UTC text; 0 is the zero TIMESTAMP."""
    value = Decimal(value)
    seconds = int(value)
    usec = int((value - seconds) * 1_000_000)
    if seconds == 0 and usec == 0:
        return "0000-00-00 00:00:00" + _fraction(0, fsp)
    when = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=seconds)
    return when.strftime("%Y-%m-%d %H:%M:%S") + _fraction(usec, fsp)


def _select_expr(col: Col, minimal: bool) -> str:
    if col.kind == "float":
        return f"CAST(`{col.name}` AS DOUBLE)"     # FLOAT as text has only 6 digits; as DOUBLE exact
    if col.kind == "timestamp":
        return f"UNIX_TIMESTAMP(`{col.name}`)"      # the stored instant, no session zone involved
    if col.kind in ("enum", "set") and minimal:
        return f"`{col.name}` + 0"                 # ENUM index / SET bitmask
    return f"`{col.name}`"


def _json_form(col: Col, value, minimal: bool):
    """A PyMySQL value of ``_select_expr(col)`` in the README.md JSON form ("Values")."""
    if value is None:
        return None
    k = col.kind
    if k == "int" or k == "year":
        return int(value)
    if k == "decimal":
        return format(value, "f")
    if k == "float":
        return _float32_shortest(value)
    if k == "double":
        return float(value)
    if k == "bit":
        return int.from_bytes(value, "big")
    if k == "date":
        return value if isinstance(value, str) else value.isoformat()
    if k == "time":
        return _time_text(value, col.fsp)
    if k == "datetime":
        if isinstance(value, str):                 # zero dates come back as text
            return value
        return (f"{value.year:04d}-{value.month:02d}-{value.day:02d} "   # strftime %Y gives "1" for year 1
                f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}{_fraction(value.microsecond, col.fsp)}")
    if k == "timestamp":
        return _unix_to_utc_text(value, col.fsp)
    if k == "text":
        assert isinstance(value, str), (col.name, value)
        return value
    if k == "binary":
        return base64.b64encode(value).decode("ascii")
    if k == "enum":
        return int(value) if minimal else value
    if k == "set":
        if minimal:
            return int(value)
        return value.split(",") if value else []
    raise AssertionError(k)


# --------------------------------------------------------------------------- running the scenario


@dataclass
class Decoded:
    """What the test keeps of one row event of the table (not the event: it holds views of the mmap)."""

    pos: int
    type_code: int
    kind: str
    columns: tuple
    rows: list | None            # None when decoding the rows raised
    error: str | None = None


@dataclass
class Scenario:
    server: object
    minimal: bool
    schema: str
    table: str
    file: Path
    after_insert: dict[int, dict]      # id → {column name: JSON form}
    after_update: dict[int, dict]
    _decoded: list | None = None

    def label(self, col: Col) -> str:
        return f"@{INDEX[col.name] + 1}" if self.minimal else col.name

    def expected(self, row: dict) -> dict:
        """A row of JSON forms keyed the way the decoder must key it."""
        return {self.label(c): row[c.name] for c in COLUMNS}

    def events(self) -> list[Decoded]:
        """The row events of the table under test, decoded once.

        An event whose rows fail to decode is kept with its error, so that one bad value does not
        hide what the other events say; errors outside row decoding propagate.
        """
        if self._decoded is None:
            from binlogd.cli.filetools import dump_events
            from binlogd.protocol.events import RowsEvent

            out = []
            for event in dump_events(self.file):
                if isinstance(event, RowsEvent) and (event.schema, event.table) == (self.schema, self.table):
                    try:
                        rows, error = event.rows, None
                    except Exception as exc:  # noqa: BLE001 - reported by every test that needs the rows
                        rows, error = None, f"{type(exc).__name__}: {exc}"
                    out.append(Decoded(event.header.next_position - event.header.event_length,
                                       event.header.type_code, event.kind, tuple(event.columns), rows, error))
                del event
            self._decoded = out
        return self._decoded

    def rows(self, kind: str, problems: list[str]) -> list:
        """Rows of the decoded events of ``kind``; events that failed are added to ``problems``."""
        out = []
        for d in self.events():
            if d.kind != kind:
                continue
            if d.error is not None:
                problems.append(f"{kind} event at {self.file.name}:{d.pos} failed to decode: {d.error}")
            else:
                out.extend(d.rows)
        return out


def _sql_value(value) -> tuple[str, list]:
    if isinstance(value, Raw):
        return str(value), []
    return "%s", [value]


def _select_all(conn, minimal: bool, schema: str, table: str) -> dict[int, dict]:
    exprs = ", ".join(_select_expr(c, minimal) for c in COLUMNS)
    with conn.cursor() as cur:
        cur.execute(f"SELECT {exprs} FROM `{schema}`.`{table}` ORDER BY id")
        rows = cur.fetchall()
    return {r[0]: {c.name: _json_form(c, v, minimal) for c, v in zip(COLUMNS, r)} for r in rows}


def run_scenario(server, minimal: bool) -> Scenario:

    schema = f"rowvals_{uuid.uuid4().hex[:10]}"
    table = "every_type"
    conn = server.connect(charset="utf8mb4", autocommit=True)
    cur = conn.cursor()
    # '' allows the zero DATE/DATETIME/TIMESTAMP and the invalid ENUM value '' (index 0).
    cur.execute("SET SESSION sql_mode = '', time_zone = '+00:00'")
    cur.execute(f"CREATE DATABASE `{schema}` CHARACTER SET utf8mb4")
    cols = ",\n  ".join(f"`{c.name}` {c.ddl}" for c in COLUMNS)
    cur.execute(f"CREATE TABLE `{schema}`.`{table}` (\n  {cols}\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")
    try:
        cur.execute("FLUSH BINARY LOGS")
        file_under_test = server.binlog_files()[-1]

        for zone, rows in INSERTS:
            cur.execute("SET SESSION time_zone = %s", (zone,))
            names = list(rows[0])
            groups, params = [], []
            for row in rows:
                parts = []
                for n in names:
                    sql, p = _sql_value(row[n])
                    parts.append(sql)
                    params += p
                groups.append("(" + ", ".join(parts) + ")")
            cur.execute(f"INSERT INTO `{schema}`.`{table}` ({', '.join(f'`{n}`' for n in names)}) "
                        f"VALUES {', '.join(groups)}", params)
        cur.execute("SET SESSION time_zone = '+00:00'")
        after_insert = _select_all(conn, minimal, schema, table)

        for zone, assignments, where in UPDATES:
            cur.execute("SET SESSION time_zone = %s", (zone,))
            sets, params = [], []
            for n, v in assignments.items():
                sql, p = _sql_value(v)
                sets.append(f"`{n}` = {sql}")
                params += p
            cur.execute(f"UPDATE `{schema}`.`{table}` SET {', '.join(sets)} WHERE {where}", params)
        cur.execute("SET SESSION time_zone = '+00:00'")
        after_update = _select_all(conn, minimal, schema, table)

        for where in DELETES:
            cur.execute(f"DELETE FROM `{schema}`.`{table}` WHERE {where}")
        cur.execute("FLUSH BINARY LOGS")
        assert server.binlog_files()[-2] == file_under_test, "another FLUSH happened meanwhile"
    except BaseException:
        cur.execute(f"DROP DATABASE IF EXISTS `{schema}`")
        raise
    finally:
        conn.close()
    return Scenario(server, minimal, schema, table, file_under_test, after_insert, after_update)



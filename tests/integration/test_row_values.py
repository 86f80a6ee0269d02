"""Every MariaDB column type through a real binlog: decoded values against two oracles.

One table holds every column type MariaDB 10.11 writes into row events (integers at their
boundaries, DECIMAL, FLOAT/DOUBLE, BIT, YEAR, DATE, TIME/DATETIME/TIMESTAMP with several fsp,
CHAR/VARCHAR in utf8mb4 and latin1, BINARY/VARBINARY, the TEXT and BLOB sizes including a 1 MiB
LONGBLOB, ENUM (1 and 2 bytes), SET (2 bytes), JSON, GEOMETRY/POINT) and a row of NULLs. Rows are
inserted (some in non-UTC session time zones), updated (full row images: NULL→value, value→NULL,
multi-row) and deleted, between two ``FLUSH BINARY LOGS`` so the file in between holds only them.

The decoded rows (``binlogd.filetools.dump_events``) are compared with
1. the server's own ``SELECT`` of the rows, converted to the JSON forms of DESIGN.md ("Values") by
   :func:`_json_form`, a deliberately plain converter (Decimal → exact string, date/time → text with
   the column's fsp digits, TIMESTAMP via ``UNIX_TIMESTAMP()`` → UTC text, bytes → base64, …):
   an insert must equal the row as selected after the inserts, an update's before/after the rows
   selected before/after the updates, a delete the row selected before the deletes;
2. ``mariadb-binlog --base64-output=decode-rows -vv`` on the same file (``binlog_oracle``), after
   normalising its formatting (see :func:`_printed_matches`).

Both run on ``mariadb`` (binlog_row_metadata=FULL: names, ENUM/SET strings) and on
``mariadb_minimal`` (binlog_row_metadata=MINIMAL with ``log_bin_compress``: every row event is a
``*_ROWS_COMPRESSED_V1``). MINIMAL metadata still carries signedness and the character sets
(``mariadb-binlog --print-table-metadata`` shows both), so there integers are unsigned where
declared and text is decoded by its charset; what is missing is names (labels ``@1``, ``@2``, …)
and the ENUM/SET strings (ENUM → index, SET → bitmask).
"""

from __future__ import annotations

import base64
import datetime as dt
import random
import re
import struct
import uuid
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest

from tests.integration import binlog_oracle

pytestmark = pytest.mark.server

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
    """A PyMySQL value of ``_select_expr(col)`` in the DESIGN.md JSON form."""
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
            from binlogd.protocol.events import RowsEvent

            from binlogd.filetools import dump_events

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


def _run_scenario(server, minimal: bool) -> Scenario:

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


@pytest.fixture(scope="module", params=["mariadb", "mariadb_minimal"])
def scenario(request):
    server = request.getfixturevalue(request.param)
    if server.flavor != "mariadb":
        pytest.skip("this table and its expectations are MariaDB's (JSON as LONGTEXT, log_bin_compress)")
    sc = _run_scenario(server, minimal=request.param == "mariadb_minimal")
    yield sc
    server.sql(f"DROP DATABASE IF EXISTS `{sc.schema}`")


# --------------------------------------------------------------------------- comparison helpers


def _short(value) -> str:
    text = repr(value)
    if len(text) <= 90:
        return text
    return f"{text[:60]}…{text[-20:]} (len {len(value) if hasattr(value, '__len__') else '?'})"


def _type_of(col: Col) -> str:
    ddl = col.ddl.split(" NULL")[0]
    return ddl if len(ddl) <= 40 else ddl[:30] + "…)"


def _same(expected, got) -> bool:
    if expected is None or got is None:
        return expected is got
    # the JSON type matters too: 1 (int) is not 1.0 (float) nor "1" nor True
    return type(expected) is type(got) and expected == got


def _diff_rows(where: str, expected: dict, got, out: list[str]) -> None:
    if not isinstance(got, dict):
        out.append(f"{where}: decoded row is {type(got).__name__}, not a dict")
        return
    if set(got) != set(expected):
        out.append(f"{where}: keys differ: missing {sorted(set(expected) - set(got))}, "
                   f"extra {sorted(set(got) - set(expected))}")
    for label, want in expected.items():
        if label in got and not _same(want, got[label]):
            col = COLUMNS[int(label[1:]) - 1] if label.startswith("@") else BY_NAME[label]
            out.append(f"{where} {label} [{_type_of(col)}]: expected {_short(want)}, "
                       f"got {_short(got[label])}")


def _id_of(sc: Scenario, row: dict):
    return row.get(sc.label(BY_NAME["id"])) if isinstance(row, dict) else None


# --------------------------------------------------------------------------- tests: decoder vs SELECT


def test_scenario_stored_what_was_written(scenario: Scenario) -> None:
    """The SELECT oracle holds the boundary values we meant (no silent clamping by sql_mode='')."""
    got = scenario.after_insert
    assert sorted(got) == INSERTED_IDS
    for row in (ROW_MIN, ROW_MAX):
        for c in COLUMNS:
            if c.kind == "int":
                assert got[row["id"]][c.name] == row[c.name], c.name
    assert got[2]["d65"] == "9" * 35 + "." + "9" * 30
    assert got[1]["d65"] == "-" + "9" * 35 + "." + "9" * 30
    assert got[2]["b64"] == 2**64 - 1 and got[2]["b17"] == 2**17 - 1
    assert got[1]["t0"] == "-838:59:59" and got[3]["t3"] == "-00:00:01.500"
    assert got[3]["dt"] == "0000-00-00" and got[3]["ts0"] == "0000-00-00 00:00:00"
    assert got[3]["dbl"] == 0.30000000000000004
    assert got[5]["lb"] == base64.b64encode(BIG_BLOB).decode()
    assert all(v is None for k, v in got[4].items() if k != "id")


def test_row_events_are_the_expected_types(scenario: Scenario) -> None:
    events = scenario.events()
    kinds = [e.kind for e in events]
    assert set(kinds) == {"insert", "update", "delete"}, kinds
    types = {e.type_code for e in events}
    if scenario.minimal:
        assert types <= COMPRESSED_ROW_TYPES, f"log_bin_compress on, but row event types are {types}"
    else:
        assert types <= PLAIN_ROW_TYPES, f"row event types {types}"


def test_labels(scenario: Scenario) -> None:
    events = scenario.events()
    assert events
    want = tuple(f"@{i + 1}" for i in range(len(COLUMNS))) if scenario.minimal else tuple(c.name for c in COLUMNS)
    for e in events:
        assert e.columns == want
        for row in (e.rows or ()):
            for image in (row if isinstance(row, tuple) else (row,)):
                assert tuple(image) == want


def _check_ids(what: str, got: list, want: list, problems: list[str]) -> None:
    if got != want:
        problems.append(f"{what}: decoded rows have ids {got}, expected {want}")


def _report(problems: list[str]) -> None:
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems)


def test_inserts_match_select(scenario: Scenario) -> None:
    problems: list[str] = []
    rows = scenario.rows("insert", problems)
    _check_ids("inserts", [_id_of(scenario, r) for r in rows], INSERTED_IDS, problems)
    for r in rows:
        rid = _id_of(scenario, r)
        if rid in scenario.after_insert:
            _diff_rows(f"insert id={rid}", scenario.expected(scenario.after_insert[rid]), r, problems)
    _report(problems)


def test_updates_match_select(scenario: Scenario) -> None:
    problems: list[str] = []
    pairs = scenario.rows("update", problems)
    if not all(isinstance(p, tuple) and len(p) == 2 for p in pairs):
        pytest.fail(f"update rows are not (before, after) pairs: {[type(p).__name__ for p in pairs]}")
    _check_ids("updates", [_id_of(scenario, b) for b, _ in pairs], UPDATED_IDS, problems)
    for before, after in pairs:
        rid = _id_of(scenario, before)
        if rid in scenario.after_update:
            _diff_rows(f"update id={rid} before", scenario.expected(scenario.after_insert[rid]), before, problems)
            _diff_rows(f"update id={rid} after", scenario.expected(scenario.after_update[rid]), after, problems)
    _report(problems)


def test_deletes_match_select(scenario: Scenario) -> None:
    problems: list[str] = []
    rows = scenario.rows("delete", problems)
    _check_ids("deletes", [_id_of(scenario, r) for r in rows], DELETED_IDS, problems)
    for r in rows:
        rid = _id_of(scenario, r)
        if rid in scenario.after_update:
            _diff_rows(f"delete id={rid}", scenario.expected(scenario.after_update[rid]), r, problems)
    _report(problems)


def test_timestamps_from_non_utc_sessions_are_utc(scenario: Scenario) -> None:
    """Written in +05:30 / -08:00 sessions; the binlog (and so the decoder) must give UTC."""
    problems: list[str] = []
    labels = [scenario.label(BY_NAME[n]) for n in ("ts0", "ts3", "ts6")]
    for rid, want in UTC_EXPECTED.items():   # the SELECT oracle agrees with the hand-made expectation
        assert tuple(scenario.after_insert[rid][n] for n in ("ts0", "ts3", "ts6")) == want
    errors: list[str] = []   # events that failed to decode: only reported if they hold our rows
    inserted = {_id_of(scenario, r): r for r in scenario.rows("insert", errors)}
    for rid, want in UTC_EXPECTED.items():
        if rid not in inserted:
            problems.append(f"insert id={rid} not decoded {errors}")
            continue
        got = tuple(inserted[rid].get(lbl) for lbl in labels)
        if got != want:
            problems.append(f"insert id={rid} TIMESTAMPs: expected {want}, got {got}")
    updated = {_id_of(scenario, a): a for _, a in scenario.rows("update", errors)}
    got = updated.get(3, {}).get(labels[0]) if 3 in updated else f"not decoded {errors}"
    if got != "2021-01-01 08:00:00":
        problems.append(f"update id=3 ts0 (written in a -08:00 session): expected '2021-01-01 08:00:00', got {got!r}")
    _report(problems)


def test_big_blob_round_trips(scenario: Scenario) -> None:
    problems: list[str] = []
    lb = scenario.label(BY_NAME["lb"])
    for kind in ("insert", "delete"):
        errors: list[str] = []
        rows = {_id_of(scenario, r): r for r in scenario.rows(kind, errors)}
        if 5 not in rows:
            problems.append(f"{kind} of id=5 (the 1 MiB LONGBLOB) not decoded {errors}")
        elif base64.b64decode(rows[5][lb]) != BIG_BLOB:
            problems.append(f"{kind} of id=5: the 1 MiB LONGBLOB differs")
    _report(problems)


# --------------------------------------------------------------------------- tests: decoder vs mysqlbinlog -vv

_NUM_WITH_UNSIGNED = re.compile(rb"^(-?\d+)(?: \((\d+)\))?$")
_BITS = re.compile(rb"^b'([01]*)'$")
_UNIX = re.compile(rb"^(\d+)(?:\.(\d+))?$")


def _ours_as_bytes(col: Col, ours) -> bytes:
    if col.kind == "text":
        return ours.encode(col.charset)
    return base64.b64decode(ours)


def _enum_index(col: Col, ours, minimal: bool) -> int | None:
    """Our ENUM value as its index (None when it is neither what the mode wants nor a member)."""
    if minimal:
        return ours if type(ours) is int else None
    if ours == "":
        return 0
    return col.members.index(ours) + 1 if ours in col.members else None


def _set_mask(col: Col, ours, minimal: bool) -> int | None:
    if minimal:
        return ours if type(ours) is int else None
    if not isinstance(ours, list) or not all(m in col.members for m in ours):
        return None
    return sum(1 << col.members.index(m) for m in ours)


def _printed_matches(col: Col, pv: binlog_oracle.PrintedValue, ours, minimal: bool) -> bool:
    """Does mysqlbinlog's printed value say the same as our decoded JSON form?

    Normalisations (mariadb-binlog 10.11 -vv formatting vs DESIGN.md's JSON forms):
    - NULL: ``NULL`` with ``is_null=1`` ↔ None (the flag decides: a string 'NULL' prints quoted).
    - integers: a negative stored value prints as ``-1 (4294967295)``, the unsigned reading in the
      parentheses, whatever the column's signedness: unsigned columns take the parenthesised number.
    - DECIMAL: printed unquoted with all ``scale`` digits, e.g. ``-1.5000``: equal as text.
    - FLOAT: printed ``%-20g`` of the float32 (6 significant digits, space padded): compare with
      ``%g`` of our value rounded to float32; DOUBLE: ``%.20g``, which reads back as the same double.
    - BIT(n): ``b'0101…'`` with n digits → int(bits, 2).
    - YEAR: mysqlbinlog prints 1900 + the stored byte, so the zero year 0000 prints as 1900.
    - DATE: ``'YYYY:MM:DD'`` (colons!) → dashes.
    - TIME(n), DATETIME(n): quoted, the same text as ours.
    - TIMESTAMP(n): unix seconds with n fraction digits → UTC text; 0 → the zero timestamp.
    - strings, TEXT, JSON (LONGTEXT): the stored bytes in the column's charset between quotes, bytes
      below 0x20 as ``\\xNN``, nothing else escaped: we encode ours with the charset and escape alike.
    - BINARY/VARBINARY/BLOB/GEOMETRY: the stored bytes likewise, ours base64-decoded. BINARY(n) is
      stored with its trailing 0x00 padding stripped (SELECT and binlogd give the padded value),
      so trailing zero bytes are stripped from ours before comparing.
    - ENUM: the index. SET: the stored bytes in storage order (little-endian), each printed as 8 bits
      most significant first: ``b'1111111100000001'`` is 0x01FF = 511 (ours: names → index/mask
      with FULL metadata).
    """
    if pv.is_null or ours is None:
        return pv.is_null and ours is None
    text, k = pv.text, col.kind
    if k == "int":
        m = _NUM_WITH_UNSIGNED.match(text)
        if not m:
            return False
        value = int(m.group(2)) if (col.unsigned and m.group(2)) else int(m.group(1))
        return value == ours
    if k == "decimal":
        return text.decode() == ours
    if k == "float":
        if not isinstance(ours, float):
            return False
        as_f32 = struct.unpack("<f", struct.pack("<f", ours))[0]
        return text == (b"%g" % as_f32)
    if k == "double":
        return isinstance(ours, float) and float(text) == ours
    if k == "bit":
        m = _BITS.match(text)
        return bool(m) and int(m.group(1) or b"0", 2) == ours
    if k == "year":
        printed = int(text)
        return (0 if printed == 1900 else printed) == ours
    if k == "date":
        return pv.unquoted.replace(b":", b"-").decode() == ours
    if k in ("time", "datetime"):
        return pv.unquoted.decode() == ours
    if k == "timestamp":
        m = _UNIX.match(text)
        if not m:
            return False
        frac = (m.group(2) or b"").decode()
        return _unix_to_utc_text(Decimal(f"{m.group(1).decode()}.{frac or '0'}"), col.fsp) == ours
    if k in ("text", "binary"):
        raw = _ours_as_bytes(col, ours)
        if col.pad:
            raw = raw.rstrip(b"\x00")
        return pv.unquoted == binlog_oracle.quote_like_mysqlbinlog(raw)
    if k == "enum":
        return int(text) == _enum_index(col, ours, minimal)
    if k == "set":
        m = _BITS.match(text)
        if not m or len(m.group(1)) % 8:
            return False
        bits = m.group(1)
        stored = bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))
        return int.from_bytes(stored, "little") == _set_mask(col, ours, minimal)
    raise AssertionError(k)


def test_matches_mysqlbinlog(scenario: Scenario) -> None:
    if binlog_oracle.find_mysqlbinlog() is None:
        pytest.skip("mariadb-binlog / mysqlbinlog not installed")
    printed = binlog_oracle.row_changes(scenario.file, scenario.schema, scenario.table)
    assert [c.kind for c in printed] == ["insert"] * len(INSERTED_IDS) + ["update"] * len(UPDATED_IDS) \
        + ["delete"] * len(DELETED_IDS)
    problems: list[str] = []
    # ours, flattened into (kind, before, after) like the oracle's changes; None for rows of events
    # that failed to decode (reported once, by event)
    flat: list = []
    for d in scenario.events():
        if d.error is not None:
            problems.append(f"{d.kind} event at {scenario.file.name}:{d.pos} failed to decode: {d.error}")
            continue
        for r in d.rows:
            images = (None, r) if d.kind == "insert" else (r, None) if d.kind == "delete" else tuple(r)
            flat.append((d.kind, *images))
    # match printed changes to ours by kind and id (printed @1 is the id, as mysqlbinlog prints it)
    ours_by_key = {}
    for kind, before, after in flat:
        ours_by_key[(kind, _id_of(scenario, before if before is not None else after))] = (before, after)
    for change in printed:
        image = change.before if change.before is not None else change.after
        key = (change.kind, int(image["@1"].text))
        if key not in ours_by_key:
            problems.append(f"{change.kind} id={key[1]}: printed by mysqlbinlog, not decoded by binlogd")
            continue
        before, after = ours_by_key[key]
        for side, pimg, oimg in (("before", change.before, before), ("after", change.after, after)):
            if pimg is None:
                continue
            assert set(pimg) == {f"@{i + 1}" for i in range(len(COLUMNS))}
            for i, col in enumerate(COLUMNS):
                pv = pimg[f"@{i + 1}"]
                value = oimg.get(scenario.label(col))
                if not _printed_matches(col, pv, value, scenario.minimal):
                    problems.append(f"{change.kind} id={key[1]} {side} @{i + 1} {col.name} [{pv.type}]: "
                                    f"mysqlbinlog printed {_short(pv.text)}, binlogd gave {_short(value)}")
    _report(problems)


# --------------------------------------------------------------------------- the oracle's own checks


def test_oracle_parses_insert_update_delete() -> None:
    out = (b"# at 4\n### INSERT INTO `d`.`t`\n### SET\n"
           b"###   @1=-1 (4294967295) /* INT meta=0 nullable=0 is_null=0 */\n"
           b"###   @2='a /* b */ c' /* VARSTRING(40) meta=40 nullable=1 is_null=0 */\n"
           b"###   @3=1.5                  /* FLOAT meta=4 nullable=1 is_null=0 */\n"
           b"### UPDATE `d`.`t`\n### WHERE\n###   @1=1 /* INT meta=0 nullable=0 is_null=0 */\n"
           b"### SET\n###   @1=NULL /* INT meta=0 nullable=1 is_null=1 */\n"
           b"### DELETE FROM `d`.`t`\n### WHERE\n###   @1=2 /* INT meta=0 nullable=0 is_null=0 */\n")
    changes = binlog_oracle.parse_verbose(out)
    assert [c.kind for c in changes] == ["insert", "update", "delete"]
    ins = changes[0].after
    assert ins["@1"].text == b"-1 (4294967295)" and ins["@2"].unquoted == b"a /* b */ c"
    assert ins["@3"].text == b"1.5" and ins["@3"].type == "FLOAT"
    assert changes[1].before["@1"].text == b"1" and changes[1].after["@1"].is_null
    assert changes[2].before["@1"].text == b"2" and changes[2].after is None
    assert binlog_oracle.quote_like_mysqlbinlog(b"a\x00\n'\\\xff") == b"a\\x00\\x0a'\\\xff"
    with pytest.raises(ValueError):
        binlog_oracle.parse_verbose(b"### INSERT INTO `d`.`t`\n### SET\n###   @1 garbage\n")

"""Every MariaDB column type through a real binlog: decoded values against two oracles.

One table holds every column type MariaDB 10.11 writes into row events (integers at their
boundaries, DECIMAL, FLOAT/DOUBLE, BIT, YEAR, DATE, TIME/DATETIME/TIMESTAMP with several fsp,
CHAR/VARCHAR in utf8mb4 and latin1, BINARY/VARBINARY, the TEXT and BLOB sizes including a 1 MiB
LONGBLOB, ENUM (1 and 2 bytes), SET (2 bytes), JSON, GEOMETRY/POINT) and a row of NULLs. Rows are
inserted (some in non-UTC session time zones), updated (full row images: NULL→value, value→NULL,
multi-row) and deleted, between two ``FLUSH BINARY LOGS`` so the file in between holds only them.

The decoded rows (``binlogd.cli.filetools.dump_events``) are compared with
1. the server's own ``SELECT`` of the rows, converted to the JSON forms of README.md ("Values") by
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
import re
import struct
from decimal import Decimal

import pytest

from tests.support import binlog_oracle
from tests.support.every_type import (
    BIG_BLOB,
    BY_NAME,
    COLUMNS,
    COMPRESSED_ROW_TYPES,
    DELETED_IDS,
    INSERTED_IDS,
    PLAIN_ROW_TYPES,
    ROW_MAX,
    ROW_MIN,
    UPDATED_IDS,
    UTC_EXPECTED,
    Col,
    Scenario,
    _unix_to_utc_text,
    run_scenario,
)

pytestmark = pytest.mark.server

@pytest.fixture(scope="module", params=["mariadb", "mariadb_minimal"])
def scenario(request, server_binaries):
    server = request.getfixturevalue(request.param)
    if server.flavor != "mariadb":
        pytest.skip("this table and its expectations are MariaDB's (JSON as LONGTEXT, log_bin_compress)")
    sc = run_scenario(server, minimal=request.param == "mariadb_minimal")
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

    Normalisations (mariadb-binlog 10.11 -vv formatting vs README.md's JSON forms):
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

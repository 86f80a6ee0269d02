"""Tests for protocol.gtid: MySQL GTID sets (text and binary) and MariaDB GTID lists."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from binlogd.protocol.errors import ProtocolError, TruncatedError
from binlogd.protocol.gtid import (
    GNO_MAX,
    GTID_LIST_FLAG_UNTIL_REACHED,
    Gtid,
    GtidSyntaxError,
    MariadbGtid,
    MariadbGtidList,
    MysqlGtidSet,
    _encode_varlen,
    decode_mariadb_gtid_list,
    decode_varlen,
)

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
U2 = "4e11fa47-71ca-11e1-9e33-c80aa9429562"
U0 = "1e11fa47-71ca-11e1-9e33-c80aa9429562"

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "binlogs"
PREVIOUS_GTIDS = 35
MARIADB_GTID_LIST = 163


def event_body(path: Path, type_code: int) -> bytes:
    """Body (without header and CRC32 footer) of the first event of ``type_code`` in a CRC32 binlog file."""
    if not path.exists():
        pytest.skip(f"binlog corpus not found at {path}")
    data = path.read_bytes()
    assert data[:4] == b"\xfebin"
    pos = 4
    while pos + 19 <= len(data):
        _ts, typ, _sid, length, _next, _flags = struct.unpack_from("<IBIIIH", data, pos)
        assert length >= 19
        if typ == type_code:
            return data[pos + 19 : pos + length - 4]
        pos += length
    raise AssertionError(f"no event of type {type_code} in {path}")


# ---------------------------------------------------------------- Gtid


def test_gtid_normalizes_and_formats():
    g = Gtid(U1.upper(), 5)
    assert g.sid == U1 and g.tag is None
    assert str(g) == f"{U1}:5"
    t = Gtid(U1.replace("-", ""), 7, "MyTag")
    assert t.sid == U1 and t.tag == "mytag"
    assert str(t) == f"{U1}:mytag:7"
    assert Gtid(U1, 1, "") == Gtid(U1, 1)


def test_gtid_parse_round_trip():
    assert Gtid.parse(f"{U1}:42") == Gtid(U1, 42)
    assert Gtid.parse(f"{U1}:Tag_1:42") == Gtid(U1, 42, "tag_1")
    assert Gtid.parse(str(Gtid(U1, GNO_MAX, "t"))) == Gtid(U1, GNO_MAX, "t")


@pytest.mark.parametrize(
    "text",
    [f"{U1}", f"{U1}:0", f"{U1}:-1", f"{U1}:x", f"{U1}:1-2", "abc:1", f"{U1}:1tag:1", f"{U1}:a:b:1",
     f"{U1}:{GNO_MAX + 1}", f"{U1}:{'a' * 33}:1"],
)
def test_gtid_parse_rejects(text):
    with pytest.raises(GtidSyntaxError):
        Gtid.parse(text)


def test_gtid_syntax_error_is_protocol_and_value_error():
    with pytest.raises(ProtocolError):
        Gtid(U1, 0)
    with pytest.raises(ValueError):
        Gtid("nope", 1)


# ---------------------------------------------------------------- MysqlGtidSet text


def test_parse_empty_and_blank():
    for text in ("", "   ", "\n"):
        s = MysqlGtidSet.parse(text)
        assert s.is_empty() and not s and str(s) == ""
    assert MysqlGtidSet.parse("") == MysqlGtidSet()


def test_parse_mysql_printed_form_with_newlines():
    # SELECT @@gtid_executed separates uuids with ",\n"
    text = f"{U2}:1-5:7,\n{U1}:3"
    s = MysqlGtidSet.parse(text)
    assert str(s) == f"{U1}:3,{U2}:1-5:7"


def test_parse_merges_and_sorts_ranges():
    s = MysqlGtidSet.parse(f"{U1}:7:1-3:2-5:9-10:8")
    assert str(s) == f"{U1}:1-5:7-10"
    assert str(MysqlGtidSet.parse(f"{U1}:1-3:4-6")) == f"{U1}:1-6"
    assert str(MysqlGtidSet.parse(f"{U1}:1-3,{U1}:5")) == f"{U1}:1-3:5"


def test_parse_tagged_mysql_doc_form():
    s = MysqlGtidSet.parse(f"{U1}:1-13:mytag:1-2")
    assert Gtid(U1, 13) in s and Gtid(U1, 14) not in s
    assert Gtid(U1, 2, "mytag") in s and Gtid(U1, 3, "mytag") not in s
    assert str(s) == f"{U1}:1-13:mytag:1-2"


def test_str_puts_untagged_first_then_tags_sorted():
    s = MysqlGtidSet.parse(f"{U1}:zz:1:AA:5-6,{U1}:3")
    assert str(s) == f"{U1}:3:aa:5-6:zz:1"
    only_tagged = MysqlGtidSet.parse(f"{U1}:t:1-2")
    assert str(only_tagged) == f"{U1}:t:1-2"


def test_parse_is_case_insensitive_and_accepts_spaces():
    s = MysqlGtidSet.parse(f"  {U1.upper()} : 1 - 3 : 5 ")
    assert str(s) == f"{U1}:1-3:5"


@pytest.mark.parametrize(
    "text",
    [f"{U1}:5-3", f"{U1}:0", f"{U1}:0-2", f"{U1}:1-", f"{U1}:1-2-3", f"{U1}:-1", f"{U1}::1", "zzz:1",
     f"{U1}:1,garbage", f"{U1}:9tag:1", f"{U1}:{GNO_MAX + 1}", f"{U1}:t-x:1"],
)
def test_parse_rejects(text):
    with pytest.raises(GtidSyntaxError):
        MysqlGtidSet.parse(text)


def test_parse_uuid_without_intervals_is_empty_for_that_uuid():
    assert MysqlGtidSet.parse(f"{U1},{U2}:1") == MysqlGtidSet.parse(f"{U2}:1")


# ---------------------------------------------------------------- MysqlGtidSet operations


def test_add_contains_and_merge():
    s = MysqlGtidSet()
    assert s.add(Gtid(U1, 3)) is None
    s.add(Gtid(U1, 1))
    assert str(s) == f"{U1}:1:3"
    s.add(Gtid(U1, 2))
    assert str(s) == f"{U1}:1-3"
    s.add(Gtid(U1, 3))  # already present: no change
    assert str(s) == f"{U1}:1-3"
    assert Gtid(U1, 2) in s and Gtid(U1, 4) not in s and Gtid(U2, 2) not in s
    assert Gtid(U1, 2, "t") not in s
    assert "not a gtid" not in s


def test_add_interval_bounds():
    s = MysqlGtidSet()
    s.add_interval(U1, 1, GNO_MAX + 1)
    assert Gtid(U1, GNO_MAX) in s
    with pytest.raises(GtidSyntaxError):
        s.add_interval(U1, 0, 2)
    with pytest.raises(GtidSyntaxError):
        s.add_interval(U1, 5, 5)
    with pytest.raises(GtidSyntaxError):
        s.add_interval(U1, 1, GNO_MAX + 2)


def test_items_uses_half_open_intervals():
    s = MysqlGtidSet.parse(f"{U2}:1-5:7,{U1}:t:2")
    assert list(s.items()) == [(U1, "t", ((2, 3),)), (U2, None, ((1, 6), (7, 8)))]


def test_union_update_copy_eq():
    a = MysqlGtidSet.parse(f"{U1}:1-3")
    b = MysqlGtidSet.parse(f"{U1}:4-6,{U2}:1")
    u = a.union(b)
    assert str(u) == f"{U1}:1-6,{U2}:1"
    assert str(a) == f"{U1}:1-3" and str(b) == f"{U1}:4-6,{U2}:1"  # union does not mutate
    assert (a | b) == u
    c = a.copy()
    c.update(b)
    assert c == u and a != u
    assert a == MysqlGtidSet.parse(f"{U1}:1:2:3")
    assert a != f"{U1}:1-3"
    with pytest.raises(TypeError):
        hash(a)


def test_contains_binary_search_across_many_intervals():
    s = MysqlGtidSet()
    for g in range(1, 2000, 2):
        s.add(Gtid(U1, g))
    assert all(Gtid(U1, g) in s for g in range(1, 2000, 2))
    assert not any(Gtid(U1, g) in s for g in range(2, 2000, 2))


# ---------------------------------------------------------------- MysqlGtidSet binary


def test_encode_untagged_layout():
    s = MysqlGtidSet.parse(f"{U1}:1-5:7")
    expected = (
        struct.pack("<Q", 1)
        + bytes.fromhex(U1.replace("-", ""))
        + struct.pack("<Q", 2)
        + struct.pack("<QQ", 1, 6)
        + struct.pack("<QQ", 7, 8)
    )
    assert s.encode() == expected
    assert MysqlGtidSet().encode() == b"\x00" * 8


def test_encode_tagged_layout():
    s = MysqlGtidSet.parse(f"{U1}:1:ab:2")
    expected = (
        bytes([1, 2, 0, 0, 0, 0, 0, 1])
        + bytes.fromhex(U1.replace("-", "")) + b"\x00" + struct.pack("<QQQ", 1, 1, 2)
        + bytes.fromhex(U1.replace("-", "")) + bytes([2 << 1]) + b"ab" + struct.pack("<QQQ", 1, 2, 3)
    )
    assert s.encode() == expected


def test_decode_previous_gtids_without_tag_from_mysql_8_0_40():
    body = event_body(CORPUS / "rust_mysql_common/binlog_transaction_previous_GTID_no_tag.000001", PREVIOUS_GTIDS)
    s = MysqlGtidSet.decode(body)
    assert str(s) == "b9b88c66-0755-11f1-9899-4a9da94c4d71:1-2"
    assert s.encode() == body


def test_decode_previous_gtids_with_tag_from_mysql_9_6():
    body = event_body(CORPUS / "rust_mysql_common/binlog_transaction_with_GTID_TAG.000001", PREVIOUS_GTIDS)
    s = MysqlGtidSet.decode(memoryview(body))
    assert str(s) == "55778904-0299-11f1-b1b8-4ef0c4956feb:1-13:mytag:1-2"
    assert s == MysqlGtidSet.parse("55778904-0299-11f1-b1b8-4ef0c4956feb:1-13:mytag:1-2")
    assert s.encode() == body


def test_encode_untagged_when_tags_removed():
    tagged = MysqlGtidSet.parse(f"{U1}:1-13:mytag:1-2")
    assert tagged.encode()[7] == 1
    plain = MysqlGtidSet.parse(f"{U1}:1-13")
    assert plain.encode()[:8] == struct.pack("<Q", 1)


def test_decode_every_prefix_is_truncated():
    for text in (f"{U1}:1-5:7,{U2}:3", f"{U1}:1:mytag:1-2"):
        raw = MysqlGtidSet.parse(text).encode()
        for cut in range(len(raw)):
            with pytest.raises(TruncatedError):
                MysqlGtidSet.decode(raw[:cut])


def test_decode_rejects_trailing_bytes_but_decode_from_reports_end():
    raw = MysqlGtidSet.parse(f"{U1}:1").encode()
    with pytest.raises(ProtocolError):
        MysqlGtidSet.decode(raw + b"\x00")
    s, end = MysqlGtidSet.decode_from(b"xx" + raw + b"tail", 2)
    assert end == 2 + len(raw) and str(s) == f"{U1}:1"


def test_decode_huge_declared_counts_fail_fast():
    with pytest.raises(TruncatedError):
        MysqlGtidSet.decode(struct.pack("<Q", (1 << 56) - 1))
    one = bytes.fromhex(U1.replace("-", ""))
    with pytest.raises(TruncatedError):
        MysqlGtidSet.decode(struct.pack("<Q", 1) + one + struct.pack("<Q", 1 << 60))


@pytest.mark.parametrize("start,stop", [(0, 2), (5, 5), (6, 5), (1, 1 << 63)])
def test_decode_rejects_bad_intervals(start, stop):
    raw = struct.pack("<Q", 1) + bytes(16) + struct.pack("<QQQ", 1, start, stop)
    with pytest.raises(ProtocolError):
        MysqlGtidSet.decode(raw)


def test_decode_rejects_unknown_format_and_bad_tag():
    with pytest.raises(ProtocolError):
        MysqlGtidSet.decode(bytes([0, 0, 0, 0, 0, 0, 0, 2]))
    bad_tag = bytes([1, 1, 0, 0, 0, 0, 0, 1]) + bytes(16) + bytes([2 << 1]) + b"A-" + struct.pack("<QQQ", 1, 1, 2)
    with pytest.raises(ProtocolError):
        MysqlGtidSet.decode(bad_tag)


def test_varlen_known_bytes():
    assert _encode_varlen(0) == b"\x00"
    assert _encode_varlen(5) == b"\x0a"
    assert _encode_varlen(127) == b"\xfe"
    assert _encode_varlen(128) == b"\x01\x02"
    assert _encode_varlen((1 << 64) - 1) == b"\xff" + b"\xff" * 8


@given(st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_varlen_round_trip(value):
    raw = _encode_varlen(value)
    assert decode_varlen(raw + b"junk", 0) == (value, len(raw))


# ---------------------------------------------------------------- properties

_uuids = st.sampled_from([U0, U1, U2]) | st.uuids().map(str)
_tags = st.none() | st.sampled_from(["a", "mytag", "_x9"]) | st.from_regex(r"[a-z_][a-z0-9_]{0,31}", fullmatch=True)
_intervals = st.tuples(st.integers(1, 60), st.integers(1, 8)) | st.tuples(
    st.integers(1, GNO_MAX), st.integers(1, 1 << 40)
)
_sets = st.lists(st.tuples(_uuids, _tags, _intervals), max_size=12)


def _build(items) -> MysqlGtidSet:
    s = MysqlGtidSet()
    for sid, tag, (start, n) in items:
        s.add_interval(sid, start, min(start + n, GNO_MAX + 1), tag)
    return s


@settings(max_examples=300)
@given(_sets)
def test_property_text_and_binary_round_trip(items):
    s = _build(items)
    assert MysqlGtidSet.parse(str(s)) == s
    assert str(MysqlGtidSet.parse(str(s))) == str(s)
    assert MysqlGtidSet.decode(s.encode()) == s
    assert MysqlGtidSet.decode(s.encode()).encode() == s.encode()


@given(st.lists(st.tuples(st.sampled_from([U1, U2]), st.sampled_from([None, "t"]), st.integers(1, 40)), max_size=60),
       st.integers(1, 41))
def test_property_matches_naive_model(adds, probe):
    s = MysqlGtidSet()
    model = set()
    for sid, tag, gno in adds:
        s.add(Gtid(sid, gno, tag))
        model.add((sid, tag, gno))
    for sid in (U1, U2):
        for tag in (None, "t"):
            assert (Gtid(sid, probe, tag) in s) == ((sid, tag, probe) in model)
    # the stored intervals are sorted, disjoint and non-adjacent
    for _sid, _tag, ivs in s.items():
        assert all(a < b for a, b in ivs)
        assert all(ivs[i][1] < ivs[i + 1][0] for i in range(len(ivs) - 1))


# ---------------------------------------------------------------- MariaDB


def test_mariadb_gtid_parse_and_str():
    g = MariadbGtid.parse("0-1-100")
    assert (g.domain_id, g.server_id, g.seq_no) == (0, 1, 100)
    assert str(g) == "0-1-100"
    assert MariadbGtid.parse(" 4294967295-2-18446744073709551615 ").domain_id == 4294967295


@pytest.mark.parametrize("text", ["", "0-1", "0-1-2-3", "a-1-2", "-1-1-2", "4294967296-1-1", "0-1-18446744073709551616"])
def test_mariadb_gtid_rejects(text):
    with pytest.raises(GtidSyntaxError):
        MariadbGtid.parse(text)


def test_mariadb_list_parse_sorts_and_rejects_duplicate_domain():
    lst = MariadbGtidList.parse("1-2-5, 0-1-100")
    assert str(lst) == "0-1-100,1-2-5"
    assert lst.get(1) == MariadbGtid(1, 2, 5) and lst.get(7) is None
    assert MariadbGtidList.parse("").is_empty() and str(MariadbGtidList.parse(" ")) == ""
    with pytest.raises(GtidSyntaxError):
        MariadbGtidList.parse("0-1-100,0-2-101")


def test_mariadb_list_advance_replaces_domain():
    lst = MariadbGtidList.parse("0-1-100,1-2-5")
    before = lst.copy()
    assert lst.advance(MariadbGtid(0, 3, 101)) is None
    lst.advance(MariadbGtid(2, 1, 1))
    assert str(lst) == "0-3-101,1-2-5,2-1-1"
    assert MariadbGtid(0, 3, 101) in lst and MariadbGtid(0, 1, 100) not in lst
    assert before == MariadbGtidList.parse("0-1-100,1-2-5") and before != lst
    assert len(lst) == 3


def _gtid_list_body(entries, flags=0):
    return struct.pack("<I", len(entries) | (flags << 28)) + b"".join(struct.pack("<IIQ", *e) for e in entries)


def test_mariadb_list_decode():
    body = _gtid_list_body([(1, 2, 5), (0, 1, 100)])
    assert str(MariadbGtidList.decode(body)) == "0-1-100,1-2-5"
    entries, flags = decode_mariadb_gtid_list(_gtid_list_body([(0, 1, 7)], GTID_LIST_FLAG_UNTIL_REACHED) + b"crc!")
    assert entries == (MariadbGtid(0, 1, 7),) and flags == GTID_LIST_FLAG_UNTIL_REACHED


def test_mariadb_list_decode_last_entry_of_a_domain_wins():
    body = _gtid_list_body([(0, 1, 100), (0, 2, 250), (1, 1, 3)])
    entries, _ = decode_mariadb_gtid_list(body)
    assert len(entries) == 3
    assert str(MariadbGtidList.decode(body)) == "0-2-250,1-1-3"


def test_mariadb_list_decode_truncated():
    body = _gtid_list_body([(0, 1, 100), (1, 2, 5)])
    for cut in range(len(body)):
        with pytest.raises(TruncatedError):
            MariadbGtidList.decode(body[:cut])


def test_mariadb_list_decode_from_mariadb_10_5_binlog():
    body = event_body(CORPUS / "rust_mysql_common/mariadb-bin.000001", MARIADB_GTID_LIST)
    lst = MariadbGtidList.decode(body)
    assert lst.is_empty() and str(lst) == ""


@given(st.lists(st.tuples(st.integers(0, (1 << 32) - 1), st.integers(0, (1 << 32) - 1),
                          st.integers(0, (1 << 64) - 1)), max_size=10, unique_by=lambda t: t[0]))
def test_mariadb_list_property_round_trip(entries):
    lst = MariadbGtidList(MariadbGtid(*e) for e in entries)
    assert MariadbGtidList.parse(str(lst)) == lst
    assert MariadbGtidList.decode(_gtid_list_body(entries)) == lst

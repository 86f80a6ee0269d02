"""Text-protocol rows: found by protocol.textrows (C twin ``_textrows``), written as JSON by library.textjson (C
twin ``_textjson``), each C twin against its Python reference.

- every column type the snapshot reads, NULLs, long values (2-, 3- and 8-byte lengths), a row of 16 MiB and
  more (several packets), invalid UTF-8, odd DOUBLE texts: C and Python give the same bytes, and each value
  is what a value-by-value encoder (:func:`after_encoder`, here) gives;
- the change lines equal the sink's ``dumps`` of the change dicts, the snapshot's last row included;
  ``scan`` finds whole rows, EOF and ERR; ``header`` walks the packets before the rows;
- malformed rows raise ValueError in both; ``BINLOGD_PURE_PYTHON=1`` turns the C twins off.
"""

from __future__ import annotations

import math
import os
import random
import struct
import subprocess
import sys
from base64 import b64encode

import orjson
import pytest

from binlogd.daemon.snapshot.tables import BYTE_TYPES, INT_TYPES, TableInfo, vector_values
from binlogd.daemon.snapshot.wire import ChunkReader, ResultRows, plan
from binlogd.library import textjson
from binlogd.library.serialize import dumps
from binlogd.protocol import textrows
from binlogd.protocol.values import float32
from tests.support.textproto import lenenc, packets

C = textjson.C
need_c = pytest.mark.skipif(C is None, reason="binlogd.library._textjson is not built (or BINLOGD_PURE_PYTHON)")

TYPES = ("bigint", "int", "tinyint", "year", "decimal", "date", "datetime", "timestamp", "time", "double", "float",
         "bit", "set", "enum", "json", "varchar", "text", "longtext", "char", "blob", "varbinary", "binary",
         "geometry", "vector")


def _encoder(data_type: str):
    """Raw text-protocol bytes of a ``data_type`` value -> its JSON bytes, one value at a time (the reference the
    plan's writers are held to); None: the bytes are already JSON."""
    if data_type in INT_TYPES:
        return None
    if data_type in ("decimal", "date", "datetime", "timestamp", "time"):
        return lambda v: b'"' + v + b'"'
    if data_type in ("double", "float"):
        return lambda v: orjson.dumps(float32(float(v)) if data_type == "float" else float(v))
    if data_type == "bit":
        return lambda v: str(int.from_bytes(v, "big")).encode()
    if data_type == "set":
        return lambda v: orjson.dumps(v.decode().split(",") if v else [])
    if data_type == "json":
        return lambda v: orjson.dumps(orjson.loads(v))
    if data_type == "vector":
        return lambda v: orjson.dumps(vector_values(v))
    if data_type in BYTE_TYPES:
        return lambda v: b'"' + b64encode(v) + b'"'
    return lambda v: orjson.dumps(v.decode("utf-8", "replace"))


def after_encoder(info: TableInfo):
    """``encode(values) -> bytes``: the JSON object ``{column: value}`` of one raw row (values as bytes or None)."""
    plan_ = [(orjson.dumps(name) + b":", _encoder(t)) for name, t in zip(info.columns, info.types)]
    return lambda values: b"{" + b",".join(prefix + (b"null" if v is None else v if enc is None else enc(v))
                                           for (prefix, enc), v in zip(plan_, values)) + b"}"


def _value(data_type: str, rnd: random.Random) -> bytes | None:
    """A raw text-protocol value of ``data_type`` as the server sends it (None now and then)."""
    if rnd.random() < 0.1:
        return None
    if data_type in ("bigint", "int", "tinyint", "year"):
        return str(rnd.randint(-2**63, 2**64 - 1)).encode()
    if data_type == "decimal":
        return f"{rnd.randint(-10**12, 10**12)}.{rnd.randint(0, 9999):04d}".encode()
    if data_type in ("date", "datetime", "timestamp", "time"):
        return rnd.choice([b"2026-01-02", b"2026-01-02 03:04:05.123456", b"-838:59:59", b"0000-00-00 00:00:00"])
    if data_type == "float":  # read as DOUBLE (+ 0e0) of a float32
        return rnd.choice([b"1.100000023841858", b"-0", b"123456792", b"3.4028234663852886e38", b"1e-45"])
    if data_type == "double":
        return rnd.choice([repr(rnd.uniform(-1e9, 1e9)).encode(), b"1e-5", b"1e16", b"-0", b"100", b"1.5e300",
                           b"5e-324", b"0.30000000000000004", b"1e500", str(rnd.randint(-9999, 9999)).encode()])
    if data_type == "bit":
        return rnd.randbytes(rnd.randint(1, 8))
    if data_type == "set":
        return rnd.choice([b"", b"a", b"a,b,c"])
    if data_type == "json":
        return rnd.choice([b'{"a": [1, 2.5, "x\\u00e9"], "b": null}', b"[]", b"3"])
    if data_type in ("blob", "varbinary", "binary", "geometry"):
        return rnd.randbytes(rnd.randint(0, 40))
    if data_type == "vector":
        return rnd.randbytes(4 * rnd.randint(0, 4))
    text = "".join(rnd.choice(["a", "é", "\"", "\\", "\n", "\x00", "\x1f", "\x7f", "\u2028", "😀", "z" * 9, " "])
                   for _ in range(rnd.randint(0, 30)))
    return text.encode()


def _info(types=TYPES) -> TableInfo:
    return TableInfo("d", "t", tuple(f"c_{t}_{i}" for i, t in enumerate(types)), tuple(types), ("c_bigint_0",))


def _both(buf: bytes, table_plan, head=b"", mid=None, tail=b"\n", first=0, again=None) -> bytes:
    """lines() in Python and (when built) in C: the same bytes, returned."""
    want = textjson.py_lines(buf, 0, len(buf), table_plan, head, mid, tail, first, None, again)
    if C is not None:
        assert C.lines(buf, 0, len(buf), table_plan, head, mid, tail, first, None, again) == want
        assert C.lines(bytearray(buf), 0, len(buf), table_plan, head, mid, tail, first, None, again) == want
    return want


def test_every_type_c_equals_python_equals_value_encoder():
    rnd = random.Random(30)
    info = _info()
    encode, table_plan = after_encoder(info), plan(info)
    rows = [[_value(t, rnd) for t in info.types] for _ in range(400)]
    buf = b"".join(packets(b"".join(lenenc(v) for v in row)) for row in rows)
    out = _both(buf, table_plan)
    assert out.split(b"\n")[:-1] == [encode(row) for row in rows]
    for line in out.split(b"\n")[:-1]:
        orjson.loads(line)  # valid JSON


@pytest.mark.parametrize("value", [b"", b"x" * 250, b"x" * 251, b"y" * 70000, "é".encode() * 40000,
                                   b"\xff\xfe bad utf-8 \xc3", b"\xed\xa0\x80 surrogate", b"\xf4\x90\x80\x80",
                                   b"ok \xe2\x82", "😀".encode() * 3])
def test_lengths_and_invalid_utf8(value):
    info = _info(("bigint", "text", "blob", "bit"))
    row = [b"1", value, value, value[:8] or None]
    buf = packets(b"".join(lenenc(v) for v in row)) + packets(b"".join(lenenc(v, wide=True) for v in row))
    out = _both(buf, plan(info))
    assert out.split(b"\n")[:-1] == [after_encoder(info)(row)] * 2


def test_row_of_severalpackets():
    info = _info(("bigint", "longtext", "longblob"))
    big = b"q" * (0xFFFFFF + 100)
    payloads = [b"".join(lenenc(v) for v in (b"7", big, b"\x01\x02")), b"".join(lenenc(v) for v in (b"8", b"s", None))]
    buf = b"".join(packets(p) for p in payloads)
    assert textrows.py_scan(buf, 0)[:3] == (len(buf), 2, len(packets(payloads[0])))
    out = _both(buf, plan(info), b"<", b"#", b">\n", 41)
    assert out == (b'<{"c_bigint_0":7,"c_longtext_1":"' + big + b'","c_longblob_2":"AQI="}#41>\n'
                   b'<{"c_bigint_0":8,"c_longtext_1":"s","c_longblob_2":null}#42>\n')
    exact = packets(b"".join(lenenc(v) for v in (b"9", b"r" * (0xFFFFFF - 7), b"")))  # ends in an empty packet
    assert exact[-4:] == b"\x00\x00\x00\x02"
    assert _both(exact, plan(info)) == after_encoder(info)([b"9", b"r" * (0xFFFFFF - 7), b""]) + b"\n"


def test_scan_finds_whole_rows_eof_and_err():
    rows = [packets(lenenc(str(i).encode()) + lenenc(b"v" * i)) for i in range(1, 30)]
    eof = packets(b"\xfe\x00\x00\x22\x00")
    err = packets(b"\xff\x15\x04#28000denied")
    body = b"".join(rows)
    for scan in (textrows.py_scan, textrows.C.scan if textrows.C else textrows.py_scan):
        assert scan(body + eof, 0) == (len(body), 29, len(body) - len(rows[-1]), 1)
        assert scan(body + err, 0) == (len(body), 29, len(body) - len(rows[-1]), 2)
        for cut in (1, 3, 4, len(rows[0]) + 2, len(body) - 1):  # a row cut short: not walked
            pos, n, last, done = scan(body[:cut], 0)
            assert done == 0 and pos <= cut and n == sum(1 for k in range(30) if len(b"".join(rows[:k])) <= pos) - 1
        assert scan(eof, 0) == (0, 0, -1, 1)
        assert scan(b"", 0) == (0, 0, -1, 0)
        assert scan(b"\x09\x00\x00\x01\xfe" + b"\x00" * 8, 0) == (13, 1, 0, 0)  # 0xFE and 9 bytes: a row
        with pytest.raises(ValueError):
            scan(body, len(body) + 1)


@pytest.mark.parametrize("payload", [b"", b"\x01", b"\x01a", b"\x01a\x01b\x01c\x01d", b"\xfc\x01", b"\xfd\x05\x00",
                                     b"\xfe\x01\x00\x00\x00\x00\x00\x00", b"\xff\x01a", b"\x05abc",
                                     b"\xfe\xff\xff\xff\xff\xff\xff\xff\x7f", b"\x01a\x01b\x03"])
def test_malformed_rows_raise_in_both(payload):
    table_plan = plan(_info(("bigint", "text")))
    buf = packets(payload)
    lines = [textjson.py_lines] + ([C.lines] if C else [])
    for fn in lines:
        with pytest.raises(ValueError, match="malformed text-protocol row at offset 0"):
            fn(buf, 0, len(buf), table_plan, b"", None, b"\n", 0)
        good = packets(lenenc(b"1") + lenenc(b"a"))
        with pytest.raises(ValueError, match=f"offset {len(good)}: the row is not whole"):
            fn(good + b"\x05\x00", 0, len(good) + 2, table_plan, b"", None, b"\n", 0)
        with pytest.raises(ValueError, match="outside"):
            fn(good, 0, len(good) + 1, table_plan, b"", None, b"\n", 0)


def test_lines_into_a_bytearray_that_grows_and_serves_again():
    info = _info(("bigint", "text", "double"))
    small = packets(b"".join(lenenc(v) for v in (b"1", b"a", b"0.5")))
    big = small * 3000
    for fn in [textjson.py_lines] + ([C.lines] if C else []):
        into = bytearray()
        n = fn(big, 0, len(big), plan(info), b"", b"#", b"\n", 0, into)
        assert bytes(into[:n]) == textjson.py_lines(big, 0, len(big), plan(info), b"", b"#", b"\n", 0)
        size = len(into)
        m = fn(small, 0, len(small), plan(info), b"", None, b"\n", 0, into)
        assert bytes(into[:m]) == b'{"c_bigint_0":1,"c_text_1":"a","c_double_2":0.5}\n' and len(into) == size
        with memoryview(into):  # too short, and held: it cannot grow
            tiny = bytearray(2)
            with memoryview(tiny), pytest.raises(BufferError):
                fn(big, 0, len(big), plan(info), b"", None, b"\n", 0, tiny)
        with pytest.raises(TypeError):
            fn(small, 0, len(small), plan(info), b"", None, b"\n", 0, b"not a bytearray")


def test_converter_errors_and_non_bytes_propagate():
    def boom(v):
        raise RuntimeError("converter failed")

    for fn in [textjson.py_lines] + ([C.lines] if C else []):
        bad = textjson.Plan(bytes([textjson.CALL]), (b'"a":',), (boom,), orjson.dumps)
        buf = packets(lenenc(b"x"))
        with pytest.raises(RuntimeError, match="converter failed"):
            fn(buf, 0, len(buf), bad, b"", None, b"\n", 0)
        text = textjson.Plan(bytes([textjson.CALL]), (b'"a":',), (lambda v: "str",), orjson.dumps)
        with pytest.raises(TypeError, match="not bytes"):
            fn(buf, 0, len(buf), text, b"", None, b"\n", 0)
        with pytest.raises(ValueError):  # float() refuses it; C falls back on the column's function
            fn(packets(lenenc(b"1.5x")), 0, 6, plan(_info(("double",))), b"", None, b"\n", 0)


def test_change_lines_equal_the_sinks_dumps_of_the_change_dicts():
    rnd = random.Random(7)
    info = _info()
    rows = [[_value(t, rnd) for t in info.types] for _ in range(50)]
    buf = bytearray(b"\x01\x00\x00\x01\x0a" + b"".join(packets(b"".join(lenenc(v) for v in r)) for r in rows))
    result = ResultRows(buf, 5, len(buf), len(rows), -1, len(info.types))
    source = {"server_id": 1, "file": "b.000001", "pos": 4, "gtid": "0-1-5", "snapshot": True}
    reader = ChunkReader(info)
    changes = reader.changes(result, source, 1700000000, 123, "snapshot:3:1")
    want = b"".join(dumps(c) + b"\n" for c in changes)
    kept = [reader.lines(result, source, 1700000000, 123, "snapshot:3:1") for _ in range(3)]
    assert all(lines == want for lines in kept)
    assert kept[0].obj is kept[2].obj and kept[1].obj is not kept[0].obj   # two buffers in turn
    assert [orjson.loads(line)["after"] for line in want.split(b"\n")[:-1]] == \
        [orjson.loads(after_encoder(info)(r)) for r in rows]
    assert orjson.loads(want.split(b"\n")[0])["source"] == {**source, "row": 123, "id": "snapshot:3:1:123"}
    assert orjson.loads(want.split(b"\n")[-2])["source"]["id"] == "snapshot:3:1:172"


@pytest.mark.parametrize("rows", [0, 1, 2, 50])
@pytest.mark.parametrize("snapshot", [True, None])
def test_the_last_rows_lines_say_last_as_the_dict_path_writes_it(rows, snapshot):
    """``lines(..., last=True)``: the bytes of the change dicts with the final one's ``source.snapshot`` set to
    "last" (in its place when the source has it, else after ``id``); the other rows unchanged."""
    rnd = random.Random(rows)
    info = _info()
    raw = [[_value(t, rnd) for t in info.types] for _ in range(rows)]
    buf = bytearray(b"".join(packets(b"".join(lenenc(v) for v in r)) for r in raw))
    last = len(buf) - len(packets(b"".join(lenenc(v) for v in raw[-1]))) if raw else -1
    result = ResultRows(buf, 0, len(buf), rows, last, len(info.types))
    source = {"server_id": 1, "file": "b.000001", "pos": 4, "gtid": None}
    if snapshot:
        source["snapshot"] = True
    reader = ChunkReader(info)
    changes = reader.changes(result, source, 5, 10, "snapshot:0:2")
    if changes:
        changes[-1]["source"]["snapshot"] = "last"
    want = b"".join(dumps(c) + b"\n" for c in changes)
    for _ in range(3):  # each buffer in turn, grown and used again
        assert reader.lines(result, source, 5, 10, "snapshot:0:2", last=True) == want
    plain = reader.lines(result, source, 5, 10, "snapshot:0:2")
    assert bytes(plain).count(b'"last"') == 0 and len(bytes(plain).split(b"\n")) == rows + 1


def test_header_walks_count_definitions_and_eof_or_finds_the_error():
    defs = [packets(lenenc(b"def") + lenenc(f"c{i}".encode()) + b"\x0c" + bytes(12), i + 2) for i in range(3)]
    head = packets(b"\x03") + b"".join(defs) + packets(b"\xfe\x00\x00\x02\x00", 5)
    row = packets(lenenc(b"1") * 3, 6)
    assert textrows.header(head + row, len(head + row)) == (len(head), 3)
    assert textrows.header(bytearray(head) + bytes(100), len(head)) == (len(head), 3)
    for cut in (0, 3, 5, len(head) - 1):
        assert textrows.header(head, cut) is None
    err = b"\xff\x7a\x04#42S02Table 'x.y' doesn't exist"
    assert textrows.header(packets(err), len(packets(err))) == err
    wide = packets(b"\xfc\x2c\x01") + b"".join(packets(lenenc(b"def")) for _ in range(300)) + packets(b"\xfe")
    assert textrows.header(wide, len(wide)) == (len(wide), 300)
    assert textrows.packet_at(row, 0, len(row)) == (len(row), lenenc(b"1") * 3)
    assert textrows.packet_at(row, 0, len(row) - 1) is None


def test_large_buffer_without_the_gil_with_values_that_need_python():
    """A buffer of 64 KiB or more is converted without the GIL; a value that needs Python (text that is not
    UTF-8, a DOUBLE text that is not the shortest, BIT over 8 bytes) takes it back, and an error at the end is
    still raised as such."""
    info = _info(("bigint", "text", "double", "bit", "varchar"))
    rows = [[str(i).encode(), b"ok \xff bad" if i % 97 == 0 else b"plain text " * 3,
             b"0.1000000000000000055511151231257827" if i % 89 == 0 else repr(i / 7).encode(),
             b"\x01" * 9 if i % 83 == 0 else b"\x05", "é".encode() * (i % 5)] for i in range(3000)]
    buf = b"".join(packets(b"".join(lenenc(v) for v in r)) for r in rows)
    assert len(buf) >= 1 << 16
    out = _both(buf, plan(info), b"", b"|", b"\n", 5)
    assert out.split(b"\n")[:-1] == [after_encoder(info)(r) + b"|" + str(5 + i).encode() for i, r in enumerate(rows)]
    twice = _both(buf, plan(info), b"", b"|", b"\n", -2, b"/")
    assert twice.split(b"\n")[:-1] == [after_encoder(info)(r) + b"|%d/%d" % (i - 2, i - 2) for i, r in enumerate(rows)]
    bad = buf + packets(lenenc(b"1"))
    for fn in [textjson.py_lines] + ([C.lines] if C else []):
        with pytest.raises(ValueError, match=f"offset {len(buf)}: fewer values than columns"):
            fn(bad, 0, len(bad), plan(info), b"", None, b"\n", 0)


@need_c
def test_fast_double_text_equals_orjson():
    """The C way of writing a DOUBLE's text (no Python) gives orjson.dumps(float(text)) byte for byte, or
    declines (None), on shortest, longer and shorter texts of random doubles."""
    rnd = random.Random(31)
    fast = 0
    for _ in range(40000):
        x = struct.unpack("<d", rnd.randbytes(8))[0]
        texts = [repr(rnd.uniform(-1e9, 1e9)), repr(rnd.random() * 10.0 ** rnd.randint(-30, 30)),
                 f"{rnd.randint(1, 10 ** rnd.randint(1, 17))}e{rnd.randint(-30, 30)}"]
        if math.isfinite(x):
            texts += [repr(x), "%.17g" % x, "%.16g" % x, "%.15e" % x]
        for text in texts:
            got = C.double_json(text.encode(), orjson.dumps)
            if got is not None:
                fast += 1
                assert got == orjson.dumps(float(text)), text
            assert C.double(text.encode()) in (None, float(text))
    assert fast > 150000  # most go the fast way
    for text in ["0", "-0", "1e16", "1e15", "1e-5", "1e-4", "100", "0.1", "5e-324", "1e400", "1.7976931348623157e308"]:
        got = C.double_json(text.encode(), orjson.dumps)
        assert got is None or got == orjson.dumps(float(text)), text
    assert C.double_json(b"1.5", lambda f: b"other layout") is None  # another dumps: declined


def test_pure_python_turns_the_c_twins_off():
    code = ("from binlogd.protocol import textrows; from binlogd.library import textjson; import sys; "
            "sys.exit(0 if textrows.C is None and textrows.scan is textrows.py_scan and textjson.C is None "
            "and textjson.lines is textjson.py_lines else 1)")
    env = {**os.environ, "BINLOGD_PURE_PYTHON": "1"}
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0


@need_c
def test_c_is_the_default_when_built():
    assert textjson.lines is C.lines and textrows.C is not None and textrows.scan is textrows.C.scan

"""The bus sinks' framing (daemon/sinks/frames.py and its C twin ``_frames``) and the blocks they frame.

- The Python functions give the requests each sink sent per row before blocks (written out here once more,
  row by row), and the C functions give the same bytes as the Python ones, for random and edge inputs.
- BusSink keeps one block per rows event: the skip key, the size limit and the byte count per block.
- The Redis and NATS sinks' ``_write`` send, for a piece of blocks, the bytes they sent row by row before.
"""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace

import pytest

from binlogd.daemon.sinks import SinkError, bus, frames
from binlogd.daemon.sinks.bus import BusSink
from binlogd.library.identity import boundary_key, order_key

needs_c = pytest.mark.skipif(frames.C is None, reason="binlogd.daemon.sinks._frames is not built")
_CHARS = ['a', '"', '\\', '\t', '\r', 'é', '€', '😀', ' ', '{', '}', ':', ',', '0']


def _lines(payloads: list) -> bytes:
    return b"".join(p + b"\n" for p in payloads)


def _random_payloads(rng: random.Random, n: int) -> list:
    out = []
    for _ in range(n):
        size = rng.choice([0, 1, 5, 40, 300]) if rng.random() > 0.02 else 70_000
        out.append("".join(rng.choice(_CHARS) for _ in range(size)).encode())
    return out


# ---------------------------------------------------------------- the per-row formats the sinks used before
def _xadd(head: bytes, payload: bytes) -> bytes:
    return head + b"$%d\r\n" % len(payload) + payload + b"\r\n"


def _hpub(subject: bytes, sid: int, prefix: bytes, row: int, seq: int, payload: bytes) -> bytes:
    headers = (b"NATS/1.0\r\nNats-Msg-Id: %d:%b:%d\r\nBinlogd-Source: %b:%d\r\n"
               b"Nats-Expected-Last-Sequence: %d\r\n\r\n" % (sid, prefix, row, prefix, row, seq))
    return b"HPUB %b %d %d\r\n%b%b\r\n" % (subject, len(headers), len(headers) + len(payload), headers, payload)


def _copy_line(payload: bytes, file: bytes, pos: int, row: int, tail: bytes) -> bytes:
    return b"%b\t%b\t%d\t%d\t%b\n" % (payload.replace(b"\\", b"\\\\"), file, pos, row, tail)


HEAD = b"*5\r\n$4\r\nXADD\r\n$9\r\nbinlogd:s\r\n$1\r\n*\r\n$6\r\nchange\r\n"
_EDGES = [[], [b""], [b"{}"], [b'{"a":"\\\\x\\"y"}', b"\\"], ["é€😀\t\r".encode()], [b"x" * 100_000, b"", b"y"]]
_INTS = [(0, 0, 0, 0), (4294967295, 2**63 - 1, 2**62, 2**63 - 200), (1, -5, 9, 10**15), (7, 10**12, 99, 9)]


@pytest.mark.parametrize("payloads", _EDGES)
@pytest.mark.parametrize("sid, pos, row0, seq0", _INTS)
def test_python_frames_are_the_per_row_requests(payloads, sid, pos, row0, seq0):
    lines, n, file = _lines(payloads), len(payloads), "mysql-bin.000001\t\\".encode()
    assert frames.py_redis_xadds(HEAD, lines, n) == b"".join(_xadd(HEAD, p) for p in payloads)
    prefix = file + b":%d:0" % pos
    assert frames.py_nats_hpubs(b"binlogd.d.t", sid, prefix, row0, seq0, lines, n) == b"".join(
        _hpub(b"binlogd.d.t", sid, prefix, row0 + i, seq0 + i, p) for i, p in enumerate(payloads))
    assert frames.py_copy_rows(lines, n, b"f\\t", pos, row0, b"\\N\td\tt\tinsert\t1") == b"".join(
        _copy_line(p, b"f\\t", pos, row0 + i, b"\\N\td\tt\tinsert\t1") for i, p in enumerate(payloads))


def _all(module_or_ns, lines: bytes, n: int, ints: tuple, names: tuple) -> list:
    sid, pos, row0, seq0 = ints
    subject, file, tail = names
    return [module_or_ns.redis_xadds(HEAD, lines, n),
            module_or_ns.nats_hpubs(subject, sid, file + b":%d:c3" % pos, row0, seq0, lines, n),
            module_or_ns.copy_rows(lines, n, file, pos, row0, tail)]


_PY = SimpleNamespace(redis_xadds=frames.py_redis_xadds, nats_hpubs=frames.py_nats_hpubs,
                      copy_rows=frames.py_copy_rows)


@needs_c
@pytest.mark.parametrize("payloads", _EDGES)
@pytest.mark.parametrize("ints", _INTS)
def test_c_is_the_python_twin_on_edges(payloads, ints):
    lines, names = _lines(payloads), (b"binlogd.\xc3\xa9.t", "b\t.000001".encode(), b"g\\\\1\tsch\\tema\tt\td\t\\N")
    assert _all(frames.C, lines, len(payloads), ints, names) == _all(_PY, lines, len(payloads), ints, names)


@needs_c
def test_c_is_the_python_twin_on_random_blocks():
    rng = random.Random(28)
    for _ in range(300):
        payloads = _random_payloads(rng, rng.choice([0, 1, 2, 7, 60]))
        ints = tuple(rng.choice([0, 1, 9, 10, 99, 12345, 2**31, 2**40 + 7]) for _ in range(4))
        names = tuple("".join(rng.choice(_CHARS) for _ in range(rng.randrange(0, 12))).encode() for _ in range(3))
        lines = _lines(payloads)
        assert _all(frames.C, lines, len(payloads), ints, names) == _all(_PY, lines, len(payloads), ints, names)


@pytest.mark.parametrize("impl", ["py", "c"])
@pytest.mark.parametrize("lines, n", [(b"a\nb\n", 1), (b"a\nb\n", 3), (b"a\nb", 2), (b"a", 1), (b"", 1), (b"\n", -1)])
def test_a_wrong_line_count_is_refused(impl, lines, n):
    if impl == "c" and frames.C is None:
        pytest.skip("binlogd.daemon.sinks._frames is not built")
    f = _PY if impl == "py" else frames.C
    for call in (lambda: f.redis_xadds(HEAD, lines, n), lambda: f.nats_hpubs(b"s", 1, b"f:4:0", 0, 1, lines, n),
                 lambda: f.copy_rows(lines, n, b"f", 4, 0, b"x")):
        with pytest.raises(ValueError):
            call()


@needs_c
def test_c_refuses_wrong_types_and_numbers_out_of_range():
    with pytest.raises(TypeError):
        frames.C.redis_xadds("head", b"a\n", 1)
    with pytest.raises(TypeError):
        frames.C.nats_hpubs(b"s", None, b"f:4:0", 0, 1, b"a\n", 1)  # as b"%d" % None
    with pytest.raises(OverflowError):
        frames.C.copy_rows(b"a\nb\n", 2, b"f", 4, 2**63 - 1, b"x")
    with pytest.raises(OverflowError):
        frames.C.nats_hpubs(b"s", 1, b"f:4:0", 2**64, 1, b"a\n", 1)


# ---------------------------------------------------------------- blocks in BusSink
class _Sink(BusSink):
    KIND = "test"


def _event(pos: int, n: int, kind: str = "insert"):
    header = SimpleNamespace(pos=pos, server_id=5)
    return SimpleNamespace(header=header, schema="d", table="t", kind=kind, n=n)


def _sink(limit: int = 1 << 20) -> _Sink:
    sink = _Sink("redis://x", limit)
    sink._lines = lambda event, file, gtid, inner: (_lines([b'{"r":%d}' % i for i in range(event.n)]), event.n)
    return sink


def test_rows_make_one_block_per_event():
    sink = _sink()
    assert sink.rows(_event(100, 3), "b.000001", "0-1-2") == 3
    assert sink.rows(_event(200, 0), "b.000001", "0-1-2") == 0  # no block for no rows
    assert sink.rows(_event(300, 1), "b.000001", "0-1-3", inner=57) == 1
    lines = b'{"r":0}\n{"r":1}\n{"r":2}\n'
    assert sink._piece == [(("d", "t", "b.000001", 100, 0, "0-1-2", "insert", 5, "b.000001:100:0"), lines, 3),
                           (("d", "t", "b.000001", 300, 0, "0-1-3", "insert", 5, "b.000001:300:57"), b'{"r":0}\n', 1)]
    assert sink._piece_bytes == len(lines) + 8 + 4 * 64


def test_rows_after_the_skip_key():
    """Events at or before the broker's last change are dropped; one partly at or before it keeps its later rows
    only (NATS: the stream's last message may be any row); inner events of one payload are told apart."""
    sink = _sink()
    sink._skip = order_key("b.000001:200:0:1")
    assert sink.rows(_event(100, 3), "b.000001", None) == 3 and sink._piece == []
    assert sink.rows(_event(200, 2), "b.000001", None) == 2 and sink._piece == []
    sink._skip = order_key("b.000001:200:0:1")
    assert sink.rows(_event(200, 4), "b.000001", None) == 4
    assert sink._piece == [(("d", "t", "b.000001", 200, 2, None, "insert", 5, "b.000001:200:0"), b'{"r":2}\n{"r":3}\n',
                            2)]
    assert sink._skip is None
    sink._piece, sink._skip = [], order_key("b.000001:300:40:0")  # inside a TRANSACTION_PAYLOAD at 300
    sink.rows(_event(300, 2), "b.000001", None, inner=40)
    assert sink._piece == [] or sink._piece[0][2] == 1
    sink.rows(_event(300, 2), "b.000001", None, inner=90)
    assert [block[0][8] for block in sink._piece][-1] == "b.000001:300:90" and sink._skip is None


def test_a_change_over_the_limit_names_its_row():
    sink = _sink(limit=7)
    sink.rows(_event(100, 2), "b.000001", None)  # 7 bytes each: not over
    sink._lines = lambda event, file, gtid, inner: (b'{"r":0}\n{"r":10}\n', 2)
    with pytest.raises(SinkError) as err:
        sink.rows(_event(200, 2), "b.000001", None)
    assert err.value.fatal and err.value.exit_code == bus.EXIT_DATA
    assert "d.t at b.000001:200 row 1 (id b.000001:200:0:1) is 8 bytes, over the limit of 7" in str(err.value)
    assert len(sink._piece) == 1


def test_change_makes_a_block_of_one():
    sink = _sink()
    sink.change({"schema": "d", "table": "t", "op": "read", "before": None, "after": {"id": 1},
                 "source": {"file": "b.000002", "pos": 4, "row": 3, "server_id": 9, "gtid": None,
                            "id": "snapshot:2:0:3"}})
    [(meta, lines, n)] = sink._piece
    assert meta == ("d", "t", "b.000002", 4, 3, None, "read", 9, "snapshot:2:0") and n == 1 and lines.endswith(b"}\n")


def test_change_after_the_skip_key():
    """A change (an incremental snapshot's row) at or before the broker's last change is dropped."""
    sink = _sink()
    sink._skip = order_key("b.000001:500:0:0")
    for change_id in ("b.000001:500:c3.0:7", "b.000001:499:0:9", "b.000001:500:0:0"):
        sink.change({"schema": "d", "table": "t", "op": "read", "source": {"id": change_id}})
    assert sink._piece == [] and sink._skip is not None
    sink.change({"schema": "d", "table": "t", "op": "read", "source": {"id": "b.000001:500:0:1"}})
    assert len(sink._piece) == 1 and sink._skip is None


def test_a_checkpoint_is_a_boundary_between_changes():
    at = boundary_key("b.000001", 300)
    assert order_key("b.000001:299:0:5") < at < order_key("b.000001:300:c0.0:0") < order_key("b.000001:301:0:0")
    assert order_key("snapshot:9:3:99") < order_key("b.000001:4:0:0") < order_key("b.000002:4:0:0")
    assert order_key("snapshot:1:0:99") < order_key("snapshot:1:1:0") < order_key("snapshot:2:0:0")
    assert order_key("b.000001:300:c7.2:0") < order_key("b.000001:300:c8.0:0") < order_key("b.000001:300:0:0")


def test_a_full_piece_is_handed_over(monkeypatch):
    sink, handed = _sink(), []
    monkeypatch.setattr(bus, "PIECE_BYTES", 500)
    monkeypatch.setattr(sink, "_submit", lambda op, size: handed.append((op, size)))
    for pos in range(100, 1000, 100):
        sink.rows(_event(pos, 2), "b.000001", None)
    assert [size for _, size in handed] == [(16 + 128) * 4] * 2 and len(sink._piece) == 1
    assert [block[0][3] for block in handed[0][0][1]] == [100, 200, 300, 400]


# ---------------------------------------------------------------- the sinks' _write, against the per-row bytes
_PIECE = [(("d", "t", "b.000001", 100, 0, None, "insert", 5, "b.000001:100:0"), b'{"a":"\\\\"}\n{}\n[]\n', 3),
          (("d", "u", "b.000001", 200, 4, "0-5-1", "update", 5, "b.000001:200:0"), b'{"b":1}\n', 1),
          (("d", "t", "b.000002", 4, 0, None, "delete", 5, "b.000002:4:30"), b'{"c":2}\n{"c":3}\n', 2)]


def _rows(piece: list) -> list:
    return [(meta, meta[4] + i, p) for meta, lines, n in piece for i, p in enumerate(lines.split(b"\n")[:n])]


@pytest.mark.parametrize("piece", [_PIECE, _PIECE[:1], _PIECE[1:2]])
def test_redis_write_sends_an_xadd_per_row(piece):
    from binlogd.daemon.sinks.redis import RedisSink

    sink, sent = RedisSink("redis://x"), []

    async def send(data, check_health):
        sent.append(data)

    sink._conn = SimpleNamespace(send_packed_command=send)
    heads = {key: b"HEAD(%b)" % key[1].encode() for key in (("d", "t"), ("d", "u"))}
    sink._streams = {key: (key[1].encode(), head) for key, head in heads.items()}
    asyncio.run(sink._write(piece))
    want = b"*1\r\n$5\r\nMULTI\r\n" + b"".join(_xadd(heads[meta[:2]], p) for meta, _row, p in _rows(piece))
    assert sent == [want] and sink._queued == len(_rows(piece)) + 1
    assert sink._written == {meta[1].encode() for meta, _, _ in piece}


@pytest.mark.parametrize("piece", [_PIECE, _PIECE[:1], _PIECE[1:2]])
def test_nats_write_sends_an_hpub_per_row_and_publishes_the_last(piece):
    from binlogd.daemon.sinks.nats import NatsSink

    sink, sent, published = NatsSink("nats://x"), [], []

    async def send(data):
        sent.append(data)

    async def publish_async(subject, payload, headers):
        published.append((subject, payload, headers))
        return asyncio.get_running_loop().create_future()

    sink._nc, sink._js, sink._seq = SimpleNamespace(_send_command=send, is_closed=False), SimpleNamespace(
        publish_async=publish_async), 41
    asyncio.run(sink._write(piece))
    rows = _rows(piece)
    want = b"".join(_hpub(b"binlogd.%b.%b" % (m[0].encode(), m[1].encode()), m[7], m[8].encode(), row, 41 + i, p)
                    for i, (m, row, p) in enumerate(rows[:-1]))
    assert b"".join(sent) == want and (len(sent) == 1 or not want)
    meta, row, payload = rows[-1]
    source = f"{meta[8]}:{row}"
    assert published == [(f"binlogd.{meta[0]}.{meta[1]}", payload, {
        "Nats-Msg-Id": f"5:{source}", "Binlogd-Source": source, "Nats-Expected-Last-Sequence": str(40 + len(rows))})]
    assert sink._seq == 41 + len(rows) and [seq for _, seq in sink._acks] == [sink._seq]


def test_copy_text_is_the_same_in_c_and_python(monkeypatch):
    from binlogd.daemon.sinks import postgres

    piece = [*_PIECE, (("s\tx", "t\\y", "b\t1", 7, 2**40, "0-1-2", "insert", None, "b\t1:7:0"), b'"\\u00e9\\\\"\n', 1)]
    fast = postgres.copy_text(piece)
    monkeypatch.setattr(postgres, "copy_rows", frames.py_copy_rows)
    assert postgres.copy_text(piece) == fast
    assert fast.endswith(b'"\\\\u00e9\\\\\\\\"\tb\\t1\t7\t1099511627776\t0-1-2\ts\\tx\tt\\\\y\tinsert\t\\N\n')

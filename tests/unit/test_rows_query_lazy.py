"""ANNOTATE_ROWS and ROWS_QUERY keep the statement's bytes; ``query`` decodes them on first read only.

Decoding such an event makes no str (no copy, no UTF-8 decode: half the bytes of a MariaDB binlog of
big statements are theirs); ``query`` is then exactly what the decoder used to return at once (UTF-8,
bad bytes backslash-escaped), on every event of the corpus and on invalid UTF-8, and the event is
shown, compared, hashed, pickled and written as JSON as when ``query`` was its field.
"""

from __future__ import annotations

import dataclasses
import pickle
import struct
import zlib
from pathlib import Path

import pytest

from binlogd.library.serialize import dumps, event_to_dict, flatten
from binlogd.protocol import decoder as D
from binlogd.protocol import events as E
from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.reader import iter_events
from tests.support.fuzz_cases import ALL_FILES

MARIADB = "rust_mysql_common/mariadb-bin.000001"  # 10.5.15, CRC32: FORMAT_DESCRIPTION first
MYSQL57 = "mysql-binlog-connector-java/mysql-bin.checksum-crc32"  # 5.7.21, CRC32
POS = 1000
# invalid UTF-8 (a lone continuation byte, a cut sequence, an encoded surrogate), CR LF, and valid UTF-8
ODD = b"INSERT INTO t VALUES ('\x80', '\xc3', '\xed\xa0\x80')\r\n/* caf\xc3\xa9 */ -- \\x80"
ODD_TEXT = "INSERT INTO t VALUES ('\\x80', '\\xc3', '\\xed\\xa0\\x80')\r\n/* café */ -- \\x80"


def _decoder(corpus: Path, name: str) -> Decoder:
    data = (corpus / name).read_bytes()
    dec = Decoder()
    dec.decode(data[4:4 + struct.unpack_from("<I", data, 13)[0]], 4)
    return dec


def _event(dec: Decoder, type_code: int, body: bytes) -> E.Event:
    raw = struct.pack("<IBIIIH", 1_700_000_000, type_code, 7, 19 + len(body) + 4, POS + 23 + len(body), 0) + body
    return dec.decode(raw + struct.pack("<I", zlib.crc32(raw)), POS)


def _annotated(corpus: Path, sql: bytes) -> list[E.RowsQueryEvent]:
    """The same statement as an ANNOTATE_ROWS (MariaDB) and as a ROWS_QUERY (MySQL 5.7, a length byte first)."""
    return [_event(_decoder(corpus, MARIADB), ET.ANNOTATE_ROWS, sql),
            _event(_decoder(corpus, MYSQL57), ET.ROWS_QUERY, bytes([len(sql) & 0xFF]) + sql)]


@pytest.fixture
def decodes(monkeypatch) -> list:
    """Every decode of a statement's text (the ``text`` that ``RowsQueryEvent.query`` calls)."""
    calls = []

    def counted(raw, codec="utf-8"):
        calls.append(bytes(raw))
        return bytes(raw).decode(codec, "backslashreplace")

    monkeypatch.setattr(E, "text", counted)
    return calls


@pytest.mark.parametrize("sql", [b"INSERT INTO t VALUES (1)", ODD, b"", b"x" * 70_000])
def test_decoding_makes_no_text_until_query_is_read(corpus, decodes, sql):
    for ev in _annotated(corpus, sql):
        assert isinstance(ev, E.RowsQueryEvent)
        assert bytes(ev.statement) == sql and not isinstance(ev.statement, str)
        assert decodes == []
        assert not any(isinstance(getattr(ev, f.name), str) for f in dataclasses.fields(ev))
        first = ev.query
        assert ev.query is first and decodes == [sql]  # decoded once, then kept
        decodes.clear()


def test_invalid_utf8_is_backslash_escaped_as_before(corpus):
    for ev in _annotated(corpus, ODD):
        assert ev.query == ODD_TEXT


def test_query_is_the_eager_text_on_every_corpus_event(corpus, monkeypatch):
    """Each ANNOTATE_ROWS and ROWS_QUERY of the corpus (inside TRANSACTION_PAYLOADs too): ``query`` is the
    text of the body the decoder got, decoded as the decoder did before (ROWS_QUERY's length byte skipped)."""
    eager = []
    for tc, skip in ((ET.ANNOTATE_ROWS, 0), (ET.ROWS_QUERY, 1)):
        def recording(h, body, ctx, fn=D._DISPATCH[tc], skip=skip):
            ev = fn(h, body, ctx)
            eager.append((ev, bytes(body[skip:]).decode("utf-8", "backslashreplace")))
            return ev
        monkeypatch.setitem(D._DISPATCH, tc, recording)
    seen = []
    for name in ALL_FILES:
        for top in iter_events((corpus / name).read_bytes()):
            seen += [ev for ev in flatten(top) if isinstance(ev, E.RowsQueryEvent)]
    assert len(seen) >= 5 and {ev.header.type_code for ev in seen} == {ET.ANNOTATE_ROWS, ET.ROWS_QUERY}
    assert [ev for ev, _ in eager] == seen
    for ev, text in eager:
        assert ev.query == text and type(ev.query) is str


def test_repr_eq_hash_pickle_and_json_as_a_query_field(corpus):
    a, b = _annotated(corpus, ODD)[0], _annotated(corpus, ODD)[0]
    assert repr(a) == f"RowsQueryEvent(header={a.header!r}, query={ODD_TEXT!r})"
    assert a == b and hash(a) == hash(b)
    assert a != _annotated(corpus, ODD + b" ")[0]
    back = pickle.loads(pickle.dumps(a))  # the view of the event's bytes goes as bytes
    assert back == a and type(back.statement) is bytes and back.query == ODD_TEXT
    out = event_to_dict(a, "f")
    assert list(out) == ["file", "pos", "next_pos", "timestamp", "type", "server_id", "query"]
    assert out["query"] == ODD_TEXT and dumps(out).endswith(b'"query":' + dumps(ODD_TEXT) + b"}")

"""The MySQL 5.1/5.2 pre-GA event-type renumbering is applied exactly where the server applies it.

The server's Format_description_event (libbinlogevents control_events.cpp, and log_event.cc before it)
permutes event types 16-22 only for the version strings of the "a_drop" development trees:
``5.1.[1-5]-a_drop5*``, ``5.1.4-a_drop6*`` and ``5.2.[0-2]-a_drop6*``, and rejects such an FDE unless it
lists 22 event types. Every other 5.x server uses today's numbers, 5.1.0-5.1.15 and 5.1.15-ndb-6.1.x
included. Checked on every 5.0/5.1/5.2 file of the corpus, and on the corpus's a_drop6 file rewritten
as a 5.1.15-ndb-6.1 server would have written it (today's numbers, same events).
"""

from __future__ import annotations

import struct

import pytest

from binlogd.library.serialize import event_to_dict
from binlogd.protocol import events as E
from binlogd.protocol.decoder import Decoder, renumbered_tree
from binlogd.protocol.errors import EventDecodeError
from binlogd.protocol.reader import iter_events
from tests.support import manifest as M

OLD_5_2 = "rust_mysql_common/ver_5_1-wl2325_r.001"  # 5.2.2-a_drop6p13: old numbers, TABLE_MAP + PRE_GA rows
CORRUPT = "rust_mysql_common/corrupt-relay-bin.000624"  # damaged on purpose (test_corpus checks how)
FIVE_X = [e for e in M.entries_or_empty()
          if e.server_version.startswith(("5.0.", "5.1.", "5.2.")) and not e.negative and e.path != CORRUPT]
# raw code in an a_drop tree's file -> today's code (what the server's permutation maps it to)
TO_TODAY = {16: 19, 17: 20, 18: 21, 19: 22, 20: 16, 21: 17, 22: 18}


@pytest.mark.parametrize("version, permuted", [
    ("5.1.1-a_drop5p3", True), ("5.1.2-a_drop5p16c", True), ("5.1.5-a_drop5p20", True),
    ("5.1.4-a_drop6p0", True), ("5.2.0-a_drop6p3", True), ("5.2.2-a_drop6p13-debug-log", True),
    ("5.1.1-alpha", False), ("5.1.0-alpha-log", False), ("5.1.15-beta-log", False),
    ("5.1.15-ndb-6.1.21-log", False), ("5.1.6-a_drop5p1", False), ("5.1.3-a_drop6p1", False),
    ("5.2.3-a_drop6p1", False), ("5.2.2-a_drop5p1", False), ("5.1.23-rc-debug-log", False),
    ("5.1.12-a_drop5p1", False),
])
def test_the_servers_version_rule(version, permuted):
    assert renumbered_tree(version) is permuted


@pytest.mark.usefixtures("corpus")
@pytest.mark.parametrize("entry", FIVE_X, ids=M.ids(FIVE_X))
def test_every_5x_corpus_file_reads_to_its_end_with_the_servers_numbering(entry):
    decoder = Decoder()
    events = list(iter_events(M.data(entry.path), decoder))
    assert len(events) == entry.total
    fde = next(e for e in events if isinstance(e, E.FormatDescriptionEvent))
    assert fde.server_version == entry.server_version
    assert decoder.renumbered is ("-a_drop" in entry.server_version)


def _rewritten(data: bytes, version: str, codes: dict[int, int]) -> bytes:
    """``data`` (a v4 file without checksums) with its FDE's server version replaced and every other
    event's type code mapped through ``codes`` (the FDE's post-header lengths moved to match)."""
    out, pos = bytearray(data), 4
    while pos < len(out):
        type_code, length = out[pos + 4], struct.unpack_from("<I", out, pos + 9)[0]
        if type_code == 15:
            body = pos + 19
            out[body + 2:body + 52] = version.encode().ljust(50, b"\0")
            old = bytes(out[body + 57:pos + length])
            new = bytearray(old)
            for code in range(1, len(old) + 1):
                new[codes.get(code, code) - 1] = old[code - 1]
            out[body + 57:pos + length] = new
        else:
            out[pos + 4] = codes.get(type_code, type_code)
        pos += length
    return bytes(out)


def _decoded(data: bytes) -> tuple[Decoder, list[dict]]:
    decoder = Decoder()
    out = [event_to_dict(e) for e in iter_events(data, decoder)]
    for o in out:
        o.pop("server_version", None)
        o.pop("post_header_lengths", None)
    return decoder, out


@pytest.mark.usefixtures("corpus")
def test_a_5_1_15_ndb_file_uses_todays_numbers():
    """The issue's files: 5.1.15-ndb-6.1.x wrote today's numbers; renumbering them loses every TABLE_MAP."""
    original = M.data(OLD_5_2)
    decoder, want = _decoded(original)
    assert decoder.renumbered and {"TABLE_MAP", "PRE_GA_WRITE_ROWS", "PRE_GA_DELETE_ROWS"} <= {o["type"] for o in want}
    ndb = _rewritten(original, "5.1.15-ndb-6.1.21-debug-log", TO_TODAY)
    assert ndb != original
    decoder, got = _decoded(ndb)
    assert not decoder.renumbered
    assert got == want


@pytest.mark.usefixtures("corpus")
def test_other_a_drop_versions_are_renumbered_too():
    original = M.data(OLD_5_2)
    _, want = _decoded(original)
    for version in ("5.1.4-a_drop6p2", "5.1.2-a_drop5p9", "5.2.0-a_drop6p3"):
        decoder, got = _decoded(_rewritten(original, version, {}))
        assert decoder.renumbered and got == want, version


@pytest.mark.usefixtures("corpus")
def test_an_a_drop_fde_without_22_event_types_is_rejected():
    data = _rewritten(M.data("rust_mysql_common/ver_5_1_23.001"), "5.1.2-a_drop5p9-debug-log", {})  # lists 26
    with pytest.raises(EventDecodeError, match="lists 26 event types; that pre-GA tree had 22"):
        list(iter_events(data, Decoder()))

"""Without servers: whose history it is (library.schema.identity), epochs in the tracker, the lock, and the
daemon's refusal of a history it cannot read. The real-server paths: tests/integration/test_schema_identity.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from binlogd.daemon.replication.schemaqueries import _mariadb_at_or_before
from binlogd.daemon.replication.serverschema import (
    DaemonSchema,
    SchemaHistoryUnusable,
    history_path,
)
from binlogd.library.schema.history import (
    Entry,
    HistoryWriter,
    SchemaHistoryError,
    SchemaHistoryLocked,
    SchemaTracker,
    load_history,
)
from binlogd.library.schema.identity import (
    HEAD_BYTES,
    FileIdentity,
    Source,
    basename,
    fde_identity,
    file_identity,
    same_server,
    stream_holds,
)
from binlogd.library.schema.model import ColumnDef, TableDef
from binlogd.protocol.position import Position

CORPUS = Path("/work/shared/binlogs")


def table(*names: str) -> TableDef:
    return TableDef("d", "t", tuple(ColumnDef(n, "int") for n in names))


def test_basename_and_same_server():
    assert basename("binlog.000012") == "binlog" and basename("/x/db1-bin.000003") == "db1-bin"
    a = Source("mariadb", 1, "", "binlog")
    assert same_server(a, Source("mariadb", 1, "", "binlog", gtid="0-1-9"))
    assert not same_server(a, Source("mariadb", 2, "", "binlog"))
    assert not same_server(a, Source("mariadb", 1, "", "mysql-bin"))
    assert not same_server(a, Source("mysql", 1, "", "binlog"))
    u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    assert same_server(Source("mysql", 1, u, "binlog"), Source("mysql", 7, u, "other"))   # the UUID decides
    assert not same_server(Source("mysql", 1, u, "binlog"), Source("mysql", 1, u.replace("3", "4"), "binlog"))


def test_stream_holds_needs_the_recorded_gtids_with_their_originating_server():
    replica_state = "0-1-57,0-2-60"         # a replica with log_slave_updates: the primary's GTIDs are there
    assert stream_holds("mariadb", ["0-1-50", "0-1-57"], replica_state)
    assert not stream_holds("mariadb", ["0-1-58"], replica_state)           # not yet there
    assert not stream_holds("mariadb", ["0-9-3"], "0-22-100")              # another primary, same domain
    assert not stream_holds("mariadb", ["", ""], replica_state)            # nothing recorded proves it
    assert stream_holds("mariadb", ["0-1-5,1-1-3"], "0-1-5,1-1-4")
    assert not stream_holds("mariadb", ["garbage"], replica_state)
    u, v = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "4e11fa47-71ca-11e1-9e33-c80aa9429562"
    assert stream_holds("mysql", [f"{u}:1-10", f"{u}:12"], f"{u}:1-20,\n{v}:1-3")
    assert not stream_holds("mysql", [f"{u}:1-21"], f"{u}:1-20")
    assert not stream_holds("mysql", [f"{v}:1"], f"{u}:1-20")


def test_mariadb_file_start_at_or_before_a_gtid_position():
    assert _mariadb_at_or_before("0-1-5,0-2-9", "0-2-9")
    assert not _mariadb_at_or_before("0-1-5,0-2-10", "0-2-9")
    assert _mariadb_at_or_before("", "0-2-9") and _mariadb_at_or_before("1-1-99", "0-1-1")


def _fde_head(server_id: int, version: str) -> bytes:
    header = (0).to_bytes(4, "little") + bytes([15]) + server_id.to_bytes(4, "little") + bytes(10)
    return b"\xfebin" + header + (4).to_bytes(2, "little") + version.encode().ljust(50, b"\0")


def test_file_identity_from_the_first_bytes():
    ident = file_identity(_fde_head(21, "10.11.19-MariaDB-log"), "binlog.000004")
    assert ident == FileIdentity("mariadb", 21, "binlog", "binlog.000004")
    assert file_identity(_fde_head(3, "8.4.2"), "/a/mysql-bin.000001").flavor == "mysql"
    assert file_identity(b"\xfebin", "x") is None and file_identity(b"nope" * 40, "x") is None


@pytest.mark.skipif(not CORPUS.is_dir(), reason="no binlog corpus")
def test_file_identity_agrees_with_the_decoder_on_corpus_files():
    from binlogd.cli.filetools import dump_events

    checked = 0
    for path in sorted(CORPUS.rglob("*"))[:400]:
        if not path.is_file() or path.stat().st_size < HEAD_BYTES:
            continue
        head = path.read_bytes()[:HEAD_BYTES]
        ident = file_identity(head, path.name)
        if ident is None:
            continue
        try:
            first = next(iter(dump_events(path)))
        except Exception:
            continue
        assert fde_identity(first, path.name) == ident, path
        checked += 1
        if checked == 20:
            break
    assert checked


def _history(path: Path, lines: list) -> None:
    path.write_bytes(b"".join(ln.to_json() if isinstance(ln, Entry) else json.dumps(ln).encode() + b"\n"
                              for ln in lines))


def test_epochs_never_compare_positions_of_two_servers(tmp_path):
    s1 = Source("mariadb", 1, "", "binlog", "0-1-5", "binlog.000001", 4)
    s2 = Source("mariadb", 2, "", "binlog", "0-1-9", "binlog.000009", 500)
    h = tmp_path / "h.jsonl"
    _history(h, [s1.to_obj(), Entry("binlog.000001", 100, None, "d", "t", table("id", "a", "b"), "seed"),
                 Entry("binlog.000009", 400, "0-1-8", "d", "t", table("id", "b", "a")),       # server 1's numbers
                 s2.to_obj(), Entry("", 0, "0-1-9", "d", "t", table("id", "b", "a"), "reanchor"),
                 Entry("binlog.000002", 300, "0-2-10", "d", "t", table("id", "a", "b"))])
    sources, entries = load_history(h)
    assert [(s.server_id, s.epoch) for s in sources] == [(1, 0), (2, 1)]
    assert [e.epoch for e in entries] == [0, 0, 1, 1]
    tracker = SchemaTracker(entries, sources=sources)
    assert tracker.epoch == 1
    tracker.start_at("binlog.000002", 200)            # server 2's position: every server-1 entry is before it
    assert tracker.lookup("d", "t").names == ("id", "b", "a")
    tracker.start_at("binlog.000002", 300)
    assert tracker.lookup("d", "t").names == ("id", "a", "b")
    # a file of server 1: its epoch, where server 2's entries never hold
    old = SchemaTracker(entries, sources=sources, name=str(h))
    old.bind(FileIdentity("mariadb", 1, "binlog", "binlog.000009"))
    old.start_at("binlog.000009", 4)
    assert old.lookup("d", "t").names == ("id", "a", "b")
    old.start_at("binlog.000009", 999_999)
    assert old.lookup("d", "t").names == ("id", "b", "a")
    with pytest.raises(SchemaHistoryError, match=r"belongs to mariadb server_id 1 .*; then mariadb server_id 2 .*"
                                                 r"not to binlog file binlog.000001 \(mariadb server_id 7"):
        SchemaTracker(entries, sources=sources, name=str(h)).bind(FileIdentity("mariadb", 7, "binlog", "binlog.000001"))
    SchemaTracker(entries).bind(FileIdentity("mariadb", 7, "binlog", "binlog.000001"))   # no sources: no check


def test_the_history_lock_keeps_a_second_writer_out(tmp_path):
    first = HistoryWriter(tmp_path / "h.jsonl", lock=True)
    with pytest.raises(SchemaHistoryLocked, match="is locked by another binlogd process"):
        HistoryWriter(tmp_path / "h.jsonl", lock=True)
    first.close()
    HistoryWriter(tmp_path / "h.jsonl", lock=True).close()


def test_the_default_path_follows_the_checkpoints_name():
    assert str(history_path("", "/var/lib/binlogd/a-checkpoint.json")) == \
        "/var/lib/binlogd/a-checkpoint.schema-history.jsonl"
    assert str(history_path("/x/h.jsonl", "/c.json")) == "/x/h.jsonl"


class _Server:
    """The ServerSchema calls attach makes before it reads the history: the binlog's file and GTID state."""

    async def stream_facts(self, flavor: str) -> tuple[str, str]:
        return "binlog.000001", "0-1-9"


def _attach(path: Path) -> DaemonSchema:
    import asyncio
    from types import SimpleNamespace

    schema = DaemonSchema(path, _Server(), lambda s, t: True, None, logging.getLogger("test"))
    info = SimpleNamespace(flavor="mariadb", server_id=1, server_uuid="")
    asyncio.run(schema.attach(info, SimpleNamespace(position=Position("binlog.000001", 4, gtid_list="0-1-9"))))
    return schema


def test_an_unreadable_history_is_refused_with_one_line_naming_it(tmp_path):
    good = tmp_path / "good.jsonl"
    _history(good, [Entry("binlog.000001", 100, None, "d", "t", table("id", "a"), "seed")])
    assert _attach(good).source.server_id == 1                  # no source line yet: this server is recorded
    assert [s.server_id for s in load_history(good)[0]] == [1]
    bad = tmp_path / "bad.jsonl"
    stray = b'{"file": "binlog.000001", "pos": 4, "sql": "CREATE TABLE t (a INT)"}\n'
    bad.write_bytes(stray)
    with pytest.raises(SchemaHistoryUnusable) as refused:
        _attach(bad)
    assert str(refused.value).startswith(f"schema history {bad}: {bad}: line 1 is not a schema history entry")
    assert "\n" not in str(refused.value) and refused.value.fatal
    assert bad.read_bytes() == stray
    (tmp_path / "schema-history.jsonl").write_bytes(stray)     # beside a default path: not read, not moved
    default = history_path("", str(tmp_path / "checkpoint.json"))
    assert _attach(default).source.server_id == 1 and (tmp_path / "schema-history.jsonl").read_bytes() == stray

"""The raw archive sink: byte-identical copies of the primary's binlog files, resumes, rotates, fsync."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlogd.daemon.sinks import SinkError
from binlogd.daemon.sinks.archive import ArchiveSink
from binlogd.protocol.constants import LOG_EVENT_ARTIFICIAL_F, LOG_EVENT_BINLOG_IN_USE_F
from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.decoder import Decoder
from tests.support.sinks import (
    ARCHIVE_FILES,
    _fsync_recorder,
    artificial_rotate,
    checksummed,
    commit_sink,
    feed_archive,
    files,
    heartbeat,
    resent_fde,
    stream,
)


@pytest.mark.parametrize("name", ARCHIVE_FILES)
def test_archive_is_byte_identical_to_the_source(corpus, tmp_path, name):
    data = (corpus / name).read_bytes()
    fname = Path(name).name
    crc = checksummed(data)
    sink = ArchiveSink(tmp_path / "archive")
    sink.open(None)
    feed_archive(sink, [artificial_rotate(fname, 4, crc)] + stream(data))
    state = commit_sink(sink)
    sink.close()
    assert state == {"file": fname, "size": len(data)}
    archived = (tmp_path / "archive" / fname).read_bytes()
    assert len(archived) == len(data)
    assert archived == data
    # A ROTATE at the end names the next file, which is only created when its first event arrives.
    assert files(tmp_path / "archive") == [fname]


@pytest.mark.parametrize("name", ARCHIVE_FILES)
def test_archive_resumes_mid_file_from_a_committed_state(corpus, tmp_path, name):
    data = (corpus / name).read_bytes()
    fname = Path(name).name
    crc = checksummed(data)
    items = stream(data)
    k = len(items) // 2
    target = tmp_path / "archive"

    sink = ArchiveSink(target)
    sink.open(None)
    feed_archive(sink, [artificial_rotate(fname, 4, crc)] + items[:k])
    state = commit_sink(sink)
    assert state == {"file": fname, "size": items[k][1].header.pos}
    feed_archive(sink, items[k:k + 3])  # written, never committed: the daemon dies here
    sink.close()
    assert (target / fname).stat().st_size > state["size"] or k + 3 > len(items)

    again = ArchiveSink(target)
    again.open(state)
    assert (target / fname).stat().st_size == state["size"]
    resume = [artificial_rotate(fname, state["size"], crc), resent_fde(data, items[0][0])]
    feed_archive(again, resume + items[k:])
    assert commit_sink(again) == {"file": fname, "size": len(data)}
    again.close()
    assert (target / fname).read_bytes() == data


def test_archive_reconnect_to_an_earlier_position_rewrites_from_there(corpus, tmp_path):
    """A reconnect from the last committed boundary, without reopening: the tail after it is replaced."""
    data = (corpus / "mysql-binlog-connector-java/mysql-bin.checksum-crc32").read_bytes()
    items = stream(data)
    k = 40
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    feed_archive(sink, [artificial_rotate("mysql-bin.000001", 4, True)] + items[:k + 5])
    pos = items[k][1].header.pos
    feed_archive(sink, [artificial_rotate("mysql-bin.000001", pos, True), resent_fde(data, items[0][0])]
                 + items[k:k + 2])
    state = commit_sink(sink)
    assert state == {"file": "mysql-bin.000001", "size": items[k + 2][1].header.pos}
    assert (tmp_path / "mysql-bin.000001").read_bytes() == data[:state["size"]]  # no stale tail
    feed_archive(sink, items[k + 2:])
    sink.close()
    assert (tmp_path / "mysql-bin.000001").read_bytes() == data


def test_archive_follows_a_rotate_into_the_next_file(corpus, tmp_path):
    first = (corpus / "canal/mysql-bin.000001").read_bytes()
    second = (corpus / "canal/mysql-bin.000002").read_bytes()
    items = stream(first)
    assert items[-1][1].next_file == "mysql-bin.000002"
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    feed_archive(sink, [artificial_rotate("mysql-bin.000001", 4, False)] + items + stream(second))
    assert commit_sink(sink) == {"file": "mysql-bin.000002", "size": len(second)}
    sink.close()
    assert (tmp_path / "mysql-bin.000001").read_bytes() == first
    assert (tmp_path / "mysql-bin.000002").read_bytes() == second


def test_archive_next_file_announced_again_by_an_artificial_rotate(corpus, tmp_path):
    first = (corpus / "canal/mysql-bin.000001").read_bytes()
    second = (corpus / "canal/mysql-bin.000002").read_bytes()
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    feed_archive(sink, [artificial_rotate("mysql-bin.000001", 4, False)] + stream(first)
                 + [artificial_rotate("mysql-bin.000002", 4, False)] + stream(second))
    sink.close()
    assert (tmp_path / "mysql-bin.000001").read_bytes() == first
    assert (tmp_path / "mysql-bin.000002").read_bytes() == second


@pytest.mark.parametrize("name", ["mysql-binlog-connector-java/mysql-bin.checksum-crc32",
                                  "rust_mysql_common/binlog_transaction.000001"])
def test_archive_skips_heartbeats_and_artificial_events(corpus, tmp_path, name):
    data = (corpus / name).read_bytes()
    fname = Path(name).name
    crc = checksummed(data)
    items = stream(data)
    mixed = [artificial_rotate(fname, 4, crc)]
    for raw, ev in items:
        mixed.append((raw, ev))
        end = ev.header.next_position
        mixed.append(heartbeat(fname, end, crc))
        mixed.append(heartbeat(fname, end, crc, ET.HEARTBEAT_V2))
        if ev.header.type_code != ET.ROTATE:
            mixed.append(artificial_rotate(fname, end, crc))  # a reconnect announcing the same place
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    feed_archive(sink, mixed)
    sink.close()
    assert (tmp_path / fname).read_bytes() == data


def test_archive_skips_an_event_flagged_artificial(corpus, tmp_path):
    data = (corpus / "mysql-binlog-connector-java/mysql-bin.checksum-crc32").read_bytes()
    items = stream(data)
    raw, ev = items[3]
    flagged = bytearray(raw)
    flagged[17] |= LOG_EVENT_ARTIFICIAL_F
    from dataclasses import replace
    fake = replace(ev, header=replace(ev.header, flags=ev.header.flags | LOG_EVENT_ARTIFICIAL_F))
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    feed_archive(sink, [artificial_rotate("x.000001", 4, True)] + items[:3] + [(bytes(flagged), fake)])
    assert commit_sink(sink) == {"file": "x.000001", "size": items[3][1].header.pos}


def test_archive_event_out_of_step_is_an_error(corpus, tmp_path):
    data = (corpus / "mysql-binlog-connector-java/mysql-bin.checksum-crc32").read_bytes()
    items = stream(data)
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    feed_archive(sink, [artificial_rotate("mysql-bin.000001", 4, True)] + items[:5])
    with pytest.raises(SinkError, match="mysql-bin.000001"):
        sink.event(*items[6])  # items[5] was lost
    sink.close()


def test_archive_event_before_any_rotate_is_an_error(corpus, tmp_path):
    data = (corpus / "mysql-binlog-connector-java/mysql-bin.checksum-crc32").read_bytes()
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    with pytest.raises(SinkError):
        sink.event(*stream(data)[0])


def test_archive_resume_past_the_end_of_the_file_is_an_error(corpus, tmp_path):
    data = (corpus / "mysql-binlog-connector-java/mysql-bin.checksum-crc32").read_bytes()
    (tmp_path / "mysql-bin.000001").write_bytes(data[:1000])
    sink = ArchiveSink(tmp_path)
    with pytest.raises(SinkError):
        sink.open({"file": "mysql-bin.000001", "size": 2000})
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    with pytest.raises(SinkError):  # the stream says it continues at 2000, the archive has 1000 bytes
        sink.event(*artificial_rotate("mysql-bin.000001", 2000, True))


def test_archive_of_the_fde_as_sent_differs_only_in_the_in_use_flag(corpus, tmp_path):
    """What a primary sends has the in-use flag clear; the active file on disk has it set (offset 21)."""
    data = (corpus / "rust_mysql_common/mariadb-bin.000001").read_bytes()
    items = stream(data)
    assert items[0][1].header.flags & LOG_EVENT_BINLOG_IN_USE_F
    sent = bytearray(items[0][0])
    sent[17] &= ~LOG_EVENT_BINLOG_IN_USE_F & 0xFF
    fde = Decoder().decode(bytes(sent), 4)  # the CRC still holds: it was computed with the flag clear
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    feed_archive(sink, [artificial_rotate("mariadb-bin.000001", 4, True), (bytes(sent), fde)] + items[1:])
    sink.close()
    archived = (tmp_path / "mariadb-bin.000001").read_bytes()
    assert len(archived) == len(data)
    assert [i for i in range(len(data)) if archived[i] != data[i]] == [21]


def test_archive_commit_fsyncs(corpus, tmp_path, monkeypatch):
    data = (corpus / "rust_mysql_common/binlog_transaction.000001").read_bytes()
    calls = _fsync_recorder(monkeypatch)
    sink = ArchiveSink(tmp_path)
    sink.open(None)
    feed_archive(sink, [artificial_rotate("master-bin.000001", 4, False)] + stream(data)[:4])
    calls.clear()
    commit_sink(sink)
    st = (tmp_path / "master-bin.000001").stat()
    assert (st.st_dev, st.st_ino, False) in calls
    sink.close()


# =========================================================================== stdout




@pytest.mark.parametrize("limit", [None, 1, 7, 4096, 100_000])
def test_archive_writev_whole_and_short_writes(corpus, tmp_path, monkeypatch, limit):
    """Every event reaches the file once and in order, whether each writev(2) takes everything
    (the usual case, handled without a per-event loop) or stops short anywhere, inside an event too."""
    import os

    from binlogd.daemon.sinks import archive

    name = ARCHIVE_FILES[0]
    data = (corpus / name).read_bytes()
    fname = Path(name).name
    calls, real_writev = [], os.writev

    def writev(fd, buffers):
        buffers = list(buffers)
        calls.append(len(buffers))
        if limit is None:
            return real_writev(fd, buffers)
        return os.write(fd, b"".join(bytes(b) for b in buffers)[:limit])

    monkeypatch.setattr(archive.os, "writev", writev)
    monkeypatch.setattr(archive, "_IOV_MAX", 3)  # a queue longer than one writev takes
    sink = ArchiveSink(tmp_path / "archive")
    sink.open(None)
    items = [artificial_rotate(fname, 4, checksummed(data))] + stream(data)
    half = len(items) // 2
    feed_archive(sink, items[:half])
    commit_sink(sink)  # a flush in the middle, then the rest
    feed_archive(sink, items[half:])
    commit_sink(sink)
    sink.close()
    assert (tmp_path / "archive" / fname).read_bytes() == data
    assert calls and max(calls) <= 3

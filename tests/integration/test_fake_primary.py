"""The daemon against a protocol-level fake MySQL 8 primary (tests/support/fakeprimary.py) replaying real binlogs.

No real server: ``daemon.service.Daemon`` runs in-process against :class:`FakePrimary`, which serves
files of the shared corpus over COM_BINLOG_DUMP_GTID / COM_BINLOG_DUMP and records what the daemon
sent. Checked here: the GTID set encoding (untagged and tagged) and the server-side skipping of
what the replica already has, checksum and heartbeat negotiation, HEARTBEAT_V2 handling, ERR 1236,
the 2 × heartbeat silence detection, closed connections, a wrong password, events over 16 MB
(continuation packets), and where the checkpoint ends up.

Every wait is bounded; the heartbeat period is 0.3 s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from binlogd.daemon.delivery.checkpoint import CheckpointStore
from binlogd.daemon.delivery.consumer import Consumer
from binlogd.library.checkpointfile import Checkpoint
from binlogd.protocol import decoder as D
from binlogd.protocol import events as E
from binlogd.protocol.constants import EventType as ET
from binlogd.protocol.decoder import Decoder
from binlogd.protocol.gtid import MysqlGtidSet
from binlogd.protocol.position import Position
from tests.support.fakeprimary import FakePrimary
from tests.support.fakeprimary_daemon import (
    F57,
    FENUM,
    FNONE,
    FTAG,
    HB,
    PASSWORD,
    SERVER_ID,
    U57,
    UENUM,
    UOTHER,
    UTAG,
    Running,
    at_pos,
    binlog,
    by_gtid,
    checkpoint,
    config,
    gtid_reaches,
    heartbeats,
    metric,
    sink_rows,
    within,
)
from tests.support.fakewire import (
    GTID,
    GTID_TAGGED,
    HEARTBEAT_V2,
    MAX_CHUNK,
    MSG_NO_FIRST_FILE,
    QUERY,
    Intervals,
    gtid_event_body,
    heartbeat_v2_event,
    query_event_body,
)

pytest.importorskip("aiomysql")
pytestmark = pytest.mark.usefixtures("corpus")   # skipped (or failed under CI) without ../shared/binlogs

# --------------------------------------------------------------------------- (1) GTID resume


async def test_gtid_resume_untagged_set_encoding_and_server_side_skip(tmp_path):
    start = f"{UENUM}:1-3,{UOTHER}:1-77"

    async def main():
        async with FakePrimary(binlog(FENUM), password=PASSWORD) as primary, \
                Running(config(tmp_path, primary.port, f"gtid:{start}"), primary) as d:
            cp = await d.wait(gtid_reaches(tmp_path, f"{UENUM}:1-5,{UOTHER}:1-77"), 20, "GTIDs :4 :5 committed")
            assert await d.stop() == 0
            return primary, cp

    primary, cp = await within(main())
    assert len(primary.dumps) == 1
    dump = primary.dumps[0]
    assert dump.command == "gtid" and dump.flags & 0x04 and dump.file == "" and dump.pos == 4
    assert dump.server_id == SERVER_ID
    assert not dump.tagged_format, dump.gtid_data.hex()
    # decoded independently by the fake, and by protocol.gtid
    assert dump.gtid_intervals == Intervals({(UENUM, ""): [(1, 4)], (UOTHER, ""): [(1, 78)]})
    assert dump.gtid_set == MysqlGtidSet.parse(start)
    # the primary skipped the transactions the replica had: no GTID event for :1-3 went out
    conn = primary.connections[-1]
    sent_gtid_offsets = [off for tc, _f, off in conn.events_sent if tc == GTID]
    assert sent_gtid_offsets == [1560, 2659]
    # the sink holds exactly :4 (update) and :5 (delete), once each
    assert by_gtid(sink_rows(tmp_path)) == {f"{UENUM}:4": ["update"], f"{UENUM}:5": ["delete"]}
    assert cp.position.file == "mysql-enum-string-set.000001" and cp.position.pos == 3331
    assert cp.source.get("resume") == "gtid"


@pytest.mark.parametrize("have_tagged, expect_rows", [("1-2", 1), ("1-3", 0)])
async def test_gtid_resume_tagged_set_encoding(tmp_path, have_tagged, expect_rows):
    start = f"{UTAG}:1-13:mytag:{have_tagged}"
    final = f"{UTAG}:1-13:mytag:1-3"

    async def main():
        async with FakePrimary(binlog(FTAG), password=PASSWORD, server_version="9.6.0-fake") as primary, \
                Running(config(tmp_path, primary.port, f"gtid:{start}"), primary) as d:
            # the file ends with a ROTATE to binlog.000005: the checkpoint follows it
            await d.wait(at_pos(tmp_path, "binlog.000005", 4), 20, "the ROTATE at the end of the file")
            await primary.wait_for(heartbeats(primary, 1), 5, "a heartbeat")
            assert await d.stop() == 0
            return primary, checkpoint(tmp_path)

    primary, cp = await within(main())
    dump = primary.dumps[0]
    assert dump.tagged_format, dump.gtid_data.hex()
    upto = int(have_tagged.split("-")[1]) + 1
    assert dump.gtid_intervals == Intervals({(UTAG, ""): [(1, 14)], (UTAG, "mytag"): [(1, upto)]})
    assert dump.gtid_set == MysqlGtidSet.parse(start)
    sent_types = [tc for tc, _f, _o in primary.connections[-1].events_sent]
    assert (GTID_TAGGED in sent_types) == bool(expect_rows)
    rows = sink_rows(tmp_path)
    assert by_gtid(rows) == ({f"{UTAG}:mytag:3": ["insert"]} if expect_rows else {})
    assert MysqlGtidSet.parse(cp.position.gtid_set) == MysqlGtidSet.parse(final)


async def test_gtid_resume_from_checkpoint_then_position_after_last_transaction(tmp_path):
    """(1) + (8): resume from a saved checkpoint; it ends after the file's last transaction."""
    store = CheckpointStore(tmp_path / "state" / "checkpoint.json")
    store.acquire()
    store.save(Checkpoint(Position("mysql-bin.000057", 378, gtid_set=f"{U57}:1-11"),
                          {"file": "changes-000001.jsonl", "offset": 0}, {"resume": "gtid", "flavor": "mysql"}))
    store.release()

    async def main():
        async with FakePrimary(binlog(F57), password=PASSWORD) as primary, \
                Running(config(tmp_path, primary.port, "current"), primary) as d:
            cp = await d.wait(gtid_reaches(tmp_path, f"{U57}:1-13"), 20, "GTID :13 committed")
            tracker_before = d.daemon.tracker.committed
            assert await d.stop() == 0
            return primary, cp, tracker_before

    primary, cp, committed = await within(main())
    conn = primary.connections[-1]
    # the checkpoint's start, not source.start=current: no SHOW MASTER STATUS
    assert not any("STATUS" in q.upper() for q in conn.queries)
    assert primary.dumps[0].gtid_intervals == Intervals({(U57, ""): [(1, 12)]})
    rows = sink_rows(tmp_path)
    assert by_gtid(rows) == {f"{U57}:12": ["insert"], f"{U57}:13": ["update", "insert"]}
    # after the stream: file from the artificial ROTATE, position after the last transaction
    assert cp.position.file == "mysql-bin.000057" and cp.position.pos == 1283 == primary.files[0].size
    assert committed == cp.position
    assert checkpoint(tmp_path).position == cp.position


async def test_gtid_set_missing_purged_transactions_is_err_1236(tmp_path, caplog):
    async def main():
        async with FakePrimary(binlog(F57), password=PASSWORD) as primary, \
                Running(config(tmp_path, primary.port, f"gtid:{U57}:11-13"), primary) as d:
            return primary, await d.exit_code(10)

    caplog.set_level(logging.INFO, "binlogd")
    primary, rc = await within(main())
    assert rc == 5
    assert primary.connections[0].errors_sent[0][0] == 1236
    text = "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)
    assert "1236" in text and "purged" in text
    assert len(primary.connections) == 1


async def test_file_pos_dump_from_offset(tmp_path):
    async def main():
        async with FakePrimary(binlog(F57), password=PASSWORD) as primary, \
                Running(config(tmp_path, primary.port, "file:mysql-bin.000057:378"), primary) as d:
            cp = await d.wait(at_pos(tmp_path, "mysql-bin.000057", 1283), 20, "end of file")
            assert await d.stop() == 0
            return primary, cp

    primary, cp = await within(main())
    dump = primary.dumps[0]
    assert (dump.command, dump.file, dump.pos, dump.server_id) == ("file", "mysql-bin.000057", 378, SERVER_ID)
    assert by_gtid(sink_rows(tmp_path)) == {f"{U57}:12": ["insert"], f"{U57}:13": ["update", "insert"]}
    assert MysqlGtidSet.parse(cp.position.gtid_set) == MysqlGtidSet.parse(f"{U57}:12-13")
    assert cp.source.get("resume") == "file"


async def test_jsonl_sink_never_decodes_rows_query_text(tmp_path, monkeypatch):
    """The ROWS_QUERY events inside :12's and :13's TRANSACTION_PAYLOADs are decoded, but the JSON-lines
    path never reads their statement's text (``RowsQueryEvent.query`` decodes on first read)."""
    decoded = []

    def recording(h, body, ctx, fn=D._DISPATCH[ET.ROWS_QUERY]):
        decoded.append(fn(h, body, ctx))
        return decoded[-1]

    monkeypatch.setitem(D._DISPATCH, ET.ROWS_QUERY, recording)
    texts = []   # every statement text made (RowsQueryEvent.query's decode)
    real_text = E.text
    monkeypatch.setattr(E, "text", lambda raw, codec="utf-8": texts.append(bytes(raw)) or real_text(raw, codec))

    async def main():
        async with FakePrimary(binlog(F57), password=PASSWORD) as primary, \
                Running(config(tmp_path, primary.port, "file:mysql-bin.000057:378"), primary) as d:
            await d.wait(at_pos(tmp_path, "mysql-bin.000057", 1283), 20, "end of file")
            assert await d.stop() == 0

    await within(main())
    assert by_gtid(sink_rows(tmp_path)) == {f"{U57}:12": ["insert"], f"{U57}:13": ["update", "insert"]}
    assert len(decoded) == 3 and all(isinstance(ev, E.RowsQueryEvent) for ev in decoded)
    assert texts == []   # no statement text was made
    assert decoded[0].query and texts == [bytes(decoded[0].statement)]   # the count sees a read


@pytest.mark.parametrize("version, statement", [("8.0.31-fake", "SHOW MASTER STATUS"),
                                                ("8.4.0-fake", "SHOW BINARY LOG STATUS")])
async def test_start_current_uses_version_aware_status_and_executed_set(tmp_path, version, statement):
    async def main():
        async with FakePrimary(binlog(F57), password=PASSWORD, server_version=version) as primary, \
                Running(config(tmp_path, primary.port, "current"), primary) as d:
            await primary.wait_for(heartbeats(primary, 2), 10, "heartbeats")
            await d.wait(lambda: checkpoint(tmp_path), 5, "a checkpoint")
            assert await d.stop() == 0
            return primary

    primary = await within(main())
    conn = primary.connections[-1]
    assert statement in conn.queries
    assert not conn.errors_sent
    assert primary.dumps[0].gtid_intervals == Intervals({(U57, ""): [(1, 14)]})
    assert not [tc for tc, _f, _o in conn.events_sent if tc == GTID]
    assert sink_rows(tmp_path) == []
    assert MysqlGtidSet.parse(checkpoint(tmp_path).position.gtid_set) == MysqlGtidSet.parse(f"{U57}:1-13")


async def test_start_datetime_probes_with_non_blocking_dumps(tmp_path):
    when = datetime.fromtimestamp(1647193297, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")

    async def main():
        async with FakePrimary(binlog(FENUM), password=PASSWORD) as primary, \
                Running(config(tmp_path, primary.port, f"datetime:{when}"), primary) as d:
            await d.wait(at_pos(tmp_path, "mysql-enum-string-set.000001", 3331), 20, "end of file")
            assert await d.stop() == 0
            return primary

    primary = await within(main())
    assert any(q.upper() == "SHOW BINARY LOGS" for c in primary.connections for q in c.queries)
    probes = [d for d in primary.dumps if d.flags & 0x01]
    assert probes and all(p.command == "file" and p.pos == 4 for p in probes)
    assert by_gtid(sink_rows(tmp_path)) == {f"{UENUM}:4": ["update"], f"{UENUM}:5": ["delete"]}


async def test_start_datetime_skip_survives_a_restart_from_a_checkpoint(tmp_path):
    """A checkpoint saved before the datetime was reached carries the skip, so a daemon that restarts
    from it (after a crash, from an earlier position) goes on skipping: nothing before the datetime
    is emitted, whatever point the restart resumes from."""
    future = datetime.fromtimestamp(1647193297 + 10**8, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    end = at_pos(tmp_path, "mysql-enum-string-set.000001", 3331)

    async def first():
        async with FakePrimary(binlog(FENUM), password=PASSWORD) as primary, \
                Running(config(tmp_path, primary.port, f"datetime:{future}"), primary) as d:
            cp = await d.wait(end, 20, "end of file")
            assert await d.stop() == 0
            return cp

    cp = await within(first())
    assert sink_rows(tmp_path) == []
    assert cp.source.get("skip_before") == 1647193297 + 10**8
    # The crash: the daemon restarts from a checkpoint at the file's start, taken mid-skip, and the
    # datetime it skips to is that of the 4th transaction.
    cp.position = dataclasses.replace(cp.position, pos=4, gtid_set="")
    cp.source["skip_before"] = 1647193297
    CheckpointStore(tmp_path / "state" / "checkpoint.json", lock=False).save(cp)

    async def second():
        async with FakePrimary(binlog(FENUM), password=PASSWORD) as primary, \
                Running(config(tmp_path, primary.port, "current"), primary) as d:
            cp = await d.wait(end, 20, "end of file")
            assert await d.stop() == 0
            return primary, cp

    primary, cp = await within(second())
    assert [(dump.file, dump.pos) for dump in primary.dumps] == [("mysql-enum-string-set.000001", 4)]
    assert by_gtid(sink_rows(tmp_path)) == {f"{UENUM}:4": ["update"], f"{UENUM}:5": ["delete"]}
    assert "skip_before" not in cp.source


# --------------------------------------------------------------------------- (2) checksum and heartbeat negotiation


@pytest.mark.parametrize("heartbeat", [0.3, 0.5])
async def test_checksum_and_heartbeat_period_negotiated_before_the_dump(tmp_path, heartbeat):
    async def main():
        async with FakePrimary(binlog(F57), password=PASSWORD) as primary, \
                Running(config(tmp_path, primary.port, f"gtid:{U57}:1-10", heartbeat=heartbeat), primary) as d:
            await primary.wait_for(heartbeats(primary, 3), 10, "3 heartbeats")
            assert await d.stop() == 0
            return primary

    primary = await within(main())
    conn = primary.connections[-1]
    v = conn.session_vars
    assert v["@source_binlog_checksum"] == "CRC32" and v["@master_binlog_checksum"] == "CRC32"
    period_ns = int(heartbeat * 1_000_000_000)
    assert v["@source_heartbeat_period"] == period_ns and v["@master_heartbeat_period"] == period_ns
    kinds = [k for k, _ in conn.log]
    set_at = next(i for i, (k, sql) in enumerate(conn.log) if k == "query" and sql.upper().startswith("SET "))
    assert set_at < kinds.index("register") < kinds.index("dump")
    assert conn.register["server_id"] == SERVER_ID == conn.dump.server_id
    assert not conn.errors_sent


async def test_stop_returns_promptly_while_heartbeats_arrive(tmp_path):
    """``stop()`` ends ``await within()`` within the shutdown bound even when a heartbeat lands as the consumer stops.

    With a 0.25 s heartbeat (the consumer's queue poll is also 0.25 s) the packet often arrives in the same
    loop turn as ``_session`` cancels the reader task; a few rounds make that coincidence near certain.
    """
    async def once(workdir: Path):
        async with FakePrimary(binlog(F57), password=PASSWORD) as primary, \
                Running(config(workdir, primary.port, f"gtid:{U57}:1-10", heartbeat=0.25)) as d:  # not quieted
            await primary.wait_for(heartbeats(primary, 3), 10, "3 heartbeats")
            d.daemon.stop()
            done, _ = await asyncio.wait({d.task}, timeout=3)
            return d.task.result() if done else None

    for round_ in range(5):
        rc = await within(once(tmp_path / f"round{round_}"))
        assert rc == 0, f"round {round_}: await within() had not returned 3s after stop() (heartbeats still flowing)"


async def test_checksum_none_primary(tmp_path):
    """A binlog_checksum=NONE primary (5.7.20): the daemon asks for NONE and decodes events without footers."""
    async def main():
        async with FakePrimary(binlog(FNONE), password=PASSWORD, server_version="5.7.20-fake",
                               gtid_mode=False) as primary, \
                Running(config(tmp_path, primary.port, "file:mysql-bin.checksum-none:4"), primary) as d:
            await d.wait(at_pos(tmp_path, "mysql-bin.checksum-none", 37643), 20, "end of file")
            await d.wait(lambda: (metric(d.daemon, "binlogd_events_total", type="HEARTBEAT_V2") or 0) >= 2, 5,
                         "heartbeats decoded")
            assert await d.stop() == 0
            return primary

    primary = await within(main())
    conn = primary.connections[-1]
    assert conn.session_vars["@source_binlog_checksum"] == "NONE"
    assert conn.dump.command == "file"
    rows = sink_rows(tmp_path)
    # 34 WRITE_ROWS and 2 UPDATE_ROWS events in the file
    assert len({r["source"]["pos"] for r in rows}) == 36
    assert {r["op"] for r in rows} == {"insert", "update"}


async def test_fake_refuses_a_replica_that_does_not_announce_checksums():
    """Self-check of the fake (what makes the negotiation tests meaningful): no SET, no stream."""
    import aiomysql

    from binlogd.protocol.commands import com_binlog_dump_gtid, com_register_slave
    from binlogd.protocol.packet import BufferedPacketReader, encode_packet, parse_err

    async def main():
        async with FakePrimary(binlog(F57), password=PASSWORD) as primary:
            conn = await aiomysql.connect(host="127.0.0.1", port=primary.port, user="repl", password=PASSWORD)
            try:
                reader, writer = conn._reader, conn._writer
                packets = BufferedPacketReader()
                writer.write(encode_packet(com_register_slave(7), 0))
                writer.write(encode_packet(com_binlog_dump_gtid(7, "", 4, MysqlGtidSet.parse(f"{U57}:1-10")), 0))
                got = []
                while len(got) < 2:
                    packets.feed(await asyncio.wait_for(reader.read(65536), 5))
                    while (p := packets.next_payload()) is not None:
                        got.append(bytes(p))
                return got
            finally:
                conn.close()

    ok, err = await within(main())
    assert ok[0] == 0 and err[0] == 0xFF
    e = parse_err(err)
    assert e.code == 1236 and "checksum" in e.message


# --------------------------------------------------------------------------- (3) heartbeat v2


async def test_heartbeat_v2_decoded_without_output_or_position_change(tmp_path):
    async def main():
        async with FakePrimary(binlog(F57), password=PASSWORD) as primary, \
                Running(config(tmp_path, primary.port, f"gtid:{U57}:1-10"), primary) as d:
            cp = await d.wait(at_pos(tmp_path, "mysql-bin.000057", 1283), 20, "end of file")
            rows_before = sink_rows(tmp_path)
            conn = primary.connections[-1]
            await primary.wait_for(lambda: conn.heartbeats_sent >= 1, 5, "first heartbeat")
            await d.wait(lambda: (metric(d.daemon, "binlogd_last_heartbeat_timestamp_seconds") or 0) > 0, 5,
                         "a heartbeat seen")
            first_ts = metric(d.daemon, "binlogd_last_heartbeat_timestamp_seconds")
            await primary.wait_for(lambda: conn.heartbeats_sent >= 4, 5, "4 heartbeats")
            await d.wait(lambda: metric(d.daemon, "binlogd_last_heartbeat_timestamp_seconds") > first_ts, 5,
                         "the heartbeat timestamp to move")
            await asyncio.sleep(0.1)
            state = dict(
                lag=metric(d.daemon, "binlogd_lag_seconds"),
                hb_events=metric(d.daemon, "binlogd_events_total", type="HEARTBEAT_V2"),
                hb_sent=conn.heartbeats_sent,
                errors=d.daemon.metrics.registry.get_sample_value("binlogd_errors_total", {"kind": "decode"}),
                reconnects=metric(d.daemon, "binlogd_reconnects_total"),
                rows_after=sink_rows(tmp_path),
                cp_after=checkpoint(tmp_path),
            )
            assert await d.stop() == 0
            return primary, cp, rows_before, state

    primary, cp, rows_before, s = await within(main())
    assert s["lag"] == 0
    assert s["hb_events"] >= 3 and s["hb_events"] <= s["hb_sent"]
    assert not s["errors"] and not s["reconnects"]
    assert s["rows_after"] == rows_before and len(rows_before) == 3
    assert s["cp_after"].position == cp.position          # heartbeats do not move the position
    # heartbeats came at the negotiated period
    assert len(primary.connections) == 1


def test_fake_heartbeat_v2_bytes_decode_with_64_bit_position():
    pos = (1 << 40) + 7
    for checksum in (True, False):
        raw = heartbeat_v2_event("binlog.000042", pos, checksum=checksum)
        ev = Decoder(checksum_alg=1 if checksum else 0).decode(raw, 0)
        assert isinstance(ev, E.HeartbeatEvent)
        assert ev.header.type_code == HEARTBEAT_V2
        assert (ev.log_file, ev.position) == ("binlog.000042", pos)


# --------------------------------------------------------------------------- (4) ERR 1236


async def test_err_1236_exits_5_quickly_with_the_code_in_the_message(tmp_path, caplog):
    async def main():
        async with FakePrimary(binlog(F57), password=PASSWORD, err_1236=True) as primary, \
                Running(config(tmp_path, primary.port, f"gtid:{U57}:1-10"), primary) as d:
            t0 = time.monotonic()
            rc = await d.exit_code(10)
            return primary, rc, time.monotonic() - t0

    caplog.set_level(logging.INFO, "binlogd")
    primary, rc, took = await within(main())
    assert rc == 5
    assert took < 3
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("1236" in m and MSG_NO_FIRST_FILE in m for m in errors), errors
    assert len(primary.connections) == 1 and primary.connections[0].errors_sent[0][0] == 1236
    assert sink_rows(tmp_path) == []


# --------------------------------------------------------------------------- (5) silence and closed connections


async def test_stall_longer_than_two_heartbeats_reconnects_and_delivers_once(tmp_path):
    # with :1-2 known: ROTATE, FDE, PREVIOUS_GTIDS, GTID:3 BEGIN TABLE_MAP WRITE XID, GTID:4 BEGIN TABLE_MAP | stall
    async def main():
        async with FakePrimary(binlog(FENUM), password=PASSWORD, stall_after=11) as primary, \
                Running(config(tmp_path, primary.port, f"gtid:{UENUM}:1-2"), primary) as d:
            await primary.wait_for(lambda: len(primary.connections) >= 2, 2 * HB + 3, "a second connection")
            await d.wait(gtid_reaches(tmp_path, f"{UENUM}:1-5"), 20, "all GTIDs")
            state = dict(timeouts=metric(d.daemon, "binlogd_errors_total", kind="timeout"),
                         reconnects=metric(d.daemon, "binlogd_reconnects_total"))
            assert await d.stop() == 0
            return primary, state

    primary, state = await within(main())
    first, second = primary.connections[0], primary.connections[1]
    assert first.stalled_at is not None
    silence = second.connected_at - first.last_send_at
    assert 2 * HB - 0.05 <= silence <= 2 * HB + 0.05 + 1.0, silence
    assert state["timeouts"] == 1 and state["reconnects"] == 1
    # the GTID set keeps advancing across reconnects (never below the start); :3 is re-read or was committed
    assert primary.dumps[1].gtid_intervals in (Intervals({(UENUM, ""): [(1, 3)]}), Intervals({(UENUM, ""): [(1, 4)]}))
    assert by_gtid(sink_rows(tmp_path)) == {f"{UENUM}:3": ["insert"], f"{UENUM}:4": ["update"],
                                           f"{UENUM}:5": ["delete"]}


async def test_primary_closing_mid_transaction_reconnects_and_delivers_once(tmp_path):
    async def main():
        async with FakePrimary(binlog(FENUM), password=PASSWORD, close_after=12) as primary, \
                Running(config(tmp_path, primary.port, f"gtid:{UENUM}:1-2"), primary) as d:
            await d.wait(gtid_reaches(tmp_path, f"{UENUM}:1-5"), 20, "all GTIDs")
            assert await d.stop() == 0
            return primary

    primary = await within(main())
    assert primary.connections[0].closed_by == "fault"
    assert len(primary.dumps) == 2
    assert primary.dumps[1].gtid_intervals in (Intervals({(UENUM, ""): [(1, 3)]}), Intervals({(UENUM, ""): [(1, 4)]}))
    assert by_gtid(sink_rows(tmp_path)) == {f"{UENUM}:3": ["insert"], f"{UENUM}:4": ["update"],
                                           f"{UENUM}:5": ["delete"]}


# --------------------------------------------------------------------------- (6) wrong password


async def test_wrong_password_exits_3(tmp_path, caplog):
    async def main():
        async with FakePrimary(binlog(F57), password=PASSWORD) as primary, \
                Running(config(tmp_path, primary.port, f"gtid:{U57}:1-10", password="not-it"), primary) as d:
            t0 = time.monotonic()
            rc = await d.exit_code(10)
            return primary, rc, time.monotonic() - t0

    caplog.set_level(logging.INFO, "binlogd")
    primary, rc, took = await within(main())
    assert rc == 3 and took < 3
    assert len(primary.connections) == 1
    conn = primary.connections[0]
    assert not conn.authenticated and conn.errors_sent[0][0] == 1045 and not conn.queries
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "1045" in text and "not-it" not in text


# --------------------------------------------------------------------------- (7) events over 16 MB


@pytest.mark.parametrize("payload_len", [MAX_CHUNK, MAX_CHUNK + 1, 2 * MAX_CHUNK + 12345],
                         ids=["exactly-one-chunk", "one-chunk-plus-one", "three-chunks"])
async def test_event_over_16mb_arrives_intact(tmp_path, payload_len):
    """A GTID :6 + a QUERY event whose packet payload (0x00 + event) is ``payload_len`` bytes."""
    base = binlog(FENUM)
    event_len = payload_len - 1
    head = "CREATE TABLE big_t (c INT) COMMENT '"
    fixed = 19 + 4 + len(query_event_body(head + "'", db="test"))
    query = head + "x" * (event_len - fixed) + "'"
    f = base.appended((GTID, gtid_event_body(UENUM, 6)), (QUERY, query_event_body(query, db="test")))
    assert len(f.events[-1].raw) == event_len
    seen: list[tuple[int, str]] = []

    async def main():
        async with FakePrimary(f, password=PASSWORD) as primary, \
                Running(config(tmp_path, primary.port, f"gtid:{UENUM}:1-5"), primary) as d:
            sink_event = d.daemon.sink.event

            def spy(raw, event):
                if isinstance(event, E.QueryEvent) and event.query.startswith("CREATE TABLE big_t"):
                    seen.append((len(raw), hashlib.sha256(event.query.encode()).hexdigest(), len(event.query)))
                return sink_event(raw, event)

            d.daemon.sink.event = spy
            cp = await d.wait(gtid_reaches(tmp_path, f"{UENUM}:1-6"), 60, "the big transaction")
            assert await d.stop(30) == 0
            return primary, cp

    primary, cp = await within(main(), timeout=120)
    assert seen == [(event_len, hashlib.sha256(query.encode()).hexdigest(), len(query))]
    assert cp.position.pos == f.size
    assert len(primary.connections) == 1


# --------------------------------------------------------------------------- (8) the checkpoint after the stream


async def test_checkpoint_after_stream_points_after_last_transaction(tmp_path):
    async def main():
        async with FakePrimary(binlog(FENUM), password=PASSWORD) as primary, \
                Running(config(tmp_path, primary.port, f"gtid:{UENUM}:1"), primary) as d:
            await primary.wait_for(heartbeats(primary, 2), 10, "heartbeats after EOF")
            await d.wait(lambda: checkpoint(tmp_path) and checkpoint(tmp_path).position.pos == 3331, 5, "checkpoint")
            tracker = d.daemon.tracker
            live = (tracker.file, tracker.pos, tracker.in_transaction)
            assert await d.stop() == 0
            return primary, live

    primary, live = await within(main())
    cp = checkpoint(tmp_path)
    rotate_name = "mysql-enum-string-set.000001"     # what the artificial ROTATE named
    assert cp.position.file == rotate_name and cp.position.pos == 3331 == primary.files[0].size
    assert MysqlGtidSet.parse(cp.position.gtid_set) == MysqlGtidSet.parse(f"{UENUM}:1-5")
    assert live == (rotate_name, 3331, False)
    assert by_gtid(sink_rows(tmp_path)) == {f"{UENUM}:3": ["insert"], f"{UENUM}:4": ["update"],
                                           f"{UENUM}:5": ["delete"]}


async def test_queue_events_bounds_the_events_between_reader_and_consumer(tmp_path, monkeypatch):
    """daemon.queue_events counts events, not reader batches: with a consumer slower than the
    primary, the queue never holds more, binlogd_queue_depth reports events, and everything arrives."""
    limit, depths, high = 2, [], [0]
    handle = Consumer._handle

    async def slow_handle(consumer, raw):
        high[0] = max(high[0], depths[-1] if depths else 0)  # the queue depth the daemon last reported
        await asyncio.sleep(0.002)
        await handle(consumer, raw)

    monkeypatch.setattr(Consumer, "_handle", slow_handle)

    async def main():
        async with FakePrimary(binlog(F57), password=PASSWORD) as primary:
            running = Running(config(tmp_path, primary.port, "file:mysql-bin.000057:4",
                                     **{"daemon.queue_events": str(limit)}), primary)
            d = running.daemon
            report = d.metrics.queue_depth
            d.metrics.queue_depth = lambda n: (depths.append(n), report(n))
            async with running:
                await running.wait(at_pos(tmp_path, "mysql-bin.000057", 1283), 30, "end of file")
                assert await running.stop() == 0

    await within(main())
    assert 0 < high[0] <= limit, f"{high[0]} events were queued with daemon.queue_events = {limit}"
    assert max(depths) == limit
    assert by_gtid(sink_rows(tmp_path)) == {f"{U57}:12": ["insert"], f"{U57}:13": ["update", "insert"]}

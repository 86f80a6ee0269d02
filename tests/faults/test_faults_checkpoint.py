"""Checkpoint faults (issue 19): a checkpoint that cannot be saved is retried, never a crash, and the
checkpoint never moves backwards.

- The FIRST save fails (before the fix: "checkpoint stays at start, retrying", then
  ``AttributeError: 'NoneType' object has no attribute 'file'``, exit 1): a directory named
  ``.checkpoint.json.tmp`` beside the checkpoint, the checkpoint on a full tmpfs, or on a read-only
  one with ``checkpoint.lock = false``. The daemon logs the error and retries from the start position
  it resolved (``current``: the transactions written meanwhile are not skipped).
- A LATER save fails (a full tmpfs under the checkpoint while a load runs), and a save AFTER A RECONNECT
  fails (the dump connection killed on the server, then the disk fills).
- A ``source.start`` the primary cannot serve is never saved: a position past the end of its file or
  inside an event (named so, with the nearest boundaries; not "purged"), a file older than the oldest ("probably
  purged"), a
  GTID the binlog lacks; each exits 5 leaving no checkpoint, and the corrected start then streams.
- The sink on a full tmpfs while the checkpoint is elsewhere, resuming by GTID (``start = "current"``):
  before the fix the session after the failure committed the artificial ``ROTATE <file>:4`` and the
  checkpoint went back to ``<file>:4``. The same test first cuts the dump twice while idle. MariaDB
  re-sends the file's header events on a GTID resume and then an artificial GTID_LIST naming the resume
  position, so the window is between the two; MySQL sends no such event: with nothing new, the header
  events (behind the checkpoint) and then heartbeats, and the idle commit came right after them. The
  fake MySQL primary shows that deterministically. A sampler reads the checkpoint every 10 ms: it never moves
  backwards, and neither does the position of any "streaming from" line.

Every case heals, and then every transaction of the writer's load is in the sink exactly once
(:func:`tests.support.faults.check_exactly_once`). The tmpfs cases need root (skipped elsewhere).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.support.daemon import (
    DaemonProcess,
    base_overrides,
    read_checkpoint,
    run_to_exit,
    running_daemon,
    wait_caught_up,
    wait_until,
)
from tests.support.fakeprimary import FakePrimary
from tests.support.fakeprimary_daemon import (
    F57,
    PASSWORD,
    U57,
    Running,
    binlog,
    checkpoint,
    config,
    gtid_reaches,
    heartbeats,
)
from tests.support.faults import (
    SCHEMA,
    Refiller,
    Writer,
    check_exactly_once,
    create_tables,
    fill_disk,
    local_server,
    small_tmpfs,
)
from tests.support.flavour import binlog_status

SAVE_FAILED = r"ERROR .*cannot write checkpoint .*: (Is a directory|No space left on device|Read-only file system)"
STREAMING_AT = re.compile(r"streaming from .* at (\S+):(\d+)")


def _key(file: str, pos: int) -> tuple[int, int]:
    return int(file.rsplit(".", 1)[1]), int(pos)


class Sampler(threading.Thread):
    """Reads the checkpoint every 10 ms; :attr:`seen` holds each distinct (file, pos, GTIDs) in order."""

    def __init__(self, path: Path):
        super().__init__(daemon=True, name="checkpoint-sampler")
        self.path, self.stop_flag, self.seen = path, threading.Event(), []

    def run(self) -> None:
        while not self.stop_flag.wait(0.01):
            with contextlib.suppress(ValueError):  # never half-written (atomic rename), but be safe
                cp = read_checkpoint(self.path)
                if cp is not None:
                    p = cp["position"]
                    now = (p["file"], p["pos"], p["gtid_list"] or p["gtid_set"])
                    if not self.seen or self.seen[-1] != now:
                        self.seen.append(now)

    def assert_monotonic(self) -> None:
        self.stop_flag.set()
        self.join(5)
        for before, after in zip(self.seen, self.seen[1:]):
            assert _key(*after[:2]) >= _key(*before[:2]), f"the checkpoint moved backwards: {before} -> {after}"


def _assert_streaming_never_backwards(daemon: DaemonProcess) -> int:
    at = [_key(m.group(1), m.group(2)) for line in daemon.lines if (m := STREAMING_AT.search(line))]
    assert at == sorted(at), f"a session started behind the one before it: {at}\n{daemon.stderr}"
    return len(at)


def _healthy_end(srv, daemon: DaemonProcess, writer: Writer, cp_path: Path, sink: Path, label: str) -> None:
    """After healing: more load, then caught up, SIGTERM exits 0, no traceback, exactly once."""
    writer.wait_count(writer.count + 50, timeout=60)
    writer.stop()
    wait_caught_up(srv, cp_path, timeout=60, daemon=daemon, fail_on=None)
    rc = daemon.terminate()
    assert rc == 0, f"exit {rc} on SIGTERM:\n{daemon.stderr}"
    assert "Traceback" not in daemon.stderr, daemon.stderr
    check_exactly_once(srv, sink, writer, label)


@contextlib.contextmanager
def _read_only_tmpfs(path: Path):
    """A tmpfs at ``path``, remounted read-only; ``heal()`` of the yielded object remounts it read-write."""
    with small_tmpfs(path):
        def remount(mode: str) -> None:
            subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True, capture_output=True, timeout=20)
        remount("ro")
        try:
            yield lambda: remount("rw")
        finally:
            with contextlib.suppress(subprocess.CalledProcessError):
                remount("rw")


@contextlib.contextmanager
def _first_save_fault(kind: str, where: Path):
    """The checkpoint directory ``where`` set up so that the first save fails; yields ``heal()``."""
    if kind == "tmp-dir":
        where.mkdir(parents=True)
        blocker = where / ".checkpoint.json.tmp"
        blocker.mkdir()
        yield blocker.rmdir
    elif kind == "full-disk":
        with small_tmpfs(where, "4m"):
            filler = where / "filler"
            fill_disk(filler)
            yield filler.unlink
    else:
        with _read_only_tmpfs(where) as heal:
            yield heal


@pytest.mark.parametrize("kind", ["tmp-dir", "full-disk", "read-only"])
def test_first_save_fails_then_heals(tmp_path, server_binaries, kind):
    with local_server(binaries=server_binaries) as srv:
        create_tables(srv)
        cp_dir = tmp_path / "cp"
        cp_path = cp_dir / "checkpoint.json"
        with _first_save_fault(kind, cp_dir) as heal:
            o = base_overrides(srv, tmp_path, **{"checkpoint.path": str(cp_path), "checkpoint.lock": "false",
                                                 "filters.include_schemas": SCHEMA, "reconnect.max_seconds": "0.5",
                                                 "schema.history_path": str(tmp_path / "schema-history.jsonl")})
            writer = Writer(srv, rate=100, seed=21)
            daemon = DaemonProcess(o)
            try:
                daemon.wait_for_line(SAVE_FAILED, timeout=30)
                writer.start()  # these transactions come after the start position: they must not be skipped
                writer.wait_count(30, timeout=30)
                wait_until(lambda: daemon.count(SAVE_FAILED) >= 3 or not daemon.running, 30, what="3 retries")
                assert daemon.running, f"binlogd exited {daemon.proc.returncode}:\n{daemon.stderr}"
                assert read_checkpoint(cp_path) is None
                heal()
                wait_until(lambda: read_checkpoint(cp_path), 30, what="the first checkpoint")
                files = sorted(p.name for p in (tmp_path / "sink").iterdir())
                assert files == ["changes-000001.jsonl"], f"the retries left sink files behind: {files}"
                _healthy_end(srv, daemon, writer, cp_path, tmp_path / "sink", f"first save: {kind}")
            finally:
                writer.halt()
                if daemon.running:
                    daemon.kill()
        print(f"[first save: {kind}] {daemon.count(SAVE_FAILED)} failed saves logged, then healed")


def _dump_thread_ids(srv) -> list[int]:
    return [int(r[0]) for r in srv.sql("SHOW PROCESSLIST") if str(r[4]).startswith("Binlog Dump")]


def test_later_save_and_save_after_reconnect_fail_then_heal(tmp_path, server_binaries):
    with local_server(binaries=server_binaries) as srv:
        create_tables(srv)
        fs = tmp_path / "fs"
        with small_tmpfs(fs, "4m"):
            cp_path = fs / "checkpoint.json"
            o = base_overrides(srv, tmp_path, **{"checkpoint.path": str(cp_path), "filters.include_schemas": SCHEMA,
                                                 "reconnect.max_seconds": "0.5",
                                                 "schema.history_path": str(tmp_path / "schema-history.jsonl")})
            writer = Writer(srv, rate=100, seed=22)
            daemon = DaemonProcess(o)
            sampler = Sampler(cp_path)
            report = []
            try:
                daemon.wait_streaming()
                sampler.start()
                writer.start()
                for phase in ("later save", "save after a reconnect"):
                    writer.wait_count(writer.count + 40, timeout=30)
                    if phase == "save after a reconnect":
                        sessions = daemon.count(STREAMING_AT.pattern)
                        for thread_id in _dump_thread_ids(srv):
                            srv.sql(f"KILL {thread_id}")
                        wait_until(lambda n=sessions: daemon.count(STREAMING_AT.pattern) > n, 30, what="a reconnect")
                    failed = daemon.count(SAVE_FAILED)
                    filler = fs / "filler"
                    fill_disk(filler)
                    refiller = Refiller(filler)
                    refiller.start()
                    wait_until(lambda n=failed: daemon.count(SAVE_FAILED) >= n + 2, 30, what=f"{phase}: failed saves")
                    held = read_checkpoint(cp_path)["position"]
                    time.sleep(1.0)
                    assert read_checkpoint(cp_path)["position"] == held, "the checkpoint moved on a full disk"
                    assert daemon.running, f"binlogd exited {daemon.proc.returncode}:\n{daemon.stderr}"
                    refiller.stop_flag.set()
                    refiller.join(10)
                    filler.unlink()
                    wait_until(lambda h=held: read_checkpoint(cp_path)["position"] != h, 30,
                               what=f"{phase}: the checkpoint moving again")
                    report.append(f"{phase}: {daemon.count(SAVE_FAILED) - failed} failed saves, held at "
                                  f"{held['file']}:{held['pos']}")
                _healthy_end(srv, daemon, writer, cp_path, tmp_path / "sink", "later saves")
                sampler.assert_monotonic()
                _assert_streaming_never_backwards(daemon)
            finally:
                sampler.stop_flag.set()
                writer.halt()
                if daemon.running:
                    daemon.kill()
        print(f"[later saves] {'; '.join(report)}; {len(sampler.seen)} checkpoints sampled")


def test_checkpoint_never_moves_backwards_with_the_sink_on_a_full_disk(tmp_path, server_binaries):
    with local_server(binaries=server_binaries) as srv:
        create_tables(srv)
        fs = tmp_path / "fs"
        with small_tmpfs(fs, "8m"):
            cp_path = tmp_path / "cp" / "checkpoint.json"
            o = base_overrides(srv, fs, **{"checkpoint.path": str(cp_path), "source.start": "current",
                                           "filters.include_schemas": SCHEMA, "reconnect.max_seconds": "0.3"})
            writer = Writer(srv, rate=150, big_every=10, seed=23)
            daemon = DaemonProcess(o)
            sampler = Sampler(cp_path)
            try:
                line = daemon.wait_streaming()
                assert "GTID" in line, f"expected a resume by GTID: {line}"
                sampler.start()
                wait_caught_up(srv, cp_path, timeout=30, daemon=daemon)
                for _ in range(2):  # resumes by GTID with nothing new: the file's header events, then idle
                    sessions = daemon.count(STREAMING_AT.pattern)
                    for thread_id in _dump_thread_ids(srv):
                        srv.sql(f"KILL {thread_id}")
                    wait_until(lambda n=sessions: daemon.count(STREAMING_AT.pattern) > n, 30, what="a reconnect")
                    time.sleep(1.0)  # an idle commit saves whatever the tracker calls committed by then
                writer.start()
                writer.wait_count(60, timeout=30)
                filler = fs / "filler"
                fill_disk(filler)
                refiller = Refiller(filler)
                refiller.start()
                wait_until(lambda: daemon.count(STREAMING_AT.pattern) >= 4 or not daemon.running, 60,
                           what="sessions failing on the full sink and reconnecting")
                assert daemon.running, f"binlogd exited {daemon.proc.returncode}:\n{daemon.stderr}"
                refiller.stop_flag.set()
                refiller.join(10)
                filler.unlink()
                _healthy_end(srv, daemon, writer, cp_path, fs / "sink", "sink full, GTID resume")
                sampler.assert_monotonic()
                sessions = _assert_streaming_never_backwards(daemon)
            finally:
                sampler.stop_flag.set()
                writer.halt()
                if daemon.running:
                    daemon.kill()
        assert len(sampler.seen) > 3, sampler.seen
        print(f"[sink full, GTID resume] {sessions} sessions, {len(sampler.seen)} checkpoints sampled, "
              f"first {sampler.seen[0][:2]}, last {sampler.seen[-1][:2]}")


def _bad_start(server, case: str) -> tuple[str, str]:
    """(source.start, what its one ERROR line must say) for a start ``server`` cannot serve."""
    server.sql("DROP DATABASE IF EXISTS ck_start_probe")  # a GTID in the binlog (a domain it lacks is accepted)
    domain, server_id, seq = str(server.sql("SELECT @@global.gtid_binlog_pos")[0][0]).split(",")[0].split("-")
    file, size = server.sql("SHOW BINARY LOGS")[-1][:2]
    stem, number = file.rsplit(".", 1)
    return {
        "past-the-end": (f"file:{file}:{int(size) + 100}", "past the end of the file"),
        "inside-an-event": (f"file:{file}:5", "the nearest event boundaries are 4 (before) and "),
        "older-than-the-oldest": (f"file:{stem}.{0:0{len(number)}d}:4", "probably purged"),
        "gtid-not-in-the-binlog": (f"gtid:{domain}-{server_id}-{int(seq) + 1_000_000}", "not in the master's binlog"),
    }[case]


@pytest.mark.parametrize("case", ["past-the-end", "inside-an-event", "older-than-the-oldest",
                                  "gtid-not-in-the-binlog"])
def test_a_start_the_primary_refuses_is_not_saved_and_a_corrected_one_works(mariadb, tmp_path, case):
    start, says = _bad_start(mariadb, case)
    o = base_overrides(mariadb, tmp_path, **{"source.start": start})
    rc, err = run_to_exit(o)
    errors = [line for line in err.splitlines() if " ERROR " in line]
    assert rc == 5 and len(errors) == 1 and "Traceback" not in err, f"exit {rc}:\n{err}"
    assert says in errors[0], errors[0]
    if case in ("past-the-end", "inside-an-event"):
        assert "purged" not in errors[0], errors[0]
    assert read_checkpoint(tmp_path / "checkpoint.json") is None, "a refused start was saved"
    file, pos = binlog_status(mariadb)
    o["source.start"] = f"file:{file}:{pos}"  # corrected: the end of the log (accepted at the first heartbeat)
    with running_daemon(o) as d:
        line = d.wait_streaming()
        assert f"at {file}:{pos}" in line, line
        wait_until(lambda: read_checkpoint(tmp_path / "checkpoint.json"), 30, what="the first checkpoint")
    assert read_checkpoint(tmp_path / "checkpoint.json")["position"]["file"] == file


@pytest.mark.usefixtures("corpus")
async def test_gtid_resume_with_nothing_new_keeps_the_checkpoint_fake_mysql(tmp_path):
    """The first dump is closed once every event and 3 heartbeats went out; the resume by GTID gets the
    file's FORMAT_DESCRIPTION and PREVIOUS_GTIDS (behind the checkpoint), nothing else, then heartbeats."""
    f = binlog(F57)

    async def main():
        async with FakePrimary(f, password=PASSWORD, close_after=len(f.events) + 1 + 3) as primary, \
                Running(config(tmp_path, primary.port, f"gtid:{U57}:1-10"), primary) as d:
            end = await d.wait(gtid_reaches(tmp_path, f"{U57}:1-13"), 20, "GTIDs :11 to :13 committed")
            await primary.wait_for(lambda: len(primary.dumps) >= 2, 20, "the resume")
            await primary.wait_for(heartbeats(primary, 4), 20, "heartbeats after the resume")
            idle = checkpoint(tmp_path)
            assert await d.stop() == 0
            return end, idle, checkpoint(tmp_path), primary.connections[-1].events_sent

    end, idle, final, resent = await asyncio.wait_for(main(), 60)
    assert (end.position.file, end.position.pos) == ("mysql-bin.000057", f.size)
    header = [offset for _tc, _file, offset in resent if 0 <= offset < end.position.pos]
    assert header, f"the resume re-sent no event behind the checkpoint: {resent}"
    assert idle.position == end.position == final.position, (end.position, idle.position, final.position)

"""Fault suite 4: a full disk and failing writes or fsyncs in the sink; the checkpoint does not move, then heals.

The load and the exactly-once check are in :mod:`tests.support.faults`.
"""

from __future__ import annotations

import errno
import os
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.support.daemon import (
    DaemonProcess,
    base_overrides,
    read_checkpoint,
    wait_caught_up,
    wait_until,
)
from tests.support.faults import (
    SCHEMA,
    LoggedDaemon,
    Refiller,
    Writer,
    check_exactly_once,
    create_tables,
    fill_disk,
    in_process_config,
    local_server,
    metrics_port,
    scrape_metric,
    small_tmpfs,
)

pytestmark = pytest.mark.server


# =========================================================================== 4. sink faults


def _checkpoint_position(path: Path):
    cp = read_checkpoint(path)
    return (cp["position"]["file"], cp["position"]["pos"], cp["sink"].get("file"), cp["sink"].get("offset"))


def _hold_during_fault(cp_path: Path, seconds: float, sink_dir: Path) -> tuple:
    """The checkpoint must not move for ``seconds``; it never claims more sink bytes than exist."""
    first = _checkpoint_position(cp_path)
    deadline = time.monotonic() + seconds
    samples = 0
    while time.monotonic() < deadline:
        now = _checkpoint_position(cp_path)
        assert now == first, f"the checkpoint moved during the sink fault: {first} -> {now}"
        f = sink_dir / now[2]
        assert f.stat().st_size >= now[3], f"checkpoint offset {now[3]} past the end of {f}"
        samples += 1
        time.sleep(0.1)
    return first, samples


def test_sink_disk_full_real_tmpfs(tmp_path, server_binaries):
    with local_server(binaries=server_binaries) as srv:
        create_tables(srv)
        fs = tmp_path / "fs"
        with small_tmpfs(fs):
            cp_path = fs / "checkpoint.json"
            o = base_overrides(srv, fs, **{"filters.include_schemas": SCHEMA, "reconnect.max_seconds": "0.5"})
            writer = Writer(srv, rate=150, seed=11)
            daemon = DaemonProcess(o)
            try:
                daemon.wait_streaming()
                port = metrics_port(daemon)
                writer.start()
                writer.wait_count(100, timeout=30)
                errors0 = scrape_metric(port, "binlogd_errors_total", kind="sink")
                filler = fs / "filler"
                filled = fill_disk(filler)
                refiller = Refiller(filler)
                refiller.start()
                daemon.wait_for_line(r"ERROR .*No space left on device.*checkpoint stays at", timeout=30)
                held, samples = _hold_during_fault(cp_path, 2.0, fs / "sink")
                errors1 = scrape_metric(port, "binlogd_errors_total", kind="sink")
                assert errors1 > errors0, f"binlogd_errors_total{{kind=sink}} {errors0} -> {errors1}"
                assert daemon.running, f"binlogd exited {daemon.proc.returncode} on a full disk:\n{daemon.stderr}"
                refiller.stop_flag.set()
                refiller.join(10)
                filler.unlink()  # the disk has room again
                wait_until(lambda: _checkpoint_position(cp_path) != held, 30, what="the checkpoint moving again")
                writer.wait_count(writer.count + 100, timeout=30)
                writer.stop()
                wait_caught_up(srv, cp_path, timeout=60, daemon=daemon, fail_on=None)
                rc = daemon.terminate()
                assert rc == 0, f"exit {rc} on SIGTERM:\n{daemon.stderr}"
                n_err = daemon.count(r"No space left on device")
                print(f"\n[tmpfs full] filled {filled} bytes; {n_err} ENOSPC log lines; checkpoint held at {held} "
                      f"over {samples} samples; binlogd_errors_total{{kind=sink}} {errors0:g} -> {errors1:g}")
            finally:
                writer.halt()
                if daemon.running:
                    daemon.kill()
            check_exactly_once(srv, fs / "sink", writer, "tmpfs full")


class _Faults:
    """What the patched sink I/O does now: None, "enospc" (writes/flushes) or "eio" (fsync)."""

    def __init__(self):
        self.mode: str | None = None
        self.hits = Counter()


class _FaultyFile:
    """The sink's file object, whose write/flush/close fail with ENOSPC while ``faults.mode == "enospc"``
    (half of a failing write reaches the file first, as on a disk that fills up mid-write)."""

    def __init__(self, real, faults: _Faults):
        self._real, self._faults = real, faults

    def _enospc(self, what: str) -> OSError:
        self._faults.hits[what] += 1
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def write(self, data):
        if self._faults.mode == "enospc":
            self._real.write(data[: len(data) // 2])
            raise self._enospc("write")
        return self._real.write(data)

    def flush(self):
        if self._faults.mode == "enospc":
            raise self._enospc("flush")
        return self._real.flush()

    def close(self):
        try:
            self._real.close()
        finally:
            if self._faults.mode == "enospc":
                raise self._enospc("close")

    def __getattr__(self, name):
        return getattr(self._real, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._real.close()


class _FaultyOs:
    """``os`` for the sink module: fsync fails with EIO while ``faults.mode == "eio"``."""

    def __init__(self, faults: _Faults):
        self._faults = faults

    def fsync(self, fd):
        if self._faults.mode == "eio":
            self._faults.hits["fsync"] += 1
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return os.fsync(fd)

    def __getattr__(self, name):
        return getattr(os, name)


def test_sink_write_and_fsync_failures_in_process(tmp_path, monkeypatch, server_binaries):
    import builtins

    import binlogd.daemon.sinks.base as base
    import binlogd.daemon.sinks.jsonl as jsonl

    faults = _Faults()
    monkeypatch.setattr(jsonl, "open", lambda *a, **k: _FaultyFile(builtins.open(*a, **k), faults), raising=False)
    monkeypatch.setattr(jsonl, "os", _FaultyOs(faults))
    monkeypatch.setattr(base, "os", _FaultyOs(faults))  # the sink's fsync (sync_all) lives there
    with local_server(binaries=server_binaries) as srv:
        create_tables(srv)
        cfg = in_process_config(srv, tmp_path, **{"filters.include_schemas": SCHEMA,
                                                  "reconnect.max_seconds": "0.5"})
        cp_path = tmp_path / "checkpoint.json"
        d = LoggedDaemon(cfg).start()
        writer = Writer(srv, rate=150, big_every=20, seed=13)
        report = []
        try:
            port = d.daemon.metrics_server.port
            writer.start()
            for mode, text in (("enospc", "No space left on device"), ("eio", "Input/output error")):
                writer.wait_count(writer.count + 40, timeout=30)
                errors0 = scrape_metric(port, "binlogd_errors_total", kind="sink")
                logged0 = d.count(text)
                faults.mode = mode
                wait_until(lambda t=text, n=logged0: d.count(rf"ERROR .*{t}.*checkpoint stays at") > n, 30,
                           what=f"an ERROR line about {mode}")
                held, samples = _hold_during_fault(cp_path, 1.5, tmp_path / "sink")
                errors1 = scrape_metric(port, "binlogd_errors_total", kind="sink")
                assert errors1 > errors0, f"binlogd_errors_total{{kind=sink}} {errors0} -> {errors1}"
                assert d.thread.is_alive(), f"the daemon stopped (rc={d.rc}):\n" + "\n".join(d.lines)
                faults.mode = None  # healed
                wait_until(lambda h=held: _checkpoint_position(cp_path) != h, 30, what="the checkpoint moving again")
                report.append(f"{mode}: {d.count(text) - logged0} ERROR lines, checkpoint held at {held[:2]} over "
                              f"{samples} samples, errors_total{{kind=sink}} {errors0:g} -> {errors1:g}")
            writer.wait_count(writer.count + 30, timeout=30)
            writer.stop()
            wait_caught_up(srv, cp_path, timeout=60)
            rc = d.stop()
            assert rc == 0, f"rc {rc}:\n" + "\n".join(d.lines)
        finally:
            faults.mode = None
            writer.halt()
            if d.thread.is_alive():
                d.stop()
        print(f"\n[sink faults in-process] {'; '.join(report)}; patched calls failed: {dict(faults.hits)}")
        assert faults.hits["fsync"] and (faults.hits["write"] or faults.hits["flush"]), faults.hits
        check_exactly_once(srv, tmp_path / "sink", writer, "sink faults in-process")



"""``binlogd info`` and ``binlogd dump`` on files of 4 GiB and more, on pipes, FIFOs, devices and
standard input, and on a file that holds only the magic.

Big files are sparse (a few KiB on disk): real corpus bytes at the start and at the end, a hole
between. Expected values come from a raw header walk of the corpus file (tests/support/manifest.py,
no decoder involved) and the MANIFEST; pipe output is compared with the same file's output read
from disk.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from binlogd.protocol.primitives import crc32
from binlogd.protocol.reader import ONLY_MAGIC
from tests.support import manifest as M
from tests.support.paths import REPO

GIB = 1 << 30
SIZES = [5 * GIB, 10 * GIB]
GTID_STARTS = {33, 34, 42, 162}  # GTID, ANONYMOUS_GTID, GTID_TAGGED, MARIADB_GTID: a transaction's first event
ROTATE = 4
# Closed by a ROTATE, CRC32: anonymous GTIDs (5.7) and a tagged GTID (9.6; MANIFEST: gno 3, tag 'mytag').
CLOSED = {
    "mysql-binlog-connector-java/mysql-bin.checksum-crc32": None,
    "rust_mysql_common/binlog_transaction_with_GTID_TAG.000001": "55778904-0299-11f1-b1b8-4ef0c4956feb:mytag:3",
}
HEAD_256 = "rust-mysql-binlog/bin-log.000001"  # 5.7, CRC32, GTIDs: its first 256 bytes end inside an event
PIPED = ["rust-mysql-binlog/bin-log.000001", "rust_mysql_common/mariadb-bin.000001",
         "mysql-binlog-connector-java/mysql-bin.checksum-crc32"]


def _binlogd(*argv: str, stdin=None, input: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "binlogd.cli", *argv], stdin=stdin, input=input,
                          capture_output=True, cwd=REPO, timeout=timeout)


def _one_line_error(proc: subprocess.CompletedProcess, name: str) -> str:
    """The single stderr line of a failed run (exit 1), after ``binlogd: NAME: ``."""
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    prefix = f"binlogd: {name}: "
    assert err.startswith(prefix), err
    return err[len(prefix):].strip()


def _sparse(path: Path, size: int, head: bytes, tail: bytes = b"") -> Path:
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)
        f.seek(size - len(tail))
        f.write(tail)
    assert path.stat().st_size == size and path.stat().st_blocks * 512 < 64 << 20, "not sparse"
    return path


def _rebased(data: bytes, start: int, new_start: int) -> bytes:
    """The events of ``data`` from ``start`` on, moved to ``new_start``: each logged next_position
    (when not 0) and CRC32 rewritten as the server would write them there (next_position modulo 2**32)."""
    out = bytearray()
    headers, partial = M.raw_headers(data)
    assert partial is None
    for h in (h for h in headers if h.pos >= start):
        event = bytearray(data[h.pos:h.pos + h.length])
        if h.next_position:
            event[13:17] = ((new_start + len(out) + h.length) & 0xFFFFFFFF).to_bytes(4, "little")
        event[-4:] = crc32(bytes(event[:-4])).to_bytes(4, "little")
        out += event
    return bytes(out)


# =========================================================================== files of 4 GiB and more


@pytest.mark.parametrize("size", SIZES, ids=["5GiB", "10GiB"])
@pytest.mark.parametrize("path", sorted(CLOSED))
def test_info_seeks_a_closed_file_past_4_gib(path, size, corpus, tmp_path):
    """The corpus file without its ROTATE, a hole, then its last transaction and ROTATE again at the end
    of a 5/10 GiB file: info finds them by seeking (the logged positions wrap at 2**32)."""
    data = M.data(path)
    headers, _ = M.raw_headers(data)
    rotate = headers[-1]
    assert rotate.type_code == ROTATE and M.entry(path).checksum == "CRC32"
    last_txn = max(h.pos for h in headers if h.type_code in GTID_STARTS)
    tail = _rebased(data, last_txn, size - (len(data) - last_txn))
    big = _sparse(tmp_path / "big.000001", size, data[:rotate.pos], tail)
    proc = _binlogd("info", "--json", str(big))
    assert proc.returncode == 0, proc.stderr.decode()
    got = json.loads(proc.stdout)
    next_file = data[rotate.pos + 19 + 8:rotate.pos + rotate.length - 4].decode()
    fde = headers[0]
    assert got["size"] == size and got["method"] == "seek" and got["truncated_at"] is None
    assert got["next_file"] == next_file and got["end_time"] == rotate.timestamp
    assert got["begin_time"] == fde.timestamp and got["checksum"] == "CRC32"
    assert got["first_gtid"] == CLOSED[path] and got["last_gtid"] == CLOSED[path]


@pytest.mark.parametrize("size", SIZES, ids=["5GiB", "10GiB"])
def test_info_and_dump_on_a_huge_file_of_256_real_bytes(size, corpus, tmp_path):
    """The first 256 bytes of a real binlog, then zeros to 5/10 GiB: the event that runs past byte 256
    fails its CRC32. Both tools say so in one line naming its offset; dump prints the events before it."""
    data = M.data(HEAD_256)
    headers, cut = M.raw_headers(data[:256])
    big = _sparse(tmp_path / "big.000001", size, data[:256])
    for tool in ("info", "dump"):
        proc = _binlogd(tool, "--json", str(big))
        message = _one_line_error(proc, str(big))
        assert message.startswith("CRC32 mismatch in ") and message.endswith(f"(at offset {cut})"), message
    printed = [json.loads(line)["pos"] for line in proc.stdout.splitlines()]
    assert printed == [h.pos for h in headers]


def test_dump_past_4_gib_fails_at_the_hole(corpus, tmp_path):
    """dump walks a 5 GiB file from the start: the events before the hole, then one line at the hole."""
    path = "rust_mysql_common/binlog_transaction_with_GTID_TAG.000001"
    data = M.data(path)
    headers, _ = M.raw_headers(data)
    big = _sparse(tmp_path / "big.000001", 5 * GIB, data[:headers[-1].pos], _rebased(data, headers[-1].pos, 0))
    proc = _binlogd("dump", "--json", str(big))
    message = _one_line_error(proc, str(big))
    assert message == f"event length 0 is shorter than the 19-byte header (at offset {headers[-1].pos})"
    assert [json.loads(line)["pos"] for line in proc.stdout.splitlines()] == [h.pos for h in headers[:-1]]


# =========================================================================== pipes, FIFOs, devices, stdin


def _events(out: bytes) -> list[dict]:
    """``dump --json`` lines without the ``file`` key (the name given differs between the runs)."""
    return [{k: v for k, v in json.loads(line).items() if k != "file"} for line in out.splitlines()]


def _dump_chunked(data: bytes, name: str, *argv: str, chunk: int = 7) -> subprocess.CompletedProcess:
    """``binlogd dump NAME`` with ``data`` written to its stdin pipe ``chunk`` bytes at a time."""
    proc = subprocess.Popen([sys.executable, "-m", "binlogd.cli", "dump", "--json", *argv, name],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    out = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()))
    reader.start()
    try:
        for i in range(0, len(data), chunk):
            proc.stdin.write(data[i:i + chunk])
            proc.stdin.flush()
        proc.stdin.close()
    except BrokenPipeError:  # dump stopped early (--stop-position, or an error)
        pass
    err = proc.stderr.read()
    proc.wait(60)
    reader.join(60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out[0], err)


@pytest.mark.parametrize("name", ["-", "/dev/stdin"])
@pytest.mark.parametrize("path", PIPED)
def test_dump_reads_a_pipe_like_the_file(path, name, corpus):
    """Bytes arriving a few at a time through a pipe decode to exactly the events of the file."""
    expected = _binlogd("dump", "--json", str(corpus / path))
    assert expected.returncode == 0, expected.stderr.decode()
    got = _dump_chunked(M.data(path), name, chunk=7 if name == "-" else 4096)
    assert got.returncode == 0, got.stderr.decode()
    assert _events(got.stdout) == _events(expected.stdout) and got.stdout
    assert {json.loads(line)["file"] for line in got.stdout.splitlines()} == {name}


def test_dump_positions_on_a_pipe(corpus):
    """--start-position / --stop-position select the same events from a pipe as from the file."""
    path = "mysql-binlog-connector-java/mysql-bin.checksum-crc32"
    headers, _ = M.raw_headers(M.data(path))
    start, stop = headers[10].pos, headers[40].pos
    argv = ("--start-position", str(start), "--stop-position", str(stop))
    expected = _binlogd("dump", "--json", *argv, str(corpus / path))
    got = _dump_chunked(M.data(path), "-", *argv, chunk=1000)
    assert got.returncode == 0 == expected.returncode, got.stderr.decode()
    assert [e["pos"] for e in _events(got.stdout)] == [h.pos for h in headers[10:40]]
    assert _events(got.stdout) == _events(expected.stdout)


def test_dump_reads_a_fifo(corpus, tmp_path):
    path = "rust-mysql-binlog/bin-log.000001"
    fifo = tmp_path / "binlog.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(M.data(path)))
    writer.start()
    got = _binlogd("dump", "--json", str(fifo), timeout=60)
    writer.join(10)
    assert got.returncode == 0, got.stderr.decode()
    assert _events(got.stdout) == _events(_binlogd("dump", "--json", str(corpus / path)).stdout)


def test_dump_of_stdin_redirected_from_a_file(corpus):
    path = corpus / "rust_mysql_common/mariadb-bin.000001"
    with open(path, "rb") as f:
        got = _binlogd("dump", "--json", "-", stdin=f)
    assert got.returncode == 0, got.stderr.decode()
    assert _events(got.stdout) == _events(_binlogd("dump", "--json", str(path)).stdout)


def test_a_pipe_cut_inside_an_event(corpus):
    """The events before the cut, then one line naming the cut event's offset and what arrived of it."""
    path = "rust-mysql-binlog/bin-log.000001"
    data = M.data(path)
    headers, _ = M.raw_headers(data)
    cut = headers[5].pos + 10
    got = _dump_chunked(data[:cut], "-", chunk=100)
    assert _one_line_error(got, "-") == f"input ends inside an event (10 bytes of it present) (at offset {headers[5].pos})"
    assert [e["pos"] for e in _events(got.stdout)] == [h.pos for h in headers[:5]]


def test_empty_pipe_says_what_was_read():
    got = _binlogd("dump", "-", input=b"")
    assert _one_line_error(got, "-") == "read 0 bytes from a pipe: no binlog magic (at offset 0)"


def test_dev_zero_is_refused_at_once():
    got = _binlogd("dump", "/dev/zero", timeout=60)
    assert _one_line_error(got, "/dev/zero") == "not a binlog file: magic is 00000000 instead of fe62696e (at offset 0)"


def test_info_refuses_a_pipe():
    got = _binlogd("info", "-", input=b"\xfebin")
    assert _one_line_error(got, "-") == ("a pipe, not a regular file: info seeks in files "
                                         "(binlogd dump reads pipes and standard input)")


# =========================================================================== a file of only the magic


def test_magic_only_is_truncated_for_info_and_dump(tmp_path):
    """Both tools exit 1 with the same line, from a file and (dump) from a pipe."""
    magic = tmp_path / "only-magic.000001"
    magic.write_bytes(b"\xfebin")
    expected = f"{ONLY_MAGIC} (at offset 4)"
    assert _one_line_error(_binlogd("info", str(magic)), str(magic)) == expected
    assert _one_line_error(_binlogd("dump", str(magic)), str(magic)) == expected
    assert _one_line_error(_binlogd("dump", "-", input=b"\xfebin"), "-") == expected


@pytest.mark.parametrize("tool", ["info", "dump"])
def test_shorter_than_the_magic(tool, tmp_path):
    empty = tmp_path / "empty.000001"
    empty.write_bytes(b"")
    message = _one_line_error(_binlogd(tool, str(empty)), str(empty))
    assert message == "file ends inside the 4-byte binlog magic (0 bytes) (at offset 0)"

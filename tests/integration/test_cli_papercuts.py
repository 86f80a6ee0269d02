"""What a new user trips over (issue 29), each as a process: exit code and stderr.

- a closed output pipe (``binlogd dump FILE | head``) ends every command quietly with exit 0;
- ``schema build --out`` never replaces a symlink or a special file (``-`` is standard output);
- ``--version``, defaults in ``--help``, UTC datetimes in ``info``'s text, ``bytes_read`` never over the size,
  ``dump --start-position`` at a non-boundary: a usage error naming the nearest boundaries.

The demo through a closed pipe is in test_demo.py; temp dirs on Ctrl-C and SIGTERM in
test_cli_process_safety.py and test_localserver.py; scripts/_setup.sh in test_setup_script.py.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from datetime import datetime, timezone

import pytest

from tests.support.paths import CORPUS, REPO

SAKILA = CORPUS / "mysql-binlog-connector-java" / "mysql-bin.sakila"  # 1.4 MB: MBs of dump/sql output
SMALL = CORPUS / "rust_mysql_common" / "mariadb-bin.000001"  # 1074 bytes: info read 2046 of it (issue 29)
SEEKS = CORPUS / "mysql-binlog-connector-java" / "mysql-bin.checksum-crc32"  # info seeks: quick, many times
BINLOGD = [sys.executable, "-m", "binlogd.cli"]

pytestmark = pytest.mark.skipif(not SAKILA.is_file(), reason=f"corpus not found at {CORPUS}")


def _binlogd(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*BINLOGD, *args], capture_output=True, cwd=REPO, timeout=timeout)


def _through_head(*args: str) -> subprocess.CompletedProcess:
    """``set -o pipefail; binlogd ARGS | head -n 1``: the pipeline's status is binlogd's unless it is 0."""
    return subprocess.run(["bash", "-c", 'set -o pipefail; "$@" | head -n 1', "bash", *BINLOGD, *args],
                          capture_output=True, cwd=REPO, timeout=120)


def _headers(path) -> list[int]:
    """The event boundaries of a v4 binlog file, by walking the headers' lengths (independent of binlogd)."""
    data = path.read_bytes()
    pos, out = 4, []
    while pos + 19 <= len(data):
        out.append(pos)
        pos += int.from_bytes(data[pos + 9:pos + 13], "little")
    return out


# ------------------------------------------------------------------ a closed output pipe


def _big_seed(tmp_path) -> str:
    """A seed of 3000 tables: a history of about 1 MB, far more than a pipe holds."""
    seed = tmp_path / "seed.sql"
    seed.write_text("CREATE DATABASE d;\nUSE d;\n" + "".join(
        f"CREATE TABLE t{i} (id INT NOT NULL PRIMARY KEY, name VARCHAR(40), amount DECIMAL(10,2));\n"
        for i in range(3000)))
    return str(seed)


def _commands(tmp_path) -> dict[str, list[str]]:
    seed = _big_seed(tmp_path)
    return {
        "dump": ["dump", str(SAKILA)],
        "dump --json": ["dump", "--json", str(SAKILA)],
        "sql": ["sql", str(SAKILA)],
        "info": ["info", *[str(SEEKS)] * 1500],
        "info --json": ["info", "--json", *[str(SEEKS)] * 2000],
        "schema build --out -": ["schema", "build", str(SAKILA), "--seed", seed, "--out", "-"],
        "schema build --out /dev/stdout": ["schema", "build", str(SAKILA), "--seed", seed, "--out", "/dev/stdout"],
    }


@pytest.mark.parametrize("name", ["dump", "dump --json", "sql", "info", "info --json", "schema build --out -",
                                  "schema build --out /dev/stdout"])
def test_a_closed_pipe_ends_the_command_quietly(name, tmp_path):
    args = _commands(tmp_path)[name]
    whole = _binlogd(*args)
    assert whole.returncode == 0, whole.stderr.decode()
    assert len(whole.stdout) > 256 * 1024, "the output must outgrow the pipe, or no write ever fails"
    got = _through_head(*args)
    assert got.stdout == whole.stdout.split(b"\n", 1)[0] + b"\n"
    assert got.returncode == 0, got.stderr.decode()
    assert got.stderr == b"", got.stderr.decode()


# ------------------------------------------------------------------ schema build --out: symlinks and specials


def test_schema_build_follows_a_symlink_and_keeps_it(tmp_path):
    expected = tmp_path / "plain.jsonl"
    assert _binlogd("schema", "build", str(SAKILA), "--out", str(expected)).returncode == 0
    volume = tmp_path / "volume"
    volume.mkdir()
    target = volume / "history.jsonl"
    target.write_text("old\n")
    chain = tmp_path / "chain"
    os.symlink("volume/history.jsonl", chain)  # relative, as config-managed links often are
    link = tmp_path / "history.jsonl"
    os.symlink(chain, link)
    got = _binlogd("schema", "build", str(SAKILA), "--out", str(link))
    assert got.returncode == 0, got.stderr.decode()
    assert link.is_symlink() and chain.is_symlink() and os.readlink(chain) == "volume/history.jsonl"
    assert target.read_bytes() == expected.read_bytes()
    assert sorted(os.listdir(volume)) == ["history.jsonl"] and not (tmp_path / ".history.jsonl.tmp").exists()


def test_schema_build_creates_a_dangling_links_target(tmp_path):
    link = tmp_path / "history.jsonl"
    os.symlink("real.jsonl", link)
    got = _binlogd("schema", "build", str(SAKILA), "--out", str(link))
    assert got.returncode == 0, got.stderr.decode()
    assert link.is_symlink() and (tmp_path / "real.jsonl").stat().st_size > 0


def test_schema_build_writes_through_a_fifo(tmp_path):
    expected = _binlogd("schema", "build", str(SAKILA), "--out", "-").stdout
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    run = _binlogd("schema", "build", str(SAKILA), "--out", str(fifo))
    reader.join(30)
    assert run.returncode == 0, run.stderr.decode()
    assert got == [expected] and len(expected) > 1000
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("path", ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"])
def test_schema_build_to_a_descriptor_writes_standard_output(path):
    expected = _binlogd("schema", "build", str(SAKILA), "--out", "-").stdout
    before = os.lstat("/dev/stdout")
    got = _binlogd("schema", "build", str(SAKILA), "--out", path)
    assert got.returncode == 0, got.stderr.decode()
    assert got.stdout == expected
    after = os.lstat("/dev/stdout")
    assert stat.S_ISLNK(after.st_mode) and after.st_ino == before.st_ino


def test_schema_build_refuses_a_directory(tmp_path):
    got = _binlogd("schema", "build", str(SAKILA), "--out", str(tmp_path))
    assert got.returncode == 1 and tmp_path.is_dir()
    lines = got.stderr.decode().splitlines()
    assert len(lines) == 1 and str(tmp_path) in lines[0] and "Traceback" not in lines[0], lines


def test_schema_build_help_says_what_happens_to_a_symlink():
    text = _binlogd("schema", "build", "--help").stdout.decode()
    assert "symlink is followed" in " ".join(text.split())


# ------------------------------------------------------------------ small ones


def test_version():
    from importlib.metadata import version

    got = _binlogd("--version")
    assert got.returncode == 0 and got.stderr == b""
    assert got.stdout.decode() == f"binlogd {version('binlogd')}\n"


@pytest.mark.parametrize("command", [[], ["info"], ["dump"], ["schema"], ["schema", "build"], ["sql"], ["run"],
                                     ["demo"]])
def test_help_shows_defaults(command):
    got = _binlogd(*command, "--help")
    assert got.returncode == 0, got.stderr.decode()
    text = " ".join(got.stdout.decode().split())
    assert "(default: None)" not in text and "(default: False)" not in text
    if command == ["demo"]:
        assert "transactions per second to write (default: 5.0)" in text
        assert "(default: until Ctrl-C)" in text


def test_help_defaults_follow_the_parser():
    """Every option with a default other than None/False/[] says it in its help."""
    from binlogd.cli import build_parser

    parser = build_parser()
    seen = 0
    stack = [parser]
    while stack:
        p = stack.pop()
        for action in p._actions:
            if action.choices and isinstance(action.choices, dict):
                stack.extend(action.choices.values())
            elif action.option_strings and action.default not in (None, False, [], "==SUPPRESS==") and action.help:
                options = p.format_help().split("\noptions:", 1)[1]
                entry = options.split(action.option_strings[-1], 1)[1].split("\n  -", 1)[0]
                assert "default" in entry, (p.prog, action.option_strings, entry)
                seen += 1
    assert seen >= 1  # demo --rate at least


def test_info_text_has_utc_datetimes_and_json_keeps_epoch():
    text = _binlogd("info", str(SAKILA))
    js = _binlogd("info", "--json", str(SAKILA))
    assert text.returncode == 0 == js.returncode
    obj = json.loads(js.stdout)
    assert isinstance(obj["begin_time"], int) and isinstance(obj["end_time"], int)
    fields = dict(line.split(None, 1) for line in text.stdout.decode().splitlines() if len(line.split(None, 1)) == 2)
    for key in ("begin_time", "end_time"):
        shown = datetime.fromisoformat(fields[key])
        assert shown.utcoffset().total_seconds() == 0
        assert shown == datetime.fromtimestamp(obj[key], timezone.utc)
    header = SAKILA.read_bytes()[4:8]  # the first event's timestamp, read here
    assert fields["begin_time"].startswith(
        datetime.fromtimestamp(int.from_bytes(header, "little"), timezone.utc).strftime("%Y-%m-%d %H:%M:%S"))


def test_bytes_read_never_exceeds_the_size():
    files = sorted(str(p) for p in CORPUS.rglob("*") if p.is_file() and p.suffix not in (".md", ".gz"))
    got = _binlogd("info", "--json", *files)
    objs = [json.loads(line) for line in got.stdout.splitlines()]
    assert len(objs) > 30
    over = [(o["file"], o["size"], o["bytes_read"]) for o in objs if o["bytes_read"] > os.path.getsize(o["file"])]
    assert over == []
    small = next(o for o in objs if o["file"] == str(SMALL))
    assert small["bytes_read"] <= small["size"] == 1074


def test_start_position_off_a_boundary_names_the_nearest(tmp_path):
    bounds = _headers(SAKILA)
    before, after = bounds[5], bounds[6]
    middle = (before + after) // 2
    for source in (str(SAKILA), "-"):
        stdin = open(SAKILA, "rb") if source == "-" else subprocess.DEVNULL
        with stdin if source == "-" else open(os.devnull) as _:
            got = subprocess.run([*BINLOGD, "dump", "--start-position", str(middle), source], stdin=stdin,
                                 capture_output=True, cwd=REPO, timeout=120)
        lines = got.stderr.decode().splitlines()
        assert got.returncode == 2 and got.stdout == b"", lines
        assert len(lines) == 1 and f"{middle} is not an event boundary" in lines[0], lines
        assert f"{before} (before) and {after} (after)" in lines[0], lines
    ok = _binlogd("dump", "--json", "--start-position", str(after), "--stop-position", str(bounds[9]), str(SAKILA))
    assert ok.returncode == 0, ok.stderr.decode()
    assert [json.loads(line)["pos"] for line in ok.stdout.splitlines()] == bounds[6:9]
    past = _binlogd("dump", "--start-position", str(SAKILA.stat().st_size + 10), str(SAKILA))
    assert past.returncode == 2 and f"the last one starts at {bounds[-1]}" in past.stderr.decode()


# ------------------------------------------------------------------ the daemon's checkpoint through a symlink


@pytest.mark.server
def test_checkpoint_through_a_symlink_replaces_its_target(mariadb, fresh_db, tmp_path):
    """``checkpoint.path`` a symlink into another directory (a mounted volume): every save replaces the
    target, atomically beside it, and the link stays; the target holds the server's position."""
    from tests.support.daemon import DaemonProcess, base_overrides, wait_caught_up

    volume = tmp_path / "volume"
    volume.mkdir()
    target = volume / "cp.json"
    link = tmp_path / "checkpoint.json"
    os.symlink(target, link)  # dangling until the first save
    d = DaemonProcess(base_overrides(mariadb, tmp_path, **{"checkpoint.path": str(link), "checkpoint.lock": "false"}))
    try:
        d.wait_streaming()
        with mariadb.connect(database=fresh_db) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
            for k in range(5):
                cur.execute("INSERT INTO t VALUES (%s)", (k,))
        cp = wait_caught_up(mariadb, link, daemon=d)
        d.proc.send_signal(2)
        assert d.wait(30) == 0, d.stderr
    finally:
        d.kill()
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_bytes())["position"] == cp["position"]
    assert sorted(os.listdir(volume)) == ["cp.json"], "the temp file is made beside the target, then renamed"
    assert "Traceback" not in d.stderr


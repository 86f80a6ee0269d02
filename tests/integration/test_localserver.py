"""The throwaway server launcher the rest of the suite relies on."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pymysql
import pytest

from binlogd.cli.localserver import LocalServer
from tests.support import processes
from tests.support.paths import REPO

pytestmark = pytest.mark.server


def _variables(server, pattern: str) -> dict[str, str]:
    return {k: str(v) for k, v in server.sql(f"SHOW GLOBAL VARIABLES LIKE '{pattern}'")}


def test_starts_with_row_binlog(mariadb: LocalServer) -> None:
    assert mariadb.running
    assert mariadb.host == "127.0.0.1" and mariadb.user == "root" and mariadb.password == ""
    assert mariadb.flavor in ("mariadb", "mysql")
    assert mariadb.version[:1].isdigit()
    v = {k: str(val) for k, val in mariadb.sql("SHOW GLOBAL VARIABLES")}
    assert v["log_bin"] == "ON"
    assert v["binlog_format"] == "ROW"
    assert v["binlog_row_image"] == "FULL"
    assert v["binlog_row_metadata"] == "FULL"
    assert v["server_id"] == "1"
    assert int(v["port"]) == mariadb.port
    assert v["datadir"].rstrip("/") == str(mariadb.datadir)
    assert v["log_bin_basename"] == str(mariadb.binlog_dir / "binlog")
    if mariadb.flavor == "mariadb":
        assert v["log_slave_updates"] == "ON"
        assert v["gtid_strict_mode"] == "OFF"
    assert mariadb.socket.exists()


def test_repl_user_connects_over_tcp(mariadb: LocalServer) -> None:
    conn = pymysql.connect(host="127.0.0.1", port=mariadb.port, user="repl", password="replpass")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT CURRENT_USER()")
            assert cur.fetchone()[0].startswith("repl@")
            cur.execute("SHOW GRANTS")
            grants = " ".join(row[0] for row in cur.fetchall()).upper()
            cur.execute("SHOW BINARY LOGS")  # needs REPLICATION CLIENT / BINLOG MONITOR
            assert cur.fetchall()
    finally:
        conn.close()
    assert "REPLICATION SLAVE" in grants or "REPLICATION REPLICA" in grants
    assert "SELECT" in grants
    with pytest.raises(pymysql.err.OperationalError):
        pymysql.connect(host="127.0.0.1", port=mariadb.port, user="repl", password="wrong")
    # root over TCP with the empty password, through the helper too
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT 1")
        assert cur.fetchone() == (1,)


def test_flush_binary_logs_adds_a_file(mariadb: LocalServer) -> None:
    before = mariadb.binlog_files()
    assert before and all(p.exists() for p in before)
    mariadb.sql("FLUSH BINARY LOGS")
    after = mariadb.binlog_files()
    assert len(after) == len(before) + 1
    assert after[: len(before)] == before
    assert after[-1].exists() and after[-1].parent == mariadb.binlog_dir
    assert [p.name for p in after] == [r[0] for r in mariadb.sql("SHOW BINARY LOGS")]
    with open(after[-1], "rb") as f:
        assert f.read(4) == b"\xfebin"


def test_fresh_db_is_empty_and_usable(mariadb: LocalServer, fresh_db: str) -> None:
    assert mariadb.sql(f"SHOW TABLES FROM `{fresh_db}`") == []
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.t (id INT PRIMARY KEY)")
    mariadb.sql(f"INSERT INTO `{fresh_db}`.t VALUES (1)")
    assert mariadb.sql("SELECT id FROM t", database=fresh_db) == [(1,)]


def test_kill_and_restart_keep_data_and_port(tmp_path, server_binaries) -> None:
    server = LocalServer(basedir=tmp_path / "srv", binaries=server_binaries)
    with server:
        port = server.port
        server.sql("CREATE DATABASE d")
        server.sql("CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB")
        server.sql("INSERT INTO d.t VALUES (1, 'one'), (2, 'two')")
        files = server.binlog_files()
        pid = server.pid

        server.kill()
        assert not server.running
        with pytest.raises(OSError):
            os.kill(pid, 0)

        server.restart()
        assert server.running and server.port == port
        assert server.sql("SELECT id, v FROM d.t ORDER BY id") == [(1, "one"), (2, "two")]
        # a restart opens a new binlog file; the old ones survive the crash
        assert server.binlog_files()[: len(files)] == files
        assert len(server.binlog_files()) == len(files) + 1

        server.sql("INSERT INTO d.t VALUES (3, 'three')")
        server.stop()
        assert not server.running
        server.start()
        assert server.port == port
        assert server.sql("SELECT COUNT(*) FROM d.t") == [(3,)]
    assert not server.running


def test_context_manager_removes_its_temp_dir(server_binaries) -> None:
    with LocalServer(binaries=server_binaries) as server:
        basedir = server.basedir
        assert server.sql("SELECT 1") == [(1,)]
        assert server.startup_seconds is not None and server.startup_seconds < 60
    assert not basedir.exists()


def test_startup_failure_reports_the_error_log(server_binaries) -> None:
    server = LocalServer(extra_args=["--no-such-option-binlogd-test"], binaries=server_binaries)
    try:
        with pytest.raises(RuntimeError) as info:
            server.start()
    finally:
        server.cleanup()
    msg = str(info.value)
    assert "no-such-option-binlogd-test" in msg
    assert "error.log" in msg


def test_minimal_server_compresses_and_has_minimal_metadata(mariadb_minimal: LocalServer) -> None:
    v = _variables(mariadb_minimal, "%")
    assert v["binlog_row_metadata"] == "MINIMAL"
    if mariadb_minimal.flavor == "mariadb":
        assert v["log_bin_compress"] == "ON"
        assert v["log_bin_compress_min_len"] == "10"
    else:  # MySQL compresses whole transactions (TRANSACTION_PAYLOAD events)
        assert v["binlog_transaction_compression"] == "ON"


def test_runs_the_server_it_was_given(mariadb: LocalServer, server_binaries) -> None:
    """The fixture's server is the installation it names: 11.8 or MySQL 9.7 from the unpacked root, the machine's
    otherwise. MySQL runs with GTIDs on and no file-privilege directory."""
    version = mariadb.sql("SELECT VERSION()")[0][0]
    assert version.startswith(".".join(map(str, server_binaries.version_tuple)))
    assert mariadb.version == server_binaries.version
    basedir = mariadb.sql("SELECT @@basedir")[0][0]
    if server_binaries.loader:  # an unpacked root: its own basedir (messages, charsets, plugins)
        assert basedir.rstrip("/") == str(server_binaries.server.parents[1])
    if server_binaries.flavor == "mysql":
        assert mariadb.version_tuple[:2] == (9, 7)
        assert mariadb.sql("SELECT @@gtid_mode, @@enforce_gtid_consistency, @@secure_file_priv") == [("ON", "ON", "")]
    elif server_binaries.loader:
        assert mariadb.version_tuple[:2] == (11, 8)
        # 11.4+ logs end_log_pos 0 inside transactions: the reason this server is in the suite
        assert mariadb.sql("SELECT @@binlog_legacy_event_pos")[0][0] == 0


def test_from_root_names_a_root_without_a_server(tmp_path) -> None:
    from binlogd.cli.serverbins import ServerBinaries, ServerNotFound

    with pytest.raises(ServerNotFound, match="holds no unpacked MariaDB or MySQL server"):
        ServerBinaries.from_root(tmp_path)


# --------------------------------------------------------------------------- temp dirs never outlive us (issue 29)


def _private_tmp() -> Path:
    """A short TMPDIR of a test's own that shares the machine's server templates."""
    shared = Path(tempfile.gettempdir()) / f"binlogd-localserver-{os.geteuid()}"
    shared.mkdir(mode=0o700, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bt-", dir="/tmp"))
    (tmp / shared.name).symlink_to(shared)
    return tmp


def _ours(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith(("binlogd-srv-", "bld-sock-")))


def test_a_server_never_cleaned_up_is_removed_at_exit() -> None:
    """A process that starts a LocalServer and exits without stopping it: the server is killed and its temp
    dir removed at interpreter exit."""
    code = ("from binlogd.cli.localserver import LocalServer; s = LocalServer().start(); "
            "print(s.basedir, s.pid, flush=True)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    basedir, pid = proc.stdout.split()
    assert basedir.startswith(tempfile.gettempdir()) and not Path(basedir).exists()
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("delay", [0.15, 0.3, 0.6, 1.0, None])
def test_a_signal_at_any_moment_leaves_no_temp_dir(signum, delay) -> None:
    """``python -m binlogd.cli.localserver`` signalled while it starts (``delay`` s after Python started) or
    once it serves (None): exit 0, 130 or 143 without a traceback, no server left, no temp dir left."""
    tmp = _private_tmp()
    code = ("import sys; print('started', file=sys.stderr, flush=True); "
            "from binlogd.cli.localserver import main; sys.exit(main())")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env={**os.environ, "TMPDIR": str(tmp)})
    try:
        assert proc.stderr.readline().strip() == "started"
        if delay is None:
            assert "Ctrl-C stops it" in proc.stdout.readline()
        else:
            time.sleep(delay)
        proc.send_signal(signum)
        _out, err = proc.communicate(timeout=60)  # read as it exits: a full pipe must not hold it
        rc = proc.returncode
        left = processes.wait_group_gone(proc.pid)
        assert "Traceback" not in err, err
        # -15: SIGTERM came before main() turned it into an exit, when nothing had been made yet
        assert rc in (0, 130, 143, -signal.SIGTERM), (rc, err)
        assert left == [], "a server outlived the process"
        assert _ours(tmp) == [], f"temp dirs left; stderr:\n{err}"
    finally:
        proc.kill()
        processes.kill_group(proc.pid)
        shutil.rmtree(tmp, ignore_errors=True)

"""On real servers: a schema history belongs to one source (``binlogd run`` as a process).

Two MINIMAL-metadata MariaDB primaries (server ids 21 and 22, both with the default binlog base name and GTID
domain 0) hold ``d.t`` with the same three INT columns in a different order. The oracle is always the
server's own rows (SELECT): a change event's names and values must equal them, or be positional with
``binlogd_schema_mismatch_total`` counting (never a wrong name).

1. Two daemons, one per server, checkpoints ``a-checkpoint.json`` and ``b-checkpoint.json`` in one directory:
   each names its own server's rows (with one shared ``schema-history.jsonl``, as before, B named A's).
2. A history of another source: ``binlogd run`` exits 8 with one line naming both and the file;
   ``binlogd dump --schema-history`` refuses the other server's binlog (exit 1, one line).
3. The lock: a second daemon on the same history exits 8.
4. A history file binlogd cannot read (a line of another format): exit 8 with one line naming the file and the
   line, never a traceback; a ``schema-history.jsonl`` of another name beside the checkpoint is not read.
5. A failover (primary + GTID replica, one base name, the old primary's binlog numbers ahead) after a DDL
   that reorders columns of one type: names right or positional-and-counted, before and after a restart.
"""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from binlogd.cli.localserver import LocalServer
from binlogd.library.schema.history import load_history
from tests.support.daemon import (
    BINLOGD,
    DaemonProcess,
    base_overrides,
    read_changes,
    run_to_exit,
    running_daemon,
    wait_caught_up,
    wait_until,
)
from tests.support.faults import metrics_port, scrape_metric
from tests.support.replication import FAILOVER, MINIMAL, Pair, hosts_overrides, wait_gtids

pytestmark = pytest.mark.server


def _who(server, file: bool = False) -> str:
    """How the daemon names ``server`` as a schema history's source: MySQL by its UUID, MariaDB by its server id;
    ``file``: as a binlog file names it (by its server id: a file does not hold the UUID)."""
    if server.flavor == "mysql" and not file:
        return f"mysql server_uuid {server.sql('SELECT @@server_uuid')[0][0]}"
    return f"{server.flavor} server_id {server.sql('SELECT @@server_id')[0][0]}"



@pytest.fixture(scope="module")
def servers(server_binaries):
    """Two independent MINIMAL primaries: server ids 21 and 22."""
    made = []
    try:
        for sid in (21, 22):
            made.append(LocalServer(extra_args=[MINIMAL, f"--server-id={sid}"], binaries=server_binaries).start())
        yield made
    finally:
        for server in made:
            server.cleanup()


def _db() -> str:
    return f"sid_{uuid.uuid4().hex[:8]}"


def _create(server: LocalServer, db: str, columns: str) -> None:
    server.sql(f"CREATE DATABASE `{db}`")
    server.sql(f"CREATE TABLE `{db}`.t ({columns})")


def _rows(server: LocalServer, db: str, table: str = "t") -> dict:
    """The server's own rows of ``db.table``: id → {column: value} (names from the server)."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{db}`.`{table}`")
        names = [d[0] for d in cur.description]
        return {row[0]: dict(zip(names, row)) for row in cur.fetchall()}


def _inserts(sink, db: str) -> list[dict]:
    return [c["after"] for c in read_changes(sink, strict=False) if c["schema"] == db and c["op"] == "insert"]


def _positional(row: dict) -> bool:
    return any(k.startswith("@") for k in row)


def _overrides(server, workdir, name: str, db: str, **extra) -> dict:
    o = base_overrides(server, workdir, **{"filters.include_schemas": db, **extra})
    o["checkpoint.path"] = str(workdir / f"{name}-checkpoint.json")
    o["sink.path"] = str(workdir / f"sink-{name}")
    return o


def _dump(history, *files) -> subprocess.CompletedProcess:
    return subprocess.run([*BINLOGD, "dump", "--json", "--schema-history", str(history), *map(str, files)],
                          capture_output=True, text=True, timeout=60)


# =========================================================================== 1. two daemons, one directory
def test_two_daemons_two_servers_one_directory_each_names_its_own_rows(servers, tmp_path):
    a, b = servers
    db = _db()
    _create(a, db, "id INT PRIMARY KEY, price INT, qty INT")
    _create(b, db, "id INT PRIMARY KEY, qty INT, price INT")
    for _ in range(2):
        b.sql("FLUSH BINARY LOGS")    # B's positions after A's: a shared history's A entries would hold on B
    oa, ob = _overrides(a, tmp_path, "a", db), _overrides(b, tmp_path, "b", db)
    with running_daemon(oa) as da:
        a.sql(f"INSERT INTO `{db}`.t (id, price, qty) VALUES (1, 250, 7), (2, 99, 3)")
        wait_caught_up(a, tmp_path / "a-checkpoint.json", daemon=da)
        with running_daemon(ob) as dbd:   # both run at once, in one directory
            b.sql(f"INSERT INTO `{db}`.t (id, qty, price) VALUES (1, 7, 250), (2, 3, 99)")
            a.sql(f"INSERT INTO `{db}`.t (id, price, qty) VALUES (3, 5, 6)")
            wait_caught_up(b, tmp_path / "b-checkpoint.json", daemon=dbd)
            wait_caught_up(a, tmp_path / "a-checkpoint.json", daemon=da)
    for server, name in ((a, "a"), (b, "b")):
        got = _inserts(tmp_path / f"sink-{name}", db)
        assert got and not any(_positional(r) for r in got), got
        assert {r["id"]: r for r in got} == _rows(server, db), name
        assert list(got[0]) == list(_rows(server, db)[1])      # the server's own column order
    ha, hb = tmp_path / "a-checkpoint.schema-history.jsonl", tmp_path / "b-checkpoint.schema-history.jsonl"
    assert [s.server_id for s in load_history(ha)[0]] == [21] and [s.server_id for s in load_history(hb)[0]] == [22]
    assert not (tmp_path / "schema-history.jsonl").exists()


# =========================================================================== 2. another source's history
def test_a_history_of_another_source_is_refused_by_run_and_by_dump(servers, tmp_path):
    a, b = servers
    db = _db()
    _create(a, db, "id INT PRIMARY KEY, price INT, qty INT")
    _create(b, db, "id INT PRIMARY KEY, qty INT, price INT")
    with running_daemon(_overrides(a, tmp_path, "a", db)) as da:
        a.sql(f"INSERT INTO `{db}`.t VALUES (1, 250, 7)")
        wait_caught_up(a, tmp_path / "a-checkpoint.json", daemon=da)
    history = tmp_path / "a-checkpoint.schema-history.jsonl"
    before = history.read_bytes()
    b.sql(f"INSERT INTO `{db}`.t VALUES (1, 7, 250)")
    rc, stderr = run_to_exit(_overrides(b, tmp_path, "b", db, **{"schema.history_path": str(history)}))
    assert rc == 8, stderr
    (line,) = [ln for ln in stderr.splitlines() if " ERROR " in ln]
    assert f"schema history {history} belongs to {_who(a)}" in line
    assert f"not to this session's source {_who(b)}" in line
    assert "Traceback" not in stderr
    assert history.read_bytes() == before                     # nothing was written to it
    assert not (tmp_path / "sink-b").exists() or not _inserts(tmp_path / "sink-b", db)

    # dump: the other server's binlog is refused; the history's own server's is named
    b_files, a_files = b.binlog_files(), a.binlog_files()
    refused = _dump(history, b_files[-1])
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith(f"binlogd: {history}: this schema history belongs to {_who(a)} (")
    assert f"not to binlog file {b_files[-1].name} ({_who(b, file=True)}" in refused.stderr
    ok = _dump(history, *a_files)
    assert ok.returncode == 0, ok.stderr
    rows = [row for ev in map(json.loads, ok.stdout.splitlines()) if ev.get("schema") == db and "rows" in ev
            for row in ev["rows"]]
    assert rows == [_rows(a, db)[1]]


# =========================================================================== 3. the lock
def test_a_second_daemon_on_the_same_history_exits_8(servers, tmp_path):
    a, _ = servers
    db = _db()
    _create(a, db, "id INT PRIMARY KEY, price INT, qty INT")
    history = tmp_path / "shared.jsonl"
    with running_daemon(_overrides(a, tmp_path, "a", db, **{"schema.history_path": str(history)})):
        rc, stderr = run_to_exit(_overrides(a, tmp_path, "b", db, **{"schema.history_path": str(history)}))
    assert rc == 8, stderr
    errors = [ln for ln in stderr.splitlines() if " ERROR " in ln]
    assert len(errors) == 1 and f"schema history {history} is locked by another binlogd process" in errors[0]


# =========================================================================== 4. an unreadable history
def test_an_unreadable_history_stops_the_daemon_with_one_line(servers, tmp_path):
    a, _ = servers
    db = _db()
    _create(a, db, "id INT PRIMARY KEY, price INT, qty INT")
    stray = b'{"file": "binlog.000001", "pos": 4, "db": "d", "sql": "CREATE TABLE t (a INT)"}\n'
    (tmp_path / "schema-history.jsonl").write_bytes(stray)    # another name: not this daemon's history
    with running_daemon(_overrides(a, tmp_path, "a", db)) as da:
        a.sql(f"INSERT INTO `{db}`.t VALUES (1, 250, 7)")
        wait_caught_up(a, tmp_path / "a-checkpoint.json", daemon=da)
    assert (tmp_path / "schema-history.jsonl").read_bytes() == stray
    assert {r["id"]: r for r in _inserts(tmp_path / "sink-a", db)} == _rows(a, db)

    history = tmp_path / "old.jsonl"
    history.write_bytes(stray)
    rc, stderr = run_to_exit(_overrides(a, tmp_path, "b", db, **{"schema.history_path": str(history)}))
    assert rc == 8, stderr
    (line,) = [ln for ln in stderr.splitlines() if " ERROR " in ln]
    assert f"schema history {history}: {history}: line 1 is not a schema history entry" in line, line
    assert "Traceback" not in stderr
    assert history.read_bytes() == stray


# =========================================================================== 5. failover re-anchor
def test_failover_after_a_same_type_reorder_with_the_old_primarys_numbers_ahead(server_binaries, tmp_path):
    pair = Pair(server_binaries, extra_args=(MINIMAL,))
    for server in pair.servers:
        server.binlog_basename = "binlog"          # one base name: positions of the two would compare
    db = _db()
    with pair:
        old, new = pair.primary, pair.replica
        o = hosts_overrides([old.port, new.port], tmp_path, **{"filters.include_schemas": db})
        checkpoint = tmp_path / "checkpoint.json"
        daemon = DaemonProcess(o)
        try:
            daemon.wait_streaming()                 # before the CREATE: the history holds the stream's DDL
            old.sql(f"CREATE DATABASE `{db}`")
            old.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, a INT, b INT)")
            old.sql(f"INSERT INTO `{db}`.t VALUES (1, 10, 20)")
            for _ in range(6):
                old.sql("FLUSH BINARY LOGS")        # the old primary's numbers run ahead of the replica's
            old.sql(f"ALTER TABLE `{db}`.t MODIFY b INT AFTER id")     # (id, b, a): the same types
            old.sql(f"INSERT INTO `{db}`.t (id, a, b) VALUES (2, 21, 22)")
            pair.wait_replica()
            wait_gtids(old, checkpoint, daemon=daemon)

            def moved():
                wait_until(lambda: daemon.count(FAILOVER.pattern) >= 1, 60, what="the failover")

            pair.switchover(between=moved)
            new.sql(f"INSERT INTO `{db}`.t (id, a, b) VALUES (3, 31, 32)")
            wait_gtids(new, checkpoint, daemon=daemon)
            mismatches = scrape_metric(metrics_port(daemon), "binlogd_schema_mismatch_total", schema=db, table="t")
            assert daemon.terminate() == 0, daemon.stderr
            assert daemon.count(f"re-anchored on {_who(new)}") == 1, daemon.stderr

            # a restart on the new primary: its positions, never compared with the old one's
            daemon = DaemonProcess(o)
            daemon.wait_streaming()
            new.sql(f"INSERT INTO `{db}`.t (id, a, b) VALUES (4, 41, 42)")
            new.sql(f"ALTER TABLE `{db}`.t MODIFY a INT AFTER id")     # (id, a, b) again
            new.sql(f"INSERT INTO `{db}`.t (id, a, b) VALUES (5, 51, 52)")
            wait_gtids(new, checkpoint, daemon=daemon)
            mismatches += scrape_metric(metrics_port(daemon), "binlogd_schema_mismatch_total", schema=db, table="t")
            assert daemon.terminate() == 0, daemon.stderr
            assert daemon.count("re-anchored") == 0
        finally:
            if daemon.running:
                daemon.kill()
        rows = _rows(new, db)
        sources, _ = load_history(tmp_path / "checkpoint.schema-history.jsonl")
    assert [s.server_id for s in sources] == [1, 2]
    got = _inserts(tmp_path / "sink", db)
    assert sorted(r.get("id", r.get("@1")) for r in got) == [1, 2, 3, 4, 5]
    positional = [r for r in got if _positional(r)]
    for row in got:
        if not _positional(row):
            assert row == rows[row["id"]], (row, rows[row["id"]])   # never a wrong name
    assert len(positional) <= mismatches, (positional, mismatches)
    assert not any(_positional(r) for r in got if r.get("id") in (4, 5) or r.get("@1") in (4, 5))


# =========================================================================== Spark's schemaHistory
def test_spark_refuses_a_history_of_another_source(servers, spark, tmp_path):
    a, b = servers
    db = _db()
    _create(a, db, "id INT PRIMARY KEY, price INT, qty INT")
    _create(b, db, "id INT PRIMARY KEY, qty INT, price INT")
    with running_daemon(_overrides(a, tmp_path, "a", db)) as da:
        a.sql(f"INSERT INTO `{db}`.t VALUES (1, 250, 7)")
        wait_caught_up(a, tmp_path / "a-checkpoint.json", daemon=da)
    b.sql(f"INSERT INTO `{db}`.t VALUES (1, 7, 250)")
    history = str(tmp_path / "a-checkpoint.schema-history.jsonl")

    def read(server):
        return (spark.read.format("binlog").option("shape", "changes").option("schemaHistory", history)
                .load([str(f) for f in server.binlog_files()]).where(f"schema = '{db}'").collect())

    rows = read(a)
    assert [json.loads(r["after"]) for r in rows] == [_rows(a, db)[1]]
    with pytest.raises(Exception) as info:
        read(b)
    assert f"{history}: this schema history belongs to {_who(a)}" in str(info.value)
    assert "not to binlog file binlog." in str(info.value) and f"({_who(b, file=True)}" in str(info.value)

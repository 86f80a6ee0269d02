"""Partial JSON updates on a real MySQL (binlog_row_value_options=PARTIAL_JSON), MINIMAL and NOBLOB row images.

JSON_SET, JSON_REPLACE and JSON_REMOVE updates (on members, array elements, past an array's end, nested, with a
column set whole in the same statement to a document that looks like diffs) are read back three ways, each
checked against the server's own SELECT, never against binlogd's output:

- the change events (the JSON-lines bytes the sinks write, and the Debezium envelopes): applying each update's
  ``json_diffs`` to the value before it, and taking ``after``'s columns, gives every row the server holds;
- ``binlogd sql`` of the files, replayed into a second server, gives the same rows there;
- a daemon following the server writes changes that do the same, and its stderr holds log lines only.

MariaDB has no partial JSON updates: the module skips there.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from binlogd.cli.filetools import dump_events
from binlogd.cli.localserver import LocalServer
from binlogd.library import debezium, jsonrows
from binlogd.library.serialize import flatten
from binlogd.protocol import events as E
from binlogd.protocol.constants import EventType as ET
from tests.support.daemon import LOG_LINE, daemon_following, read_changes, wait_caught_up
from tests.support.jsondiff import apply_json_diffs
from tests.support.sqlout import binlogd_sql, client, flush, new_files, target

pytestmark = pytest.mark.server

DOCS = {
    1: ('{"a": 1, "arr": [1, 2, 3], "nested": {"b": [10, 20]}, "s": "x"}', '{"k": 0}'),
    2: ('{"s": "short", "n": null, "arr": []}', None),
    3: ('[1, {"x": "y"}, [2, 3]]', '[]'),
    4: ('{"a": 1}', '{"b": 2}'),
}
LOOKALIKE = '[{"op": "replace", "path": "$.a", "value": 1}]'
UPDATES = [
    "UPDATE t SET j = JSON_SET(j, '$.a', 2, '$.new', 'x', '$.arr[1]', 9, '$.arr[10]', 10), n = n + 1 WHERE id = 1",
    "UPDATE t SET j = JSON_REPLACE(j, '$.nested.b[0]', JSON_OBJECT('c', 1.5), '$.missing', 1) WHERE id = 1",
    "UPDATE t SET j = JSON_REMOVE(j, '$.arr[0]', '$.s') WHERE id = 1",
    "UPDATE t SET j = JSON_SET(j, '$.s', 'a longer string than before', '$.n', 7), k = CAST(%s AS JSON) WHERE id = 2",
    "UPDATE t SET j = JSON_SET(j, '$.arr[0]', 'é€😀', '$.\"key with space\"', NULL) WHERE id = 2",
    "UPDATE t SET j = JSON_SET(j, '$[1].x', 'z', '$[2][5]', 4) WHERE id = 3",
    "UPDATE t SET j = JSON_REMOVE(JSON_SET(j, '$[0]', 100), '$[1]') WHERE id = 3",
    "UPDATE t SET k = JSON_SET(k, '$.b', 3), j = JSON_SET(j, '$.a', 2) WHERE id IN (1, 4)",
    "UPDATE t SET j = JSON_OBJECT('whole', 1), note = 'w' WHERE id = 4",
    "UPDATE t SET j = JSON_SET(j, '$.a', j->'$.a') WHERE id = 1",
]


@pytest.fixture(scope="module", params=["MINIMAL", "NOBLOB"])
def partial_server(request, server_binaries):
    if server_binaries.flavor != "mysql":
        pytest.skip("MariaDB has no partial JSON updates (binlog_row_value_options, PARTIAL_UPDATE_ROWS)")
    server = LocalServer(extra_args=["--binlog-row-value-options=PARTIAL_JSON", f"--binlog-row-image={request.param}",
                                     "--binlog-row-metadata=FULL"], binaries=server_binaries)
    request.addfinalizer(server.cleanup)
    server.start()
    return server


def _rows(server, db: str) -> dict[int, dict]:
    """The server's rows of ``db.t``, JSON columns parsed."""
    conn = server.connect(database=db, charset="utf8mb4")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id, j, k, n, note FROM t ORDER BY id")
            return {r[0]: {"id": r[0], "j": None if r[1] is None else json.loads(r[1], parse_float=Decimal),
                           "k": None if r[2] is None else json.loads(r[2], parse_float=Decimal),
                           "n": r[3], "note": r[4]} for r in cur.fetchall()}
    finally:
        conn.close()


def _workload(server, db: str, updates=UPDATES) -> None:
    conn = server.connect(charset="utf8mb4")
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
            cur.execute(f"USE `{db}`")
            cur.execute("CREATE TABLE t (id INT PRIMARY KEY, j JSON, k JSON, n INT NOT NULL DEFAULT 0, "
                        "note VARCHAR(10))")
            for key, (j, k) in DOCS.items():
                cur.execute("INSERT INTO t (id, j, k) VALUES (%s, %s, %s)", (key, j, k))
            for statement in updates:
                cur.execute(statement, (LOOKALIKE,) if "%s" in statement else None)
    finally:
        conn.close()


def _follow(changes, state: dict[int, dict], ops: set) -> None:
    """Apply change events of ``t`` to ``state`` (id -> row) as a consumer does: the diffs to the value before."""
    for c in changes:
        if c["table"] != "t":
            continue
        if c["op"] == "insert":
            state[c["after"]["id"]] = {"j": None, "k": None, "n": 0, "note": None, **c["after"]}
            continue
        row = state[c["before"]["id"]]
        for column, diffs in c.get("json_diffs", {}).items():
            assert column not in c["after"], c
            row[column] = apply_json_diffs(row[column], diffs)
            ops.update(d["op"] for d in diffs)
        row.update(c["after"])


def _loads(line: bytes) -> dict:
    return json.loads(line, parse_float=Decimal)


def test_change_events_applied_give_the_servers_rows(partial_server, tmp_path):
    db = "pj_events"
    first = flush(partial_server)
    _workload(partial_server, db)
    want = _rows(partial_server, db)
    flush(partial_server)
    state: dict[int, dict] = {}
    ops: set = set()
    partial = lookalike = 0
    for path in new_files(partial_server, first)[:-1]:
        for event in dump_events(path):
            for item in flatten(event):
                if not isinstance(item, E.RowsEvent) or item.schema != db:
                    continue
                lines, _ = jsonrows.change_lines(item, path.name, None)
                changes = [_loads(line) for line in lines.splitlines()]
                envelopes, _ = debezium.change_lines(item, path.name, None)
                for change, env in zip(changes, map(_loads, envelopes.splitlines())):
                    assert env.get("json_diffs") == change.get("json_diffs") and env["after"] == change["after"]
                    lookalike += change["after"] is not None and isinstance(change["after"].get("k"), list) \
                        and change["after"]["k"] == json.loads(LOOKALIKE)
                partial += item.header.type_code == ET.PARTIAL_UPDATE_ROWS
                _follow(changes, state, ops)
    assert partial, "the server logged no PARTIAL_UPDATE_ROWS event"
    assert ops == {"replace", "insert", "remove"}, ops
    assert lookalike == 1, "the document that looks like diffs did not come as the column's value"
    assert state == want


def test_binlogd_sql_replays_the_diffs(partial_server):
    db = "pj_sql"
    first = flush(partial_server)
    _workload(partial_server, db)
    want = _rows(partial_server, db)
    flush(partial_server)
    run = binlogd_sql(*new_files(partial_server, first)[:-1])
    assert run.code == 0, run.stderr
    assert b"JSON_ARRAY_INSERT(" in run.sql and b"JSON_REMOVE(" in run.sql and b"JSON_REPLACE(" in run.sql
    with target(partial_server) as dest:
        client(dest, run.sql)
        assert _rows(dest, db) == want


def test_a_daemon_writes_the_diffs_and_only_log_lines(partial_server, tmp_path):
    db = "pj_daemon"
    with daemon_following(partial_server, tmp_path, **{"source.tls.mode": "disabled"}) as daemon:
        _workload(partial_server, db)
        want = _rows(partial_server, db)
        wait_caught_up(partial_server, daemon.checkpoint, daemon=daemon)
    state: dict[int, dict] = {}
    ops: set = set()
    _follow([c for c in read_changes(daemon.sink) if c["schema"] == db], state, ops)
    assert state == want and "replace" in ops
    others = [line for line in daemon.lines if not LOG_LINE.match(line)]
    assert not others, f"stderr lines that are not log lines: {others}"
    assert not any("Warning" in line or "warnings.warn" in line or "aiomysql" in line for line in daemon.lines), \
        daemon.stderr

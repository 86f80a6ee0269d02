"""``binlogd info --json`` on an open binlog (the server's active file, copied while it runs: in-use flag set, no
closing ROTATE): ``closed_cleanly`` false, found by a scan, and ``bytes_read`` never more than ``size``; the same
for the copy cut at every event boundary and inside every event (a last event cut short is ``truncated_at``)."""

from __future__ import annotations

import json
import shutil
import subprocess

from binlogd.cli import filetools
from tests.support.daemon import BINLOGD


def test_info_on_an_open_binlog_reads_no_more_than_its_size(mariadb, fresh_db, tmp_path):
    mariadb.sql("FLUSH BINARY LOGS")
    mariadb.sql("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(200), j JSON)", database=fresh_db)
    for i in range(8):
        mariadb.sql(f"INSERT INTO t VALUES ({i}, REPEAT('v', {i * 20}), '{{\"a\": {i}}}')", database=fresh_db)
    mariadb.sql("UPDATE t SET v = 'u' WHERE id < 4", database=fresh_db)
    name = str(mariadb.sql("SHOW BINARY LOGS")[-1][0])
    bounds = [int(r[1]) for r in mariadb.sql(f"SHOW BINLOG EVENTS IN '{name}'")]
    copy = tmp_path / name
    shutil.copyfile(mariadb.binlog_files()[-1], copy)
    size = copy.stat().st_size
    run = subprocess.run([*BINLOGD, "info", "--json", str(copy)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert (got["size"], got["closed_cleanly"], got["method"], got["truncated_at"]) == (size, False, "scan", None)
    assert 0 < got["bytes_read"] <= size and got["last_gtid"], got
    data = copy.read_bytes()
    cut = tmp_path / "cut"
    cuts = {size - 1, *bounds[1:], *(b + 1 for b in bounds[1:]), *(b + 20 for b in bounds[1:])}
    for at in sorted(a for a in cuts if a < size):
        cut.write_bytes(data[:at])
        info, read = filetools.measured_info(cut)
        assert read <= at, (at, read)
        assert info.truncated_at == (None if at in bounds else max(b for b in bounds if b < at)), at

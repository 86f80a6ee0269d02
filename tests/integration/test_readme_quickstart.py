"""README's quick start, as written: its SQL creates the replication user on a server that does not log full row
metadata, its shell lines make the password file, its configuration (the host, port, user, schema and home
directory put in) runs ``binlogd run`` as given, and the README's INSERT and UPDATE come out as its two example
change lines, with column names; Ctrl-C then exits 0.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid

from tests.support.daemon import wait_until
from tests.support.paths import REPO


def _quick_start() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]


def _block(section: str, lang: str) -> str:
    """The one fenced block of ``lang`` in the section."""
    blocks = re.findall(rf"^```{lang}\n(.*?)^```$", section, re.M | re.S)
    assert len(blocks) == 1, (lang, blocks)
    return blocks[0]


def test_the_quick_start_runs_as_written(mariadb_minimal, tmp_path):
    srv, section = mariadb_minimal, _quick_start()
    tag = uuid.uuid4().hex[:8]
    user, schema, home = f"qs_{tag}", f"shop_{tag}", tmp_path / "home"
    home.mkdir()

    def ours(text: str) -> str:  # the names this test uses (the server is shared) in the README's text
        return text.replace("'binlogd'@", f"'{user}'@").replace("shop.", f"{schema}.")

    sql, toml = _block(section, "sql"), _block(section, "toml")
    shell = [line.split("#")[0].strip() for block in re.findall(r"^```sh\n(.*?)^```$", section, re.M | re.S)
             for line in block.splitlines()]
    assert "binlogd run --config ~/binlogd/binlogd.toml" in shell
    statements = re.findall(r"`((?:INSERT|UPDATE) [^`]+)`", section)
    examples = [json.loads(line.replace(",…}}", "}}")) for line in section.splitlines() if line.startswith('{"op":')]
    assert "/var/lib/binlogd" not in toml and "password =" not in toml
    assert len(statements) == 2 and len(examples) == 2

    admin = srv.connect()
    try:
        with admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE {schema}")
            cur.execute(f"CREATE TABLE {schema}.orders (id INT PRIMARY KEY, item VARCHAR(20), qty INT)")
            for statement in ours(sql).split(";"):
                if statement.split("--")[0].strip():
                    cur.execute(statement.split("--")[0])
        env = {**os.environ, "HOME": str(home)}
        for step in shell:  # the password file (installing and running are this test's own)
            if step and not step.startswith(("python3 -m venv", ".venv/bin/pip", "binlogd run")):
                subprocess.run([shutil.which("bash"), "-ec", step], env=env, check=True, timeout=30)
        password = home / "binlogd" / "password"
        assert password.stat().st_mode & 0o077 == 0, oct(password.stat().st_mode)
        config = home / "binlogd" / "binlogd.toml"
        config.write_text(ours(toml).replace('"db.example.com"', f'"{srv.host}"')
                          .replace("port = 3306", f"port = {srv.port}").replace('"binlogd"', f'"{user}"')
                          .replace("/home/me", str(home)))

        # as README runs it, with the metrics off: port 9108 may be another process's here
        log = tmp_path / "stderr"
        with open(log, "w") as err:
            daemon = subprocess.Popen([sys.executable, "-m", "binlogd.cli", "run", "--config", str(config),
                                       "--set", "metrics.listen="], env=env, cwd=tmp_path, stderr=err)
        changes = home / "binlogd" / "changes" / "changes-000001.jsonl"
        try:
            wait_until(lambda: "streaming from" in log.read_text() or daemon.poll() is not None, timeout=30,
                       what="the daemon streaming")
            assert daemon.poll() is None, log.read_text()
            with admin.cursor() as cur:
                for statement in statements:
                    cur.execute(ours(statement))
                    admin.commit()
            lines = wait_until(lambda: changes.exists() and len(changes.read_text().splitlines()) >= 2
                               and changes.read_text().splitlines(), timeout=30, what="two change lines")
        finally:
            daemon.send_signal(signal.SIGINT)
            daemon.wait(timeout=30)
        stderr = log.read_text()
        assert daemon.returncode == 0, stderr
        assert "WARNING" not in stderr, stderr  # the grants sufficed: no column left unnamed
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {schema}")
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
        admin.close()

    got = [json.loads(line) for line in lines]
    assert len(got) == 2, lines
    for change, example in zip(got, examples):
        assert {k: v for k, v in change.items() if k not in ("ts", "source")} == \
            {**{k: v for k, v in example.items() if k not in ("ts", "source")}, "schema": schema}
        assert set(example["source"]) <= set(change["source"])

"""pg_chameleon 2.0.21 (PyPI), the peer of ``bench.bench_mirror``: installed in a venv of its own, configured for
the bench's MariaDB and PostgreSQL, run as a whole process per command.

pg_chameleon refuses to run as root: as root it runs as the OS user ``postgres`` (the venv is made with the
system Python, ``/usr/bin/python3``, so that user can read it, under /tmp). Its PostgreSQL connection needs a
non-empty password: with an empty one, libpq reads ``password= port=...`` as the password and connects to port
5432.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

VERSION = "2.0.21"
SOURCE = "mysql"
CONFIG = """---
pid_dir: '{home}/pid/'
log_dir: '{home}/logs/'
log_dest: file
log_level: info
log_days_keep: 1
rollbar_key: ''
rollbar_env: ''
pg_conn:
  host: "127.0.0.1"
  port: "{pg_port}"
  user: "{pg_user}"
  password: "{pg_password}"
  database: "{pg_database}"
  charset: "utf8"
sources:
  mysql:
    db_conn:
      host: "127.0.0.1"
      port: "{my_port}"
      user: "{my_user}"
      password: "{my_password}"
      charset: 'utf8'
      connect_timeout: 10
    schema_mappings:
      {schema}: {schema}
    limit_tables: []
    skip_tables: []
    grant_select_to: []
    skip_events:
      insert: []
      delete: []
      update: []
    lock_timeout: "120s"
    my_server_id: 9100
    replica_batch_size: 10000
    replay_max_rows: 10000
    batch_retention: '1 day'
    copy_max_memory: "300M"
    copy_mode: 'file'
    out_dir: '{home}/out'
    sleep_loop: 1
    on_error_replay: continue
    on_error_read: continue
    auto_maintenance: "disabled"
    gtid_enable: false
    type: mysql
    keep_existing_schema: No
    net_read_timeout: 600
"""


def ensure_venv(venv: Path) -> Path:
    """The ``chameleon`` script of pg_chameleon VERSION in ``venv``, installed there from PyPI when missing."""
    script = venv / "bin" / "chameleon"
    if not script.exists():
        python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else "python3"
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        f"pg_chameleon=={VERSION}"], check=True)
        os.chmod(venv, 0o755)
    return script


class Chameleon:
    """One pg_chameleon replica of MySQL schema ``schema`` into PostgreSQL database ``database`` (same schema
    name), its configuration and logs in ``home``.

    Args:
        script: the ``chameleon`` script (:func:`ensure_venv`).
        home: a new directory for its HOME (made readable by the user it runs as).
        pg: the bench's PostgresServer (with a password); srv: the MariaDB; my_user, my_password: a MySQL
            account with the rights pg_chameleon needs (RELOAD, REPLICATION, SELECT).
    """

    def __init__(self, script: Path, home: Path, pg, database: str, srv, my_user: str, my_password: str,
                 schema: str):
        self.script, self.home, self.pg, self.database = script, home, pg, database
        (home / ".pg_chameleon" / "configuration").mkdir(parents=True)
        for sub in ("pid", "logs", "out"):
            (home / sub).mkdir()
        (home / ".pg_chameleon" / "configuration" / "default.yml").write_text(CONFIG.format(
            home=home, pg_port=pg.port, pg_user=pg.user, pg_password=pg.password, pg_database=database,
            my_port=srv.port, my_user=my_user, my_password=my_password, schema=schema))
        self.user = None
        if os.geteuid() == 0:
            self.user = "postgres"
            for path in [home, *home.rglob("*")]:
                shutil.chown(path, "postgres")
        self._replica: subprocess.Popen | None = None

    def _cmd(self, *args: str) -> list[str]:
        cmd = [str(self.script), *args, "--config", "default"]
        env = ["env", f"HOME={self.home}", "PYTHONDONTWRITEBYTECODE="]
        return (["runuser", "-u", self.user, "--"] if self.user else []) + env + cmd

    def run(self, *args: str) -> float:
        """Run ``chameleon <args>`` to its end; returns its seconds (the whole process). Raises SystemExit when
        it fails (its output and log's tail)."""
        t0 = time.perf_counter()
        done = subprocess.run(self._cmd(*args), capture_output=True, text=True, cwd=self.home, timeout=900)
        seconds = time.perf_counter() - t0
        logs = "".join(p.read_text(errors="replace")[-2000:] for p in (self.home / "logs").glob("*.log"))
        if done.returncode != 0 or "Traceback" in done.stdout + done.stderr:
            raise SystemExit(f"chameleon {' '.join(args)} failed ({done.returncode}): {done.stdout[-2000:]}"
                             f"{done.stderr[-2000:]}\n{logs}")
        return seconds

    def setup(self) -> None:
        """Its replica schema and the source (not timed)."""
        self.run("create_replica_schema")
        self.run("add_source", "--source", SOURCE)

    def init_replica(self) -> float:
        """Seconds of ``init_replica`` (its initial copy) in the foreground (``--debug``: else it goes on in a
        process of its own), the whole process."""
        return self.run("init_replica", "--source", SOURCE, "--debug")

    def start_replica(self) -> None:
        """``start_replica`` in the foreground (``--debug``), in a process group of its own."""
        self._replica = subprocess.Popen(self._cmd("start_replica", "--source", SOURCE, "--debug"),
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.home,
                                         start_new_session=True)

    def replica_running(self) -> bool:
        return self._replica is not None and self._replica.poll() is None

    def stop_replica(self) -> None:
        """End the replica's process group (the one :meth:`start_replica` made), and mark it stopped."""
        if self._replica is not None:
            if self._replica.poll() is None:
                os.killpg(self._replica.pid, signal.SIGTERM)
                try:
                    self._replica.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(self._replica.pid, signal.SIGKILL)
                    self._replica.wait(30)
            self._replica = None
            # a replica ended by a signal stays "running" in its catalog, and start_replica would refuse
            self.pg.psql(f"UPDATE sch_chameleon.t_sources SET enm_status = 'stopped' WHERE t_source = '{SOURCE}'",
                         self.database)

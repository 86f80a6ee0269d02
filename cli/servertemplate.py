"""The initialised data directory a :class:`binlogd.cli.localserver.LocalServer` copies, and the options its
server starts with, per flavour.

The template (system tables, the users ``root`` with an empty password and ``repl``/``replpass``, no binary
logs) is built once per server version and set of :data:`INIT_OPTIONS`, in the temp dir, under a lock: MariaDB's
with ``mariadb-install-db``, MySQL's with ``mysqld --initialize-insecure``. :func:`flavour_args` are the
options only one flavour has: MariaDB's replica options; MySQL's GTIDs on (``gtid_mode=ON``,
``enforce_gtid_consistency=ON``), no X plugin, and ``--secure-file-priv=`` (the defaults name directories a
private server does not have). Stdlib only; failures raise :class:`ServerSetupError`.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from binlogd.cli._children import forget, spawn
from binlogd.cli.serverbins import ServerBinaries, ServerSetupError

__all__ = ["INIT_OPTIONS", "READY_TIMEOUT", "REPL_PASSWORD", "REPL_USER", "STOP_TIMEOUT", "flavour_args"]

READY_TIMEOUT = 60.0
STOP_TIMEOUT = 60.0
REPL_USER = "repl"
REPL_PASSWORD = "replpass"

_TEMPLATE_REVISION = "2"  # bump when the template's contents (users, options) change
# Options that shape the files mariadb-install-db creates: they must match between the template
# and the server, so they are passed to the installer and are part of the template's cache key.
INIT_OPTIONS = (
    "--innodb-page-size",
    "--innodb_page_size",
    "--innodb-data-file-path",
    "--innodb_data_file_path",
    "--innodb-undo-tablespaces",
    "--innodb_undo_tablespaces",
    "--lower-case-table-names",
    "--lower_case_table_names",
    "--innodb-checksum-algorithm",
    "--innodb_checksum_algorithm",
)
_SETUP_SQL = (
    # no anonymous users, no root@<hostname> (ignored with a warning under --skip-name-resolve)
    "DELETE FROM mysql.global_priv WHERE User = '' OR (User = 'root' AND Host NOT IN"
    " ('localhost', '127.0.0.1', '::1'))",
    "DELETE FROM mysql.proxies_priv WHERE Host NOT IN ('localhost', '127.0.0.1', '::1')",
    "FLUSH PRIVILEGES",
    "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY ''",
    "GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION",
    f"CREATE USER IF NOT EXISTS '{REPL_USER}'@'%' IDENTIFIED BY '{REPL_PASSWORD}'",
    f"GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO '{REPL_USER}'@'%'",
    f"CREATE USER IF NOT EXISTS '{REPL_USER}'@'127.0.0.1' IDENTIFIED BY '{REPL_PASSWORD}'",
    f"GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO '{REPL_USER}'@'127.0.0.1'",
    "FLUSH PRIVILEGES",
)


def flavour_args(bins: ServerBinaries) -> list[str]:
    """The server options of ``bins``' flavour, after the common ones (a server's ``extra_args`` still override)."""
    if bins.flavor == "mariadb":
        return ["--log-slave-updates", "--gtid-strict-mode=OFF", "--skip-slave-start"]
    if bins.version_tuple < (8, 0, 26):
        return ["--log-slave-updates", "--skip-slave-start", "--gtid-mode=ON", "--enforce-gtid-consistency=ON"]
    return ["--log-replica-updates", "--skip-replica-start", "--gtid-mode=ON", "--enforce-gtid-consistency=ON"]


def tail_text(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


def run_sql(
    bins: ServerBinaries,
    statement: str,
    *,
    host: str | None = None,
    port: int | None = None,
    unix_socket: Path | None = None,
    user: str = "root",
    password: str = "",
    database: str | None = None,
    timeout: float = 60.0,
) -> list[tuple]:
    """Run one statement via PyMySQL if importable, else the mariadb/mysql CLI (-N -B)."""
    try:
        import pymysql
    except ImportError:
        pymysql = None
    if pymysql is not None:
        kw: dict = dict(user=user, password=password, database=database, autocommit=True,
                        connect_timeout=min(timeout, 30), read_timeout=timeout,
                        write_timeout=timeout)
        if unix_socket is not None:
            kw["unix_socket"] = str(unix_socket)
        else:
            kw.update(host=host, port=port)
        conn = pymysql.connect(**kw)
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
                rows = cur.fetchall()
                return [tuple(r) for r in rows] if rows else []
        finally:
            conn.close()
    if bins.client is None:
        raise ServerSetupError("neither PyMySQL nor the mariadb/mysql client is available")
    cmd = [*bins.command(bins.client), "--no-defaults", "-N", "-B", f"--user={user}"]
    if password:
        cmd.append(f"--password={password}")
    if unix_socket is not None:
        cmd.append(f"--socket={unix_socket}")
    else:
        cmd += ["--protocol=TCP", f"--host={host}", f"--port={port}"]
    if database:
        cmd.append(f"--database={database}")
    cmd += ["-e", statement]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise ServerSetupError(f"SQL failed: {statement!r}: {proc.stderr.strip()}")
    return [
        tuple(None if v == "NULL" else v for v in line.split("\t"))
        for line in proc.stdout.splitlines()
    ]


# --------------------------------------------------------------------------- template


def short_socket_path(preferred: Path) -> tuple[Path, Path | None]:
    """Unix socket paths are limited to ~107 bytes; fall back to a short temp dir."""
    if len(os.fsencode(preferred)) < 100:
        return preferred, None
    d = Path(tempfile.mkdtemp(prefix="bld-sock-", dir="/tmp"))
    return d / "mysqld.sock", d


def _common_options(bins: ServerBinaries, basedir: Path) -> list[str]:
    """Options shared by the installer, the template's setup start and the server."""
    redo = ("--innodb-redo-log-capacity=32M" if bins.flavor == "mysql" and bins.version_tuple >= (8, 0, 30)
            else "--innodb-log-file-size=16M")  # MySQL 9 has no innodb_log_file_size
    args = [f"--tmpdir={basedir / 'tmp'}", "--innodb-buffer-pool-size=64M", redo, "--innodb-log-buffer-size=8M"]
    if bins.flavor == "mysql":  # its defaults name a directory and a port a private server does not have
        args += ["--secure-file-priv=", "--mysqlx=OFF"]
    if os.geteuid() == 0:
        args.append("--user=root")
    return args


def base_args(bins: ServerBinaries, datadir: Path, basedir: Path) -> list[str]:
    # --no-defaults first: never read /etc/mysql/my.cnf, we are not the system server
    return [*bins.command(bins.server), "--no-defaults", *bins.server_args, f"--datadir={datadir}",
            *_common_options(bins, basedir)]


def _template_dir(bins: ServerBinaries, init_args: Sequence[str]) -> Path:
    key = hashlib.sha256(
        "\0".join([_TEMPLATE_REVISION, str(bins.server), bins.version, *init_args]).encode()
    ).hexdigest()[:12]
    root = Path(tempfile.gettempdir()) / f"binlogd-localserver-{os.geteuid()}"
    root.mkdir(mode=0o700, exist_ok=True)
    return root / f"template-{bins.flavor}-{bins.version}-{key}"


def ensure_template(bins: ServerBinaries, init_args: Sequence[str]) -> Path:
    """An initialised datadir with our users and no binary logs, built once and then copied."""
    target = _template_dir(bins, init_args)
    if (target / ".complete").exists():
        return target
    with open(str(target) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same template
        if (target / ".complete").exists():
            return target
        build = Path(tempfile.mkdtemp(prefix="build-", dir=target.parent))
        try:
            _build_template(bins, build, init_args)
            data = build / "data"
            (data / ".complete").write_text(bins.version + "\n")
            if target.exists():
                shutil.rmtree(target)
            data.rename(target)
        finally:
            shutil.rmtree(build, ignore_errors=True)
    return target


def _build_template(bins: ServerBinaries, build: Path, init_args: Sequence[str]) -> None:
    datadir = build / "data"
    (build / "tmp").mkdir()
    log = build / "init.log"
    base = base_args(bins, datadir, build)
    if bins.flavor == "mariadb":
        if bins.install_db is None:
            raise ServerSetupError("mariadb-install-db not found (install mariadb-server)")
        cmd = [
            str(bins.install_db),
            "--no-defaults",
            *bins.install_args,
            f"--datadir={datadir}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            "--skip-name-resolve",
            *_common_options(bins, build),
            *init_args,
        ]
    else:
        cmd = [*base, "--initialize-insecure", *init_args]
    with open(log, "wb") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=300)
    if proc.returncode != 0:
        raise ServerSetupError(
            f"initialising the datadir failed ({proc.returncode}): {' '.join(cmd)}\n{tail_text(log)}"
        )
    # Start once without networking or binary log to create the users, then shut down cleanly.
    sock, sockdir = short_socket_path(build / "init.sock")
    err = build / "init-error.log"
    cmd = [*base, *init_args, "--skip-networking", f"--socket={sock}", "--skip-log-bin",
           f"--pid-file={build / 'init.pid'}", f"--log-error={err}"]
    proc = spawn(cmd, build / "init-stdout.log")
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            if proc.poll() is not None:
                raise ServerSetupError(
                    f"template server exited with {proc.returncode}: {' '.join(cmd)}\n{tail_text(err)}"
                )
            if sock.exists():
                try:
                    run_sql(bins, "SELECT 1", unix_socket=sock, timeout=10)
                    break
                except Exception:
                    pass
            if time.monotonic() > deadline:
                raise ServerSetupError(f"template server not ready in {READY_TIMEOUT}s\n{tail_text(err)}")
            time.sleep(0.05)
        for stmt in _SETUP_SQL:
            if bins.flavor == "mysql" and "global_priv" in stmt:
                stmt = stmt.replace("mysql.global_priv", "mysql.user")
            run_sql(bins, stmt, unix_socket=sock)
        proc.send_signal(signal.SIGTERM)
        proc.wait(STOP_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        forget(proc)
        if sockdir is not None:
            shutil.rmtree(sockdir, ignore_errors=True)
    for leftover in ("ibtmp1", "init.pid"):
        (datadir / leftover).unlink(missing_ok=True)

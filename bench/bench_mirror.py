"""PostgreSQL mirror benchmark against pg_chameleon 2.0.21, measured in the same run on the same backlog.

``python -m bench.bench_mirror [--rows 200000] [--update 50000] [--rounds 3] [--chameleon-venv /tmp/pgch-venv]
[--json]``
starts a throwaway MariaDB (``binlog_row_metadata=FULL``: pg_chameleon needs the column names) and PostgreSQL
(:mod:`tests.support.brokers`, with a password: pg_chameleon needs one), writes a 5-column table of ``--rows``
rows in 1,000-row transactions, and times, each as a whole process:

- "snapshot": ``binlogd run`` with ``[snapshot] mode = "initial"`` from its start until it logs the snapshot
  done, against pg_chameleon's ``init_replica`` (each into a database of its own);
- "insert": ``binlogd run`` on the binlog of those inserts, from its start until its checkpoint covers them
  (no peer: pg_chameleon's init_replica copied the rows);
- "update": one ``--update``-row UPDATE, then ``binlogd run`` from its checkpoint until its checkpoint covers it,
  against pg_chameleon's ``start_replica`` from its start until its copy shows every updated row.

The snapshot and the update run ``--rounds`` times, binlogd and pg_chameleon in turn (who goes first alternates),
and each one's best round is its figure (every round's seconds are in ``--json``). In the same rounds PostgreSQL
alone does the work that bounds both phases (:func:`postgres_alone`: the COPY of the rows, the UPDATE as the
mirror applies it), and binlogd's ratio to it is printed beside the one to pg_chameleon.

Every mirror is checked equal to the source, value by value (EXCEPT ALL both ways in PostgreSQL). pg_chameleon
runs from a venv (:mod:`bench.chameleon`, made when missing); ``--no-chameleon`` leaves it out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CREATE = ("CREATE TABLE bench_m.t (id INT PRIMARY KEY, a INT NOT NULL, b VARCHAR(64), c DECIMAL(12,4), "
          "d DATETIME(6))")
PG_PASSWORD = "bench-pw"
MY_USER, MY_PASSWORD = "pgch", "pgch-pw"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def file_key(name: str) -> int:
    return int(name.rsplit(".", 1)[1])


def binlog_file(conn) -> str:
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        return cur.fetchone()[0]


def binlogd_cmd(srv, url: str, checkpoint: Path, **more: str) -> list[str]:
    """``binlogd run`` into the mirror at ``url`` with its checkpoint at ``checkpoint``."""
    sets = {"source.host": "127.0.0.1", "source.port": str(srv.port), "source.user": srv.repl_user,
            "source.password": srv.repl_password, "checkpoint.path": str(checkpoint), "sink.kind": "mirror",
            "sink.mirror.url": url, "metrics.listen": "", "filters.include_schemas": "bench_m", **more}
    return [sys.executable, "-m", "binlogd.cli", "run"] + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]


def warm_bytecode() -> None:
    """binlogd's modules and those its mirror path imports compiled into the bytecode cache of
    :func:`bench.decode.bytecode_env` (binlogd runs as an installed package does, as pg_chameleon from its venv)."""
    import binlogd
    from bench.decode import bytecode_env

    env = bytecode_env()
    package = str(Path(binlogd.__file__).parent)
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-x", "/tests?/|/bench/", package], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-c", "import binlogd.cli, binlogd.daemon.service, binlogd.daemon.sinks.mirror, "
                    "binlogd.daemon.snapshot.initial, psycopg, aiomysql, pymysql"], check=True, env=env)


def timed(cmd: list[str], errlog: Path, done) -> float:
    """Seconds from starting ``cmd`` (with compiled bytecode) until ``done(log text)`` is true (then it is
    stopped)."""
    from bench.decode import bytecode_env

    with open(errlog, "a+") as err:
        start = err.tell()
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=bytecode_env())
        try:
            while True:
                err.seek(start)
                if done(err.read()):
                    return time.perf_counter() - t0
                if proc.poll() is not None or time.perf_counter() - t0 > 600:
                    err.seek(start)
                    raise SystemExit(f"binlogd did not get there (exit {proc.poll()}): {err.read()[-3000:]}")
                time.sleep(0.002)
        finally:
            proc.terminate()
            proc.wait(60)


def run_mirror(srv, url: str, first: str, target: str, workdir: Path) -> float:
    """Seconds from ``binlogd run`` (from ``first``:4 or its checkpoint) until its checkpoint reaches ``target``."""
    checkpoint = workdir / "checkpoint.json"

    def caught_up(_text: str) -> bool:
        try:
            position = json.loads(checkpoint.read_bytes())["position"]
        except (FileNotFoundError, ValueError):
            return False
        return file_key(position["file"]) >= file_key(target)

    cmd = binlogd_cmd(srv, url, checkpoint, **{"source.start": f"file:{first}:4"})
    return timed(cmd, workdir / "binlogd.log", caught_up)


def run_snapshot(srv, url: str, workdir: Path) -> float:
    """Seconds from ``binlogd run`` with an initial snapshot (its checkpoint in the new ``workdir``) until it
    logs the snapshot done."""
    workdir.mkdir()
    cmd = binlogd_cmd(srv, url, workdir / "snapshot.json", **{"snapshot.mode": "initial"})
    return timed(cmd, workdir / "snapshot.log", lambda text: "snapshot: done" in text)


def check_equal(srv, url: str, table: str = "bench_m.t") -> None:
    """The mirror's ``table`` holds the source's rows, value by value (compared in PostgreSQL, each column cast
    to the source's type)."""
    import psycopg

    conn = srv.connect(init_command="SET time_zone = '+00:00'")
    with conn.cursor() as cur:
        cur.execute("SELECT id, a, b, c, DATE_FORMAT(d, '%Y-%m-%d %H:%i:%s.%f') FROM bench_m.t")
        rows = cur.fetchall()
    conn.close()
    with psycopg.connect(url) as pconn:
        pconn.execute("CREATE TEMP TABLE src (id int, a int, b text, c numeric(12,4), d timestamp(6))")
        with pconn.cursor().copy("COPY src FROM STDIN") as copy:
            for r in rows:
                copy.write_row(r)
        mirror = f"(SELECT id::int, a::int, b::text, c::numeric(12,4), d::timestamp(6) FROM {table})"
        diff = pconn.execute(f"SELECT count(*) FROM ((SELECT * FROM src EXCEPT ALL {mirror}) UNION ALL "
                             f"({mirror} EXCEPT ALL SELECT * FROM src)) x").fetchone()[0]
    if diff:
        raise SystemExit(f"the mirror at {url} ({table}) differs from the source in {diff} rows")


def updated(url: str, rows: int, mark: str) -> bool:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM bench_m.t WHERE b LIKE %s", (mark + "%",)).fetchone()[0] >= rows


def replay_seconds(peer, url: str, rows: int, mark: str) -> float:
    """Seconds from pg_chameleon's ``start_replica`` until its copy shows all ``rows`` rows updated (their ``b``
    starting with ``mark``)."""
    t0 = time.perf_counter()
    peer.start_replica()
    try:
        while not updated(url, rows, mark):
            if not peer.replica_running() or time.perf_counter() - t0 > 900:
                raise SystemExit("pg_chameleon's replica ended or did not apply the UPDATE in 900 s")
            time.sleep(0.02)
        return time.perf_counter() - t0
    finally:
        peer.stop_replica()


def seed(srv, rows: int) -> None:
    conn = srv.connect(autocommit=False)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE bench_m")
        cur.execute(CREATE)
        for start in range(0, rows, 1000):
            ids = range(start, min(start + 1000, rows))
            cur.execute("INSERT INTO bench_m.t VALUES " + ",".join(
                f"({i}, {i * 7 % 1000003}, 'row {i} {'x' * (i % 40)}', {i % 99999}.{i % 10000:04d}, "
                f"'2024-01-01 00:00:00' + INTERVAL {i} SECOND)" for i in ids))
            conn.commit()
        cur.execute(f"CREATE USER '{MY_USER}'@'%' IDENTIFIED BY '{MY_PASSWORD}'")
        cur.execute(f"GRANT ALL ON *.* TO '{MY_USER}'@'%'")
        cur.execute("FLUSH BINARY LOGS")
    conn.close()


def source_rows(srv) -> list[tuple]:
    """The source table's rows in key order, each value as text (DATETIME with its 6 digits, in UTC)."""
    conn = srv.connect(init_command="SET time_zone = '+00:00'")
    with conn.cursor() as cur:
        cur.execute("SELECT id, a, b, c, DATE_FORMAT(d, '%Y-%m-%d %H:%i:%s.%f') FROM bench_m.t ORDER BY id")
        rows = cur.fetchall()
    conn.close()
    return rows


def postgres_alone(url: str, rows: list[tuple], update: int, r: int) -> tuple[float, float]:
    """PostgreSQL's own seconds for the work of the snapshot and of the update, the bound of the mirror's (the
    COPY text made before the clock starts): the rows COPYed into a new table with its key, 10,000 a
    transaction as the snapshot commits its chunks; then the ``update`` rows' new values applied as the mirror
    applies a batch (COPY into a temporary table, one ``UPDATE ... FROM``; 10,000 a batch, one transaction)."""
    import psycopg

    from binlogd.library.pgtypes import copy_field

    def text(values) -> bytes:
        return "".join("\t".join(copy_field(None if v is None else str(v)) for v in row) + "\n"
                       for row in values).encode()

    chunks = [text(rows[k:k + 10_000]) for k in range(0, len(rows), 10_000)]
    new = [text((i, a + 1, "u" + b) for i, a, b, _c, _d in rows[k:min(k + 10_000, update)])
           for k in range(0, update, 10_000)]
    with psycopg.connect(url) as conn:
        conn.execute(f"CREATE TABLE bound{r} (id integer PRIMARY KEY, a integer NOT NULL, b text, c numeric(12,4), "
                     "d timestamp(6))")
        conn.commit()
        t0 = time.perf_counter()
        for data in chunks:
            with conn.cursor().copy(f"COPY bound{r} FROM STDIN") as copy:
                copy.write(data)
            conn.commit()
        t1 = time.perf_counter()
        for data in new:
            conn.execute(f"CREATE TEMP TABLE s ON COMMIT DROP AS SELECT id, a, b FROM bound{r} WITH NO DATA")
            with conn.cursor().copy("COPY s FROM STDIN") as copy:
                copy.write(data)
            conn.execute(f"UPDATE bound{r} AS t SET a = s.a, b = s.b FROM s WHERE t.id = s.id")
            conn.execute("DROP TABLE s")
        conn.commit()
        return t1 - t0, time.perf_counter() - t1


def phase(rows: int, seconds: list[float]) -> dict:
    """A phase's figures: the best of its rounds' ``seconds``, and every round's."""
    best = min(seconds)
    return {"rows": rows, "seconds": round(best, 3), "rows_per_s": round(rows / best),
            "rounds": [round(x, 3) for x in seconds]}


def bench(args, srv, pg, tmp: Path) -> dict:
    """Every phase of the module docstring, binlogd's and pg_chameleon's, the snapshot and the update in
    ``args.rounds`` interleaved rounds (who goes first alternates); each mirror checked equal at the end."""
    from bench.chameleon import Chameleon, ensure_venv

    out: dict = {"binlogd": {}, "pg_chameleon": {}, "postgresql": {}}
    times: dict = {(who, name): [] for who in out for name in ("snapshot", "update")}
    warm_bytecode()
    first = binlog_file(srv.connect())
    seed(srv, args.rows)
    conn = srv.connect(autocommit=False)
    target = binlog_file(conn)
    base = pg.url.rsplit("/", 1)[0]
    pg.psql(f"CREATE DATABASE pgch OWNER {pg.user}")
    peer = None
    if args.chameleon:
        peer = Chameleon(ensure_venv(Path(args.chameleon_venv)), tmp / "pgch", pg, "pgch", srv, MY_USER,
                         MY_PASSWORD, "bench_m")
        peer.setup()
    rows = source_rows(srv)
    for r in range(args.rounds):
        pg.psql(f"CREATE DATABASE snap{r} OWNER {pg.user}")
        for who in (("binlogd", "pg_chameleon", "postgresql") if r % 2 else ("pg_chameleon", "postgresql", "binlogd")):
            if who == "postgresql":
                log(f"round {r + 1}: PostgreSQL alone: COPY of {args.rows} rows, UPDATE of {args.update}")
                for name, seconds in zip(("snapshot", "update"), postgres_alone(pg.url, rows, args.update, r)):
                    times[who, name].append(seconds)
            elif who == "binlogd":
                log(f"round {r + 1}: {args.rows} rows: binlogd initial snapshot")
                times[who, "snapshot"].append(run_snapshot(srv, f"{base}/snap{r}", tmp / f"snap{r}"))
                check_equal(srv, f"{base}/snap{r}")
            elif peer is not None:
                log(f"round {r + 1}: {args.rows} rows: pg_chameleon init_replica")
                times[who, "snapshot"].append(peer.init_replica())
                check_equal(srv, f"{base}/pgch")
    log(f"backlog: {args.rows} inserts; binlogd mirroring")
    out["binlogd"]["insert"] = phase(args.rows, [run_mirror(srv, pg.url, first, target, tmp)])
    for r in range(args.rounds):
        mark = "u" * (r + 1)
        with conn.cursor() as cur:
            cur.execute(f"UPDATE bench_m.t SET a = a + 1, b = CONCAT('u', b) WHERE id < {args.update}")
            conn.commit()
            cur.execute("FLUSH BINARY LOGS")
        target = binlog_file(conn)
        for who in (("binlogd", "pg_chameleon") if r % 2 else ("pg_chameleon", "binlogd")):
            if who == "binlogd":
                log(f"round {r + 1}: one {args.update}-row UPDATE; binlogd mirroring")
                times[who, "update"].append(run_mirror(srv, pg.url, first, target, tmp))
                if not updated(pg.url, args.update, mark):
                    raise SystemExit("binlogd's mirror does not show the UPDATE")
            elif peer is not None:
                log(f"round {r + 1}: one {args.update}-row UPDATE; pg_chameleon start_replica")
                times[who, "update"].append(replay_seconds(peer, f"{base}/pgch", args.update, mark))
    conn.close()
    check_equal(srv, pg.url)
    if peer is not None:
        check_equal(srv, f"{base}/pgch")
    for (who, name), seconds in times.items():
        if seconds:
            out[who][name] = phase(args.rows if name == "snapshot" else args.update, seconds)
    out["equal"] = True
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--update", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the snapshot and the update")
    ap.add_argument("--chameleon-venv", default="/tmp/pgch-venv")
    ap.add_argument("--no-chameleon", dest="chameleon", action="store_false")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from binlogd.cli.localserver import LocalServer
    from tests.support.brokers import PostgresServer

    # FULL metadata: pg_chameleon's python-mysql-replication names no columns without it (binlogd's mirror
    # takes its definitions from the schema history either way)
    server_args = ["--binlog-format=ROW", "--binlog-row-metadata=FULL", "--innodb-buffer-pool-size=256M"]
    with LocalServer(extra_args=server_args) as srv, PostgresServer(password=PG_PASSWORD) as pg, \
            tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        out = bench(args, srv, pg, Path(tmp))
    out["machine"] = {"cpus": os.cpu_count(), "load": os.getloadavg(), "python": platform.python_version(),
                      "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{out['machine']['date']}, {os.cpu_count()} CPUs, load {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for name in ("snapshot", "insert", "update"):
        ours, theirs, bound = out["binlogd"][name], out["pg_chameleon"].get(name), out["postgresql"].get(name)
        line = f"{name:8} {ours['rows']:>7} rows  binlogd {ours['seconds']:>7.2f} s {ours['rows_per_s']:>8} rows/s"
        if theirs:
            line += (f"  pg_chameleon {theirs['seconds']:>7.2f} s {theirs['rows_per_s']:>7} rows/s  "
                     f"ratio {theirs['seconds'] / ours['seconds']:.1f}x")
        if bound:
            line += f"  PostgreSQL alone {bound['seconds']:>5.2f} s (binlogd {bound['seconds'] / ours['seconds']:.2f}x)"
        print(line)
    print("every mirror equal to the source: yes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

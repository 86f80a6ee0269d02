"""Bus-sink benchmark (issue 28): ``binlogd run`` into Redis Streams, NATS JetStream and PostgreSQL against the
JSON-lines sink, on the same backlog, in the same run.

``python -m bench.bus [--rows N] [--repeat 2] [--kinds redis,nats,postgres] [--snapshot] [--compare PYTHON]
[--json]``:

1. starts a throwaway MariaDB and writes :func:`bench.decode.write_workload`'s backlog (``--rows`` inserts in
   500-row transactions, then rows/10 updates and rows/20 deletes), and private brokers on free ports
   (:mod:`tests.support.brokers`: redis-server with ``appendfsync always``, ``nats-server -js`` with file
   storage, PostgreSQL);
2. per round, for jsonl and each bus sink: ``binlogd run`` from the first binlog file, timed from the process
   start until its checkpoint reaches the last file (everything durably in the sink), with the broker
   emptied before;
3. checks every sink received every row change (jsonl: lines; Redis: XLEN; NATS: the stream's message
   count; PostgreSQL: ``count(*)``), exits 1 if not;
4. for each, also the broker alone (binlogd not running): the jsonl run's lines, in commits of ~8 MB as
   binlogd makes them, sent as the sink sends them with every request packed beforehand
   (:func:`broker_alone`), which is as fast as a sink can be on this machine;
5. prints rows/s (best of the rounds) and each one's ratio to jsonl (target: 0.5 or more).

``--snapshot`` times an initial snapshot of the workload's table instead (``[snapshot] mode = "initial"``, from
process start until ``snapshot: done``; every row read once into each sink), without the brokers alone.
``--compare PYTHON`` also times the same runs of another installation (another commit's venv: its ``python``)
in the same rounds, as "<sink> (compare)", and prints this tree's speed over the other's per sink.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.cdc import _server_ids, file_key
from bench.decode import SCHEMA, SERVER_ARGS, TABLE, bytecode_env, log, machine, write_workload

KINDS = ("redis", "nats", "postgres")


def empty(kind: str, broker) -> None:
    """Remove what an earlier run left in ``broker``."""
    if kind == "redis":
        import redis

        r = redis.Redis.from_url(broker.url)
        r.flushall()
        r.close()
    elif kind == "postgres":
        broker.psql("DROP TABLE IF EXISTS binlogd_changes, binlogd_changes_checkpoint", database=broker.database)
    else:
        import nats

        async def go():
            nc = await nats.connect(broker.url)
            try:
                await nc.jetstream().delete_stream("BINLOGD")
            except Exception:  # noqa: BLE001 (absent the first time)
                pass
            await nc.close()

        asyncio.run(go())


def count(kind: str, broker) -> int:
    """Messages the broker holds for the benchmark's table."""
    if kind == "redis":
        import redis

        r = redis.Redis.from_url(broker.url)
        try:
            return r.xlen(f"binlogd:{SCHEMA}.{TABLE}")
        finally:
            r.close()
    if kind == "postgres":
        return int(broker.psql("SELECT count(*) FROM binlogd_changes", database=broker.database).strip())
    import nats

    async def go():
        nc = await nats.connect(broker.url)
        try:
            subject = f"binlogd.{SCHEMA}.{TABLE}"  # the checkpoint messages left out
            info = await nc.jetstream().stream_info("BINLOGD", subjects_filter=subject)
            return (info.state.subjects or {}).get(subject, 0)
        finally:
            await nc.close()

    return asyncio.run(go())


ALONE = ("redis", "nats", "postgres")
COMMIT_BYTES = 8 << 20  # a commit of the broker-alone runs: about what binlogd commits while busy


def commits(changes: Path) -> list[list[bytes]]:
    """The jsonl sink's change lines (without newlines) under ``changes``, in commits of ~COMMIT_BYTES."""
    out, cur, size = [], [], 0
    for path in sorted(changes.glob("changes-*.jsonl")):
        for line in path.read_bytes().splitlines():
            cur.append(line)
            size += len(line)
            if size >= COMMIT_BYTES:
                out.append(cur)
                cur, size = [], 0
    return out + ([cur] if cur else [])


def broker_alone(kind: str, broker, batches: list[list[bytes]]) -> float:
    """Seconds the broker alone takes to commit ``batches`` as the sink does (binlogd not running; the
    requests packed beforehand). Redis: each batch one MULTI of XADDs and a SET, EXEC, all pipelined; NATS:
    each message an HPUB with the sink's headers (its expected last sequence too) into a new stream with file
    storage, all sent at once, until the stream holds them all; PostgreSQL: each batch one COPY (text
    format, the sink's columns) and the checkpoint upsert, COMMIT."""
    from binlogd.daemon.sinks.frames import py_nats_hpubs
    from binlogd.daemon.sinks.postgres import copy_text

    empty(kind, broker)
    if kind in ("redis", "nats"):
        import socket

        host, port = broker.url.split("//")[1].split("/")[0].rsplit("@", 1)[-1].split(":")
    if kind == "redis":

        def pack(*parts: bytes) -> bytes:
            return b"".join([b"*%d\r\n" % len(parts), *[b"$%d\r\n%b\r\n" % (len(x), x) for x in parts]])

        stream = f"binlogd:{SCHEMA}.{TABLE}".encode()
        data = b"".join(pack(b"MULTI") + b"".join(pack(b"XADD", stream, b"*", b"change", c) for c in batch)
                        + pack(b"SET", b"checkpoint", b"%d" % i) + pack(b"EXEC") for i, batch in enumerate(batches))
        data += pack(b"PING")
        with socket.create_connection((host, int(port))) as sock:
            t0 = time.perf_counter()
            sock.sendall(data)
            tail = b""
            while not tail.endswith(b"+PONG\r\n"):
                chunk = sock.recv(1 << 20)
                if not chunk:
                    raise SystemExit("redis closed the connection")
                tail = tail[-16:] + chunk
            return time.perf_counter() - t0
    if kind == "nats":
        data, seq = [], 0
        for batch in batches:
            data.append(py_nats_hpubs(f"binlogd.{SCHEMA}.{TABLE}".encode(), 1, b"binlog.000001:4:0", seq, seq,
                                      b"".join(c + b"\n" for c in batch), len(batch)))
            seq += len(batch)
        asyncio.run(_nats_stream(broker, 0))  # created as the sink creates it
        with socket.create_connection((host, int(port))) as sock:
            sock.recv(1 << 16)  # INFO
            sock.sendall(b'CONNECT {"verbose":false,"headers":true}\r\nPING\r\n')
            t0 = time.perf_counter()
            sock.sendall(b"".join(data))
            asyncio.run(_nats_stream(broker, seq))
            return time.perf_counter() - t0
    import psycopg

    meta = (SCHEMA, TABLE, "binlog.000001", 4, 0, None, "insert", 1, "binlog.000001:4:0")
    pieces = [copy_text([(meta, b"".join(c + b"\n" for c in batch), len(batch))]) for batch in batches]
    with psycopg.connect(broker.url) as conn:
        from binlogd.daemon.sinks.postgres import _CREATE, _CREATE_CP

        conn.execute(_CREATE.format(t="binlogd_changes"))
        conn.execute(_CREATE_CP.format(c="binlogd_changes_checkpoint"))
        conn.commit()
        t0 = time.perf_counter()
        for i, piece in enumerate(pieces):
            with conn.cursor() as cur:
                with cur.copy("COPY binlogd_changes (change, source_file, source_pos, source_row, gtid, "
                              "schema_name, table_name, op, server_id) FROM STDIN") as copy:
                    copy.write(piece)
                cur.execute("INSERT INTO binlogd_changes_checkpoint VALUES (true, %s) ON CONFLICT (id) "
                            "DO UPDATE SET checkpoint = excluded.checkpoint", (json.dumps({"n": i}),))
            conn.commit()
        return time.perf_counter() - t0


async def _nats_stream(broker, messages: int) -> None:
    """Create the sink's stream (file storage) when ``messages`` is 0, else wait until it holds that many."""
    import nats
    from nats.js import api

    nc = await nats.connect(broker.url)
    try:
        js = nc.jetstream()
        if not messages:
            await js.add_stream(name="BINLOGD", subjects=["binlogd.>"], storage=api.StorageType.FILE)
        while messages and (await js.stream_info("BINLOGD")).state.messages < messages:
            await asyncio.sleep(0.002)
    finally:
        await nc.close()


def run_bus(kind: str, broker, srv, first_file: str, target: str, workdir: Path, env: dict,
            python: str = sys.executable, snapshot: bool = False) -> float:
    """``binlogd run`` (of the installation ``python`` runs) with the ``kind`` sink (None: jsonl) from
    ``first_file``:4 until its checkpoint reaches ``target``; with ``snapshot``, an initial snapshot of the
    workload's schema until the daemon logs ``snapshot: done``."""
    checkpoint = workdir / "checkpoint.json"
    sets = {"source.host": "127.0.0.1", "source.port": str(srv.port), "source.user": srv.repl_user,
            "source.password": srv.repl_password, "source.server_id": str(next(_server_ids)),
            "checkpoint.path": str(checkpoint), "metrics.listen": "", "schema.source": "none",
            **({"sink.kind": kind, f"sink.{kind}.url": broker.url} if kind else
               {"sink.kind": "jsonl", "sink.path": str(workdir / "changes")}),
            **({"snapshot.mode": "initial", "filters.include_schemas": SCHEMA} if snapshot else
               {"source.start": f"file:{first_file}:4"})}
    cmd = [python, "-m", "binlogd.cli", "run"] + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    errlog = open(workdir / "binlogd.log", "w+")
    done = file_key(target)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errlog, env=env)
    try:
        while True:
            if snapshot:
                errlog.seek(0)
                if "snapshot: done" in errlog.read():
                    return time.perf_counter() - t0
                position = None
            else:
                try:
                    position = json.loads(checkpoint.read_bytes())["position"]
                except (FileNotFoundError, ValueError):
                    position = None
            if position is not None and file_key(position["file"]) >= done:
                return time.perf_counter() - t0
            if proc.poll() is not None or time.perf_counter() - t0 > 900:
                errlog.seek(0)
                raise SystemExit(f"binlogd ({kind}) did not catch up (exit {proc.poll()}): {errlog.read()[-3000:]}")
            time.sleep(0.002)
    finally:
        proc.terminate()
        proc.wait(60)
        errlog.close()


def jsonl_lines(directory: Path) -> int:
    """The change lines in a JSON-lines sink directory."""
    total = 0
    for path in directory.glob("changes-*.jsonl"):
        with open(path, "rb") as fh:
            total += sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.bus", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000, help="inserted rows (default 100000)")
    ap.add_argument("--repeat", type=int, default=2, help="rounds (default 2)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="the bus sinks to time, comma-separated (default all)")
    ap.add_argument("--snapshot", action="store_true", help="time an initial snapshot of the table instead")
    ap.add_argument("--compare", metavar="PYTHON", help="also time the binlogd this interpreter runs (another "
                    "commit's venv) in the same rounds")
    ap.add_argument("--json", action="store_true", help="print one JSON object with the figures")
    ns = ap.parse_args(argv)
    kinds = tuple(k for k in ns.kinds.split(",") if k)
    if not kinds or set(kinds) - set(KINDS):
        ap.error(f"--kinds: {ns.kinds!r}: each one of {', '.join(KINDS)}")
    from binlogd.cli.localserver import LocalServer
    from tests.support.brokers import KINDS as BROKERS

    env = bytecode_env(dict(os.environ, BINLOGD_PURE_PYTHON=""))
    started = dt.datetime.now().astimezone()
    work = Path(tempfile.mkdtemp(prefix="binlogd-bus-"))
    pythons = {"": sys.executable, **({" (compare)": ns.compare} if ns.compare else {})}
    times: dict[str, list[float]] = {f"{k}{tag}": [] for k in ("jsonl", *kinds) for tag in pythons}
    times.update({f"{k} alone": [] for k in kinds if k in ALONE and not ns.snapshot})
    brokers, batches = {}, None
    try:
        for kind in kinds:
            brokers[kind] = BROKERS[kind]().start()
        with LocalServer(extra_args=SERVER_ARGS) as srv:
            with srv.connect() as conn:
                expected = sum(write_workload(conn, ns.rows).values())
                if ns.snapshot:
                    with conn.cursor() as cur:
                        cur.execute(f"SELECT COUNT(*) FROM {SCHEMA}.{TABLE}")
                        expected = cur.fetchone()[0]
            files = srv.binlog_files()
            first, target = files[0].name, files[-1].name
            log(f"{'table' if ns.snapshot else 'backlog'}: {expected} row changes, {len(files) - 1} binlog file(s)")
            for python in pythons.values():
                subprocess.run([python, "-c", "import binlogd.cli, binlogd.daemon.service, binlogd.daemon.sinks.redis, "
                                "binlogd.daemon.sinks.nats, binlogd.daemon.sinks.postgres"], check=True, env=env)
            for rnd in range(ns.repeat):
                for kind in ("jsonl", *kinds):
                    for tag, python in pythons.items():
                        broker = brokers.get(kind)
                        if broker is not None:
                            empty(kind, broker)
                        run_dir = work / f"{kind}-{rnd}{tag.strip(' ()')}"
                        run_dir.mkdir()
                        seconds = run_bus(kind if broker else None, broker, srv, first, target, run_dir, env, python,
                                          ns.snapshot)
                        got = count(kind, broker) if broker else jsonl_lines(run_dir / "changes")
                        if kind == "jsonl" and batches is None and not ns.snapshot:
                            batches = commits(run_dir / "changes")
                        shutil.rmtree(run_dir)
                        if got != expected:
                            log(f"{kind}{tag}: {got} changes, not {expected}")
                            return 1
                        times[f"{kind}{tag}"].append(seconds)
                        log(f"round {rnd + 1}: {kind}{tag} {expected / seconds:,.0f} rows/s")
                    if f"{kind} alone" in times:
                        seconds = broker_alone(kind, brokers[kind], batches)
                        got = count(kind, brokers[kind])
                        if got != expected:
                            log(f"{kind} alone: {got} messages, not {expected}")
                            return 1
                        times[f"{kind} alone"].append(seconds)
                        log(f"round {rnd + 1}: {kind} alone {expected / seconds:,.0f} rows/s")
    finally:
        for broker in brokers.values():
            broker.close()
        shutil.rmtree(work, ignore_errors=True)
    return report(ns, expected, times, started)


def report(ns, expected: int, times: dict, started) -> int:
    """Print the figures (one JSON object with ``--json``): rows/s, each one's ratio to jsonl, and with
    ``--compare`` each sink's speed over the other installation's."""
    rate = {k: expected / min(v) for k, v in times.items()}
    result = {"rows": expected, "snapshot": ns.snapshot, "rows_per_s": {k: round(v) for k, v in rate.items()},
              "ratio_to_jsonl": {k: round(rate[k] / rate["jsonl"], 3) for k in rate if not k.startswith("jsonl")},
              "machine": machine(), "date": started.isoformat(timespec="seconds")}
    if ns.compare:
        result.update(compare=ns.compare, ratio_to_compare={k: round(rate[k] / rate[f"{k} (compare)"], 3)
                                                            for k in rate if f"{k} (compare)" in rate})
    if ns.json:
        print(json.dumps(result))
        return 0
    print(f"{expected} row changes{' (initial snapshot)' if ns.snapshot else ''}, best of {ns.repeat} round(s), "
          f"{result['machine']}, {result['date']}")
    for k in rate:
        ratio = "" if k == "jsonl" else f"  {rate[k] / rate['jsonl']:.2f}x jsonl"
        if k in result.get("ratio_to_compare", {}):
            ratio += f"  {result['ratio_to_compare'][k]:.2f}x compare"
        print(f"  {k:20s} {rate[k]:>10,.0f} rows/s{ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

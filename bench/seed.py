"""The schema history's seed from the server, MariaDB against Oracle MySQL, the same tables on both.

``python -m bench.seed [--tables N] [--rounds R] [--mysql-root DIR]``:

1. starts a throwaway MariaDB (the machine's) and a throwaway MySQL (unpacked under ``--mysql-root``, default
   ``~/.cache/binlogd/mysql-9.7``, as ``scripts/fetch-mysql`` leaves it), each with binary logging;
2. creates the same ``--tables`` (200) tables in 10 schemas on both (a few column types, keys, defaults);
3. times, ``--rounds`` (5) times on each, what a seed runs on a new connection of its own
   (:class:`binlogd.daemon.replication.schemaqueries.ServerSchema`: the binlog position, the databases and tables, every
   table's definition, the position again, the DDL since the seed's position), step by step, the two servers
   in turn, and prints each step's median and best and the ratio MySQL / MariaDB of the median totals as JSON.
   ``definitions by SHOW CREATE TABLE`` (not in ``total``): ``SHOW CREATE TABLE`` of each table, what
   :meth:`ServerSchema.definitions` does on MariaDB (and did on MySQL).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

from bench.decode import log, machine

# Every table's columns differ from the other tables' (lengths, precisions, values): no definition repeats.
DDL = ("CREATE TABLE `{db}`.`t{i}` (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT, name VARCHAR({i2}) NOT NULL, "
       "price DECIMAL({p},{s}) DEFAULT NULL, tags SET('a','b','t{i}') DEFAULT NULL, kind ENUM('x','y{i}') NOT NULL "
       "DEFAULT 'x', body TEXT, doc JSON, at DATETIME({f}) DEFAULT CURRENT_TIMESTAMP({f}), code CHAR({c}) "
       "CHARACTER SET latin1, PRIMARY KEY (id), KEY by_name (name))")


def _load(srv, tables: int) -> None:
    conn = srv.connect()
    with conn.cursor() as cur:
        for i in range(tables):
            db = f"seed{i % 10}"
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{db}`")
            cur.execute(DDL.format(db=db, i=i, i2=16 + i % 700, p=10 + i % 20, s=i % 5, f=i % 7, c=1 + i % 200))
            cur.execute(f"INSERT INTO `{db}`.`t{i}` (name, doc) VALUES ('n', '{{\"a\": 1}}')")
    conn.close()


async def _seed_once(srv) -> dict[str, float]:
    """One seed's queries on a new connection, each step's seconds (``connect`` included in ``position``)."""
    from binlogd.daemon.replication import _aiomysql
    from binlogd.daemon.replication.schemaqueries import ServerSchema

    async def connect():
        return await _aiomysql.connect(host=srv.host, port=srv.port, user=srv.user, password=srv.password,
                                       ssl=None, connect_timeout=10)

    server = ServerSchema(connect)
    steps: dict[str, float] = {}
    start = t = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        steps[name] = now - t
        t = now

    try:
        file, pos = await server.position()
        lap("position")
        _, tables = await server.tables(lambda schema, table: schema.startswith("seed"))
        lap("tables")
        definitions = await server.definitions(tables)
        lap("definitions")
        assert len(tables) == len(definitions) and all(d is not None for d in definitions.values())
        each = {name: await server.create_table(*name) for name in tables}
        lap("definitions by SHOW CREATE TABLE")  # the seed's way on MariaDB (and on MySQL before)
        assert each == definitions
        await server.position()
        lap("position again")
        await server.ddl_tables_since(file, pos)
        lap("ddl since")
    finally:
        await server.close()
    steps["total"] = time.perf_counter() - start - steps["definitions by SHOW CREATE TABLE"]
    return steps


def _summary(runs: list[dict[str, float]]) -> dict[str, str]:
    """Each step's median and best of the runs, in ms."""
    return {step: f"{statistics.median(r[step] for r in runs) * 1000:.1f} "
                  f"(best {min(r[step] for r in runs) * 1000:.1f})" for step in runs[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mysql-root", type=Path, default=Path(os.environ.get("XDG_CACHE_HOME")
                                                            or Path.home() / ".cache") / "binlogd" / "mysql-9.7")
    args = ap.parse_args(argv)
    from binlogd.cli.localserver import LocalServer
    from binlogd.cli.serverbins import ServerBinaries

    result: dict = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "tables": args.tables,
                    "rounds": args.rounds, "ms": {}}
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(LocalServer(binaries=bins))
                   for bins in (None, ServerBinaries.from_root(args.mysql_root))]
        for srv in servers:
            log(f"{srv.flavor} {srv.version}: creating {args.tables} tables")
            _load(srv, args.tables)
        runs: list[list[dict[str, float]]] = [[], []]
        for _ in range(args.rounds):  # the two servers in turn, so that a busy spell slows both
            for srv, out in zip(servers, runs):
                out.append(asyncio.run(_seed_once(srv)))
        for srv, out in zip(servers, runs):
            result["ms"][f"{srv.flavor} {srv.version}"] = _summary(out)
    totals = [statistics.median(r["total"] for r in out) for out in runs]
    result["mysql / mariadb (median total)"] = round(totals[1] / totals[0], 2)
    json.dump(result, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Reading the bus sinks back, independently of binlogd's sink code: every change a broker holds, in order.

``read_bus(kind, broker, **cfg)`` returns the change dicts (parsed from the messages) with, under the key
``"_id"``, what identifies the message in the broker (Redis entry id, JetStream sequence and Nats-Msg-Id,
PostgreSQL seq). ``write_jsonl`` puts them in a JSON-lines sink directory so the file sinks' checks
(``tests.support.faults.check_exactly_once``) apply unchanged.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path


def _order(change: dict) -> tuple:
    """The delivery order of a change: its id's (README, "Change identity"), parsed here."""
    head, a, b, row = change["source"]["id"].rsplit(":", 3)
    if head == "snapshot":
        return (0, int(a), int(b), 0, 0, int(row))
    kind, inner = (0, b[1:].replace(".", "")) if b.startswith("c") else (1, b)
    return (1, int(head.rpartition(".")[2]), int(a), kind, int(inner), int(row))


def read_redis(url: str, pattern: str = "binlogd:*", checkpoint_key: str = "binlogd:checkpoint:binlogd") -> list:
    """Every entry of every stream matching ``pattern`` (field ``change``), in binlog order."""
    import redis

    r = redis.Redis.from_url(url)
    out = []
    try:
        for key in r.scan_iter(match=pattern):
            if r.type(key) != b"stream":
                continue
            for entry_id, fields in r.xrange(key):
                assert set(fields) == {b"change"}, f"entry {key!r} {entry_id!r} has fields {sorted(fields)}"
                change = json.loads(fields[b"change"])
                change["_id"] = (key.decode(), entry_id.decode())
                out.append(change)
    finally:
        r.close()
    return sorted(out, key=_order)


def redis_checkpoint(url: str, key: str = "binlogd:checkpoint:binlogd") -> dict | None:
    import redis

    r = redis.Redis.from_url(url)
    try:
        raw = r.get(key)
    finally:
        r.close()
    return json.loads(raw) if raw else None


def read_nats(url: str, stream: str = "BINLOGD") -> list:
    """Every change message of JetStream ``stream`` by sequence (direct gets), with its headers checked; the
    binlogd's own subjects (``_binlogd.``: the checkpoint, the [ha] fences) and deleted sequences are passed over."""
    import nats
    from nats.js.errors import NotFoundError

    async def go():
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            info = await js.stream_info(stream)
            out = []
            for seq in range(info.state.first_seq, info.state.last_seq + 1):
                try:
                    msg = await js.get_msg(stream, seq)
                except NotFoundError:
                    continue
                if msg.subject.startswith("_binlogd."):
                    continue
                change = json.loads(msg.data)
                h = msg.headers or {}
                src = change["source"]
                assert h.get("Binlogd-Source") == src["id"], (seq, h, src)
                assert h.get("Nats-Msg-Id") == f"{src['server_id']}:{src['id']}", (seq, h, src)
                change["_id"] = (seq, h.get("Nats-Msg-Id"))
                out.append(change)
            return out
        finally:
            await nc.close()

    return asyncio.run(go())


def read_postgres(url: str, table: str = "binlogd_changes") -> list:
    """Every row of ``table`` by seq; the columns must agree with the change they hold."""
    import psycopg

    out = []
    with psycopg.connect(url) as conn:
        rows = conn.execute(f"SELECT seq, change::text, source_file, source_pos, source_row, schema_name, "
                            f"table_name, op FROM {table} ORDER BY seq").fetchall()
    for seq, text, file, pos, row, schema, tbl, op in rows:
        change = json.loads(text)
        src = change["source"]
        assert (src["file"], src["pos"], src["row"], change["schema"], change["table"], change["op"]) == \
            (file, pos, row, schema, tbl, op), f"row seq {seq}: columns disagree with its change"
        change["_id"] = seq
        out.append(change)
    return out


def read_bus(kind: str, url: str) -> list:
    """The changes a broker of ``kind`` holds with the default stream/table names."""
    return {"redis": read_redis, "nats": read_nats, "postgres": read_postgres}[kind](url)


def write_jsonl(changes: list, directory: Path) -> Path:
    """``changes`` (without ``_id``) as ``directory/changes-000001.jsonl``; returns the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "changes-000001.jsonl", "w") as fh:
        for c in changes:
            fh.write(json.dumps({k: v for k, v in c.items() if k != "_id"}) + "\n")
    return directory

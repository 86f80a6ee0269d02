"""The mirror's watermarks: for each keyless table an initial snapshot read, the position of the view it was read in.

A table without a primary key is read whole in one read view (daemon/snapshot/initial.py), which may be later
than the position P1 the stream starts from (a resumed snapshot, a renewed view). Its rows then already hold the
stream's changes of that table between P1 and the view, and applied again they would double an insert (no key
to upsert by) or find no row for an update or delete. So the mirror drops the stream's changes of such a table
that begin before its watermark.

The snapshot names the views in its checkpoint state (``read_views``); the worker copies them into
``binlogd_mirror_watermarks`` in the transaction that commits that checkpoint (so with the table's rows), and
deletes a watermark once a committed checkpoint is at or past it (a resume never goes back before it).
"""

from __future__ import annotations

import json

from binlogd.protocol.position import is_before

WATERMARKS = "binlogd_mirror_watermarks"
CREATE = (f"CREATE TABLE IF NOT EXISTS {WATERMARKS} (mysql_schema text, mysql_table text, file text NOT NULL, "
          "pos bigint NOT NULL, PRIMARY KEY (mysql_schema, mysql_table))")


class Watermarks:
    """The watermarks, kept by the worker and read by the consumer.

    Fields:
        at: (MySQL schema, table) → (file, pos) of the view its snapshot rows were read in, as committed. The
            worker replaces the dict whole (never changes it in place); the consumer only reads it.
    """

    def __init__(self):
        self.at: dict[tuple[str, str], tuple[str, int]] = {}

    def covers(self, name: tuple[str, str], file: str, pos: int) -> bool:
        """Whether the stream's change of table ``name`` at ``file``:``pos`` (where its event begins) is in the
        view the table's snapshot rows were read in (so it must not be applied)."""
        mark = self.at.get(name)
        return mark is not None and is_before(file, pos, *mark)

    async def load(self, cur) -> None:
        """Read the committed watermarks (the table created when missing)."""
        await cur.execute(CREATE)
        await cur.execute(f"SELECT mysql_schema, mysql_table, file, pos FROM {WATERMARKS}")
        self.at = {(s, t): (f, int(p)) for s, t, f, p in await cur.fetchall()}

    async def commit(self, cur, checkpoint: bytes) -> None:
        """In the transaction that commits ``checkpoint`` (its JSON): store the views its snapshot state names,
        and delete the watermarks its position is at or past."""
        if not self.at and b'"read_views"' not in checkpoint:
            return
        data = json.loads(checkpoint)
        views = (data.get("snapshot") or {}).get("read_views") or []
        at = dict(self.at)
        for view in views:
            name, mark = (view["table"][0], view["table"][1]), (str(view["file"]), int(view["pos"]))
            if at.get(name) != mark:
                await cur.execute(f"INSERT INTO {WATERMARKS} VALUES (%s, %s, %s, %s) ON CONFLICT (mysql_schema, "
                                  "mysql_table) DO UPDATE SET file = excluded.file, pos = excluded.pos", (*name, *mark))
                at[name] = mark
        if "snapshot" not in data:  # the stream's position: a watermark it is at or past is no longer needed
            file, pos = data["position"]["file"], int(data["position"]["pos"])
            for name, mark in list(at.items()):
                if not is_before(file, pos, *mark):
                    await cur.execute(f"DELETE FROM {WATERMARKS} WHERE mysql_schema = %s AND mysql_table = %s", name)
                    del at[name]
        self.at = at

"""INSERT, UPDATE and DELETE statements for the rows of one table.

A :class:`TablePlan` is built once per TABLE_MAP definition: the table's quoted name, each column's
quoted name and literal renderers, and its primary key. UPDATE and DELETE find a row by its primary
key when the TABLE_MAP names one and the image holds it; otherwise by every column of the image with
``<=>`` (NULL-safe, byte-exact for text) and ``LIMIT 1``.
"""

from __future__ import annotations

from binlogd.library.sqlwriter.sqlerrors import SqlOutError
from binlogd.protocol import events as E
from binlogd.protocol.constants import ColumnType as T

from .literals import ident, is_json_diff, json_diff_sql, renderer


class TablePlan:
    """SQL pieces for one table as one TABLE_MAP describes it.

    Args:
        table_map: the TABLE_MAP. flavor: "mariadb" or "mysql". where: ``FILE:POS``, for errors.
        primary_key: the key's column names from a schema history, used when the TABLE_MAP marks none.
    Fields:
        name: `` `db`.`table` ``. columns: label → Column. pk: the primary key's labels (empty when unknown).
        table_columns: the TABLE_MAP's columns. native: the C writer's compiled images (:mod:`.native`).
    Raises (on construction):
        SqlOutError: the TABLE_MAP names no columns, or a column cannot be rendered exactly.
    """

    def __init__(self, table_map: E.TableMapEvent, flavor: str, where: str, primary_key: tuple[str, ...] = ()):
        label = f"`{table_map.schema}`.`{table_map.table}`"
        if any(c.name is None for c in table_map.columns):
            raise SqlOutError(f"{where}: {label} has no column names in the binlog (it was written with "
                              "binlog_row_metadata other than FULL) and no schema history names them, so no "
                              "SQL for its rows can be sure to be right")
        self.name = ident(table_map.schema) + "." + ident(table_map.table)
        self.table_columns = table_map.columns
        self.native: dict = {}
        self.columns = {c.name: c for c in table_map.columns}
        self.quoted = {c.name: ident(c.name) for c in table_map.columns}
        self.value = {c.name: renderer(c, flavor, f"{where}: {label}.`{c.name}`") for c in table_map.columns}
        self.match = {c.name: renderer(c, flavor, f"{where}: {label}.`{c.name}`", match=True)
                      for c in table_map.columns}
        self.pk = tuple(c.name for c in table_map.columns if c.primary_key)
        if not self.pk and primary_key and all(k in self.columns for k in primary_key):
            self.pk = tuple(primary_key)

    def full(self, row: dict) -> bool:
        """The image holds every column (not a MINIMAL or NOBLOB image) and no JSON diff."""
        return len(row) == len(self.columns) and not any(is_json_diff(v) for v in row.values())

    def keyed(self, row: dict) -> bool:
        """The image finds exactly its row: it holds the whole primary key, or every column."""
        return bool(self.pk) and all(k in row for k in self.pk) or self.full(row)

    def insert(self, rows: list[dict]) -> str:
        """One INSERT of ``rows`` (images of the same columns)."""
        keys = list(rows[0])
        fns = [self.value[k] for k in keys]
        tuples = ["(" + ",".join([f(v) for f, v in zip(fns, row.values())]) + ")" for row in rows]
        return f"INSERT INTO {self.name} ({','.join([self.quoted[k] for k in keys])}) VALUES " + ",".join(tuples)

    def where(self, row: dict) -> str:
        """`` WHERE …`` finding the row of an image (by primary key, else every column and LIMIT 1)."""
        if self.pk and all(k in row for k in self.pk):
            return " WHERE " + " AND ".join([f"{self.quoted[k]}={self.value[k](row[k])}" for k in self.pk])
        return " WHERE " + " AND ".join([f"{self.quoted[k]}<=>{self.match[k](v)}" for k, v in row.items()
                                         if not is_json_diff(v)]) + " LIMIT 1"

    def update(self, before: dict, after: dict) -> str:
        """UPDATE setting the after image's columns on the row of the before image."""
        sets = []
        for k, v in after.items():
            q = self.quoted[k]
            if self.columns[k].type == T.JSON and is_json_diff(v):
                sets.append(f"{q}={json_diff_sql(q, v)}")
            else:
                sets.append(f"{q}={self.value[k](v)}")
        return f"UPDATE {self.name} SET {','.join(sets)}{self.where(before)}"

    def delete(self, row: dict) -> str:
        """DELETE of the row of an image."""
        return f"DELETE FROM {self.name}{self.where(row)}"

    def replay(self, kind: str, rows: list) -> list[str]:
        """The statements that make the changes of one rows event again, in order."""
        if kind == "insert":
            return [self.insert(rows)]
        if kind == "update":
            return [self.update(before, after) for before, after in rows]
        return [self.delete(row) for row in rows]

    def invert(self, kind: str, rows: list) -> list[str] | None:
        """The statements that undo one rows event, newest row first; None when its images cannot
        (MINIMAL or NOBLOB images, JSON diffs without a primary key)."""
        if kind == "insert":
            if not all(self.keyed(row) for row in rows):
                return None
            return [self.delete(row) for row in reversed(rows)]
        if kind == "delete":
            if not all(self.full(row) for row in rows):
                return None
            return [self.insert(list(reversed(rows)))]
        if not all(self.full(before) and self.keyed(after) for before, after in rows):
            return None
        return [self.update(after, before) for before, after in reversed(rows)]

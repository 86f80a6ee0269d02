"""The one entry point from a statement to its column changes: :func:`read_ddl`.

It chooses the parser: :mod:`.fastddl` for plain CREATE DATABASE/TABLE, else :mod:`.ddl` (sqlglot, imported
with the first statement that needs it). Neither parser imports this module, so there is no cycle.
"""

from __future__ import annotations

from .sqltext import ddl_text


def read_ddl(sql: str, default_db: str = "", sql_mode: int = 0, server_version: str = "") -> list:
    """A QUERY event's statement read as :func:`binlogd.library.schema.ddl.parse` reads it (same arguments, same
    change records): [] for no DDL (BEGIN, DML); a plain CREATE DATABASE or CREATE TABLE by
    :func:`binlogd.library.schema.fastddl.parse`; any other DDL by ``ddl.parse_text``, which imports sqlglot (70 ms or
    more) the first time. The change records' modules are imported with the first DDL statement."""
    text = ddl_text(sql, sql_mode, server_version)
    if text is None:
        return []
    from . import fastddl

    changes = fastddl.parse(text, default_db)
    if changes is None:
        from . import ddl

        changes = ddl.parse_text(text, default_db)
    return changes

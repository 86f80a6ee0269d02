"""Schema history: the right column names at every binlog position.

Layers: :mod:`.model` (table definitions, the check against a TABLE_MAP), :mod:`.sqltext` (comments
and statements as the server reads them), :mod:`.ddl` (DDL parsed with sqlglot into the plain change
records of :mod:`.changes`), :mod:`.fastddl` (plain CREATE DATABASE/TABLE read by hand, the same records
without importing sqlglot), :mod:`.catalog` (tables moved forward by those changes), :mod:`.history`
(the JSON-lines file and the stream tracker), :mod:`.cli` (``binlogd schema build``, dump's tracker).
Imports only ``binlogd.protocol`` and sqlglot; no network I/O.
"""

from .history import Entry, HistoryWriter, SchemaHistoryError, SchemaTracker, read_history
from .model import ColumnDef, TableDef, agrees

__all__ = ["ColumnDef", "Entry", "HistoryWriter", "SchemaHistoryError", "SchemaTracker", "TableDef", "agrees",
           "read_history"]

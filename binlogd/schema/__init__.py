"""Schema history: the right column names at every binlog position (issue 15).

Layers: :mod:`.model` (table definitions, the check against a TABLE_MAP), :mod:`.ddl` (DDL parsed
with sqlglot into plain change records), :mod:`.catalog` (tables moved forward by those changes),
:mod:`.history` (the JSON-lines file and the stream tracker). Imports only ``binlogd.protocol``
and sqlglot; no network I/O.
"""

from .history import Entry, HistoryWriter, SchemaHistoryError, SchemaTracker, read_history
from .model import ColumnDef, TableDef, agrees

__all__ = ["ColumnDef", "Entry", "HistoryWriter", "SchemaHistoryError", "SchemaTracker", "TableDef", "agrees",
           "read_history"]

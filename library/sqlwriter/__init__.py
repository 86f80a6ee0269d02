"""SQL for row changes: exact literals (:mod:`.literals`), INSERT/UPDATE/DELETE of one table's rows
(:mod:`.rowsql`, the reference) and the C writer ``binlogd.library._sqlrows`` behind :mod:`.native`."""

from binlogd.library.sqlwriter.sqlerrors import SqlOutError

__all__ = ["SqlOutError"]

"""``binlogd sql``: binlog files as SQL a server executes — point-in-time replay and flashback.

- :mod:`.groups`: files → transactions (:class:`~.groups.Group`), the file sequence check and the range.
- :mod:`.render`: a transaction as SQL: replayed with its logged session context, or inverted.
- :mod:`.rowsql`: INSERT/UPDATE/DELETE for the rows of one table; :mod:`.literals`: exact literals.
- :mod:`.command`: the subcommand's options and run (exit codes 0/1/2, as ``dump``'s).
"""

from .command import add_arguments, run
from .errors import SqlOutError

__all__ = ["SqlOutError", "add_arguments", "run"]

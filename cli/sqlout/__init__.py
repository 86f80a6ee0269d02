"""``binlogd sql``: binlog files as SQL a server executes — point-in-time replay and flashback.

- :mod:`.groups`: files → transactions (:class:`~.groups.Group`), the file sequence check and the range.
- :mod:`.render`: a transaction as SQL: replayed with its logged session context, or inverted.
- :mod:`.command`: the subcommand's options and run (exit codes 0/1/2, as ``dump``'s).

The rows of a transaction are written by :mod:`binlogd.library.sqlwriter` (the C writer and its reference).
"""

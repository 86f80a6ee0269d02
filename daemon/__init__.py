"""The replication daemon (``binlogd run``): connection, stream, position, sinks, metrics, lifecycle."""

if __name__ != "binlogd.daemon":  # the folder daemon/ is installed as binlogd.daemon (pyproject.toml)
    raise ImportError(f"import binlogd.daemon, not {__name__}: daemon/ is part of the binlogd namespace")

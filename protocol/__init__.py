"""binlogd's shared binlog decoder: sans-I/O, bytes in, typed events out.

Nothing in this package opens sockets, files or event loops; the daemon, the
file tools and the Spark data source feed it bytes and take back values.
"""

if __name__ != "binlogd.protocol":  # the folder protocol/ is installed as binlogd.protocol (pyproject.toml)
    raise ImportError(f"import binlogd.protocol, not {__name__}: protocol/ is part of the binlogd namespace")


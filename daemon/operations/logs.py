"""Logging to stderr, plain or JSON lines: one line per connect, rotate, reconnect and error."""

from __future__ import annotations

import json
import logging
import sys
import time


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": round(record.created, 3), "level": record.levelname.lower(), "msg": record.getMessage()}
        out.update(getattr(record, "fields", {}))
        return json.dumps(out, default=str)


def setup_logging(fmt: str = "plain", level: str = "info") -> logging.Logger:
    """Configure the ``binlogd`` logger; returns it."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        formatter = logging.Formatter("%(asctime)s.%(msecs)03dZ %(levelname)s %(message)s", "%Y-%m-%dT%H:%M:%S")
        formatter.converter = time.gmtime
        handler.setFormatter(formatter)
    log = logging.getLogger("binlogd")
    log.handlers[:] = [handler]
    log.setLevel(level.upper())
    log.propagate = False
    return log

"""The bus sinks' per-row framing: one call per block of change payloads makes the requests of all of them.

A *block* is ``lines``, n change payloads each ending in ``\\n`` (a rows event's changes as
:func:`library.debezium.rows_writer` returns them, or a snapshot chunk's as ``Sink.change_lines`` takes them;
JSON never holds a raw newline), and the fields its rows share. Each function returns the bytes of n requests,
one per line, the payload without its newline:

- :func:`redis_xadds`: Redis XADDs in RESP (daemon/sinks/redis.py);
- :func:`nats_hpubs`: NATS HPUBs with binlogd's headers (daemon/sinks/nats.py);
- :func:`copy_rows`: PostgreSQL COPY text-format lines (daemon/sinks/postgres.py).

They run in C (:mod:`binlogd.daemon.sinks._frames`, daemon/sinks/_frames.c) when that extension is built and
``binlogd.protocol.speedups.ENABLED``, else as the Python functions here (``py_*``), which are the reference:
both give the same bytes (tests/unit/test_bus_frames.py). Integers are expected in the C long long range.

Raises (each): ValueError when ``lines`` holds other than exactly n newline-ended lines.
"""

from __future__ import annotations

from binlogd.protocol import speedups

try:
    from binlogd.daemon.sinks import _frames as C
except ImportError:
    C = None


def _payloads(lines: bytes, n: int) -> list:
    """The n payloads of ``lines`` (without newlines); ValueError when it holds another count."""
    parts = lines.split(b"\n")
    if n < 0 or len(parts) != n + 1 or parts[-1]:
        raise ValueError(f"lines hold {len(parts) - 1} newline-ended lines"
                         f"{' and a partial one' if parts[-1] else ''}, not {n}")
    parts.pop()
    return parts


def py_redis_xadds(head: bytes, lines: bytes, n: int) -> bytes:
    """Per line, ``head`` (an XADD's packed RESP up to its last argument) then the payload as a RESP bulk
    string: ``$<len>\\r\\n<payload>\\r\\n``."""
    out = []
    for payload in _payloads(lines, n):
        out += (head, b"$%d\r\n" % len(payload), payload, b"\r\n")
    return b"".join(out)


def py_nats_hpubs(subject: bytes, sid: int, prefix: bytes, row0: int, seq0: int, lines: bytes, n: int) -> bytes:
    """Per line i, ``HPUB <subject> <header bytes> <total bytes>`` with headers ``Nats-Msg-Id:
    <sid>:<prefix>:<row>``, ``Binlogd-Source: <prefix>:<row>`` (the change's id, :mod:`library.identity`) and
    ``Nats-Expected-Last-Sequence: <seq>``, where row = row0 + i and seq = seq0 + i."""
    out = []
    for i, payload in enumerate(_payloads(lines, n)):
        row = row0 + i
        headers = (b"NATS/1.0\r\nNats-Msg-Id: %d:%b:%d\r\nBinlogd-Source: %b:%d\r\n"
                   b"Nats-Expected-Last-Sequence: %d\r\n\r\n" % (sid, prefix, row, prefix, row, seq0 + i))
        out.append(b"HPUB %b %d %d\r\n%b%b\r\n" % (subject, len(headers), len(headers) + len(payload), headers,
                                                     payload))
    return b"".join(out)


def py_copy_rows(lines: bytes, n: int, file: bytes, pos: int, row0: int, tail: bytes) -> bytes:
    """Per line i, a COPY text-format line: the payload with its backslashes doubled (JSON holds no raw tab,
    newline or carriage return), ``\\t<file>\\t<pos>\\t<row0 + i>\\t<tail>\\n``. ``file`` and ``tail`` (the
    later fields joined by tabs) are COPY text already."""
    return b"".join([b"%b\t%b\t%d\t%d\t%b\n" % (p.replace(b"\\", b"\\\\"), file, pos, row0 + i, tail)
                     for i, p in enumerate(_payloads(lines, n))])


if C is not None and speedups.ENABLED:
    redis_xadds, nats_hpubs, copy_rows = C.redis_xadds, C.nats_hpubs, C.copy_rows
else:
    redis_xadds, nats_hpubs, copy_rows = py_redis_xadds, py_nats_hpubs, py_copy_rows

__all__ = ["C", "copy_rows", "nats_hpubs", "py_copy_rows", "py_nats_hpubs", "py_redis_xadds", "redis_xadds"]

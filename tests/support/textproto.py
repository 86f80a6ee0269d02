"""Text-protocol result-set rows built by hand, for the tests of their readers and writers."""

from __future__ import annotations


def lenenc(value: bytes | None, wide: bool = False) -> bytes:
    """``value`` as a length-encoded string (0xFB for NULL); ``wide``: with an 8-byte length whatever its size."""
    if value is None:
        return b"\xfb"
    n = len(value)
    if wide:
        return b"\xfe" + n.to_bytes(8, "little") + value
    if n < 251:
        return bytes([n]) + value
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little") + value
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little") + value
    return b"\xfe" + n.to_bytes(8, "little") + value


def packets(payload: bytes, seq: int = 1) -> bytes:
    """A payload as packets (split at 0xFFFFFF bytes, an empty packet after an exact multiple)."""
    out = []
    while True:
        part, payload = payload[:0xFFFFFF], payload[0xFFFFFF:]
        out.append(len(part).to_bytes(3, "little") + bytes([seq & 255]) + part)
        seq += 1
        if len(part) < 0xFFFFFF:
            return b"".join(out)


def row_packets(rows) -> bytes:
    """Rows (each a list of bytes or None) as the row packets of a result set."""
    return b"".join(packets(b"".join(lenenc(v) for v in row), i) for i, row in enumerate(rows))

"""Parse ``../shared/binlogs/MANIFEST.md`` (the corpus' ground truth) into entries.

Each corpus line looks like::

    - `dir/file` — source; server version; checksum ALG; notes … [N events: FDEx1, QUERYx111, …; clean walk to EOF; crc_bad=0]

The bracketed counts come from a plain header walk by whoever built the corpus; the
type names there are the server's (``FDE``, ``WRITE_ROWS_V2``, ``MARIA_GTID``, a bare
number for vendor types) and are mapped here to ours (``event.header.type_name``).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from tests.support.paths import CORPUS

MANIFEST = CORPUS / "MANIFEST.md"

# Manifest type name -> our EventHeader.type_name.
_NAME_MAP = {
    "FDE": "FORMAT_DESCRIPTION",
    "WRITE_ROWS_V2": "WRITE_ROWS",
    "UPDATE_ROWS_V2": "UPDATE_ROWS",
    "DELETE_ROWS_V2": "DELETE_ROWS",
    "MARIA_GTID": "MARIADB_GTID",
    "MARIA_GTID_LIST": "MARIADB_GTID_LIST",
    "MARIA_BINLOG_CHECKPOINT": "BINLOG_CHECKPOINT",
    "MARIA_ANNOTATE_ROWS": "ANNOTATE_ROWS",
}

_LINE = re.compile(r"^- `(?P<path>[^`]+)` — (?P<rest>.*)$")
_COUNTS = re.compile(r"\[(?P<total>\d+) events: (?P<body>[^\]]*)\]")
_ITEM = re.compile(r"^(?P<name>[A-Za-z0-9_]+)x(?P<n>\d+)$")


def our_type_name(manifest_name: str) -> str:
    """Map a manifest event-type name to ``EventHeader.type_name``."""
    if manifest_name.isdigit():
        return f"UNKNOWN_{manifest_name}"
    return _NAME_MAP.get(manifest_name, manifest_name)


@dataclass(frozen=True)
class Entry:
    """One corpus file as MANIFEST.md describes it.

    Fields:
        path: relative to the corpus root (``rust_mysql_common/bug32407.001``).
        source: the source repository/path text.
        server_version: as the manifest gives it (``?`` when unknown).
        checksum: ``CRC32``, ``NONE``, ``n/a`` or ``?``.
        negative: marked NEGATIVE (or only usable as a negative sample).
        total: the bracketed event total, or None.
        raw_counts: manifest type name -> count, as written.
        counts: our type name -> count.
        notes: the remaining text of the line.
        clean_walk: the manifest says "clean walk to EOF".
        crc_bad: the manifest's crc_bad value, or None.
    """

    path: str
    source: str
    server_version: str
    checksum: str
    negative: bool
    total: int | None
    raw_counts: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    notes: str = ""
    clean_walk: bool = False
    crc_bad: int | None = None
    line: str = ""

    @property
    def name(self) -> str:
        return Path(self.path).name

    def file(self, root: Path = CORPUS) -> Path:
        return root / self.path


def parse_line(line: str) -> Entry | None:
    m = _LINE.match(line.strip())
    if not m:
        return None
    path, rest = m.group("path"), m.group("rest")
    parts = [p.strip() for p in rest.split(";")]
    source = parts[0]
    server_version = parts[1] if len(parts) > 1 else "?"
    checksum = "?"
    for p in parts[2:]:
        if p.startswith("checksum "):
            checksum = p[len("checksum "):].strip()
            break
    negative = "NEGATIVE" in rest or "only usable as a negative sample" in rest \
        or "magic check intentionally fails" in rest
    total, raw, clean, crc_bad = None, {}, False, None
    cm = _COUNTS.search(rest)
    if cm:
        total = int(cm.group("total"))
        body = cm.group("body")
        for chunk in body.split(";"):
            chunk = chunk.strip()
            if chunk == "clean walk to EOF":
                clean = True
            elif chunk.startswith("crc_bad="):
                crc_bad = int(chunk.split("=", 1)[1])
            else:
                for item in chunk.split(","):
                    im = _ITEM.match(item.strip())
                    if im:
                        raw[im.group("name")] = raw.get(im.group("name"), 0) + int(im.group("n"))
    counts: Counter[str] = Counter()
    for name, n in raw.items():
        counts[our_type_name(name)] += n
    return Entry(path=path, source=source, server_version=server_version, checksum=checksum,
                 negative=negative, total=total, raw_counts=raw, counts=dict(counts), notes=rest,
                 clean_walk=clean, crc_bad=crc_bad, line=line.strip())


def load(manifest: Path = MANIFEST) -> list[Entry]:
    """Every file entry of MANIFEST.md, in order (the "Text oracles" section is not included)."""
    entries = []
    for line in manifest.read_text(encoding="utf-8").splitlines():
        if line.startswith("## ") and "oracle" in line.lower():
            break
        entry = parse_line(line)
        if entry is not None:
            entries.append(entry)
    return entries


def by_path(manifest: Path = MANIFEST) -> dict[str, Entry]:
    return {e.path: e for e in load(manifest)}


def entries_or_empty() -> list[Entry]:
    """For pytest parametrisation at import time: no corpus, no entries (the fixture skips)."""
    return load() if MANIFEST.is_file() else []


# --------------------------------------------------------------------------- raw header walk

@dataclass(frozen=True)
class RawHeader:
    """A v4 common header read straight from the bytes (no decoder involved)."""

    pos: int
    timestamp: int
    type_code: int
    server_id: int
    length: int
    next_position: int
    flags: int


def raw_headers(data: bytes) -> tuple[list[RawHeader], int | None]:
    """Walk v4 event headers from offset 4 using only the length field.

    Returns the complete events and the offset of a trailing partial event (or None).
    An independent oracle for event boundaries, types and timestamps.
    """
    out, pos = [], 4
    while pos < len(data):
        if len(data) - pos < 19:
            return out, pos
        ts, tc, sid, length, nxt, flags = (int.from_bytes(data[pos:pos + 4], "little"), data[pos + 4],
                                            int.from_bytes(data[pos + 5:pos + 9], "little"),
                                            int.from_bytes(data[pos + 9:pos + 13], "little"),
                                            int.from_bytes(data[pos + 13:pos + 17], "little"),
                                            int.from_bytes(data[pos + 17:pos + 19], "little"))
        if length < 19 or pos + length > len(data):
            return out, pos
        out.append(RawHeader(pos, ts, tc, sid, length, nxt, flags))
        pos += length
    return out, None


def ids(entries) -> list[str]:
    """Test ids: the entries' corpus paths."""
    return [e.path for e in entries]


def entry(path: str) -> Entry:
    """The manifest entry of ``path`` (the test is skipped when the manifest lacks it)."""
    import pytest

    found = _BY_PATH.get(path)
    if found is None:
        pytest.skip(f"{path} not in MANIFEST.md")
    return found


@lru_cache(maxsize=None)
def data(path: str) -> bytes:
    """A corpus file's bytes (read once per test session)."""
    return (CORPUS / path).read_bytes()


_BY_PATH = {e.path: e for e in entries_or_empty()}


def materialise(event) -> None:
    """Decode the rows of a rows event, and of every rows event inside a TRANSACTION_PAYLOAD (binlogd's decoder;
    the rest of this module reads the corpus without it)."""
    from binlogd.protocol import events as E

    if isinstance(event, E.RowsEvent):
        assert isinstance(event.rows, list)
    if isinstance(event, E.TransactionPayloadEvent):
        for inner in event.events:
            materialise(inner)

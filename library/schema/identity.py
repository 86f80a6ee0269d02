"""Whose history: the source identity a schema history file records, and the rules that match it.

A history's positions (binlog file, offset) mean something on one server only. So the file records,
in ``source`` lines, the server whose positions its entries use: the first line a daemon writes, and
one more at each failover (a re-anchor: the entries after it use the new server's positions).

One source, one history:

- the *same server*: the same flavour and server UUID (MySQL), or the same flavour, ``server_id`` and
  binlog base name (MariaDB has no UUID);
- the *same replication stream* (a GTID-consistent failover or switchover inside one topology): the
  new server's GTID state holds the GTIDs the history recorded (:func:`stream_holds`). MariaDB GTIDs
  name their originating server (``domain-server-seq``), so an unrelated primary with the same domain
  does not hold them; MySQL GTIDs name the originating server's UUID.

Binlog files (``binlogd dump``, Spark) are matched by their FORMAT_DESCRIPTION (flavour, the writing
server's ``server_id``) and file base name (:func:`file_identity`), against every source line.
"""

from __future__ import annotations

import re

from binlogd.protocol.gtid import GtidSyntaxError, MysqlGtidSet
from binlogd.protocol.records import record

_SUFFIX = re.compile(r"^(.*?)\.?(\d+)$")


def basename(file: str) -> str:
    """A binlog file name's base name: ``binlog.000012`` → ``binlog`` (the name itself without a number)."""
    m = _SUFFIX.match(file.rsplit("/", 1)[-1])
    return m[1] if m else file


@record(frozen=False)
class Source:
    """A ``source`` line of a history: which server's positions the entries after it use.

    Fields:
        flavor: ``mariadb`` or ``mysql``.
        server_id: the server's ``server_id``.
        server_uuid: MySQL's ``server_uuid`` ("" on MariaDB).
        basename: its binlog base name (``binlog`` for ``binlog.000012``).
        gtid: the GTIDs the stream was at when this line was written (MariaDB GTID list, MySQL GTID set;
            "" without GTIDs).
        file, pos: the resume position then (for a re-anchor: in the previous source's positions).
        epoch: its index among the file's source lines (set when read).
    """

    flavor: str
    server_id: int
    server_uuid: str = ""
    basename: str = ""
    gtid: str = ""
    file: str = ""
    pos: int = 0
    epoch: int = 0

    def to_obj(self) -> dict:
        return {"kind": "source", "flavor": self.flavor, "server_id": self.server_id,
                "server_uuid": self.server_uuid, "basename": self.basename, "gtid": self.gtid,
                "file": self.file, "pos": self.pos}

    @classmethod
    def from_obj(cls, obj: dict, epoch: int) -> Source:
        """Raises: KeyError, TypeError, ValueError on a malformed line."""
        return cls(str(obj["flavor"]), int(obj["server_id"]), str(obj.get("server_uuid") or ""),
                   str(obj.get("basename") or ""), str(obj.get("gtid") or ""), str(obj.get("file") or ""),
                   int(obj.get("pos") or 0), epoch)

    def describe(self) -> str:
        """One phrase for messages: ``mariadb server_id 21 (binlog base name 'binlog', GTID 0-21-7)``."""
        who = f"server_uuid {self.server_uuid}" if self.server_uuid else f"server_id {self.server_id}"
        gtid = f", GTID {self.gtid}" if self.gtid else ""
        return f"{self.flavor} {who} (binlog base name {self.basename!r}{gtid})"


def same_server(a: Source, b: Source) -> bool:
    """True when both describe one server: same flavour and UUID, or (no UUID) server_id and base name."""
    if a.flavor != b.flavor:
        return False
    if a.server_uuid and b.server_uuid:
        return a.server_uuid == b.server_uuid
    return a.server_id == b.server_id and a.basename == b.basename


def _mariadb_gtids(text: str) -> list[tuple[int, int, int]]:
    out = []
    for part in text.replace(" ", "").split(","):
        if part:
            d, s, n = part.split("-")
            out.append((int(d), int(s), int(n)))
    return out


def stream_holds(flavor: str, recorded: list[str], server_state: str) -> bool:
    """True when a server's GTID state holds every GTID the history recorded (non-empty) — the history is
    of the replication stream that server is part of.

    Args:
        flavor: ``mariadb`` or ``mysql``.
        recorded: GTID texts from the history (GTID lists/sets, single GTIDs); empty ones are ignored.
        server_state: MariaDB ``@@gtid_binlog_state`` plus ``@@gtid_slave_pos`` (comma-joined: each
            ``domain-server-seq``), MySQL ``@@gtid_executed``.
    Returns:
        False when nothing was recorded (no GTID to prove the stream is the same), or a GTID is missing.
    """
    recorded = [r for r in recorded if r]
    if not recorded:
        return False
    try:
        if flavor == "mariadb":
            have: dict[tuple[int, int], int] = {}
            for d, s, n in _mariadb_gtids(server_state):
                have[(d, s)] = max(n, have.get((d, s), -1))
            return all(have.get((d, s), -1) >= n for r in recorded for d, s, n in _mariadb_gtids(r))
        state = MysqlGtidSet.parse(server_state)
        want = MysqlGtidSet()
        for r in recorded:
            want.update(MysqlGtidSet.parse(r))
        return state.union(want) == state
    except (GtidSyntaxError, ValueError):
        return False


@record(frozen=False)
class FileIdentity:
    """A binlog file's source, from its first event (FORMAT_DESCRIPTION) and its name.

    Fields: flavor, server_id, basename, name (the file's name).
    """

    flavor: str
    server_id: int
    basename: str
    name: str

    def describe(self) -> str:
        return f"{self.name} ({self.flavor} server_id {self.server_id}, binlog base name {self.basename!r})"

    def matches(self, source: Source) -> bool:
        """True when ``source`` is the server that wrote the file."""
        return (self.flavor == source.flavor and self.server_id == source.server_id
                and (not source.basename or self.basename == source.basename))


HEAD_BYTES = 4 + 19 + 2 + 50   # magic, event header, binlog version, server version


def file_identity(head: bytes, name: str) -> FileIdentity | None:
    """The identity of a binlog file from its first :data:`HEAD_BYTES` bytes; None when they do not start
    with a FORMAT_DESCRIPTION (not a binlog, or too short: the caller's own reading reports that)."""
    if len(head) < HEAD_BYTES or head[:4] != b"\xfebin" or head[4 + 4] != 15:
        return None
    server_id = int.from_bytes(head[9:13], "little")
    version = head[25:75].split(b"\0", 1)[0].decode("ascii", "replace")
    flavor = "mariadb" if "mariadb" in version.lower() else "mysql"
    base = name.rsplit("/", 1)[-1]
    return FileIdentity(flavor, server_id, basename(base), base)


def fde_identity(event, name: str) -> FileIdentity:
    """The identity of the binlog file ``name`` from its decoded FORMAT_DESCRIPTION ``event``."""
    flavor = "mariadb" if "mariadb" in event.server_version.lower() else "mysql"
    base = name.rsplit("/", 1)[-1]
    return FileIdentity(flavor, event.header.server_id, basename(base), base)

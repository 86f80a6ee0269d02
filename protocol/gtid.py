"""Global transaction identifiers of MySQL and MariaDB: values, sets, text and binary forms.

MySQL (5.6+) identifies a transaction by ``uuid:gno`` and, from 8.4, optionally
``uuid:tag:gno``. A :class:`MysqlGtidSet` is what ``@@gtid_executed`` prints and
what PREVIOUS_GTIDS_LOG_EVENT and COM_BINLOG_DUMP_GTID carry in binary.

MariaDB (10.0+) identifies a transaction by ``domain-server-seq``; a replication
position is one GTID per domain (:class:`MariadbGtidList`, what
``@@gtid_slave_pos`` prints and what GTID_LIST events carry).

Mutability: :class:`Gtid` and :class:`MariadbGtid` are frozen values. The two
collections are mutable (``add`` / ``advance`` change them in place and return
None) because the daemon advances its position once per transaction; use
``copy()`` before handing one to another owner. Being mutable, they are not
hashable.

Errors: text that is not a GTID/GTID set raises :class:`GtidSyntaxError` (a
:class:`ProtocolError` that is also a :class:`ValueError`); malformed binary
raises :class:`ProtocolError`, input that ends early :class:`TruncatedError`.
"""

from __future__ import annotations

import re
import struct
from bisect import bisect_right
from collections.abc import Iterable, Iterator

from .errors import ProtocolError, TruncatedError
from .records import record

__all__ = [
    "GNO_MAX",
    "GTID_LIST_FLAG_IGN_GTIDS",
    "GTID_LIST_FLAG_UNTIL_REACHED",
    "Gtid",
    "GtidSyntaxError",
    "MariadbGtid",
    "MariadbGtidList",
    "MysqlGtidSet",
    "decode_mariadb_gtid_list",
    "decode_varlen",
]

#: Largest GNO MySQL hands out (its exclusive interval end is 2**63 - 1).
GNO_MAX = (1 << 63) - 2
_GNO_END = GNO_MAX + 1

#: GTID_LIST flags (the top 4 bits of the count word, shifted down by 28).
GTID_LIST_FLAG_UNTIL_REACHED = 0x1
GTID_LIST_FLAG_IGN_GTIDS = 0x2

_U32_MAX = (1 << 32) - 1
_U64_MAX = (1 << 64) - 1

_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_INTERVAL = struct.Struct("<QQ")
_MARIADB_ENTRY = struct.Struct("<IIQ")

_FORMAT_UNTAGGED = 0
_FORMAT_TAGGED = 1
_TAG_MAX_LENGTH = 32

_UUID_RE = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32}", re.ASCII
)
_TAG_RE = re.compile(r"[a-z_][a-z0-9_]{0,31}", re.ASCII)
_INTERVAL_RE = re.compile(r"([0-9]+)[ \t\r\n]*(?:-[ \t\r\n]*([0-9]+))?", re.ASCII)
_MARIADB_RE = re.compile(r"([0-9]+)-([0-9]+)-([0-9]+)", re.ASCII)
_WS = " \t\r\n"


class GtidSyntaxError(ProtocolError, ValueError):
    """Text that is not a valid GTID, GTID set or GTID list (``offset`` is None)."""


def _norm_uuid(text: str) -> str:
    """Return ``text`` as a lowercase dashed UUID; raise GtidSyntaxError if it is not one."""
    t = text.strip(_WS).lower()
    if not _UUID_RE.fullmatch(t):
        raise GtidSyntaxError(f"not a UUID: {text!r}")
    if len(t) == 32:
        t = f"{t[:8]}-{t[8:12]}-{t[12:16]}-{t[16:20]}-{t[20:]}"
    return t


def _norm_tag(text: str | None) -> str:
    """Return the normalized (lowercase) tag, ``""`` for None/empty; raise GtidSyntaxError if invalid."""
    if not text:
        return ""
    t = text.strip(_WS).lower()
    if not _TAG_RE.fullmatch(t):
        raise GtidSyntaxError(f"not a GTID tag: {text!r}")
    return t


def _uuid_from_bytes(raw: bytes) -> str:
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _check_gno(gno: int) -> None:
    if not 1 <= gno <= GNO_MAX:
        raise GtidSyntaxError(f"GNO out of range 1..{GNO_MAX}: {gno}")


# ---------------------------------------------------------------- MySQL


@record(slots=True)
class Gtid:
    """One MySQL GTID.

    Fields:
        sid: source UUID, lowercase dashed form (normalized on construction).
        gno: transaction number, 1..2**63-2.
        tag: MySQL 8.4+ tag (lowercase, ``[a-z_][a-z0-9_]{0,31}``) or None (``""`` becomes None).

    Raises GtidSyntaxError on construction with an invalid field.
    """

    sid: str
    gno: int
    tag: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "sid", _norm_uuid(self.sid))
        object.__setattr__(self, "tag", _norm_tag(self.tag) or None)
        _check_gno(self.gno)

    def __str__(self) -> str:
        if self.tag:
            return f"{self.sid}:{self.tag}:{self.gno}"
        return f"{self.sid}:{self.gno}"

    @classmethod
    def parse(cls, text: str) -> Gtid:
        """Parse ``uuid:gno`` or ``uuid:tag:gno``. Raises GtidSyntaxError."""
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise GtidSyntaxError(f"not a GTID: {text!r}")
        num = parts[-1].strip(_WS)
        if not num.isascii() or not num.isdigit():
            raise GtidSyntaxError(f"not a GTID: {text!r}")
        tag = parts[1] if len(parts) == 3 else None
        return cls(parts[0], int(num), tag)


def _insert_interval(ivs: list[tuple[int, int]], start: int, stop: int) -> None:
    """Add [start, stop) to a sorted list of disjoint, non-adjacent half-open intervals."""
    if ivs and ivs[-1][1] <= start:  # fast path: appending at (or after) the end
        if ivs[-1][1] == start:
            ivs[-1] = (ivs[-1][0], stop)
        else:
            ivs.append((start, stop))
        return
    i = bisect_right(ivs, start, key=lambda iv: iv[0])
    if i > 0 and ivs[i - 1][1] >= start:
        i -= 1
    j = i
    lo, hi = start, stop
    while j < len(ivs) and ivs[j][0] <= hi:
        lo = min(lo, ivs[j][0])
        hi = max(hi, ivs[j][1])
        j += 1
    ivs[i:j] = [(lo, hi)]


def _format_intervals(ivs: list[tuple[int, int]]) -> str:
    return ":".join(str(a) if b - a == 1 else f"{a}-{b - 1}" for a, b in ivs)


class MysqlGtidSet:
    """A MySQL GTID set: (uuid, tag) → sorted, merged intervals of GNOs.

    Internally each interval is half-open ``(start, stop)`` (stop exclusive), the
    same convention as the binary encoding; the text form uses closed ranges.
    Untagged GTIDs have tag None in the API (``""`` internally, so they sort
    before tags, as MySQL does).

    Mutable: :meth:`add`, :meth:`add_interval` and :meth:`update` change the set
    in place; :meth:`union` and :meth:`copy` return new sets.
    """

    __slots__ = ("_sets",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, gtids: Iterable[Gtid] = ()) -> None:
        """Create a set holding ``gtids`` (empty by default)."""
        self._sets: dict[tuple[str, str], list[tuple[int, int]]] = {}
        for g in gtids:
            self.add(g)

    # -- mutation
    def add(self, gtid: Gtid) -> None:
        """Add one GTID in place. Returns None."""
        _insert_interval(self._sets.setdefault((gtid.sid, gtid.tag or ""), []), gtid.gno, gtid.gno + 1)

    def add_interval(self, sid: str, start: int, stop: int, tag: str | None = None) -> None:
        """Add the GNOs ``start <= gno < stop`` of ``sid``/``tag`` in place.

        Raises GtidSyntaxError for a bad UUID or tag, or unless 1 <= start < stop <= 2**63-1.
        """
        if not 1 <= start < stop <= _GNO_END:
            raise GtidSyntaxError(f"bad GNO interval [{start}, {stop})")
        key = (_norm_uuid(sid), _norm_tag(tag))
        _insert_interval(self._sets.setdefault(key, []), start, stop)

    def update(self, other: MysqlGtidSet) -> None:
        """Add every GTID of ``other`` in place. Returns None."""
        for key, ivs in other._sets.items():
            mine = self._sets.setdefault(key, [])
            for a, b in ivs:
                _insert_interval(mine, a, b)

    # -- derived sets
    def copy(self) -> MysqlGtidSet:
        """Return an independent copy."""
        new = MysqlGtidSet()
        new._sets = {k: list(v) for k, v in self._sets.items()}
        return new

    def union(self, other: MysqlGtidSet) -> MysqlGtidSet:
        """Return a new set with the GTIDs of both."""
        new = self.copy()
        new.update(other)
        return new

    __or__ = union

    # -- queries
    def __contains__(self, gtid: object) -> bool:
        if not isinstance(gtid, Gtid):
            return False
        ivs = self._sets.get((gtid.sid, gtid.tag or ""))
        if not ivs:
            return False
        i = bisect_right(ivs, gtid.gno, key=lambda iv: iv[0]) - 1
        return i >= 0 and gtid.gno < ivs[i][1]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MysqlGtidSet):
            return NotImplemented
        return self._sets == other._sets

    def is_empty(self) -> bool:
        """True when the set holds no GTID."""
        return not self._sets

    def __bool__(self) -> bool:
        return bool(self._sets)

    def items(self) -> Iterator[tuple[str, str | None, tuple[tuple[int, int], ...]]]:
        """Yield ``(sid, tag or None, ((start, stop), ...))`` sorted by sid then tag; stop is exclusive."""
        for (sid, tag), ivs in sorted(self._sets.items()):
            yield sid, tag or None, tuple(ivs)

    # -- text
    @classmethod
    def parse(cls, text: str) -> MysqlGtidSet:
        """Parse MySQL's text form, e.g. ``uuid:1-5:7,uuid2:3`` or ``uuid:1-13:mytag:1-2``.

        Whitespace and newlines around tokens (as ``SELECT @@gtid_executed`` prints
        them) are ignored; empty or blank text gives the empty set; UUIDs and tags
        are case-insensitive; overlapping ranges merge.
        Raises GtidSyntaxError on anything else.
        """
        result = cls()
        for part in text.split(","):
            if not part.strip(_WS):
                continue
            tokens = part.split(":")
            sid = _norm_uuid(tokens[0])
            tag = ""
            for tok in tokens[1:]:
                tok = tok.strip(_WS)
                m = _INTERVAL_RE.fullmatch(tok)
                if m:
                    start = int(m.group(1))
                    last = int(m.group(2)) if m.group(2) is not None else start
                    if not 1 <= start <= last <= GNO_MAX:
                        raise GtidSyntaxError(f"bad GNO range {tok!r} in {text!r}")
                    _insert_interval(result._sets.setdefault((sid, tag), []), start, last + 1)
                elif tok:
                    tag = _norm_tag(tok)
                else:
                    raise GtidSyntaxError(f"empty element in GTID set {text!r}")
        return result

    def __str__(self) -> str:
        """Canonical MySQL text: sorted by uuid, untagged ranges first then tags sorted, ``,`` between uuids."""
        out: list[str] = []
        cur_sid = None
        for (sid, tag), ivs in sorted(self._sets.items()):
            piece = (f"{tag}:" if tag else "") + _format_intervals(ivs)
            if sid == cur_sid:
                out[-1] += ":" + piece
            else:
                out.append(f"{sid}:{piece}")
                cur_sid = sid
        return ",".join(out)

    def __repr__(self) -> str:
        return f"MysqlGtidSet({str(self)!r})"

    # -- binary
    def encode(self) -> bytes:
        """Encode as in PREVIOUS_GTIDS bodies and COM_BINLOG_DUMP_GTID.

        Without tags: the untagged format every MySQL 5.6+ reads (u64 n_sids,
        then per sid: 16-byte uuid, u64 n_intervals, (u64 start, u64 stop)...).
        With any tag: MySQL 8.4+'s tagged format (format byte 1 in the top and
        the bottom byte of the first u64, n_sids in between; each uuid followed
        by a varlen-length-prefixed tag, empty for untagged GTIDs).
        """
        keys = sorted(self._sets)
        tagged = any(tag for _, tag in keys)
        if tagged:
            head = (_FORMAT_TAGGED << 56) | (len(keys) << 8) | _FORMAT_TAGGED
        else:
            head = len(keys)
        out = bytearray(_U64.pack(head))
        for sid, tag in keys:
            out += bytes.fromhex(sid.replace("-", ""))
            if tagged:
                raw_tag = tag.encode("ascii")
                out += _encode_varlen(len(raw_tag)) + raw_tag
            ivs = self._sets[(sid, tag)]
            out += _U64.pack(len(ivs))
            for a, b in ivs:
                out += _INTERVAL.pack(a, b)
        return bytes(out)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview) -> MysqlGtidSet:
        """Decode the binary form (tagged or untagged); ``buf`` must hold exactly one set.

        Raises TruncatedError if ``buf`` ends early, ProtocolError on an unknown
        format, a bad tag, an empty or out-of-range interval, or trailing bytes.
        """
        result, end = cls.decode_from(buf)
        if end != len(buf):
            raise ProtocolError(f"{len(buf) - end} trailing bytes after GTID set", end)
        return result

    @classmethod
    def decode_from(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> tuple[MysqlGtidSet, int]:
        """Decode one set starting at ``offset``; return it and the offset just past it.

        Raises as :meth:`decode`, except that bytes after the set are left alone.
        """
        mv = memoryview(buf).cast("B") if not isinstance(buf, bytes) else buf
        size = len(mv)
        pos = offset
        if size - pos < 8:
            raise TruncatedError("GTID set shorter than its 8-byte header", pos)
        (head,) = _U64.unpack_from(mv, pos)
        pos += 8
        fmt = head >> 56
        if fmt == _FORMAT_UNTAGGED:
            n_sids = head & ((1 << 56) - 1)
        elif fmt == _FORMAT_TAGGED:
            n_sids = (head >> 8) & ((1 << 48) - 1)
        else:
            raise ProtocolError(f"unknown GTID set encoding format {fmt}", offset)
        if n_sids * 24 > size - pos:  # each sid needs >= 16 + 8 bytes: check before looping
            raise TruncatedError(f"GTID set declares {n_sids} sids in {size - pos} bytes", offset)
        result = cls()
        for _ in range(n_sids):
            if size - pos < 16:
                raise TruncatedError("GTID set ends inside a uuid", pos)
            sid = _uuid_from_bytes(bytes(mv[pos : pos + 16]))
            pos += 16
            tag = ""
            if fmt == _FORMAT_TAGGED:
                tag_len, pos = decode_varlen(mv, pos)
                if tag_len > _TAG_MAX_LENGTH:
                    raise ProtocolError(f"GTID tag length {tag_len} > {_TAG_MAX_LENGTH}", pos)
                if size - pos < tag_len:
                    raise TruncatedError("GTID set ends inside a tag", pos)
                raw_tag = bytes(mv[pos : pos + tag_len])
                if tag_len and not _TAG_RE.fullmatch(raw_tag.decode("latin-1")):
                    raise ProtocolError(f"invalid GTID tag {raw_tag!r}", pos)
                tag = raw_tag.decode("ascii")
                pos += tag_len
            if size - pos < 8:
                raise TruncatedError("GTID set ends before an interval count", pos)
            (n_iv,) = _U64.unpack_from(mv, pos)
            pos += 8
            if n_iv * 16 > size - pos:
                raise TruncatedError(f"GTID set declares {n_iv} intervals in {size - pos} bytes", pos)
            ivs = result._sets.setdefault((sid, tag), [])
            for _ in range(n_iv):
                a, b = _INTERVAL.unpack_from(mv, pos)
                if not 1 <= a < b <= _GNO_END:
                    raise ProtocolError(f"bad GNO interval [{a}, {b})", pos)
                pos += 16
                _insert_interval(ivs, a, b)
            if not ivs:
                del result._sets[(sid, tag)]
        return result, pos


def _encode_varlen(value: int) -> bytes:
    """MySQL serialization library's unsigned varlen integer (libs/mysql/serialization).

    The count of trailing one-bits of the first byte, plus one, is the total
    length (1..9); the value's low bits follow those marker bits, the rest is
    little-endian in the next bytes.
    """
    nbytes = ((value.bit_length() * 575) >> 12) + 1
    if nbytes == 1:
        return bytes([(value << 1) & 0xFF])
    if nbytes == 9:
        return b"\xff" + value.to_bytes(8, "little")
    first = ((1 << (nbytes - 1)) - 1) | ((value << nbytes) & 0xFF)
    return bytes([first]) + (value >> (8 - nbytes)).to_bytes(nbytes - 1, "little")


def decode_varlen(mv: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Read one MySQL serialization-library varlen unsigned integer at ``pos`` (GTID tags, GTID_TAGGED
    events): the count of trailing 1-bits in the first byte is the count of extra bytes.
    Returns (value, new pos). Raises TruncatedError."""
    if pos >= len(mv):
        raise TruncatedError("input ends inside a varlen integer", pos)
    first = mv[pos]
    nbytes = 1
    while nbytes < 9 and first & (1 << (nbytes - 1)):
        nbytes += 1
    if len(mv) - pos < nbytes:
        raise TruncatedError("input ends inside a varlen integer", pos)
    if nbytes == 1:
        return first >> 1, pos + 1
    rest = int.from_bytes(mv[pos + 1 : pos + nbytes], "little")
    if nbytes == 9:
        return rest, pos + 9
    return (first >> nbytes) | (rest << (8 - nbytes)), pos + nbytes


# ---------------------------------------------------------------- MariaDB


@record(slots=True)
class MariadbGtid:
    """One MariaDB GTID.

    Fields:
        domain_id: replication domain, u32.
        server_id: originating server, u32.
        seq_no: sequence number, u64.

    Raises GtidSyntaxError on construction with an out-of-range field.
    """

    domain_id: int
    server_id: int
    seq_no: int

    def __post_init__(self) -> None:
        if not (0 <= self.domain_id <= _U32_MAX and 0 <= self.server_id <= _U32_MAX and 0 <= self.seq_no <= _U64_MAX):
            raise GtidSyntaxError(f"MariaDB GTID field out of range: {self.domain_id}-{self.server_id}-{self.seq_no}")

    def __str__(self) -> str:
        return f"{self.domain_id}-{self.server_id}-{self.seq_no}"

    @classmethod
    def parse(cls, text: str) -> MariadbGtid:
        """Parse ``domain-server-seq`` (e.g. ``0-1-100``). Raises GtidSyntaxError."""
        m = _MARIADB_RE.fullmatch(text.strip(_WS))
        if not m:
            raise GtidSyntaxError(f"not a MariaDB GTID: {text!r}")
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3)))


def decode_mariadb_gtid_list(buf: bytes | bytearray | memoryview) -> tuple[tuple[MariadbGtid, ...], int]:
    """Decode a MariaDB GTID_LIST event body into its raw entries and flags.

    Layout: u32 whose low 28 bits are the count and top 4 bits the flags, then
    per entry u32 domain, u32 server, u64 seq (little-endian). The binlog state
    may list several servers of one domain; entries are returned in file order.

    Returns (entries, flags) with flags shifted down (GTID_LIST_FLAG_*).
    Raises TruncatedError if ``buf`` is shorter than the count says; bytes after
    the entries are ignored (the caller strips the checksum).
    """
    mv = memoryview(buf).cast("B") if not isinstance(buf, bytes) else buf
    if len(mv) < 4:
        raise TruncatedError("GTID_LIST body shorter than its count", 0)
    (word,) = _U32.unpack_from(mv, 0)
    count, flags = word & 0x0FFFFFFF, word >> 28
    if len(mv) < 4 + count * _MARIADB_ENTRY.size:
        raise TruncatedError(f"GTID_LIST declares {count} entries in {len(mv)} bytes", 0)
    entries = tuple(
        MariadbGtid(*_MARIADB_ENTRY.unpack_from(mv, 4 + i * _MARIADB_ENTRY.size)) for i in range(count)
    )
    return entries, flags


class MariadbGtidList:
    """A MariaDB GTID position: one GTID per replication domain.

    Mutable: :meth:`advance` replaces the domain's GTID in place.
    """

    __slots__ = ("_by_domain",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, gtids: Iterable[MariadbGtid] = ()) -> None:
        """Create a list from ``gtids``; for a repeated domain the last one wins."""
        self._by_domain: dict[int, MariadbGtid] = {}
        for g in gtids:
            self.advance(g)

    def advance(self, gtid: MariadbGtid) -> None:
        """Make ``gtid`` the position of its domain (replacing any previous one). Returns None."""
        self._by_domain[gtid.domain_id] = gtid

    def get(self, domain_id: int) -> MariadbGtid | None:
        """The GTID of ``domain_id``, or None."""
        return self._by_domain.get(domain_id)

    def gtids(self) -> tuple[MariadbGtid, ...]:
        """All GTIDs sorted by domain."""
        return tuple(self._by_domain[d] for d in sorted(self._by_domain))

    def copy(self) -> MariadbGtidList:
        """Return an independent copy."""
        return MariadbGtidList(self._by_domain.values())

    def is_empty(self) -> bool:
        """True when no domain has a GTID."""
        return not self._by_domain

    def __bool__(self) -> bool:
        return bool(self._by_domain)

    def __len__(self) -> int:
        return len(self._by_domain)

    def __contains__(self, gtid: object) -> bool:
        """True when ``gtid`` is the exact position of its domain."""
        return isinstance(gtid, MariadbGtid) and self._by_domain.get(gtid.domain_id) == gtid

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MariadbGtidList):
            return NotImplemented
        return self._by_domain == other._by_domain

    def __str__(self) -> str:
        """``d-s-n`` entries sorted by domain, joined by ``,`` (empty string when empty)."""
        return ",".join(str(g) for g in self.gtids())

    def __repr__(self) -> str:
        return f"MariadbGtidList({str(self)!r})"

    @classmethod
    def parse(cls, text: str) -> MariadbGtidList:
        """Parse ``0-1-100,1-2-5`` (whitespace ignored, blank → empty).

        Raises GtidSyntaxError on a malformed entry or a domain given twice (as
        MariaDB refuses such a ``gtid_slave_pos``).
        """
        result = cls()
        for part in text.split(","):
            if not part.strip(_WS):
                continue
            g = MariadbGtid.parse(part)
            if g.domain_id in result._by_domain:
                raise GtidSyntaxError(f"domain {g.domain_id} given twice in {text!r}")
            result.advance(g)
        return result

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview) -> MariadbGtidList:
        """Decode a GTID_LIST event body (see :func:`decode_mariadb_gtid_list`).

        Where the server lists several GTIDs of one domain, the last one wins:
        MariaDB writes the most recently logged GTID of each domain last.
        Raises TruncatedError.
        """
        entries, _flags = decode_mariadb_gtid_list(buf)
        return cls(entries)

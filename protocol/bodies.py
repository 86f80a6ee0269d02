"""Decoders for the bodies of every non-row event.

Each function takes ``(header, body, ctx)`` where ``body`` is the event after its
common header and before its checksum (post-header included) and ``ctx`` the
:class:`protocol.decoder.Decoder` (post-header lengths, charset hints), and
returns the typed event.
"""

from __future__ import annotations

import struct
import zlib

from . import events as E
from .charsets import codec_for_collation
from .constants import EventType as ET
from .errors import EventDecodeError
from .gtid import MysqlGtidSet, decode_varlen
from .gtid import decode_mariadb_gtid_list as gtid_list_entries
from .primitives import I64, U16, U32, U64, need, packed_len, take, text, uuid_text

# ---------------------------------------------------------------- QUERY


def _status_vars(view: memoryview) -> dict:
    """Decode QUERY status variables; stops at the first code whose length it cannot know."""
    out: dict = {}
    pos, end = 0, len(view)
    try:
        while pos < end:
            code = view[pos]
            pos += 1
            if code == 0:
                out["flags2"] = U32.unpack_from(view, pos)[0]; pos += 4
            elif code == 1:
                out["sql_mode"] = U64.unpack_from(view, pos)[0]; pos += 8
            elif code == 2:  # Q_CATALOG_CODE (5.0.0-5.0.3): length, string, NUL
                n = view[pos]
                out["catalog"] = text(view[pos + 1:pos + 1 + n]); pos += 1 + n + 1
            elif code == 3:
                out["auto_increment"] = (U16.unpack_from(view, pos)[0], U16.unpack_from(view, pos + 2)[0]); pos += 4
            elif code == 4:
                client, conn, server = (U16.unpack_from(view, pos + k)[0] for k in (0, 2, 4))
                out["charset"] = {"client": client, "connection": conn, "server": server}; pos += 6
            elif code in (5, 6):
                n = view[pos]
                out["time_zone" if code == 5 else "catalog"] = text(view[pos + 1:pos + 1 + n]); pos += 1 + n
            elif code == 7:
                out["lc_time_names"] = U16.unpack_from(view, pos)[0]; pos += 2
            elif code == 8:
                out["charset_database"] = U16.unpack_from(view, pos)[0]; pos += 2
            elif code == 9:
                out["table_map_for_update"] = U64.unpack_from(view, pos)[0]; pos += 8
            elif code == 10:
                pos += 4  # Q_MASTER_DATA_WRITTEN_CODE
            elif code == 11:
                n = view[pos]; user = text(view[pos + 1:pos + 1 + n]); pos += 1 + n
                n = view[pos]; host = text(view[pos + 1:pos + 1 + n]); pos += 1 + n
                out["invoker"] = f"{user}@{host}"
            elif code == 12:
                count = view[pos]; pos += 1
                names = []
                if count != 254:  # OVER_MAX_DBS_IN_EVENT_MTS
                    for _ in range(count):
                        nul = bytes(view[pos:]).index(b"\0")
                        names.append(text(view[pos:pos + nul])); pos += nul + 1
                out["updated_db_names"] = names
            elif code == 13:
                out["microseconds"] = int.from_bytes(view[pos:pos + 3], "little"); pos += 3
            elif code in (14, 15):
                pos += 8  # commit timestamps, never written by released servers
            elif code in (16, 19, 20):
                out[{16: "explicit_defaults_for_timestamp", 19: "sql_require_primary_key",
                     20: "default_table_encryption"}[code]] = view[pos]; pos += 1
            elif code == 17:
                out["ddl_xid"] = U64.unpack_from(view, pos)[0]; pos += 8
            elif code == 18:
                out["default_collation_for_utf8mb4"] = U16.unpack_from(view, pos)[0]; pos += 2
            elif code == 128:  # MariaDB Q_HRNOW
                out["microseconds"] = int.from_bytes(view[pos:pos + 3], "little"); pos += 3
            elif code == 129:  # MariaDB Q_XID
                out["xid"] = U64.unpack_from(view, pos)[0]; pos += 8
            elif code == 130:  # MariaDB Q_GTID_FLAGS3
                out["gtid_flags3"] = view[pos]; pos += 1
            else:
                out["unparsed_status_code"] = code
                break
    except (IndexError, ValueError, struct.error) as exc:
        raise EventDecodeError(f"malformed QUERY status variables: {exc}") from exc
    return out


def _query_parts(body: memoryview, post_len: int, status_at: int | None = None):
    """Split a QUERY body: (thread_id, exec_time, error_code, schema, status, statement bytes).

    ``status_at`` is where the status block starts when a longer post-header
    (EXECUTE_LOAD_QUERY) precedes it.
    """
    need(body, 0, max(post_len, 11), "QUERY post-header")
    thread_id, exec_time = U32.unpack_from(body, 0)[0], U32.unpack_from(body, 4)[0]
    db_len, error_code = body[8], U16.unpack_from(body, 9)[0]
    status_len = U16.unpack_from(body, 11)[0] if post_len >= 13 else 0
    status_raw, pos = take(body, status_at or post_len, status_len, "status variables")
    schema, pos = take(body, pos, db_len, "schema name")
    return thread_id, exec_time, error_code, text(schema), _status_vars(status_raw), body[pos + 1:]


def _query_codec(status: dict) -> str:
    client = status.get("charset", {}).get("client")
    return codec_for_collation(client) or "utf-8"


def decode_query(h, body, ctx):
    post_len = ctx.post_header_len(h.type_code)
    if h.type_code == ET.EXECUTE_LOAD_QUERY:
        base_len = ctx.post_header_len(ET.QUERY)
        need(body, 0, base_len + 13, "EXECUTE_LOAD_QUERY post-header")
        file_id, start, end = (U32.unpack_from(body, base_len + k)[0] for k in (0, 4, 8))
        # The extra post-header sits between the QUERY post-header and the status block.
        thread_id, exec_time, error_code, schema, status, rest = _query_parts(body, base_len, post_len)
        return E.ExecuteLoadQueryEvent(h, thread_id, exec_time, error_code, schema,
                                       text(rest, _query_codec(status)), status, file_id, start, end,
                                       body[base_len + 12])
    thread_id, exec_time, error_code, schema, status, rest = _query_parts(body, post_len)
    if h.type_code == ET.QUERY_COMPRESSED:
        rest = memoryview(mariadb_uncompress(rest))
    return E.QueryEvent(h, thread_id, exec_time, error_code, schema, text(rest, _query_codec(status)), status)


def mariadb_uncompress(raw: memoryview) -> bytes:
    """MariaDB's compressed-event payload: 1 header byte (low 3 bits: size bytes), BE size, zlib data.

    Raises:
        EventDecodeError: on a bad header, bad zlib data or a size mismatch.
    """
    need(raw, 0, 1, "compression header")
    lenlen = raw[0] & 0x07
    if not 1 <= lenlen <= 4 or raw[0] & 0x70:
        raise EventDecodeError(f"unsupported MariaDB compression header 0x{raw[0]:02x}")
    size_raw, pos = take(raw, 1, lenlen, "uncompressed size")
    size = int.from_bytes(size_raw, "big")
    stream = zlib.decompressobj()
    try:
        out = stream.decompress(bytes(raw[pos:]), size + 1)
    except zlib.error as exc:
        raise EventDecodeError(f"MariaDB compressed event: {exc}") from exc
    if len(out) != size:
        raise EventDecodeError(f"MariaDB compressed event: {len(out)} bytes, header says {size}")
    if not stream.eof or stream.unused_data:
        raise EventDecodeError("MariaDB compressed event: the zlib stream is cut short or followed by junk")
    return out


# ---------------------------------------------------------------- simple events


def decode_rotate(h, body, ctx):
    if ctx.post_header_len(ET.ROTATE) >= 8:
        need(body, 0, 8, "ROTATE position")
        return E.RotateEvent(h, U64.unpack_from(body, 0)[0], text(body[8:]))
    return E.RotateEvent(h, 4, text(body))


def decode_stop(h, body, ctx):
    return E.StopEvent(h)


def decode_xid(h, body, ctx):
    need(body, 0, 8, "XID")
    return E.XidEvent(h, U64.unpack_from(body, 0)[0])


def decode_intvar(h, body, ctx):
    need(body, 0, 9, "INTVAR")
    return E.IntvarEvent(h, body[0], U64.unpack_from(body, 1)[0])


def decode_rand(h, body, ctx):
    need(body, 0, 16, "RAND")
    return E.RandEvent(h, U64.unpack_from(body, 0)[0], U64.unpack_from(body, 8)[0])


def decode_user_var(h, body, ctx):
    need(body, 0, 4, "USER_VAR name length")
    name, pos = take(body, 4, U32.unpack_from(body, 0)[0], "USER_VAR name")
    need(body, pos, 1, "USER_VAR null flag")
    if body[pos]:
        return E.UserVarEvent(h, text(name), None, None, None, False)
    need(body, pos + 1, 9, "USER_VAR value header")
    vtype, charset, vlen = body[pos + 1], U32.unpack_from(body, pos + 2)[0], U32.unpack_from(body, pos + 6)[0]
    raw, pos = take(body, pos + 10, vlen, "USER_VAR value")
    unsigned = pos < len(body) and bool(body[pos] & 1)
    if vtype == 0:  # STRING_RESULT
        value = text(raw, codec_for_collation(charset) or "utf-8")
    elif vtype == 1:  # REAL_RESULT
        need(raw, 0, 8, "USER_VAR real")
        value = struct.unpack_from("<d", raw)[0]
    elif vtype == 2:  # INT_RESULT
        need(raw, 0, 8, "USER_VAR int")
        value = (U64 if unsigned else I64).unpack_from(raw, 0)[0]
    elif vtype == 4:  # DECIMAL_RESULT: precision, scale, binary decimal
        from .values import decimal_text  # the row value decoders: not on binlogd info's path

        need(raw, 0, 2, "USER_VAR decimal")
        value = decimal_text(raw, 2, raw[0], raw[1])
    else:
        value = bytes(raw).hex()
    return E.UserVarEvent(h, text(name), value, vtype, charset, unsigned)


def decode_incident(h, body, ctx):
    need(body, 0, 2, "INCIDENT")
    message = b""
    if len(body) > 2:
        message, _ = take(body, 3, body[2], "INCIDENT message")
    return E.IncidentEvent(h, U16.unpack_from(body, 0)[0], text(message))


def decode_heartbeat(h, body, ctx):
    return E.HeartbeatEvent(h, text(body), h.next_position)


def decode_heartbeat_v2(h, body, ctx):
    """HEARTBEAT_V2: type/length/value fields; 1 = log file name, 2 = 64-bit position."""
    log_file, position, pos = "", h.next_position, 0
    while pos < len(body):
        ftype, pos = packed_len(body, pos)
        if ftype == 0:
            break
        flen, pos = packed_len(body, pos)
        value, pos = take(body, pos, flen, "HEARTBEAT_V2 field")
        if ftype == 1:
            log_file = text(value)
        elif ftype == 2:
            position, _ = packed_len(value, 0)
    return E.HeartbeatEvent(h, log_file, position)


def decode_rows_query(h, body, ctx):
    # One length byte (truncated at 255, ignored) then the whole statement (decoded when it is read).
    return E.RowsQueryEvent(h, body[1:])


def decode_annotate_rows(h, body, ctx):
    return E.RowsQueryEvent(h, body)


def decode_ignorable(h, body, ctx):
    return E.IgnorableEvent(h, bytes(body))


def decode_load_block(h, body, ctx):
    need(body, 0, 4, "file id")
    return E.LoadBlockEvent(h, U32.unpack_from(body, 0)[0], bytes(body[4:]))


def decode_load_file(h, body, ctx):
    need(body, 0, 4, "file id")
    return E.LoadFileEvent(h, U32.unpack_from(body, 0)[0])


def decode_legacy_load(h, body, ctx):
    """LOAD (6), NEW_LOAD (12) and CREATE_FILE (8): pre-5.0 LOAD DATA INFILE.

    All three start with LOAD's 18-byte post-header; CREATE_FILE adds its file id after it and
    ends with the file name, a NUL and the first data block.
    """
    need(body, 0, 18, "LOAD post-header")
    thread_id, exec_time, skip_lines = (U32.unpack_from(body, k)[0] for k in (0, 4, 8))
    table_len, db_len, nfields = body[12], body[13], U32.unpack_from(body, 14)[0]
    pos, file_id = 18, None
    if h.type_code == ET.CREATE_FILE:
        need(body, pos, 4, "CREATE_FILE file id")
        file_id, pos = U32.unpack_from(body, pos)[0], pos + 4
    else:
        pos = max(18, ctx.post_header_len(h.type_code))
    if h.type_code == ET.LOAD:  # old sql_ex: five single chars, opt_flags, empty_flags
        pos += 7
    else:  # new sql_ex: five counted strings, then opt_flags
        for _ in range(5):
            need(body, pos, 1, "LOAD field terminator")
            pos += 1 + body[pos]
        pos += 1
    lengths, pos = take(body, pos, nfields, "LOAD field lengths")
    fields = []
    for n in lengths:
        name, pos = take(body, pos, n + 1, "LOAD field name")
        fields.append(text(name[:-1]))
    table, pos = take(body, pos, table_len + 1, "LOAD table")
    schema, pos = take(body, pos, db_len + 1, "LOAD schema")
    rest = bytes(body[pos:])
    file_name, _, block = rest.partition(b"\0") if h.type_code == ET.CREATE_FILE else (rest.rstrip(b"\0"), b"", b"")
    return E.LegacyLoadEvent(h, thread_id, exec_time, skip_lines, text(schema[:-1]), text(table[:-1]),
                             text(file_name), tuple(fields), file_id,
                             block if h.type_code == ET.CREATE_FILE else None)


def decode_xa_prepare(h, body, ctx):
    need(body, 0, 13, "XA_PREPARE")
    one_phase, format_id = bool(body[0]), U32.unpack_from(body, 1)[0]
    gl, bl = U32.unpack_from(body, 5)[0], U32.unpack_from(body, 9)[0]
    gtrid, pos = take(body, 13, gl, "XA gtrid")
    bqual, _ = take(body, pos, bl, "XA bqual")
    return E.XaPrepareEvent(h, one_phase, format_id, bytes(gtrid), bytes(bqual))


def decode_transaction_context(h, body, ctx):
    # Post-header (18 bytes): uuid length, thread id, gtid_specified, write set, read set and
    # certification info lengths; the server uuid follows it.
    need(body, 0, 18, "TRANSACTION_CONTEXT")
    uuid_len = body[0]
    thread_id, gtid_specified = U32.unpack_from(body, 1)[0], bool(body[5])
    uuid, _ = take(body, 18, uuid_len, "server uuid")
    return E.TransactionContextEvent(h, text(uuid), thread_id, gtid_specified, bytes(body))


def decode_view_change(h, body, ctx):
    need(body, 0, 48, "VIEW_CHANGE")
    view_id = text(bytes(body[:40]).rstrip(b"\0"))
    return E.ViewChangeEvent(h, view_id, U64.unpack_from(body, 40)[0], bytes(body))


# ---------------------------------------------------------------- MariaDB


def decode_mariadb_gtid(h, body, ctx):
    need(body, 0, 13, "MariaDB GTID")
    seq_no, domain_id, flags = U64.unpack_from(body, 0)[0], U32.unpack_from(body, 8)[0], body[12]
    commit_id = xid = None
    pos = 13
    if flags & 0x02:  # FL_GROUP_COMMIT_ID
        need(body, pos, 8, "commit id")
        commit_id = U64.unpack_from(body, pos)[0]
        pos += 8
    if flags & 0xC0:  # FL_PREPARED_XA | FL_COMPLETED_XA (independent of the commit id, as the server reads it)
        need(body, pos, 6, "XA id")
        n = body[pos + 4] + body[pos + 5]
        raw, _ = take(body, pos, 6 + n, "XA id")
        xid = bytes(raw)
    return E.MariadbGtidEvent(h, domain_id, seq_no, flags, commit_id, xid)


def decode_mariadb_gtid_list(h, body, ctx):
    entries, flags = gtid_list_entries(body)
    return E.MariadbGtidListEvent(h, tuple(str(g) for g in entries), flags)


def decode_binlog_checkpoint(h, body, ctx):
    need(body, 0, 4, "BINLOG_CHECKPOINT")
    name, _ = take(body, 4, U32.unpack_from(body, 0)[0], "checkpoint file")
    return E.BinlogCheckpointEvent(h, text(name))


def decode_start_encryption(h, body, ctx):
    need(body, 0, 17, "START_ENCRYPTION")
    return E.StartEncryptionEvent(h, body[0], U32.unpack_from(body, 1)[0], bytes(body[5:17]))


# ---------------------------------------------------------------- GTID


def decode_gtid(h, body, ctx):
    """GTID / ANONYMOUS_GTID: fixed layout, optional trailing fields by server version."""
    need(body, 0, 25, "GTID")
    flags, sid, gno = body[0], uuid_text(body[1:17]), U64.unpack_from(body, 17)[0]
    fields: dict = {}
    pos = 25
    if len(body) >= pos + 17 and body[pos] == 2:  # logical clock type code
        fields["last_committed"] = U64.unpack_from(body, pos + 1)[0]
        fields["sequence_number"] = U64.unpack_from(body, pos + 9)[0]
        pos += 17
        if len(body) >= pos + 7:
            ts = int.from_bytes(body[pos:pos + 7], "little")
            pos += 7
            immediate = ts & ((1 << 55) - 1)
            original = immediate
            if ts >> 55 and len(body) >= pos + 7:
                original = int.from_bytes(body[pos:pos + 7], "little")
                pos += 7
            fields["immediate_commit_ts"], fields["original_commit_ts"] = immediate, original
            if pos < len(body):
                fields["transaction_length"], pos = packed_len(body, pos)
    return E.GtidEvent(h, sid, gno, None, bool(flags & 1), **fields)


def _zigzag(value: int) -> int:
    return -(value >> 1) - 1 if value & 1 else value >> 1


def decode_gtid_tagged(h, body, ctx):
    """GTID_TAGGED (MySQL 8.4+): serialization-library message of (field id, value) pairs."""
    need(body, 0, 1, "GTID_TAGGED version")
    _size, pos = decode_varlen(body, 1)
    _last_required, pos = decode_varlen(body, pos)
    f: dict = {}
    sid = "00000000-0000-0000-0000-000000000000"
    gno, tag, flags = 0, None, 0
    while pos < len(body):
        fid, pos = decode_varlen(body, pos)
        if fid == 0:
            flags, pos = decode_varlen(body, pos)
        elif fid == 1:
            raw = bytearray()
            for _ in range(16):
                byte, pos = decode_varlen(body, pos)
                raw.append(byte & 0xFF)
            sid = uuid_text(raw)
        elif fid == 2:
            gno, pos = decode_varlen(body, pos)
            gno = _zigzag(gno)
        elif fid == 3:
            n, pos = decode_varlen(body, pos)
            raw, pos = take(body, pos, n, "GTID tag")
            tag = text(raw) or None
        elif fid in (4, 5):
            value, pos = decode_varlen(body, pos)
            f["last_committed" if fid == 4 else "sequence_number"] = _zigzag(value)
        elif fid in (6, 7, 8, 9, 10, 11):
            value, pos = decode_varlen(body, pos)
            key = {6: "immediate_commit_ts", 7: "original_commit_ts", 8: "transaction_length"}.get(fid)
            if key:
                f[key] = value
        else:
            raise EventDecodeError(f"GTID_TAGGED: unknown field id {fid}")
    if "immediate_commit_ts" in f:
        f.setdefault("original_commit_ts", f["immediate_commit_ts"])
    return E.GtidEvent(h, sid, gno, tag, bool(flags & 1), **f)


def decode_previous_gtids(h, body, ctx):
    return E.PreviousGtidsEvent(h, str(MysqlGtidSet.decode(body)))

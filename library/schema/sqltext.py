"""SQL text as the server reads it: executable and versioned comments, quotes, statements of a script.

A QUERY event logs the statement as the client sent it; the server ran what its executable comments
hold (``/*! ... */`` always, ``/*!NNNNN ... */`` from version NNNNN on, ``/*M!NNNNNN ... */`` on MariaDB
only) and ignored every other comment. :func:`ddl_text` gives the text a DDL parser reads
(:func:`binlogd.library.schema.readddl.read_ddl`).
"""

from __future__ import annotations

import re

from binlogd.protocol.decoder import version_tuple

_ANSI_QUOTES = 4        # sql_mode bit: "..." quotes identifiers
_FIRST_WORD = re.compile(r"\s*([A-Za-z]+)")
_DDL_WORDS = frozenset({"CREATE", "ALTER", "DROP", "RENAME", "TRUNCATE"})


def version_id(server_version: str) -> tuple[bool, int]:
    """(is MariaDB, version as the server's MYSQL_VERSION_ID: 10.11.19 → 101119) from an FDE's version;
    an unknown version runs every versioned comment."""
    major, minor, patch = version_tuple(server_version or "")
    number = major * 10000 + minor * 100 + patch if major else 999999
    return "mariadb" in (server_version or "").lower(), number


def _quoted_end(sql: str, i: int) -> int:
    """Index just past the quoted string or identifier starting at ``sql[i]``."""
    quote, j = sql[i], i + 1
    while j < len(sql):
        ch = sql[j]
        if ch == "\\" and quote != "`":
            j += 2
            continue
        if ch == quote:
            if j + 1 < len(sql) and sql[j + 1] == quote:
                j += 2
                continue
            return j + 1
        j += 1
    return len(sql)


def expand_comments(sql: str, mariadb: bool = True, version: int = 999999, ansi_quotes: bool = False) -> str:
    """The statement as the server executed it: executable comments opened, other comments removed,
    and (``ansi_quotes``) double-quoted identifiers turned into backquoted ones."""
    out, i, n = [], 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"`":
            j = _quoted_end(sql, i)
            piece = sql[i:j]
            if ch == '"' and ansi_quotes:
                piece = "`" + piece[1:-1].replace('""', '"').replace("`", "``") + "`"
            out.append(piece)
            i = j
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            end = n if end < 0 else end
            body = sql[i + 2:end]
            special = 2 if body.startswith("M!") else 1 if body.startswith("!") else 0
            if special:
                digits = re.match(r"\d{5,6}" if mariadb else r"\d{5}", body[special:])
                wanted = int(digits[0]) if digits else 0
                runs = (special == 1 or mariadb) and wanted <= version
                out.append(" " + body[special + (len(digits[0]) if digits else 0):] + " " if runs else " ")
            else:
                out.append(" ")
            i = end + 2
        elif ch == "#" or (sql.startswith("--", i) and (i + 2 >= n or sql[i + 2] in " \t\r\n")):
            end = sql.find("\n", i)
            i = n if end < 0 else end
        else:
            out.append(ch)
            i += 1
    return "".join(out).strip().rstrip(";").strip()


def ddl_text(sql: str, sql_mode: int = 0, server_version: str = "") -> str | None:
    """A QUERY event's statement as its server ran it (:func:`expand_comments`, with ANSI_QUOTES from
    ``sql_mode`` and the executable comments of ``server_version``; the START TRANSACTION that MySQL 8 logs
    after CREATE ... SELECT dropped) when it is a statement that may change tables (CREATE, ALTER, DROP,
    RENAME, TRUNCATE); None for any other (DML, BEGIN, COMMIT ...)."""
    mariadb, version = version_id(server_version)
    text = expand_comments(sql, mariadb, version, bool(sql_mode & _ANSI_QUOTES))
    if text.upper().endswith("START TRANSACTION"):
        text = text[:-len("START TRANSACTION")].rstrip()
    m = _FIRST_WORD.match(text)
    return text if m and m[1].upper() in _DDL_WORDS else None


def split_statements(text: str) -> list[str]:
    """The statements of an SQL script, split at semicolons outside quotes and comments (empty ones dropped)."""
    out, i, begin, n = [], 0, 0, len(text)
    while i < n:
        ch = text[i]
        if ch in "'\"`":
            i = _quoted_end(text, i)
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif ch == "#" or text.startswith("-- ", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        else:
            if ch == ";":
                out.append(text[begin:i])
                begin = i + 1
            i += 1
    out.append(text[begin:])
    return [s.strip() for s in out if s.strip()]

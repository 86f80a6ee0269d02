"""An independent oracle for row values: the server's own ``mariadb-binlog``/``mysqlbinlog``.

``mariadb-binlog --base64-output=decode-rows -vv FILE`` prints every row change as::

    ### INSERT INTO `db`.`t`
    ### SET
    ###   @1=1 /* INT meta=0 nullable=0 is_null=0 */
    ###   @2='h\\x00é' /* VARSTRING(1200) meta=1200 nullable=1 is_null=0 */
    ### UPDATE `db`.`t`
    ### WHERE            <- before image
    ###   @1=…
    ### SET              <- after image
    ###   @1=…
    ### DELETE FROM `db`.`t`
    ### WHERE
    ###   @1=…

:func:`parse_verbose` turns that into :class:`RowChange` objects whose images map ``"@N"`` to a
:class:`PrintedValue` (the value exactly as printed, as bytes, plus the type text of the comment and
the is_null flag). It does no interpretation of the values: normalising them to binlogd's JSON forms is
the test's business (see ``tests/integration/test_row_values.py``), because it needs the column types.

The output is read as bytes: mysqlbinlog prints string and blob values as the raw stored bytes between
single quotes, escaping only bytes below 0x20 as ``\\xNN`` (quotes and backslashes are *not*
escaped), so the text is in the column's charset, not necessarily UTF-8. :func:`quote_like_mysqlbinlog`
applies the same escaping to known bytes, so a test can compare ``printed == quote(expected)`` without
the ambiguity of un-escaping (a stored backslash followed by ``x0a`` prints the same as a newline).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

_ROW_START = re.compile(rb"^### (INSERT INTO|UPDATE|DELETE FROM) `((?:[^`]|``)*)`\.`((?:[^`]|``)*)`$")
# The value is everything up to the *last* " /* TYPE meta=N nullable=N is_null=N */" on the line
# (greedy first group): string values may themselves contain " /* ".
_VALUE = re.compile(
    rb"^###   @(\d+)=(.*) /\* (.*?) meta=(\d+) nullable=(\d) is_null=(\d) \*/$", re.DOTALL)

_KINDS = {b"INSERT INTO": "insert", b"UPDATE": "update", b"DELETE FROM": "delete"}


@dataclass(frozen=True)
class PrintedValue:
    """One ``@N=`` line: the printed value (bytes, trailing padding spaces removed), its comment."""

    text: bytes
    type: str          # e.g. "INT", "TIME(2)", "VARSTRING(1200)", "LONGBLOB/LONGTEXT"
    meta: int
    nullable: bool
    is_null: bool

    @property
    def is_quoted(self) -> bool:
        return len(self.text) >= 2 and self.text[:1] == b"'" and self.text[-1:] == b"'"

    @property
    def unquoted(self) -> bytes:
        """The bytes between the quotes of a quoted value (still escaped)."""
        if not self.is_quoted:
            raise ValueError(f"value {self.text[:60]!r} of type {self.type} is not quoted")
        return self.text[1:-1]


@dataclass
class RowChange:
    """One printed row change. ``before`` for update/delete, ``after`` for insert/update."""

    kind: str
    schema: str
    table: str
    before: dict[str, PrintedValue] | None = None
    after: dict[str, PrintedValue] | None = None
    _current: dict | None = field(default=None, repr=False)


def parse_verbose(output: bytes) -> list[RowChange]:
    """Parse ``mysqlbinlog --base64-output=decode-rows -vv`` output into row changes, in file order.

    Raises:
        ValueError: on a ``###`` line it does not understand (the format changed; fix the oracle).
    """
    changes: list[RowChange] = []
    cur: RowChange | None = None
    for line in output.split(b"\n"):
        if not line.startswith(b"###"):
            continue
        m = _ROW_START.match(line)
        if m:
            cur = RowChange(_KINDS[m.group(1)], m.group(2).replace(b"``", b"`").decode(),
                            m.group(3).replace(b"``", b"`").decode())
            changes.append(cur)
            continue
        if cur is None:
            raise ValueError(f"row line before any row header: {line[:120]!r}")
        if line == b"### SET":
            if cur.kind == "delete" or cur.after is not None:
                raise ValueError(f"unexpected SET in a {cur.kind}: {line!r}")
            cur.after = cur._current = {}
            continue
        if line == b"### WHERE":
            if cur.kind == "insert" or cur.before is not None:
                raise ValueError(f"unexpected WHERE in an {cur.kind}")
            cur.before = cur._current = {}
            continue
        m = _VALUE.match(line)
        if m:
            if cur._current is None:
                raise ValueError(f"value line before SET/WHERE: {line[:120]!r}")
            num, text, typ, meta, nullable, is_null = m.groups()
            # Numbers are printed left-justified in a fixed-width field (FLOAT: "%-20g"): strip the padding.
            # Quoted values end with their quote, so rstrip removes no data from them.
            cur._current[f"@{int(num)}"] = PrintedValue(
                text.rstrip(b" "), typ.decode(), int(meta), nullable == b"1", is_null == b"1")
            continue
        raise ValueError(f"unrecognised mysqlbinlog row line: {line[:120]!r}")
    for change in changes:
        change._current = None
        if (change.kind in ("insert", "update") and change.after is None) or \
                (change.kind in ("update", "delete") and change.before is None):
            raise ValueError(f"incomplete {change.kind} of {change.schema}.{change.table}")
    return changes


def quote_like_mysqlbinlog(raw: bytes) -> bytes:
    """The bytes as mysqlbinlog prints a string/blob value, without the quotes.

    ``my_b_write_quoted``: bytes 0x20 and above as they are, lower ones as ``\\xNN`` (lowercase hex).
    """
    return re.sub(rb"[\x00-\x1f]", lambda m: b"\\x%02x" % m.group(0)[0], raw)


def find_mysqlbinlog() -> str | None:
    """Path of mariadb-binlog (preferred) or mysqlbinlog, or None."""
    return shutil.which("mariadb-binlog") or shutil.which("mysqlbinlog")


def run_verbose(path: str | Path, tool: str | None = None, timeout: float = 300) -> bytes:
    """Run ``TOOL --base64-output=decode-rows -vv PATH`` and return its stdout.

    Raises:
        FileNotFoundError: no tool found.
        subprocess.CalledProcessError: the tool failed.
    """
    tool = tool or find_mysqlbinlog()
    if tool is None:
        raise FileNotFoundError("neither mariadb-binlog nor mysqlbinlog is on PATH")
    proc = subprocess.run([tool, "--no-defaults", "--base64-output=decode-rows", "-vv", str(path)],
                          capture_output=True, timeout=timeout, check=True)
    return proc.stdout


def row_changes(path: str | Path, schema: str | None = None, table: str | None = None,
                tool: str | None = None) -> list[RowChange]:
    """The file's row changes as mysqlbinlog prints them, optionally only those of one table."""
    return [c for c in parse_verbose(run_verbose(path, tool))
            if (schema is None or c.schema == schema) and (table is None or c.table == table)]

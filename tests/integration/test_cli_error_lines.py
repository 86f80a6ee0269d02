"""The file tools' error lines: each fact once, and nothing on standard output from a command that fails before
it has anything to say.

- ``binlogd sql`` with a file that is missing, is not a binlog, or comes after a good one: exit 1, one line on
  stderr naming it, and standard output empty (no header of a replay that never began);
- a binlog cut inside an event: ``dump``'s and ``sql``'s error names the event's offset once.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.support.daemon import BINLOGD
from tests.support.paths import CORPUS

GOOD = CORPUS / "rust_mysql_common" / "mariadb-bin.000001"


def _run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([*BINLOGD, *args], capture_output=True, timeout=120, cwd=cwd)


@pytest.mark.parametrize("case", ["missing", "not_a_binlog", "after_a_good_one", "a_directory"])
def test_sql_that_fails_at_once_writes_nothing(case, corpus, tmp_path):
    (tmp_path / "notes.txt").write_text("hello\n")
    (tmp_path / "dir").mkdir()
    args = {"missing": ["nope.000001"], "not_a_binlog": ["notes.txt"], "after_a_good_one": [str(GOOD), "nope.000001"],
            "a_directory": ["dir"]}[case]
    run = _run("sql", *args, cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    assert run.stdout == b""
    lines = run.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"binlogd sql: {args[-1]}: "), lines


def test_a_cut_event_is_named_once(corpus, tmp_path):
    data = GOOD.read_bytes()
    cut = tmp_path / "cut.000001"
    cut.write_bytes(data[:-7])
    for command in ("dump", "sql"):
        run = _run(command, str(cut))
        assert run.returncode == 1, run.stderr
        line = run.stderr.decode().strip()
        offsets = re.findall(r"offset (\d+)", line)
        assert len(offsets) == 1 and "ends inside an event" in line, line

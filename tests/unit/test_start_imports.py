"""Start-up imports (issue 16): ``binlogd info`` and the daemon import what they need when they need it.

``python -m bench.info --start-only`` and ``python -m bench.cdc`` time them; these tests keep what made
them fast from coming back: info's own argument parsing gives what argparse gives, a fresh ``binlogd
info FILE`` imports none of argparse, typing, orjson and the row decoders, and the schema history imports the
DDL parser (sqlglot) only for a DDL statement.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from binlogd.cli import build_parser, info_args
from tests.support.paths import CORPUS

ROW_DECODING = ("binlogd.protocol.rowcodec", "binlogd.protocol.tablemap", "binlogd.protocol.jsonb",
                "binlogd.protocol.values", "binlogd.protocol.jsonrows", "binlogd.schema", "decimal")


@pytest.mark.parametrize("argv", [["info", "a.bin"], ["info", "--json", "a", "b"], ["info", "a", "--json"],
                                  ["info", "-", "--json", "--json"], ["info", "s3://bucket/k"]])
def test_info_arguments_are_what_argparse_gives(argv):
    assert vars(info_args(argv)) == vars(build_parser("info").parse_args(argv))


@pytest.mark.parametrize("argv", [["info"], ["info", "--json"], ["info", "--js", "a"], ["info", "a", "--region", "x"],
                                  ["info", "--", "a"], ["info", "-h"], ["dump", "a"], [], ["info", "a", "-x"]])
def test_other_command_lines_are_left_to_argparse(argv):
    assert info_args(argv) is None


def _modules_after(argv: list[str]) -> tuple[set[str], str]:
    code = ("import sys; from binlogd.cli import main; rc = main(sys.argv[1:]); "
            "print(__import__('json').dumps(sorted(sys.modules)), file=sys.stderr); sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stderr.splitlines()[-1])), done.stdout


def _a_closed_file() -> Path:
    files = sorted(p for p in CORPUS.rglob("*") if p.is_file() and 4 < p.stat().st_size < 4 << 20
                   and p.read_bytes()[:4] == b"\xfebin")
    if not files:
        pytest.skip("no binlog file in the corpus")
    return files[0]


def test_info_imports_no_argparse_typing_orjson_or_row_decoders():
    path = _a_closed_file()
    modules, out = _modules_after(["info", str(path)])
    assert str(path) in out
    unwanted = {"argparse", "typing", "orjson", *ROW_DECODING} & modules
    assert not unwanted, sorted(unwanted)
    modules, out = _modules_after(["info", "--json", str(path)])
    assert json.loads(out)["file"] == str(path) and "orjson" in modules


def test_the_schema_history_imports_the_ddl_parser_only_for_ddl():
    code = """
import sys
import binlogd.daemon.service
from binlogd.protocol import events as E
from binlogd.protocol.constants import EventType as ET
from binlogd.schema import SchemaTracker

def query(sql, pos):
    return E.QueryEvent(E.EventHeader(0, ET.QUERY, 1, 40, pos + 40, 0, pos), 1, 0, 0, "d", sql, {})

tracker = SchemaTracker()
for i, sql in enumerate(["BEGIN", "COMMIT", "INSERT INTO t VALUES (1)", "/* CREATE TABLE x (a INT) */ SAVEPOINT a"]):
    assert tracker.observe(query(sql, 100 * i), "b.000001") == []
before = {m for m in sys.modules if m.startswith(("sqlglot", "binlogd.schema.changes"))}
entries = tracker.observe(query("CREATE TABLE t (a INT)", 900), "b.000001")
after = "sqlglot" in sys.modules
print(sorted(before), [e.table for e in entries], after)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "['t']", "True"]


def test_ctrl_c_wrapped_by_class_creation_exits_130(monkeypatch):
    """Python wraps a KeyboardInterrupt raised in a dataclass field's __set_name__ (a class made during an
    import) in RuntimeError; main() still exits 130, and any other RuntimeError still propagates."""
    import types

    from binlogd import cli

    def interrupted(args):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise RuntimeError("Error calling __set_name__") from exc

    monkeypatch.setattr(cli, "info_args", lambda argv: types.SimpleNamespace(func=interrupted))
    assert cli.main(["info", "f"]) == cli.EXIT_INTERRUPTED

    def broken(args):
        raise RuntimeError("not a Ctrl-C")

    monkeypatch.setattr(cli, "info_args", lambda argv: types.SimpleNamespace(func=broken))
    with pytest.raises(RuntimeError, match="not a Ctrl-C"):
        cli.main(["info", "f"])

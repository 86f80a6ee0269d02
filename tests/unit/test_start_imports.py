"""Start-up imports: ``binlogd info`` and the daemon import what they need when they need it.

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
                "binlogd.protocol.values", "binlogd.library.jsonrows", "binlogd.library.schema", "decimal")


@pytest.mark.parametrize("argv", [["info", "a.bin"], ["info", "--json", "a", "b"], ["info", "a", "--json"],
                                  ["info", "-", "--json", "--json"], ["info", "s3://bucket/k"]])
def test_info_arguments_are_what_argparse_gives(argv):
    assert vars(info_args(argv)) == vars(build_parser("info").parse_args(argv))


@pytest.mark.parametrize("argv", [["sql", "--flashback", "--table", "d.t", "f1", "f2"], ["dump", "--json", "-"],
                                  ["schema", "build", "--seed", "s.sql", "--out", "h", "f"], ["run", "--set", "a.b=1"],
                                  ["demo", "--seconds", "2"]])
def test_one_command_parser_parses_as_the_whole_one(argv, capsys):
    """build_parser(command) builds that command's parser alone: it parses that command's line the same, and
    another command's line not at all."""
    assert vars(build_parser(argv[0]).parse_args(argv)) == vars(build_parser().parse_args(argv))
    other = ["dump", "--json", "-"] if argv[0] != "dump" else ["demo", "--seconds", "2"]
    assert build_parser().parse_args(other).command == other[0]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        build_parser(argv[0]).parse_args(other)
    assert exited.value.code == 2 and "invalid choice" in capsys.readouterr().err


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


_TRACKER = """
import sys
import binlogd.daemon.service
from binlogd.protocol import events as E
from binlogd.protocol.constants import EventType as ET
from binlogd.library.schema import SchemaTracker

def query(sql, pos):
    return E.QueryEvent(E.EventHeader(0, ET.QUERY, 1, 40, pos + 40, 0, pos), 1, 0, 0, "d", sql, {})

def sqlglot():
    return "sqlglot" in sys.modules

tracker = SchemaTracker()
"""


def _run(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", _TRACKER + code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\n")


def test_the_schema_history_imports_the_ddl_parser_only_for_ddl():
    out = _run("""
for i, sql in enumerate(["BEGIN", "COMMIT", "INSERT INTO t VALUES (1)", "/* CREATE TABLE x (a INT) */ SAVEPOINT a"]):
    assert tracker.observe(query(sql, 100 * i), "b.000001") == []
print(sorted(m for m in sys.modules if m.startswith(("sqlglot", "binlogd.library.schema.changes"))))
entries = tracker.observe(query("ALTER TABLE t ADD b INT", 900), "b.000001")
print([e.table for e in entries], sqlglot())
""")
    assert out[:2] == ["[]", "['t'] True"]


def test_the_bench_workloads_ddl_is_followed_without_sqlglot():
    """``binlogd run`` and ``binlogd sql`` on the benchmark's backlog: its CREATE DATABASE and
    CREATE TABLE take the fast path, and give the definitions sqlglot's parser gives."""
    from bench.decode import CREATE_TABLE, SCHEMA

    out = _run(f"""
import json
statements = [{f"CREATE DATABASE {SCHEMA}"!r}, {CREATE_TABLE!r}]
entries = [e for i, sql in enumerate(statements) for e in tracker.observe(query(sql, 100 * i), "b.000001")]
print(sqlglot())
print(json.dumps([e.to_json().decode() for e in entries]))
from binlogd.library.schema import ddl
from binlogd.library.schema.catalog import Catalog
reference = Catalog()
for sql in statements:
    for change in ddl.parse(sql, "d"):
        reference.apply(change)
print(reference.tables == tracker.catalog.tables, reference.databases == tracker.catalog.databases)
""")
    assert out[0] == "False"
    entries = [json.loads(line) for line in json.loads(out[1])]
    assert [(e["schema"], e["table"], e["kind"]) for e in entries] == [(SCHEMA, None, "database"),
                                                                     (SCHEMA, "t", "table")]
    table = entries[1]
    assert [c["name"] for c in table["columns"]][:3] == ["id", "c_int", "c_varchar"] and table["primary_key"] == ["id"]
    assert out[2] == "True True"   # what sqlglot's parser makes of the same statements


def test_a_statement_the_fast_path_leaves_is_parsed_by_sqlglot():
    out = _run("""
entries = tracker.observe(query("CREATE TABLE t (a INT, b INT AS (a + 1) VIRTUAL, CHECK (a > 0))", 100), "b.000001")
print(sqlglot(), [(c.name, c.type) for c in entries[0].state.columns], tracker.unparsed)
""")
    assert out[0] == "True [('a', 'int'), ('b', 'int')] 0"


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

"""The C SQL writer on the every-type table of a real MariaDB: ``binlogd sql`` writes the same bytes with it
as the reference path (row dicts from the generated Python decoders, literals from sqlout.literals), replayed
and inverted. Two servers: FULL row metadata (names and keys from the TABLE_MAP), and MINIMAL metadata with
compressed events (names and key from a schema history seeded with SHOW CREATE TABLE). The reference's SQL
is checked against servers by test_sql_replay and test_sql_flashback."""

from __future__ import annotations

import pytest

from binlogd.cli import main
from binlogd.cli.filetools import dump_events
from binlogd.library.sqlwriter import native
from binlogd.protocol import events as E
from tests.support import every_type as RV
from tests.support.sqlout import events_between, speedups, sql_main

pytest.importorskip("binlogd.library._sqlrows", reason="the C extension is not built (pip install -e .)")
pytestmark = pytest.mark.server


def _sql(capsysbinary, args: list, c_writer: bool) -> tuple[int, bytes, bytes]:
    with speedups(c_writer):
        return sql_main(capsysbinary, args)


@pytest.mark.parametrize("server_name", ["mariadb", "mariadb_minimal"])
def test_every_type_same_sql(server_name, server_binaries, request, tmp_path, capsysbinary, monkeypatch) -> None:
    server = request.getfixturevalue(server_name)
    if server.flavor != "mariadb":
        pytest.skip("the every-type table is MariaDB's")
    minimal = server_name == "mariadb_minimal"
    sc = RV.run_scenario(server, minimal=minimal)
    try:
        _check_every_type(server, sc, minimal, tmp_path, capsysbinary, monkeypatch)
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{sc.schema}`")


def _check_every_type(server, sc, minimal: bool, tmp_path, capsysbinary, monkeypatch) -> None:
    args = [sc.file]
    if minimal:  # the TABLE_MAPs name no columns: a schema history does, from the table's definition
        create = server.sql(f"SHOW CREATE TABLE `{sc.schema}`.`{sc.table}`")[0][1]
        seed = tmp_path / "seed.sql"
        seed.write_text(f"USE `{sc.schema}`;\n{create};\n")
        history = tmp_path / "history.jsonl"
        assert main(["schema", "build", "--seed", str(seed), "--out", str(history), str(sc.file)]) == 0
        capsysbinary.readouterr()
        args = ["--schema-history", history, sc.file]
    calls = []  # what each rows event was written as, by C.rows or (a run of them) C.rows_events
    rows, run = native.C.rows, native.C.rows_events
    monkeypatch.setattr(native.C, "rows", lambda *a: calls.append(a[3]) or rows(*a))
    monkeypatch.setattr(native.C, "rows_events",
                        lambda *a: calls.extend([a[7]] * events_between(*a[2:5])) or run(*a))
    for options in ([], ["--flashback", "--skip-unsafe"]):
        reference = _sql(capsysbinary, [*options, *args], c_writer=False)
        assert reference[0] == 0, reference[2]
        calls.clear()
        written = _sql(capsysbinary, [*options, *args], c_writer=True)
        assert written[0] == 0 and written[2] == reference[2]
        assert written[1] == reference[1]
        # every rows event went through the C writer: the inserts, updates and deletes of the scenario
        update = native.C.W_UPDATE_SWAPPED if options else native.C.W_UPDATE
        assert sorted(set(calls)) == sorted({native.C.W_VALUES, native.C.W_DELETE, update})
        assert len(calls) == sum(isinstance(e, E.RowsEvent) for e in dump_events(sc.file))

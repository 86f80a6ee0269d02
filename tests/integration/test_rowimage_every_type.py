"""The C row image decoder and the generated Python decoders on a real server's binlog: the every-type table
of test_row_values (tests/support/every_type.py), with FULL and with MINIMAL row metadata, decodes to identical
rows (same keys in the same order, same values and types, floats bit for bit). The decoders' other comparisons
(the corpus, edge values, hypothesis) are tests/unit/test_rowimage_speedup.py."""

from __future__ import annotations

import pytest

from binlogd.protocol import rowcodec
from tests.support import every_type as RV
from tests.support.rowcompare import file_rows, same

pytest.importorskip("binlogd.protocol._rowimage", reason="the C extension is not built (pip install -e .)")


@pytest.fixture(autouse=True)
def _restore_mode():
    before = rowcodec.speedups_enabled()
    yield
    rowcodec.use_speedups(before)


@pytest.mark.parametrize("fixture", ["mariadb", "mariadb_minimal"])
def test_mariadb_every_type_identical(request, server_binaries, fixture) -> None:
    server = request.getfixturevalue(fixture)
    if server.flavor != "mariadb":
        pytest.skip("the every-type table is MariaDB's")
    sc = RV.run_scenario(server, minimal=fixture == "mariadb_minimal")
    try:
        data = sc.file.read_bytes()
        rowcodec.use_speedups(False)
        py = file_rows(data)
        rowcodec.use_speedups(True)
        native = file_rows(data)
        assert sum(len(r[1][1]) for r in native if r[1][0] == "ok") >= 8
        assert len(py) == len(native)
        for a, b in zip(py, native):
            assert a[1][0] == b[1][0] == "ok"
            assert same(a[1][1], b[1][1])
    finally:
        server.sql(f"DROP DATABASE IF EXISTS `{sc.schema}`")

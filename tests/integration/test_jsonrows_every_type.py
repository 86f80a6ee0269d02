"""The C JSON row writer on the every-type table of a real MariaDB (FULL and MINIMAL metadata, compressed
events): the same bytes as the reference path (row dicts from the generated Python decoders through
``serialize.dumps``), and what it writes parses back to what the server's SELECT gave."""

from __future__ import annotations

import orjson
import pytest

from binlogd.library import jsonrows
from binlogd.library.serialize import change_events, dumps, event_to_dict, flatten
from binlogd.protocol import events as E
from binlogd.protocol import rowcodec
from binlogd.protocol.reader import iter_events
from tests.support import every_type as RV

pytest.importorskip("binlogd.library._jsonrows", reason="the C extension is not built (pip install -e .)")
pytestmark = pytest.mark.server


@pytest.fixture(params=["mariadb", "mariadb_minimal"])
def scenario(request, server_binaries):
    server = request.getfixturevalue(request.param)
    if server.flavor != "mariadb":
        pytest.skip("the every-type table is MariaDB's")
    sc = RV.run_scenario(server, minimal=request.param == "mariadb_minimal")
    yield sc
    server.sql(f"DROP DATABASE IF EXISTS `{sc.schema}`")


def _write(data: bytes, name: str, native: bool) -> list[bytes]:
    """Every event's dump --json line and every rows event's change lines, with the C writer or the reference."""
    rowcodec.use_speedups(native)
    jsonrows.use_speedups(native)
    out = []
    try:
        for ev in iter_events(data):
            end = ev.header.pos + ev.header.event_length
            for item in flatten(ev):
                if native:
                    out.append(jsonrows.event_json(item, name, end))
                    if isinstance(item, E.RowsEvent):
                        out.append(jsonrows.change_lines(item, name, "0-1-9")[0])
                else:
                    out.append(dumps(event_to_dict(item, name, end)))
                    if isinstance(item, E.RowsEvent):
                        out.append(b"".join(dumps(c) + b"\n" for c in change_events(item, name, "0-1-9")))
    finally:
        rowcodec.use_speedups(True)
        jsonrows.use_speedups(True)
    return out


def test_every_type_same_bytes_and_server_values(scenario) -> None:
    data = scenario.file.read_bytes()
    reference = _write(data, scenario.file.name, native=False)
    native = _write(data, scenario.file.name, native=True)
    assert len(native) == len(reference)
    for k, (a, b) in enumerate(zip(reference, native)):
        assert a == b, f"item {k}:\nreference {a[:400]!r}\nnative    {b[:400]!r}"

    inserted = {}
    for chunk in native:
        for line in chunk.splitlines() if chunk.endswith(b"\n") else ():
            change = orjson.loads(line)
            if change["table"] == scenario.table and change["op"] == "insert":
                row = change["after"]
                inserted[row[scenario.label(RV.BY_NAME["id"])]] = row
    assert sorted(inserted) == RV.INSERTED_IDS
    for rid, row in inserted.items():  # JSON on both sides: 1 is not 1.0 nor "1"
        assert row == orjson.loads(dumps(scenario.expected(scenario.after_insert[rid]))), f"id {rid}"

"""bench.compare's pure parts: the sides' environment, where modules came from, the figures and the table."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from bench import compare

ROOT = Path(__file__).resolve().parents[2]


def test_side_env_drops_binlogd_variables_and_sets_only_its_tree_on_the_path():
    base = {"PATH": "/bin", "PYTHONPATH": "/elsewhere", "BINLOGD_PURE_PYTHON": "1", "BINLOGD_SINK__KIND": "x"}
    env = compare.side_env(base, Path("/ref"), {"BINLOGD_SCHEMA__SOURCE": "none"})
    assert env == {"PATH": "/bin", "PYTHONPATH": "/ref", "BINLOGD_SCHEMA__SOURCE": "none"}
    assert base["PYTHONPATH"] == "/elsewhere"  # the parent's environment is not changed


def test_foreign_modules_names_what_came_from_outside_the_tree(tmp_path):
    tree = tmp_path / "ref"
    modules = {"protocol.decoder": str(tree / "protocol" / "decoder.py"),
               "binlogd.protocol": str(tmp_path / "current" / "protocol" / "__init__.py"),
               "binlogd": str(tree / "binlogd" / "__init__.py"),
               "orjson": "/site-packages/orjson.so",        # not ours: never checked
               "protocol._rowimage": None}                   # no file: nothing to check
    assert compare.foreign_modules(tree, modules) == [f"binlogd.protocol ({tmp_path / 'current' / 'protocol' / '__init__.py'})"]
    assert compare.foreign_modules(tree, {k: v for k, v in modules.items() if k != "binlogd.protocol"}) == []


def test_rounds_alternate_which_side_goes_first():
    assert [compare.round_order(["before", "current"], i)[0] for i in range(4)] == ["before", "current"] * 2


def test_parse_benches_keeps_the_canonical_order_and_rejects_unknown_names():
    assert compare.parse_benches("latency, decode") == ["decode", "latency"]
    for bad in ("decode,spark", " , "):
        with pytest.raises(argparse.ArgumentTypeError):
            compare.parse_benches(bad)


@pytest.mark.parametrize("before, current, higher, ratio, worse", [
    ([100.0, 90.0], [96.0, 80.0], True, 0.96, False),     # rates: best is the highest
    ([100.0], [94.0], True, 0.94, True),
    ([2.0, 3.0], [2.08, 19.0], False, 1.04, False),       # times: best is the lowest
    ([2.0], [2.2], False, 1.1, True),
])
def test_compare_figure(before, current, higher, ratio, worse):
    f = compare.compare_figure(before, current, higher)
    assert f["ratio"] == pytest.approx(ratio)
    assert f["worse"] is worse
    assert (f["before"]["min"], f["before"]["max"], f["before"]["n"]) == (min(before), max(before), len(before))


def test_table_marks_regressions_but_not_the_control():
    figures = {"decode": compare.compare_figure([100_000.0], [90_000.0], True),
               "peer_p99": compare.compare_figure([1.0], [2.0], False),
               "rss": compare.compare_figure([40.0], [40.5], False)}
    header, decode, peer, rss = compare.format_table(figures)
    assert "current/before" in header
    assert "100,000 (100,000-100,000)" in decode and "0.900x" in decode and "WORSE" in decode
    assert "2.000x" in peer and "WORSE" not in peer and "noise" in peer
    assert "WORSE" not in rss and "lower is better" in rss
    assert len({line.index("x  ") for line in (decode, peer, rss)}) == 1  # the columns line up


def test_number_format():
    assert [compare.fmt(v) for v in (123456.7, 123.4, 12.34, 1.234, 0.1234)] == ["123,457", "123", "12.3", "1.23",
                                                                                   "0.123"]


def test_a_child_of_this_tree_runs_from_it_and_reports_its_c_extensions():
    """The bootstrap every measurement uses: this file run by path in a process of the tree, its result on the
    marked line, every module of ours from the tree (the probe imports the decoder, the daemon and the CLI)."""
    side = compare.Side("current", ROOT, "HEAD", "binlogd.", compare.side_env(dict(os.environ), ROOT))
    out = compare.run_child(side, {"kind": "probe"}, timeout=120)
    assert set(out) == {"c_extensions", "row_speedups"}
    assert set(out["c_extensions"]) <= {"_rowimage", "_jsonrows", "_skim"}

"""The C extensions never go missing silently.

- Under CI (``CI`` set) or with ``BINLOGD_REQUIRE_C`` set, every fast path is the C one: each extension of
  ``protocol.speedups.EXTENSIONS`` imports, and each module that can fall back to Python holds the C
  function. Elsewhere (a developer's machine without a compiler) that part is skipped.
- Always: when an extension cannot be imported, ``binlogd dump`` and ``binlogd sql`` say once on stderr which
  fast path is missing, and say nothing when ``BINLOGD_PURE_PYTHON=1`` turned them off on purpose.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from binlogd.protocol import speedups
from tests.support.paths import CORPUS

REQUIRED = bool(os.environ.get("CI") or os.environ.get("BINLOGD_REQUIRE_C", "") not in ("", "0"))


@pytest.mark.skipif(not REQUIRED, reason="the C extensions are required under CI or with BINLOGD_REQUIRE_C only")
def test_every_fast_path_is_the_c_one():
    assert speedups.ENABLED, "BINLOGD_PURE_PYTHON turns the C extensions off in this run"
    assert speedups.missing() == [], speedups.missing_message()
    from binlogd.daemon.sinks import frames
    from binlogd.library import jsonrows, textjson
    from binlogd.library.sqlwriter import native
    from binlogd.protocol import decoder, packet, rowcodec, skim, textrows

    fast = {"protocol.rowcodec.C": rowcodec.C, "protocol.skim.C": skim.C, "protocol.decoder._frame_c":
            decoder._frame_c, "protocol.decoder._rows_like_c": decoder._rows_like_c,
            "protocol.packet._ok_payloads_c": packet._ok_payloads_c, "library.jsonrows.C": jsonrows.C,
            "library.sqlwriter.native.C": native.C, "daemon.sinks.frames.C": frames.C,
            "protocol.textrows.C": textrows.C, "library.textjson.C": textjson.C}
    assert not [name for name, value in fast.items() if value is None], fast
    assert jsonrows._speedups and native.speedups_enabled()
    assert textrows.scan is textrows.C.scan and textjson.lines is textjson.C.lines and frames.redis_xadds is frames.C.redis_xadds
    assert {type(value).__name__ for value in fast.values()} <= {"module", "builtin_function_or_method"}


_BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == {name!r}:
            raise ImportError("blocked by the test")
sys.meta_path.insert(0, Block())
from binlogd.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _a_binlog() -> str:
    files = sorted(p for p in CORPUS.rglob("*") if p.is_file() and 4 < p.stat().st_size < 1 << 20
                   and p.read_bytes()[:4] == b"\xfebin")
    if not files:
        pytest.skip("no binlog file in the corpus")
    return str(files[0])


def _run(blocked: str, argv: list[str], pure: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BINLOGD_")}
    if pure:
        env["BINLOGD_PURE_PYTHON"] = "1"
    return subprocess.run([sys.executable, "-c", _BLOCK.format(name=blocked), *argv], capture_output=True,
                          env=env, timeout=120)


@pytest.mark.parametrize("blocked", sorted(speedups.EXTENSIONS))
def test_a_missing_extension_is_named_once_at_start(blocked):
    path = _a_binlog()
    for argv in (["dump", path], ["sql", path]):
        done = _run(blocked, argv)
        err = done.stderr.decode()
        lines = [ln for ln in err.splitlines() if "C extensions missing" in ln]
        assert len(lines) == 1, f"{argv[0]} with {blocked} missing: stderr:\n{err}"
        assert blocked in lines[0] and speedups.EXTENSIONS[blocked] in lines[0], lines[0]
        others = set(speedups.EXTENSIONS) - {blocked}
        assert not [name for name in others if name in lines[0]], lines[0]
        pure = _run(blocked, argv, pure=True)
        assert "C extensions missing" not in pure.stderr.decode(), pure.stderr.decode()
        assert pure.stdout == done.stdout and pure.returncode == done.returncode, argv

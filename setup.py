"""Build hook for the C extensions; every other setting is in pyproject.toml.

``binlogd.protocol._rowimage`` decodes row images in C, ``binlogd.protocol._skim`` checks runs of events
a raw archive does not decode and ``binlogd.protocol._textrows`` finds the rows of a text-protocol result set
(the decoder layer); ``binlogd.library._jsonrows`` writes row images as JSON bytes and ``binlogd.library._sqlrows``
as SQL, both from the plans of ``protocol/_rowplan.h``, and ``binlogd.library._textjson`` writes text-protocol rows
as JSON and ``binlogd.library._textcopy`` as PostgreSQL COPY text (the output formats; the two JSON writers
share ``library/_jsonstr.h``);
``binlogd.daemon.sinks._frames`` frames the bus sinks' requests. Where they cannot
be compiled, installation goes on and binlogd uses its Python code for the same work, and says so once at start
(``binlogd.protocol.speedups.missing``). With ``BINLOGD_REQUIRE_C=1`` (CI, the Dockerfile, ``scripts/test``) a
failed compile fails the install.
"""

import os

from setuptools import Extension, setup

_OPTIONAL = os.environ.get("BINLOGD_REQUIRE_C", "") in ("", "0")
_PLAN = ["protocol/_rowplan.h"]
_TEXTROW = ["protocol/_textrow.h"]
_JSONSTR = ["library/_jsonstr.h"]
_SQL = ["library/_sqltext.h", "library/_sqlimage.h", "library/_shortest.h", "library/_utf8simd.h"]


def _ext(name: str, source: str, depends: list[str]) -> Extension:
    return Extension(name, [source], depends=depends, include_dirs=["protocol"], optional=_OPTIONAL)


setup(ext_modules=[_ext("binlogd.protocol._rowimage", "protocol/_rowimage.c", _PLAN),
                   _ext("binlogd.protocol._skim", "protocol/_skim.c", []),
                   _ext("binlogd.protocol._textrows", "protocol/_textrows.c", _TEXTROW),
                   _ext("binlogd.library._jsonrows", "library/_jsonrows.c", [*_PLAN, *_JSONSTR]),
                   _ext("binlogd.library._textjson", "library/_textjson.c", [*_TEXTROW, *_JSONSTR]),
                   _ext("binlogd.library._textcopy", "library/_textcopy.c", [*_TEXTROW, *_JSONSTR]),
                   _ext("binlogd.library._sqlrows", "library/_sqlrows.c", [*_PLAN, *_SQL]),
                   _ext("binlogd.daemon.sinks._frames", "daemon/sinks/_frames.c", [])])

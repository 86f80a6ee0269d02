"""Build hook for the optional C extensions; every other setting is in pyproject.toml.

``binlogd.protocol._rowimage`` decodes row images in C, ``binlogd.protocol._jsonrows`` writes them as
JSON bytes (both from the plans of ``protocol/_rowplan.h``), ``binlogd.protocol._skim`` checks runs of
events a raw archive does not decode. All are optional: where they cannot be compiled, installation goes
on and binlogd uses its Python code for the same work (as it does with ``BINLOGD_PURE_PYTHON=1``).
"""

from setuptools import Extension, setup

_PLAN = ["protocol/_rowplan.h"]
setup(ext_modules=[Extension("binlogd.protocol._rowimage", ["protocol/_rowimage.c"], depends=_PLAN, optional=True),
                   Extension("binlogd.protocol._jsonrows", ["protocol/_jsonrows.c"], depends=_PLAN, optional=True),
                   Extension("binlogd.protocol._skim", ["protocol/_skim.c"], optional=True),
                   Extension("binlogd.protocol._sqlrows", ["protocol/_sqlrows.c"], optional=True,
                             depends=[*_PLAN, "protocol/_sqltext.h", "protocol/_sqlimage.h", "protocol/_shortest.h",
                                      "protocol/_utf8simd.h"])])

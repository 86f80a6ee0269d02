"""Build hook for the optional C extension; every other setting is in pyproject.toml.

``binlogd.protocol._rowimage`` decodes row images in C, ``binlogd.protocol._skim`` checks runs of events a raw
archive does not decode. Both are optional: where they cannot be compiled, installation goes on and
binlogd uses its Python code for the same work.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("binlogd.protocol._rowimage", ["protocol/_rowimage.c"], optional=True),
                   Extension("binlogd.protocol._skim", ["protocol/_skim.c"], optional=True)])

"""Build hook for the optional C extension; every other setting is in pyproject.toml.

``protocol._rowimage`` decodes row images in C. It is optional: where it cannot be
compiled, installation goes on and binlogd uses its generated Python decoders.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("protocol._rowimage", ["protocol/_rowimage.c"], optional=True)])

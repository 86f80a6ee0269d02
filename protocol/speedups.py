"""The one switch of binlogd's optional C extensions.

``BINLOGD_PURE_PYTHON=1`` in the environment (any value but empty or ``0``) turns every one of them
off: the row image decoder (``_rowimage``), the JSON row writer (``_jsonrows``), the skim of rows
events and the packet framing loop (``_skim``), and the SQL writer of ``binlogd sql`` (``_sqlrows``,
used by ``binlogd.library.sqlwriter.native``). binlogd then runs its Python code for the same work, with the same
results; so it does where an extension could not be built.
"""

from __future__ import annotations

import os

#: False when ``BINLOGD_PURE_PYTHON`` turns the C extensions off (read once, at import).
ENABLED = os.environ.get("BINLOGD_PURE_PYTHON", "") in ("", "0")

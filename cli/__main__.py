"""``python -m binlogd.cli``: the same as the ``binlogd`` command."""

import sys

from binlogd.cli import main

sys.exit(main())

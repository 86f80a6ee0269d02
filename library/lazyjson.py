"""orjson, imported on first use with Ctrl-C held back: :func:`orjson`.

orjson's module init crashes the process (SIGSEGV) when a KeyboardInterrupt comes up inside it (one of
the imports it does itself fails). Importing it costs about as much as the rest of ``binlogd sql``'s
start, which needs it only for a schema history file or a JSON value its C writer leaves to Python, so
the modules on that path import it through here, when they first need it.
"""

from __future__ import annotations

import sys


def orjson():
    """The orjson module, imported now if it is not yet; a Ctrl-C during the import is raised right
    after it, as a KeyboardInterrupt (in the main thread, with Python's own SIGINT handler; elsewhere
    it is imported as usual)."""
    module = sys.modules.get("orjson")
    if module is not None:
        return module
    import signal
    import threading

    if (signal.getsignal(signal.SIGINT) is not signal.default_int_handler
            or threading.current_thread() is not threading.main_thread()):
        import orjson as module  # Ctrl-C ignored or handled elsewhere: nothing to hold back

        return module
    caught = []
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        import orjson as module
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if caught:
        raise KeyboardInterrupt
    return module

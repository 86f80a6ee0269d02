"""A tiny sd_notify(3) client: tell systemd we are ready, alive, or stopping. No dependency.

``deploy/systemd/binlogd.service`` runs binlogd with ``Type=notify`` and ``WatchdogSec=``; systemd then
passes ``$NOTIFY_SOCKET`` (a unix datagram socket; a leading ``@`` means the abstract namespace) and,
with a watchdog, ``$WATCHDOG_USEC`` and ``$WATCHDOG_PID``. Outside systemd (a terminal, a container,
the tests) the variables are unset, :func:`notify` returns False and does nothing, and
:func:`watchdog_interval` returns None.

The messages the daemon sends (sd_notify(3) names them):

- ``READY=1`` once, after the first dump request to the primary succeeded (``Type=notify`` units stay
  "activating" until then);
- ``WATCHDOG=1`` every :func:`watchdog_interval` / 2 seconds while the daemon makes progress;
- ``STATUS=<one line>`` whenever what the daemon is doing changes (streaming, reconnecting in N s);
- ``STOPPING=1`` on the first SIGTERM/SIGINT.

Several assignments may go in one datagram, separated by newlines (``"READY=1\\nSTATUS=streaming"``).
Nothing secret should ever be put in a STATUS: systemd shows it to every local user.
"""

from __future__ import annotations

import os
import socket

__all__ = ["notify", "watchdog_interval"]


def _address(value: str) -> str | bytes | None:
    """The socket address for ``$NOTIFY_SOCKET``: a path, or bytes for the abstract namespace."""
    if value.startswith("@") and len(value) > 1:
        return b"\0" + value[1:].encode()
    if value.startswith("/"):
        return value
    return None  # "vsock:…" and anything else this client does not speak


def notify(state: str) -> bool:
    """Send ``state`` (one or more ``KEY=value`` lines) to systemd's notification socket.

    Returns True when the datagram was sent, False when ``$NOTIFY_SOCKET`` is unset or unusable or
    the send failed. It never raises: losing a notification must not stop the daemon (systemd's
    own timeouts report a daemon that stops talking).
    """
    target = os.environ.get("NOTIFY_SOCKET", "")
    address = _address(target) if target else None
    if address is None or not state:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall(state.encode("utf-8"))
    except (OSError, UnicodeError):
        return False
    return True


def watchdog_interval() -> float | None:
    """The watchdog period systemd expects pings within, in seconds, or None when there is no watchdog.

    Read from ``$WATCHDOG_USEC``; None when it is unset, not a positive integer, or when
    ``$WATCHDOG_PID`` is set and names another process (the variable was inherited, not meant for
    us). Ping with ``notify("WATCHDOG=1")`` at half this period.
    """
    usec = os.environ.get("WATCHDOG_USEC", "").strip()
    if not usec.isdigit() or int(usec) <= 0:
        return None
    pid = os.environ.get("WATCHDOG_PID", "").strip()
    if pid and (not pid.isdigit() or int(pid) != os.getpid()):
        return None
    return int(usec) / 1_000_000

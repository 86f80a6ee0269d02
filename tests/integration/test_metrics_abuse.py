"""Idle and slow (slowloris) HTTP clients on the metrics port do not stall the daemon (issue 19, #1).

``binlogd run`` runs as a subprocess with RLIMIT_NOFILE at 256 while 300 idle and 100 slowloris
clients hold connections to its metrics port (each reconnects a second after the server drops it),
more than the fd limit would allow if the server took them all. Meanwhile a load runs against the real
MariaDB in three phases; after each, every insert must be in the sink (read back and compared with
the ids written), the checkpoint must reach the primary's ``SHOW MASTER STATUS``, /healthz must
answer, and the daemon's open fds must stay well under the limit.
"""

from __future__ import annotations

import os
import selectors
import socket
import threading
import time
import urllib.request

import pytest

from binlogd.cli.localserver import free_port
from tests.support.daemon import DaemonProcess, base_overrides, read_changes, wait_caught_up, wait_until

pytestmark = pytest.mark.server

NOFILE = 256
CAP = NOFILE // 8  # daemon.http.connection_cap under that limit
IDLE, SLOW = 300, 100
PHASES, PER_PHASE = 3, 40


class Attack:
    """``idle`` clients that connect and send nothing, ``slow`` ones that send a request head one
    byte every half second; a client the server drops reconnects a second later. One thread.

    Fields:
        dropped: clients the server closed (EOF or reset) so far.
        attempts: connections tried so far; connects: made so far.
    """

    def __init__(self, port: int, idle: int, slow: int):
        self.port, self.dropped, self.attempts, self.connects = port, 0, 0, 0
        self._clients = [{"slow": i >= idle, "sock": None, "retry_at": 0.0} for i in range(idle + slow)]
        self._sel = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="attack", daemon=True)

    def __enter__(self) -> Attack:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)
        for client in self._clients:
            if client["sock"] is not None:
                client["sock"].close()

    @property
    def held(self) -> int:
        """Clients connected now (from their side)."""
        return sum(1 for c in self._clients if c["sock"] is not None)

    def _drop(self, client: dict) -> None:
        self._sel.unregister(client["sock"])
        client["sock"].close()
        client["sock"], client["retry_at"] = None, time.monotonic() + 1.0
        self.dropped += 1

    def _run(self) -> None:
        next_byte = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            for client in self._clients:
                if client["sock"] is None and now >= client["retry_at"]:
                    self.attempts += 1
                    try:
                        sock = socket.create_connection(("127.0.0.1", self.port), timeout=0.2)
                    except OSError:
                        client["retry_at"] = now + 1.0
                        continue
                    sock.setblocking(False)
                    if client["slow"]:
                        sock.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                    client["sock"] = sock
                    self._sel.register(sock, selectors.EVENT_READ, client)
                    self.connects += 1
            if now >= next_byte:  # slowloris: one more header byte, never the blank line
                next_byte = now + 0.5
                for client in self._clients:
                    if client["slow"] and client["sock"] is not None:
                        try:
                            client["sock"].send(b"a")
                        except OSError:
                            self._drop(client)
            for key, _ in self._sel.select(timeout=0.1):
                client = key.data
                try:
                    data = client["sock"].recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    self._drop(client)


def _healthz(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
        return r.status


def _fds(pid: int) -> tuple[int, int]:
    """(open fds, of which sockets) of process ``pid`` (an fd closed while it is listed is not counted)."""
    links = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except FileNotFoundError:
            pass
    return len(links), sum(1 for link in links if link.startswith("socket:"))


def test_idle_and_slow_clients_do_not_stall_the_daemon(mariadb, fresh_db, tmp_path):
    port = free_port()
    checkpoint = tmp_path / "checkpoint.json"
    daemon = DaemonProcess(base_overrides(mariadb, tmp_path, **{"metrics.listen": f"127.0.0.1:{port}"}),
                           nofile=NOFILE)
    try:
        daemon.wait_streaming()
        conn = mariadb.connect(database=fresh_db)
        cur = conn.cursor()
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
        conn.commit()
        written: list[int] = []
        with Attack(port, IDLE, SLOW) as attack:
            wait_until(lambda: attack.attempts >= IDLE + SLOW, timeout=120, what="every attacker tried once")
            for phase in range(PHASES):
                for i in range(PER_PHASE):
                    key = phase * PER_PHASE + i + 1
                    cur.execute("INSERT INTO t VALUES (%s, %s)", (key, f"phase {phase}"))
                    conn.commit()
                    written.append(key)
                    time.sleep(0.05)  # a phase lasts 2 s, the attack > 6 s: past the request deadline
                wait_caught_up(mariadb, checkpoint, timeout=60, daemon=daemon)
                inserted = [c["after"]["id"] for c in read_changes(tmp_path / "sink")
                            if c["op"] == "insert" and c["table"] == "t"]
                assert inserted == written, f"phase {phase}: the sink holds {len(inserted)} of {len(written)}"
                assert _healthz(port) == 200
                fds, sockets = _fds(daemon.pid)
                assert fds < NOFILE // 2, f"phase {phase}: the daemon holds {fds} fds"
                assert sockets >= CAP, f"phase {phase}: only {sockets} sockets: the attack holds no slots"
            # the server dropped them, they came back: the pressure lasted the whole run
            assert attack.dropped > IDLE + SLOW and attack.connects > 2 * (IDLE + SLOW), (attack.dropped,
                                                                                       attack.connects)
        conn.close()
        assert daemon.terminate() == 0, daemon.stderr
        assert " ERROR " not in daemon.stderr and "Traceback" not in daemon.stderr, daemon.stderr
    finally:
        daemon.kill()

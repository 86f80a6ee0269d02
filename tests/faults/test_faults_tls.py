"""Fault suite 6: TLS with a self-signed CA, certificate and host name checks, and secrets kept out of logs and metrics.

The load and the exactly-once check are in :mod:`tests.support.faults`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import socket
import subprocess
import traceback
import urllib.request
from pathlib import Path

import pymysql
import pytest

from binlogd.cli.localserver import LocalServer, free_port
from binlogd.cli.servertemplate import run_sql
from tests.support.daemon import (
    DaemonProcess,
    base_overrides,
    wait_caught_up,
)
from tests.support.faults import (
    SCHEMA,
    Writer,
    check_exactly_once,
    create_tables,
    local_server,
)

pytestmark = pytest.mark.server


# =========================================================================== 6. security

SECRET = "Zq9-TLS-s3cr3t-Pw!x7"
TLS_USER = "tlsrepl"


def make_certs(d: Path) -> dict[str, Path]:
    """A CA, a server certificate it signs (SAN IP 127.0.0.1, CN binlogd-test-server), and an unrelated CA."""
    d.mkdir(parents=True, exist_ok=True)
    try:
        return _certs_cryptography(d)
    except ImportError:
        pass
    if shutil.which("openssl") is None:
        pytest.skip("neither the cryptography package nor the openssl CLI is available")
    return _certs_openssl(d)


def _certs_cryptography(d: Path) -> dict[str, Path]:
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.timezone.utc)

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def ca(cn):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(name(cn))
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=30))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                               critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .sign(key, hashes.SHA256()))
        return key, cert

    def pem(cert):
        return cert.public_bytes(serialization.Encoding.PEM)

    ca_key, ca_cert = ca("binlogd test CA")
    _, other_cert = ca("some other CA")
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(name("binlogd-test-server")).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    out = {"ca": d / "ca.pem", "other_ca": d / "other-ca.pem", "cert": d / "server.pem", "key": d / "server.key"}
    out["ca"].write_bytes(pem(ca_cert))
    out["other_ca"].write_bytes(pem(other_cert))
    out["cert"].write_bytes(pem(cert))
    out["key"].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()))
    return out


def _certs_openssl(d: Path) -> dict[str, Path]:
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    for ca in ("ca", "other-ca"):
        run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "30",
            "-subj", f"/CN=binlogd {ca}", "-keyout", str(d / f"{ca}.key"), "-out", str(d / f"{ca}.pem"),
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=binlogd-test-server",
        "-keyout", str(d / "server.key"), "-out", str(d / "server.csr"))
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n"
                               "extendedKeyUsage=serverAuth\n")
    run("x509", "-req", "-in", str(d / "server.csr"), "-CA", str(d / "ca.pem"), "-CAkey", str(d / "ca.key"),
        "-CAcreateserial", "-days", "30", "-extfile", str(d / "ext.cnf"), "-out", str(d / "server.pem"))
    return {"ca": d / "ca.pem", "other_ca": d / "other-ca.pem", "cert": d / "server.pem", "key": d / "server.key"}


class SocketServer(LocalServer):
    """A LocalServer whose own admin and writer connections use the Unix socket (TCP needs TLS there)."""

    def sql(self, statement: str, *, database: str | None = None, timeout: float = 60.0) -> list[tuple]:
        return run_sql(self.binaries, statement, unix_socket=self.socket, user=self.user, password=self.password,
                        database=database, timeout=timeout)

    def connect(self, *, repl: bool = False, **overrides):
        overrides.setdefault("autocommit", True)
        kw = dict(unix_socket=str(self.socket), user=self.user, password=self.password)
        kw.update(overrides)
        return pymysql.connect(**kw)


def _listening(pid: int) -> list[tuple[str, int]]:
    """The TCP sockets process ``pid`` listens on, as (address, port)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    out = []
    for table, fam in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
                f = line.split()
                if f[3] != "0A" or f[9] not in inodes:  # 0A = LISTEN
                    continue
                addr, port = f[1].split(":")
                raw = bytes.fromhex(addr)
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                out.append((socket.inet_ntop(fam, raw), int(port, 16)))
    return out


def _chain_text(exc: BaseException) -> str:
    """str/repr/traceback of an exception and everything it chains to (suppressed context included)."""
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        parts += [str(exc), repr(exc), "".join(traceback.format_exception(exc)), repr(getattr(exc, "args", ()))]
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)


async def test_tls_verify_identity_and_secrets(tmp_path):
    certs = make_certs(tmp_path / "certs")
    tls_args = [f"--ssl-ca={certs['ca']}", f"--ssl-cert={certs['cert']}", f"--ssl-key={certs['key']}",
                "--require-secure-transport=ON"]
    with local_server(tls_args, cls=SocketServer) as srv:
        assert srv.sql("SELECT @@have_ssl")[0][0] == "YES", srv.sql("SHOW VARIABLES LIKE '%ssl%'")
        create_tables(srv)
        srv.sql(f"CREATE USER '{TLS_USER}'@'%' IDENTIFIED BY '{SECRET}' REQUIRE SSL")
        srv.sql(f"GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO '{TLS_USER}'@'%'")
        env = {"BINLOGD_SOURCE__PASSWORD": SECRET}  # not on the command line, where ps would show it

        def overrides(workdir, **extra):
            o = base_overrides(srv, workdir, **{"source.user": TLS_USER, "filters.include_schemas": SCHEMA,
                                                "source.tls.mode": "verify_identity",
                                                "source.tls.ca_file": str(certs["ca"]), **extra})
            del o["source.password"]
            return o

        captured: list[str] = []
        results = {}
        problems: list[str] = []  # checked last, so that every case runs and is reported

        # -- verify_identity with the right CA: streams; metrics only on the configured address
        mport = free_port()
        o = overrides(tmp_path / "ok", **{"metrics.listen": f"127.0.0.2:{mport}"})
        writer = Writer(srv, total=40, rate=100, seed=3)
        daemon = DaemonProcess(o, env=env)
        try:
            daemon.wait_streaming(timeout=60)
            writer.start()
            writer.wait_count(40, timeout=60)
            writer.stop()
            wait_caught_up(srv, tmp_path / "ok" / "checkpoint.json", timeout=60, daemon=daemon)
            with urllib.request.urlopen(f"http://127.0.0.2:{mport}/metrics", timeout=5) as resp:
                body = resp.read().decode()
            for path in ("/healthz", "/readyz"):
                with contextlib.suppress(Exception), urllib.request.urlopen(f"http://127.0.0.2:{mport}{path}",
                                                                          timeout=5) as resp:
                    captured.append(resp.read().decode())
            captured.append(body)
            assert "binlogd_transactions_total" in body
            listening = _listening(daemon.pid)
            assert listening == [("127.0.0.2", mport)], f"the daemon listens on {listening}"
            with pytest.raises(OSError), socket.create_connection(("127.0.0.1", mport), timeout=2):
                pass
            rc = daemon.terminate()
            assert rc == 0, f"exit {rc}:\n{daemon.stderr}"
            results["verify_identity"] = f"streamed {len(writer.committed)} transactions, exit {rc}"
        finally:
            writer.halt()
            if daemon.running:
                daemon.kill()
            captured.append(daemon.stderr)
        check_exactly_once(srv, tmp_path / "ok" / "sink", writer, "TLS verify_identity")

        # -- failures, fatal at once (README's exit codes): (what, overrides, expected text, exit code)
        cases = [
            ("wrong CA", {"source.tls.ca_file": str(certs["other_ca"])}, r"certificate verify failed", 6),
            ("wrong host name", {"source.host": "localhost"}, r"certificate verify failed|match|mismatch", 6),
            # the user is REQUIRE SSL and the server require_secure_transport=ON: refused as an auth failure
            ("TLS off", {"source.tls.mode": "disabled"}, r"authentication failed|insecure transport", 3),
        ]
        for what, extra, pattern, code in cases:
            o = overrides(tmp_path / what.replace(" ", "_"), **{"reconnect.max_attempts": "3",
                                                              "reconnect.initial_seconds": "0.1", **extra})
            d = DaemonProcess(o, env=env)
            try:
                rc = d.wait(60)
            finally:
                if d.running:
                    d.kill()
            captured.append(d.stderr)
            errors = [ln for ln in d.stderr.splitlines() if re.search(r" (ERROR|WARNING) ", ln)]
            results[what] = f"exit {rc}; first message: {errors[0] if errors else d.stderr[:300]}"
            assert "streaming from" not in d.stderr, f"{what}: it streamed:\n{d.stderr}"
            assert "Traceback" not in d.stderr, d.stderr
            assert rc == code, f"{what}: exit {rc}, documented {code}:\n{d.stderr}"
            if not (errors and re.search(pattern, errors[0], re.I)):
                problems.append(f"{what}: no clear TLS error (wanted /{pattern}/), exit {rc}:\n{d.stderr}")

        # -- verify_ca checks the chain only: "localhost" is fine there
        o = overrides(tmp_path / "verify_ca", **{"source.host": "localhost", "source.tls.mode": "verify_ca"})
        d = DaemonProcess(o, env=env)
        try:
            d.wait_streaming(timeout=60)
            assert d.terminate() == 0
        finally:
            if d.running:
                d.kill()
            captured.append(d.stderr)
        results["verify_ca + localhost"] = "streamed"

        # -- exceptions raised in-process (wrong CA; wrong password over TLS) and config reprs never hold it
        from binlogd.daemon.config import load_config
        from binlogd.daemon.replication.connection import SourceConnection

        async def attempt(**extra):
            cfg = load_config(None, env={"BINLOGD_SOURCE__PASSWORD": SECRET}, overrides=overrides(tmp_path / "x",
                                                                                                   **extra))
            captured.extend([repr(cfg), str(cfg), repr(cfg.source), str(cfg.source.password)])

            async def go():
                conn = SourceConnection(cfg.source)
                try:
                    await conn.open()
                finally:
                    await conn.close()

            with pytest.raises(Exception) as info:
                await go()
            captured.append(_chain_text(info.value))
            return info.value

        exc = await attempt(**{"source.tls.ca_file": str(certs["other_ca"])})
        results["in-process wrong CA"] = f"{type(exc).__name__}(kind={getattr(exc, 'kind', None)}): {exc}"
        if not re.search(r"certificate verify failed", str(exc), re.I):
            problems.append(f"in-process wrong CA: the exception does not say why: {exc!r}")
        srv.sql(f"ALTER USER '{TLS_USER}'@'%' IDENTIFIED BY 'other-{SECRET}'")
        exc = await attempt()
        results["in-process wrong password"] = f"{type(exc).__name__}(kind={getattr(exc, 'kind', None)}): {exc}"
        assert getattr(exc, "kind", None) == "auth", exc

        print("\n[TLS] " + "\n[TLS] ".join(f"{k}: {v}" for k, v in results.items()))
        leaks = [text[:200] for text in captured if SECRET in text]
        assert not leaks, f"the password appears in captured output: {leaks}"
        assert not problems, "\n\n".join(problems)

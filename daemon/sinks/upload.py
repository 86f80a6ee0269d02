"""Uploads of the raw archive's closed binlog files to an object store (``[sink.upload]``).

A file is closed once the stream has moved past the ROTATE that ends it; it may be uploaded once a
saved checkpoint names a later file (then no restart rewrites or truncates it). The archive sink
tells :meth:`Uploader.release` which file its last saved checkpoint names; every archive file
numbered before it is then due. Nothing is queued in memory only: the queue is the archive directory
itself (due files not yet in the journal), so uploads resume after a crash and files wait on local
disk while the store is down. One worker thread uploads, oldest first; the stream never waits for it.

Each upload is multipart for files of two parts or more (``part_size``), then verified: the size the
store lists, and its checksum (S3's ETag: the MD5 of the object, or of its parts' MD5s for a multipart
upload; a store without one, like ``file://``, is read back and hashed). Only a verified file is
written to the journal (``.uploaded`` in the archive directory, one name per line, fsynced) and,
with ``delete_after_upload``, removed locally.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
from pathlib import Path

from binlogd.library import storage

JOURNAL = ".uploaded"
_NUMBERED = re.compile(r"^[^.].*\.(\d+)$")  # binlog file names: base.NNNNNN


def file_number(name: str) -> int | None:
    """The numeric extension of a binlog file name (``mysql-bin.000042``: 42), None for other names."""
    m = _NUMBERED.match(name)
    return int(m.group(1)) if m else None


class UploadError(storage.StorageError):
    """An upload that did not verify: the store's size or checksum differs from the local file's."""


class Uploader:
    """Uploads closed archive files in a worker thread.

    Fields:
        directory: the archive directory; url: where the files go (``url/<file name>``).
        pending: names of due files not yet uploaded and verified (the worker's queue).
    """

    def __init__(self, directory: str | os.PathLike, url: str, options: storage.Options | None = None, *,
                 delete_after_upload: bool = False, part_size: int = 64 << 20, retry_seconds: float = 5.0,
                 metrics=None, log: logging.Logger | None = None):
        self.directory = Path(directory)
        self.url = url.rstrip("/")
        self.options = options
        self.delete_after_upload = delete_after_upload
        self.part_size = part_size
        self.retry_seconds = retry_seconds
        self.metrics = metrics
        self.log = log or logging.getLogger("binlogd")
        self.pending: list[str] = []
        self._released = -1          # files numbered below this are due
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._fs = self._root = None

    def release(self, active: str | None) -> None:
        """Every archive file numbered before ``active`` (the file a saved checkpoint names) is due.

        Cheap when ``active`` did not change (called at every sync); starts the worker on first use.
        """
        number = file_number(active) if active else None
        if number is None or number <= self._released:
            return
        self._released = number
        self._scan()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="binlogd-upload", daemon=True)
            self._thread.start()
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the worker after the request in flight (an upload cut short is redone at the next start)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _scan(self) -> None:
        """Queue the due files of the directory that the journal does not list, oldest first."""
        done = self._journal()
        names = []
        with os.scandir(self.directory) as it:
            for entry in it:
                number = file_number(entry.name)
                if number is not None and number < self._released and entry.name not in done and entry.is_file():
                    names.append((number, entry.name))
        with self._lock:
            self.pending = [name for _, name in sorted(names)]
        self._gauge()

    def _journal(self) -> set[str]:
        try:
            return set((self.directory / JOURNAL).read_text().split())
        except FileNotFoundError:
            return set()

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.upload_pending.set(len(self.pending))

    def _run(self) -> None:
        while not self._stopping.is_set():
            with self._lock:
                name = self.pending[0] if self.pending else None
            if name is None:
                self._wake.wait()
                self._wake.clear()
                continue
            try:
                self._upload(name)
            except Exception as exc:  # noqa: BLE001 - a store's client raises its own types: count, log, retry
                if self.metrics is not None:
                    self.metrics.upload_errors.inc()
                self.log.warning("upload of %s to %s failed (retrying in %g s): %s", name, self.url,
                                 self.retry_seconds, exc)
                self._stopping.wait(self.retry_seconds)
                continue
            with self._lock:
                if self.pending and self.pending[0] == name:
                    del self.pending[0]
            self._gauge()

    def _upload(self, name: str) -> None:
        """Upload ``name``, verify it, journal it, delete it if asked.

        Raises:
            StorageError, UploadError, OSError: the file stays due.
        """
        local = self.directory / name
        uri = f"{self.url}/{name}"
        if self._fs is None:
            self._fs, self._root = storage.filesystem(self.url, self.options)
            if storage.scheme(self.url) == "file":
                self._fs.makedirs(self._root, exist_ok=True)
        fs, remote = self._fs, f"{self._root.rstrip('/')}/{name}"
        size = local.stat().st_size
        try:
            fs.put_file(str(local), remote, chunksize=self.part_size)
            fs.invalidate_cache(remote)
            listed = fs.info(remote)
        except Exception as exc:  # noqa: BLE001
            raise storage.StorageError(f"{uri}: {type(exc).__name__}: {str(exc).strip()[:300]}") from None
        if int(listed.get("size", -1)) != size:
            raise UploadError(f"{uri}: the store lists {listed.get('size')} bytes, {local} has {size}")
        etag = (listed.get("ETag") or "").strip('"')
        if etag:
            want = _etag(local, self._parts(size, etag))
        else:  # no checksum listed (file://): hash what the store holds
            etag, want = _md5_stream(fs.open(remote, "rb", block_size=8 << 20)), _md5_stream(open(local, "rb"))
        if etag != want:
            raise UploadError(f"{uri}: checksum {etag} from the store, {want} for {local}")
        with open(self.directory / JOURNAL, "a") as fh:
            fh.write(name + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        if self.metrics is not None:
            self.metrics.upload_bytes.inc(size)
        self.log.info("uploaded %s to %s (%d bytes, verified)", name, uri, size)
        if self.delete_after_upload:
            local.unlink()

    def _parts(self, size: int, etag: str) -> int:
        """The part size behind an ETag: ours for a multipart one (``md5-N``), 0 for a single-part one."""
        return self.part_size if "-" in etag else 0


def _md5_stream(fh) -> str:
    with fh:
        digest = hashlib.md5(usedforsecurity=False)
        while block := fh.read(8 << 20):
            digest.update(block)
    return digest.hexdigest()


def _etag(path: Path, part_size: int) -> str:
    """S3's ETag for ``path``: its MD5, or with ``part_size`` the MD5 of its parts' MD5s and ``-<parts>``."""
    if not part_size:
        return _md5_stream(open(path, "rb"))
    digests = []
    with open(path, "rb") as fh:
        while block := fh.read(part_size):
            digests.append(hashlib.md5(block, usedforsecurity=False).digest())
    return f"{hashlib.md5(b''.join(digests), usedforsecurity=False).hexdigest()}-{len(digests)}"

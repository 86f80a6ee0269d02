"""Where binlog files live: local paths and object-store URIs behind one small interface.

Every reader (``binlogd info``/``dump``, the Spark source) and the daemon's uploader go through
here. Plain paths and ``file://`` URIs are the local filesystem; ``s3://``, ``gs://``,
``abfs://`` and ``hdfs://`` are object stores (or HDFS), read with ranged requests, never copied
whole to local disk.

Built on fsspec (the ``storage`` extra: fsspec + s3fs; ``gcsfs``/``adlfs`` for ``gs://``/``abfs://``,
pyarrow for ``hdfs://``), not on pyarrow's filesystems, because: s3fs reports the ETag the store
computed for an object (the uploader's check after upload; pyarrow's FileInfo carries no checksum),
fsspec has Azure Blob (pyarrow only from 20 on, without SAS/anonymous), and its file objects are
plain seekable Python files whose reads are ranged GETs of exactly the bytes asked for. Local
paths need neither package: they are opened with :func:`open`.

Credentials come from each store's standard chain (environment, profile, instance role);
:class:`Options` adds an endpoint (default: ``AWS_ENDPOINT_URL``), a region and path-style addressing.
"""

from __future__ import annotations

import io
import os
import re

from binlogd.protocol.errors import BinlogError
from binlogd.protocol.records import record

TYPE_CHECKING = False  # typing itself is not imported at run time (start-up: `binlogd info`)
if TYPE_CHECKING:
    from typing import BinaryIO

_URI = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
REMOTE_SCHEMES = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "hdfs"})
_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "abfs": "adlfs", "abfss": "adlfs",
             "az": "adlfs", "hdfs": "pyarrow"}


class StorageError(BinlogError):
    """A store cannot be reached or read: a missing bucket or object, refused credentials, no client package.

    The message names the URI; ``missing`` is True when the object or bucket does not exist.
    """

    def __init__(self, message: str, missing: bool = False):
        super().__init__(message)
        self.missing = missing


@record
class Options:
    """How to reach an object store. Fields (all optional):

    endpoint: the store's URL (an S3-compatible server); default ``AWS_ENDPOINT_URL`` from the environment.
    region: the bucket's region (S3).
    path_style: address buckets as ``endpoint/bucket/key`` rather than ``bucket.endpoint/key`` (S3).
    """

    endpoint: str | None = None
    region: str | None = None
    path_style: bool = False


_default_options = Options()


def configure(options: Options) -> None:
    """Make ``options`` the default of every call here that is given none (``info``/``dump``'s flags)."""
    global _default_options
    _default_options = options


def scheme(path: str | os.PathLike) -> str | None:
    """The URI scheme of ``path`` (``s3``, ``file`` ...), None for a plain path."""
    m = _URI.match(os.fspath(path))
    return m.group(1).lower() if m else None


def is_remote(path: str | os.PathLike) -> bool:
    """True when ``path`` is an object-store (or HDFS) URI, False for a plain path or ``file://``.

    Raises:
        StorageError: a URI whose scheme is not one of the supported ones.
    """
    s = scheme(path)
    if s is None or s == "file":
        return False
    if s not in REMOTE_SCHEMES:
        raise StorageError(f"{path}: unsupported URI scheme {s}:// (use s3, gs, abfs, hdfs, file or a path)")
    return True


def local_path(path: str | os.PathLike) -> str:
    """A plain path or ``file://`` URI as a local path (``file:///a/b`` is ``/a/b``)."""
    path = os.fspath(path)
    if path.startswith("file://"):
        return path[len("file://"):]
    return path


def filesystem(uri: str, options: Options | None = None):
    """The fsspec filesystem of a remote ``uri`` and the path inside it.

    Returns:
        (filesystem, path without the scheme).
    Raises:
        StorageError: the scheme's client package is not installed.
    """
    s = scheme(uri)
    opts = options or _default_options
    kwargs: dict = {}
    if s in ("s3", "s3a"):
        client: dict = {}
        endpoint = opts.endpoint or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            client["endpoint_url"] = endpoint
        if opts.region:
            client["region_name"] = opts.region
        kwargs["client_kwargs"] = client
        if opts.path_style:
            kwargs["config_kwargs"] = {"s3": {"addressing_style": "path"}}
    try:
        import fsspec
        from fsspec.core import split_protocol

        fs = fsspec.filesystem("s3" if s == "s3a" else s, **kwargs)
    except ImportError as exc:
        raise StorageError(f"{uri}: reading {s}:// needs the {_PACKAGES.get(s, s)} package "
                           f"(pip install 'binlogd[storage]'): {exc}") from None
    return fs, split_protocol(uri)[1]


def _error(uri: str, exc: BaseException) -> StorageError:
    """One line naming ``uri`` for what the store said."""
    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, FileNotFoundError):
        return StorageError(f"{uri}: no such object or bucket", missing=True)
    if isinstance(exc, PermissionError):
        return StorageError(f"{uri}: access denied (check the store's credentials): {_first_line(exc)}")
    return StorageError(f"{uri}: {type(exc).__name__}: {_first_line(exc)}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


class CountingReader(io.RawIOBase):
    """A seekable binary file that counts the bytes read through it. Fields: ``bytes_read``, ``size``."""

    def __init__(self, raw: BinaryIO, size: int):
        self._raw, self.size, self.bytes_read = raw, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        self.bytes_read += len(data)
        return data

    def read1(self, n: int = -1) -> bytes:
        return self.read(n)

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._raw.close()
        super().close()


def open_input(uri: str | os.PathLike, options: Options | None = None, block_size: int = 0) -> CountingReader:
    """Open ``uri`` for reading: every read of a remote object is a ranged request for the bytes asked.

    Args:
        block_size: 0 reads exactly what each call asks (``info``); more reads ahead that many bytes
            (sequential readers: ``dump``, Spark), so memory stays bounded by it whatever the object's size.
    Returns:
        A :class:`CountingReader` (``size``: the object's length from the store's metadata).
    Raises:
        StorageError: missing object or bucket, refused credentials, unreachable store (naming ``uri``).
        OSError: a local file cannot be opened.
    """
    if not is_remote(uri):
        fh = open(local_path(uri), "rb")
        return CountingReader(fh, os.fstat(fh.fileno()).st_size)
    uri = os.fspath(uri)
    fs, path = filesystem(uri, options)
    try:
        size = fs.size(path)
        if block_size:
            raw = fs.open(path, "rb", block_size=block_size, cache_type="readahead")
        else:
            raw = fs.open(path, "rb", cache_type="none")
    except Exception as exc:  # noqa: BLE001 - the store's client raises its own types: one line naming the URI
        raise _error(uri, exc) from None
    return CountingReader(_Guarded(raw, uri), size)


class _Guarded:
    """A remote file whose read errors become :class:`StorageError` naming the URI."""

    def __init__(self, raw, uri: str):
        self._raw, self._uri = raw, uri

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()

    def read(self, n: int = -1) -> bytes:
        try:
            return self._raw.read(n)
        except Exception as exc:  # noqa: BLE001
            raise _error(self._uri, exc) from None

    def close(self) -> None:
        self._raw.close()


@record
class Entry:
    """One listed file. Fields: ``uri`` (with its scheme when remote), ``size`` in bytes."""

    uri: str
    size: int


def list_files(uri: str, options: Options | None = None) -> list[Entry]:
    """The objects ``uri`` names, from one listing of the store: a prefix ending in ``/`` (or a
    "directory") lists the objects right under it, a glob matches, anything else is one object.

    Raises:
        StorageError: missing bucket or prefix, refused credentials (naming ``uri``).
    """
    fs, path = filesystem(uri, options)
    prefix = uri[:len(uri) - len(path)] if uri.endswith(path) else f"{scheme(uri)}://"
    try:
        if any(c in path for c in "*?["):
            found = fs.glob(path, detail=True)
        elif path.endswith("/"):
            found = {e["name"]: e for e in fs.ls(path.rstrip("/"), detail=True)}
        else:
            entry = fs.info(path)
            found = ({e["name"]: e for e in fs.ls(path, detail=True)} if entry["type"] == "directory"
                     else {path: entry})
    except Exception as exc:  # noqa: BLE001
        raise _error(uri, exc) from None
    return [Entry(prefix + name, int(e.get("size") or 0)) for name, e in found.items() if e.get("type") == "file"]


__all__ = ["REMOTE_SCHEMES", "CountingReader", "Entry", "Options", "StorageError", "filesystem", "is_remote",
           "list_files", "local_path", "open_input", "scheme"]

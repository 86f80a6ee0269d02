"""Row changes as JSON bytes, written straight from the row images.

``binlogd dump --json`` and the JSON-lines sink spend most of their time turning row images into
JSON. The reference path decodes each row into a dict of Python values (:mod:`protocol.rowcodec`)
and gives it to :func:`library.serialize.dumps` (orjson). When the optional C extension
``library._jsonrows`` is built, :func:`rows_json` writes the same bytes from the row images
instead, with the per-table plan built once per TABLE_MAP and image shape
(:func:`protocol.rowcodec.image_plan`) and no Python object per value. Values whose Python form
comes from a Python function (JSON documents, FLOAT, binary columns, text in charsets other than
UTF-8, ...) are written from that value. PARTIAL_UPDATE_ROWS events, rows events made by hand
and ``BINLOGD_PURE_PYTHON=1`` take the reference path. The two give the same bytes, down to the
last one (``tests/unit/test_jsonrows.py``).

:func:`change_lines` (the change-event contract of ARCHITECTURE.md), :func:`event_json` (``binlogd
dump --json``) and :func:`images_json` (the Spark source's JSON text columns) are built on :func:`rows_json`.
"""

from __future__ import annotations

from binlogd.protocol import events as E
from binlogd.protocol import rowcodec, speedups
from binlogd.protocol.rows import RowImages

from .identity import stream_prefix
from .serialize import dumps, event_to_dict, has_json_diffs, split_json_diffs

try:
    from binlogd.library import _jsonrows as C
except ImportError:  # not built: the reference path writes every row
    C = None

# Numbers and strings as orjson writes them (the C writer follows orjson 3.10+): checked once, so that
# an orjson that writes them otherwise turns the C writer off rather than changing one byte.
_PROBES = (None, True, False, 0, -1, 2**64 - 1, -2**63, 0.0, -0.0, 1.0, 0.1, -1.5, 1e-5, 1.5e-5, 1e-6, 1e15, 1e16,
           1.2345678901234567e19, 1e22, 5e-324, 1.7976931348623157e308, float("nan"), float("inf"),
           "".join(map(chr, range(128))) + "\u00e9\u20ac\U0001f600\u2028\u2029", "\\x00")
_speedups = (C is not None and rowcodec.C is not None and speedups.ENABLED
             and all(C.scalar(x) == dumps(x) for x in _PROBES))


def use_speedups(enabled: bool = True) -> bool:
    """Write rows with the C extension (when it is built) or not; returns whether it now does.

    The default comes from ``BINLOGD_PURE_PYTHON`` (:mod:`protocol.speedups`).
    """
    global _speedups
    _speedups = bool(enabled) and C is not None and rowcodec.C is not None and all(
        C.scalar(x) == dumps(x) for x in _PROBES)
    return _speedups


def _json_image(columns: tuple, present: list[int], null_offset: int):
    """The C writer of one image shape, or None when only the reference can write it: a row dict
    keeps one value per key, so two present columns with the same label are left to it."""
    labels = [columns[i].label for i in present]
    if len(set(labels)) != len(labels):
        return None
    return C.Image(rowcodec.image_plan(columns, present), null_offset, dumps)


def _native(images: RowImages) -> tuple | None:
    """The C writers of an event's (before, after) images, or None when the reference must write them."""
    if images.partial:
        return None
    codec = images.codec
    first = codec.compiled("json", images.present_before, images.null_offset, _json_image)
    if images.kind != "update":
        return (first, None) if first is not None else None
    after = images.present_after if images.present_after is not None else images.present_before
    second = codec.compiled("json", after, images.null_offset, _json_image)
    return (first, second) if first is not None and second is not None else None


def rows_json(event: E.RowsEvent, pre: bytes, mid: bytes, post: bytes, sep: bytes = b"",
              index_end: bytes | None = None, again: bytes | None = None) -> tuple[bytes, int]:
    """Every row of ``event`` as JSON, each framed by the caller's bytes, and how many rows there were.

    Row k (from 0) is ``pre + image + post`` for inserts and deletes and ``pre + before + mid +
    after + post`` for updates, followed by ``b"%d" % k + index_end`` unless ``index_end`` is
    None (``b"%d" % k + again + b"%d" % k + index_end`` with ``again``), where each image is ``dumps``
    of its row dict; ``sep`` goes between rows.

    Raises:
        EventDecodeError: malformed rows (the same error ``event.rows`` raises).
    """
    images = event.images
    if _speedups and type(images) is RowImages:
        native = _native(images)
        if native is not None:
            try:
                return C.rows(native[0], native[1], images.data, pre, mid, post, sep, index_end, again)
            except Exception:  # noqa: BLE001 - the reference path below raises the canonical error
                pass
    return reference_rows_json(event, pre, mid, post, sep, index_end, again)


def reference_rows_json(event: E.RowsEvent, pre: bytes, mid: bytes, post: bytes, sep: bytes = b"",
                        index_end: bytes | None = None, again: bytes | None = None) -> tuple[bytes, int]:
    """:func:`rows_json` from the row dicts (``event.rows``) and :func:`library.serialize.dumps`. (Only this
    path writes PARTIAL_UPDATE_ROWS events: an after image's partial JSON columns are left out of it and
    ``,"json_diffs":`` with their diffs (:func:`library.serialize.split_json_diffs`) follows it, before ``post``.)

    Raises:
        EventDecodeError: malformed rows.
    """
    out = []
    partial = event.kind == "update" and has_json_diffs(event)
    for k, row in enumerate(event.rows):
        if partial:  # the partial JSON columns leave the after image for json_diffs, which follows it
            after, diffs = split_json_diffs(row[1])
            text = pre + dumps(row[0]) + mid + dumps(after)
            text += (b',"json_diffs":' + dumps(diffs) + post) if diffs else post
        elif event.kind == "update":
            text = pre + dumps(row[0]) + mid + dumps(row[1]) + post
        else:
            text = pre + dumps(row) + post
        if index_end is not None:
            text += b"%d" % k + (b"" if again is None else again + b"%d" % k) + index_end
        out.append(text)
    return sep.join(out), len(out)


def id_opening(prefix: str) -> bytes:
    """``"id":"<prefix>:`` as JSON (the row number and the closing quote follow)."""
    return b',"id":' + dumps(prefix + ":")[:-1]


def change_lines(event: E.RowsEvent, file: str | None, gtid: str | None, inner: int = 0) -> tuple[bytes, int]:
    """The change events of one rows event as JSON lines, one per row, each ending in a newline (the
    bytes of ``dumps(change) + b"\\n"`` for each change of :func:`library.serialize.change_events`),
    and how many there are. ``inner``: the event's offset inside its TRANSACTION_PAYLOAD (0: none).

    Raises:
        EventDecodeError: malformed rows.
    """
    h = event.header
    head = dumps({"op": event.kind, "schema": event.schema, "table": event.table})[:-1] + b',"before":'
    tail = (b',"ts":' + dumps(h.timestamp) + b',"source":'
            + dumps({"server_id": h.server_id, "file": file, "pos": h.pos, "gtid": gtid})[:-1] + b',"row":')
    again = id_opening(stream_prefix(file or "", h.pos, inner))
    if event.kind == "insert":
        return rows_json(event, head + b'null,"after":', b"", tail, b"", b'"}}\n', again)
    if event.kind == "delete":
        return rows_json(event, head, b"", b',"after":null' + tail, b"", b'"}}\n', again)
    return rows_json(event, head, b',"after":', tail, b"", b'"}}\n', again)


def images_json(event: E.RowsEvent) -> list[bytes]:
    """Each row image of ``event`` as JSON, in order (an update's before, then its after): the bytes of
    ``dumps(image)`` for each row dict, an after image without its partial JSON columns (they are in
    :func:`json_diffs_json`). (JSON text never holds a raw newline, which parts the images.)

    Raises:
        EventDecodeError: malformed rows.
    """
    if event.kind == "update" and has_json_diffs(event):
        return [dumps(image) for before, after in event.rows for image in (before, split_json_diffs(after)[0])]
    return rows_json(event, b"", b"\n", b"\n")[0].split(b"\n")[:-1]


def json_diffs_json(event: E.RowsEvent) -> list[bytes | None]:
    """Each row's ``json_diffs`` (:func:`library.serialize.split_json_diffs`) as JSON, None where the row
    has none: one entry per row, all None unless ``event`` is a PARTIAL_UPDATE_ROWS event.

    Raises:
        EventDecodeError: malformed rows.
    """
    if event.kind != "update" or not has_json_diffs(event):
        return [None] * len(event.rows)
    return [None if diffs is None else dumps(diffs) for diffs in (split_json_diffs(a)[1] for _, a in event.rows)]


def event_json(event: E.Event, file: str | None = None, next_pos: int | None = None) -> bytes:
    """One event as ``binlogd dump --json`` prints it: the bytes of ``dumps(event_to_dict(event, file, next_pos))``.

    Raises:
        EventDecodeError: a rows event's malformed rows.
    """
    if not isinstance(event, E.RowsEvent):
        return dumps(event_to_dict(event, file, next_pos))
    head = dumps(event_to_dict(event, file, next_pos, rows=False))[:-1] + b',"rows":['
    if event.kind == "update":
        return head + rows_json(event, b'{"before":', b',"after":', b"}", b",")[0] + b"]}"
    return head + rows_json(event, b"", b"", b"", b",")[0] + b"]}"

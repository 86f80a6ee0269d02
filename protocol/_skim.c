/* protocol._skim: the raw path's loops in C, each the twin of a Python loop with the same result.
 *
 * ok_payloads(view, pos, end, limit, max_packet): protocol.packet.BufferedPacketReader.next_ok_payloads
 *   on the read-only memoryview of its buffer, from pos to end; returns (payloads, new pos).
 *
 * skim_run(events, start, end, table, crc_len, crc32, expect)
 *   events: a list of complete events (objects with the buffer protocol) with v4 (19-byte) headers.
 *   table: 256 bytes; table[type code] is 0 for a type that may not be skimmed, else 1 + the
 *       fewest body bytes (after the header, before the checksum) that type may have.
 *   crc_len: 4 when events end with a CRC32, else 0; crc32: the function that computes it
 *       (called with a memoryview), or None not to verify.
 *   expect: the stream position the first event must start at; an event whose next_position is 0
 *       (MariaDB 11.4+, inside a transaction) starts at expect and ends at expect + its length.
 * Takes events from start while each one is skimmable (see protocol/skim.py) and returns
 * (stop, next_position, last_timestamp, bytes, {type code: count}). Never raises for the
 * events' contents: it stops before the first event it does not take.
 *
 * frame(view, crc_len, crc32): protocol.decoder.Decoder._frame's checks of one complete event with a
 *   v4 (19-byte) header, for a decoder past its FDE (no type renumbering, not encrypted).
 *   view: a memoryview of the event's bytes (one byte per item).
 *   crc_len: 4 when the event ends with a CRC32, else 0; crc32: as for skim_run.
 * Returns the header's fields (timestamp, type_code, server_id, event_length, next_position, flags)
 * when its length field equals len(view), the view has room for the header and crc_len bytes, and
 * the CRC32 matches (when crc32 is given); None otherwise, and for FORMAT_DESCRIPTION and START_V3
 * (whose checksums the decoder handles its own way), so that the caller's Python check runs and
 * raises its error. Never raises for the event's contents (only an exception of crc32 propagates).
 *
 * rows_like(view, pos, first, head_len, ends_at, crc_len, crc32, limit): protocol.decoder.Decoder.rows_like.
 *   view: a memoryview of a whole file (or stream) of events with v4 (19-byte) headers; first: the
 *   offset in it of a rows event already decoded, whose row images start head_len bytes in; ends_at: the
 *   offset in an event of its rows flags' low byte, or 0.
 * Takes the events from pos while each is whole in the view, has rows (more than head_len + crc_len bytes),
 * has first's timestamp, type code, server id and flags, the same head_len - 19 bytes after its header
 * (table id, flags, extra data, width, columns-present bitmaps) but, with ends_at, the STMT_END_F bit
 * first has not (such an event is the last taken), and a matching CRC32 (when crc32 is given); stops
 * before the first other one, or once limit bytes are taken. Returns (stop, count, whether the last taken
 * ends the statement). Never raises for the events' contents (only an exception of crc32 propagates).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEADER_LEN 19
#define ARTIFICIAL_F 0x20
#define START_V3 1
#define FORMAT_DESCRIPTION 15

static uint32_t
u32le(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* 1: the CRC32 of data[0:n-4] equals the stored one; 0: it does not; -1: an exception is set. */
static int
crc_ok(PyObject *crc32, const unsigned char *data, Py_ssize_t n)
{
    PyObject *view = PyMemoryView_FromMemory((char *)data, n - 4, PyBUF_READ);
    if (view == NULL)
        return -1;
    PyObject *result = PyObject_CallOneArg(crc32, view);
    Py_DECREF(view);
    if (result == NULL)
        return -1;
    unsigned long actual = PyLong_AsUnsignedLong(result);
    Py_DECREF(result);
    if (actual == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    return (uint32_t)actual == u32le(data + n - 4);
}

static PyObject *
skim_run(PyObject *self, PyObject *args)
{
    PyObject *events, *crc32;
    Py_ssize_t start, end, crc_len;
    unsigned long long expect;
    Py_buffer table;
    if (!PyArg_ParseTuple(args, "O!nny*nOK", &PyList_Type, &events, &start, &end, &table, &crc_len, &crc32,
                          &expect))
        return NULL;
    if (table.len != 256 || (crc_len != 0 && crc_len != 4)) {
        PyBuffer_Release(&table);
        PyErr_SetString(PyExc_ValueError, "table must have 256 bytes and crc_len be 0 or 4");
        return NULL;
    }
    const unsigned char *min_body = table.buf;
    Py_ssize_t counts[256];
    memset(counts, 0, sizeof counts);
    unsigned long long nbytes = 0, last_ts = 0;
    if (end > PyList_GET_SIZE(events))
        end = PyList_GET_SIZE(events);
    Py_ssize_t i = start < 0 ? 0 : start;
    for (; i < end; i++) {
        Py_buffer buf;
        if (PyObject_GetBuffer(PyList_GET_ITEM(events, i), &buf, PyBUF_SIMPLE) < 0) {
            PyErr_Clear();
            break;  /* not bytes-like: the caller's decode says what it is */
        }
        const unsigned char *p = buf.buf;
        Py_ssize_t n = buf.len;
        int take = n >= HEADER_LEN + crc_len;
        uint32_t ts = 0, length = 0;
        unsigned long long next = 0;
        unsigned char type_code = 0;
        if (take) {
            ts = u32le(p);
            type_code = p[4];
            length = u32le(p + 9);
            next = u32le(p + 13);
            if (next == 0)  /* MariaDB 11.4+ inside a transaction: the event starts at expect */
                next = expect + length;
            unsigned flags = p[17] | (p[18] << 8);
            take = min_body[type_code] != 0 && (Py_ssize_t)length == n && !(flags & ARTIFICIAL_F) && ts != 0
                   && next >= length && next - length == expect
                   && n - HEADER_LEN - crc_len >= (Py_ssize_t)min_body[type_code] - 1;
        }
        if (take && crc_len && crc32 != Py_None) {
            int ok = crc_ok(crc32, p, n);
            if (ok < 0) {
                PyBuffer_Release(&buf);
                PyBuffer_Release(&table);
                return NULL;
            }
            take = ok;
        }
        PyBuffer_Release(&buf);
        if (!take)
            break;
        counts[type_code]++;
        nbytes += (unsigned long long)n;
        last_ts = ts;
        expect = next;
    }
    PyBuffer_Release(&table);
    PyObject *by_type = PyDict_New();
    if (by_type == NULL)
        return NULL;
    for (int t = 0; t < 256; t++) {
        if (!counts[t])
            continue;
        PyObject *key = PyLong_FromLong(t), *value = PyLong_FromSsize_t(counts[t]);
        int failed = key == NULL || value == NULL || PyDict_SetItem(by_type, key, value) < 0;
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (failed) {
            Py_DECREF(by_type);
            return NULL;
        }
    }
    return Py_BuildValue("nKKKN", i, expect, last_ts, nbytes, by_type);
}

/* The tuple (timestamp, type_code, server_id, event_length, next_position, flags) of the v4 header at p;
 * NULL with an exception set when out of memory. */
static PyObject *
header_fields(const unsigned char *p)
{
    unsigned long values[6] = {u32le(p), p[4], u32le(p + 5), u32le(p + 9), u32le(p + 13), p[17] | (p[18] << 8)};
    PyObject *out = PyTuple_New(6);
    for (int i = 0; out != NULL && i < 6; i++) {
        PyObject *value = PyLong_FromUnsignedLong(values[i]);
        if (value == NULL)
            Py_CLEAR(out);
        else
            PyTuple_SET_ITEM(out, i, value);
    }
    return out;
}

static PyObject *
frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyMemoryView_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "frame(view, crc_len, crc32) takes a memoryview, an int and a callable");
        return NULL;
    }
    Py_ssize_t crc_len = PyLong_AsSsize_t(args[1]);
    if (crc_len == -1 && PyErr_Occurred())
        return NULL;
    if (crc_len != 0 && crc_len != 4) {
        PyErr_SetString(PyExc_ValueError, "crc_len must be 0 or 4");
        return NULL;
    }
    PyObject *crc32 = args[2];
    const Py_buffer *mv = PyMemoryView_GET_BUFFER(args[0]);
    if (mv->ndim != 1 || mv->itemsize != 1)  /* len(view) would not count bytes: the Python check decides */
        Py_RETURN_NONE;
    Py_buffer buf;
    if (PyObject_GetBuffer(args[0], &buf, PyBUF_SIMPLE) < 0) {  /* released or not contiguous */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    const unsigned char *p = buf.buf;
    Py_ssize_t n = buf.len;
    int take = n >= HEADER_LEN + crc_len && u32le(p + 9) == (unsigned long long)n && p[4] != START_V3
               && p[4] != FORMAT_DESCRIPTION;
    if (take && crc_len && crc32 != Py_None) {
        take = crc_ok(crc32, p, n);
        if (take < 0) {
            PyBuffer_Release(&buf);
            return NULL;
        }
    }
    PyObject *out = take ? header_fields(p) : Py_NewRef(Py_None);
    PyBuffer_Release(&buf);
    return out;
}

/* Whether the event at e has the same head_len - 17 bytes from offset 17 as the one at t, but for bit 0 (the
 * rows event's STMT_END_F) of the byte at ends_at, which e has and t has not (ends_at 0: no exception). */
static int
same_head(const unsigned char *e, const unsigned char *t, Py_ssize_t head_len, Py_ssize_t ends_at, int *ends)
{
    if (!memcmp(e + 17, t + 17, head_len - 17))
        return 1;
    *ends = ends_at >= 17 && ends_at < head_len && !memcmp(e + 17, t + 17, ends_at - 17)
            && e[ends_at] == (t[ends_at] | 1) && e[ends_at] != t[ends_at]
            && !memcmp(e + ends_at + 1, t + ends_at + 1, head_len - ends_at - 1);
    return *ends;
}

static PyObject *
rows_like(PyObject *self, PyObject *args)
{
    PyObject *view, *crc32;
    Py_ssize_t pos, first, head_len, ends_at, crc_len, limit, count = 0;
    int ends = 0;
    if (!PyArg_ParseTuple(args, "O!nnnnnOn", &PyMemoryView_Type, &view, &pos, &first, &head_len, &ends_at, &crc_len,
                          &crc32, &limit))
        return NULL;
    Py_buffer buf;
    if (PyObject_GetBuffer(view, &buf, PyBUF_SIMPLE) < 0)  /* raises for a released view */
        return NULL;
    const unsigned char *p = buf.buf, *t = p + first;
    Py_ssize_t size = buf.len, taken = 0;
    if (first < 0 || head_len < HEADER_LEN || first > size - head_len || pos < 0 || (crc_len != 0 && crc_len != 4)) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "rows_like: first and head_len must lie within the view, crc_len be 0 or 4");
        return NULL;
    }
    while (!ends && taken < limit && size - pos >= HEADER_LEN) {
        const unsigned char *e = p + pos;
        Py_ssize_t n = u32le(e + 9);
        if (n <= head_len + crc_len || n > size - pos || memcmp(e, t, 9) || !same_head(e, t, head_len, ends_at, &ends))
            break;
        if (crc_len && crc32 != Py_None) {
            int ok = crc_ok(crc32, e, n);
            if (ok < 0) {
                PyBuffer_Release(&buf);
                return NULL;
            }
            if (!ok) {
                ends = 0;
                break;
            }
        }
        pos += n;
        taken += n;
        count++;
    }
    PyBuffer_Release(&buf);
    return Py_BuildValue("nnO", pos, count, ends ? Py_True : Py_False);
}

static PyObject *
ok_payloads(PyObject *self, PyObject *args)
{
    PyObject *view;
    Py_ssize_t pos, end, limit, max_packet;
    if (!PyArg_ParseTuple(args, "O!nnnn", &PyMemoryView_Type, &view, &pos, &end, &limit, &max_packet))
        return NULL;
    Py_buffer buf;
    if (PyObject_GetBuffer(view, &buf, PyBUF_SIMPLE) < 0)  /* raises for a released view */
        return NULL;
    if (pos < 0 || end > buf.len || pos > end) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "pos and end must lie within the buffer");
        return NULL;
    }
    const unsigned char *p = buf.buf;
    PyObject *out = PyList_New(0);
    while (out != NULL && PyList_GET_SIZE(out) < limit && end - pos >= 5) {
        Py_ssize_t length = p[pos] | (p[pos + 1] << 8) | (p[pos + 2] << 16);
        if (length == 0 || length >= 0xFFFFFF || length > max_packet || end - pos - 4 < length || p[pos + 4])
            break;
        PyObject *payload = PySequence_GetSlice(view, pos + 5, pos + 4 + length);
        if (payload == NULL || PyList_Append(out, payload) < 0)
            Py_CLEAR(out);
        Py_XDECREF(payload);
        pos += 4 + length;
    }
    PyBuffer_Release(&buf);
    if (out == NULL)
        return NULL;
    return Py_BuildValue("Nn", out, pos);
}

static PyMethodDef methods[] = {
    {"ok_payloads", ok_payloads, METH_VARARGS,
     PyDoc_STR("ok_payloads(view, pos, end, limit, max_packet) -> (payloads, pos); see protocol/packet.py.")},
    {"frame", (PyCFunction)(void (*)(void))frame, METH_FASTCALL,
     PyDoc_STR("frame(view, crc_len, crc32) -> (timestamp, type_code, server_id, event_length, next_position, "
               "flags) or None; see protocol/decoder.py.")},
    {"rows_like", rows_like, METH_VARARGS,
     PyDoc_STR("rows_like(view, pos, first, head_len, ends_at, crc_len, crc32, limit) -> (stop, count, ends); "
               "see protocol/decoder.py.")},
    {"skim_run", skim_run, METH_VARARGS,
     PyDoc_STR("skim_run(events, start, end, table, crc_len, crc32, expect) -> "
               "(stop, next_position, last_timestamp, bytes, counts); see protocol/skim.py.")},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, .m_name = "binlogd.protocol._skim",
    .m_doc = "The raw path's loops in C (protocol.skim.skim_run, BufferedPacketReader.next_ok_payloads) "
             "and Decoder.decode's frame check and rows_like.",
    .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__skim(void)
{
    return PyModule_Create(&moduledef);
}

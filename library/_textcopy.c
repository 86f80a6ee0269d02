/* library._textcopy: the rows of a text-protocol result set (COM_QUERY) as PostgreSQL COPY text, in C; the twin
 * of library/textcopy.py's rows(), with the same results byte for byte (see there for the contract; bytes in,
 * bytes out). The rows are found as protocol/_textrow.h frames them; UTF-8 is checked as _jsonstr.h does.
 *
 * rows(buf, start, end, kinds): the rows from start to end as COPY text (bytes), or None when a TEXT value is
 *   not well-formed UTF-8 or holds NUL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_jsonstr.h"
#include "_textrow.h"

enum { K_RAW, K_TEXT, K_DATE, K_UTC, K_BYTEA, K_COUNT };

static const char HEX[] = "0123456789abcdef";

/* What rows() stops on: a malformed row (its words), or a value the Python path must take. */
static const char NOT_COPY_TEXT[] = "";

/* The length-encoded value at p[*i] (n bytes in all): 1 and *v, *len set (*v NULL for NULL), or 0 with *err. */
static int
next_value(const unsigned char *p, Py_ssize_t n, Py_ssize_t *i, const unsigned char **v, Py_ssize_t *len,
           const char **err)
{
    Py_ssize_t k = *i;
    if (k >= n) {
        *err = "fewer values than columns";
        return 0;
    }
    unsigned c = p[k];
    uint64_t u;
    if (c < 251) {
        u = c;
        k += 1;
    }
    else if (c == 251) {
        *v = NULL;
        *i = k + 1;
        return 1;
    }
    else if (c == 252 || c == 253 || c == 254) {
        int w = c == 252 ? 2 : c == 253 ? 3 : 8;
        if (n - k < 1 + w) {
            *err = "a value's length is cut short";
            return 0;
        }
        u = 0;
        for (int j = w; j >= 1; j--)
            u = u << 8 | p[k + j];
        k += 1 + w;
    }
    else {
        *err = "0xff is no value's length";
        return 0;
    }
    if (u > (uint64_t)(n - k)) {
        *err = "a value runs past the row";
        return 0;
    }
    *v = p + k;
    *len = (Py_ssize_t)u;
    *i = k + (Py_ssize_t)u;
    return 1;
}

/* The COPY text of text v at w (room for 2 bytes a byte); NULL when it is not well-formed UTF-8 or holds NUL. */
static char *
put_text(char *w, const unsigned char *v, Py_ssize_t len)
{
    Py_ssize_t k = 0;
    while (k < len) {
        unsigned c = v[k];
        if (c >= 0x80) {
            int m = json_utf8_char(v + k, len - k);
            if (!m)
                return NULL;
            memcpy(w, v + k, (size_t)m);
            w += m;
            k += m;
            continue;
        }
        if (c == 0)
            return NULL;
        if (c == '\\' || c == '\t' || c == '\n' || c == '\r') {
            *w++ = '\\';
            *w++ = c == '\\' ? '\\' : c == '\t' ? 't' : c == '\n' ? 'n' : 'r';
        }
        else
            *w++ = (char)c;
        k++;
    }
    return w;
}

static int
zero_date(const unsigned char *v, Py_ssize_t len)
{
    return len >= 10 && (memcmp(v, "0000", 4) == 0 || (v[5] == '0' && v[6] == '0') || (v[8] == '0' && v[9] == '0'));
}

/* One row's payload p (n bytes) written at w, with room for it; the end of what was written, or NULL and *err. */
static char *
put_row(char *w, const unsigned char *kinds, Py_ssize_t ncols, const unsigned char *p, Py_ssize_t n,
        const char **err)
{
    Py_ssize_t i = 0;
    for (Py_ssize_t k = 0; k < ncols; k++) {
        const unsigned char *v;
        Py_ssize_t len = 0;
        if (k)
            *w++ = '\t';
        if (!next_value(p, n, &i, &v, &len, err))
            return NULL;
        if (v == NULL) {
            memcpy(w, "\\N", 2);
            w += 2;
            continue;
        }
        switch (kinds[k]) {
        case K_TEXT:
            if ((w = put_text(w, v, len)) == NULL) {
                *err = NOT_COPY_TEXT;
                return NULL;
            }
            break;
        case K_BYTEA:
            memcpy(w, "\\\\x", 3);
            w += 3;
            for (Py_ssize_t j = 0; j < len; j++) {
                *w++ = HEX[v[j] >> 4];
                *w++ = HEX[v[j] & 15];
            }
            break;
        case K_DATE:
        case K_UTC:
            if (zero_date(v, len)) {
                memcpy(w, "-infinity", 9);
                w += 9;
                break;
            }
            memcpy(w, v, (size_t)len);
            w += len;
            if (kinds[k] == K_UTC) {
                memcpy(w, "+00", 3);
                w += 3;
            }
            break;
        default:
            memcpy(w, v, (size_t)len);
            w += len;
        }
    }
    if (i != n) {
        *err = "more values than columns";
        return NULL;
    }
    *w++ = '\n';
    return w;
}

static PyObject *
rows(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer view, kinds;
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "y*nny*:rows", &view, &start, &end, &kinds))
        return NULL;
    PyObject *out = NULL;
    unsigned char *joined = NULL;
    const unsigned char *b = view.buf, *kind = kinds.buf;
    Py_ssize_t ncols = kinds.len, next, size, nrows = 0, cap = 0, at = start;
    int multi;
    const char *err = NULL;
    for (Py_ssize_t k = 0; k < ncols; k++)
        if (kind[k] >= K_COUNT) {
            PyErr_SetString(PyExc_ValueError, "rows: a kind out of range");
            goto done;
        }
    if (start < 0 || end > view.len || start > end) {
        PyErr_SetString(PyExc_ValueError, "rows: start and end are outside the buffer");
        goto done;
    }
    for (Py_ssize_t q = start; q < end && row_at(b, q, end, &next, &size, &multi); q = next)
        nrows++;
    /* each value's bytes at most doubled, and at most 12 bytes more (its separator, \\x, +00, -infinity) */
    if ((out = PyBytes_FromStringAndSize(NULL, 2 * (end - start) + nrows * (ncols * 12 + 1) + 16)) == NULL)
        goto done;
    char *w = PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t pos = start; pos < end; pos = next) {
        at = pos;
        if (!row_at(b, pos, end, &next, &size, &multi)) {
            err = "the row is not whole";
            break;
        }
        const unsigned char *p = b + pos + 4;
        if (multi) {  /* a row of 16 MiB or more: its packets' payloads joined */
            if (size > cap) {
                unsigned char *j = PyMem_RawRealloc(joined, (size_t)size);
                if (j == NULL) {
                    err = "no memory";
                    break;
                }
                joined = j;
                cap = size;
            }
            for (Py_ssize_t q = pos, o = 0; q < next; ) {
                Py_ssize_t len = (Py_ssize_t)b[q] | (Py_ssize_t)b[q + 1] << 8 | (Py_ssize_t)b[q + 2] << 16;
                memcpy(joined + o, b + q + 4, (size_t)len);
                o += len;
                q += 4 + len;
            }
            p = joined;
        }
        if ((w = put_row(w, kind, ncols, p, size, &err)) == NULL)
            break;
    }
    Py_END_ALLOW_THREADS
    if (err == NOT_COPY_TEXT) {
        Py_CLEAR(out);
        out = Py_NewRef(Py_None);
    }
    else if (err != NULL) {
        Py_CLEAR(out);
        if (strcmp(err, "no memory") == 0)
            PyErr_NoMemory();
        else
            PyErr_Format(PyExc_ValueError, "malformed text-protocol row at offset %zd: %s", at, err);
    }
    else
        _PyBytes_Resize(&out, w - PyBytes_AS_STRING(out));
done:
    PyMem_RawFree(joined);
    PyBuffer_Release(&kinds);
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"rows", rows, METH_VARARGS, "rows(buf, start, end, kinds) -> bytes or None: see library/textcopy.py"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, .m_name = "binlogd.library._textcopy",
    .m_doc = "The rows of a text-protocol result set as PostgreSQL COPY text (the twin of "
             "binlogd.library.textcopy.rows).",
    .m_size = 0, .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__textcopy(void)
{
    return PyModule_Create(&moduledef);
}

/* protocol._textrows: the rows of a text-protocol result set (COM_QUERY) as JSON, in C; the twin of the
 * Python functions of protocol/textrows.py, with the same results byte for byte (see there for the
 * contract of each; sans-I/O: bytes in, bytes out).
 *
 * scan(buf, pos): walks the whole rows (a row of 16 MiB or more spans several packets) from pos; returns
 *   (pos, rows, last, done): where it stopped, how many rows it walked, where the last one starts (-1: none),
 *   and why it stopped: 0 the next row is not whole in buf, 1 an EOF packet starts at pos, 2 an ERR packet.
 * lines(buf, start, end, plan, head, mid, tail, first): the rows from start to end as JSON bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { K_RAW, K_QUOTED, K_TEXT, K_BASE64, K_BIT, K_DOUBLE, K_CALL, K_COUNT };

/* ------------------------------------------------------------------ output buffer */

typedef struct {
    char *s;
    Py_ssize_t len, cap;
} Out;

static int
reserve(Out *o, Py_ssize_t n)
{
    if (o->len + n <= o->cap)
        return 0;
    Py_ssize_t cap = o->cap ? o->cap : 1 << 16;
    while (cap < o->len + n)
        cap *= 2;
    char *s = PyMem_Realloc(o->s, (size_t)cap);
    if (s == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    o->s = s;
    o->cap = cap;
    return 0;
}

static inline int
put(Out *o, const void *s, Py_ssize_t n)
{
    if (reserve(o, n) < 0)
        return -1;
    memcpy(o->s + o->len, s, (size_t)n);
    o->len += n;
    return 0;
}

/* The bytes object r (a new reference, or NULL on an error) appended, then released. */
static int
put_result(Out *o, PyObject *r)
{
    if (r == NULL)
        return -1;
    int ok = PyBytes_Check(r) ? put(o, PyBytes_AS_STRING(r), PyBytes_GET_SIZE(r)) : -1;
    if (ok < 0 && !PyErr_Occurred())
        PyErr_Format(PyExc_TypeError, "a value converter returned %.100s, not bytes", Py_TYPE(r)->tp_name);
    Py_DECREF(r);
    return ok;
}

static int
put_call(Out *o, PyObject *fn, const unsigned char *v, Py_ssize_t n)
{
    PyObject *arg = PyBytes_FromStringAndSize((const char *)v, n);
    if (arg == NULL)
        return -1;
    PyObject *r = PyObject_CallOneArg(fn, arg);
    Py_DECREF(arg);
    return put_result(o, r);
}

static int
put_uint(Out *o, uint64_t u)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (reserve(o, n) < 0)
        return -1;
    while (n)
        o->s[o->len++] = tmp[--n];
    return 0;
}

/* ------------------------------------------------------------------ JSON strings (as orjson writes them) */

static const char HEX[] = "0123456789abcdef";

/* 0: copied as is; 'u': \u00XX; else the letter after the backslash. */
static const char ESCAPE[128] = {
    'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'b', 't', 'n', 'u', 'f', 'r', 'u', 'u',
    'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u',
    0, 0, '"', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, '\\', 0, 0, 0,
};

/* The top bit of each of the 8 bytes of v that may need a look: non-ASCII, a control character, '"'
 * or '\\'. A byte below 0x20 (x - 0x20) or equal to one of those (x ^ c, minus 1) wraps and sets its
 * top bit; its borrow may flag bytes above it too, but never one below: the lowest flag is exact. */
static inline uint64_t
special8(uint64_t v)
{
    const uint64_t ones = 0x0101010101010101ULL;
    return (v | (v - ones * 0x20) | ((v ^ ones * '"') - ones) | ((v ^ ones * '\\') - ones)) & ones * 0x80;
}

/* The length of the well-formed UTF-8 character at s (n bytes left), 0 when there is none there:
 * the bytes Python's strict UTF-8 decoder rejects (overlongs, surrogates, past U+10FFFF, cut short). */
static inline int
utf8_char(const unsigned char *s, Py_ssize_t n)
{
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    if (c < 0xC2 || c > 0xF4)
        return 0;
    if (c < 0xE0)
        return n >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c < 0xF0) {
        lo = c == 0xE0 ? 0xA0 : 0x80;
        hi = c == 0xED ? 0x9F : 0xBF;
        return n >= 3 && s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 ? 3 : 0;
    }
    lo = c == 0xF0 ? 0x90 : 0x80;
    hi = c == 0xF4 ? 0x8F : 0xBF;
    return n >= 4 && s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 && (s[3] & 0xC0) == 0x80 ? 4 : 0;
}

/* The JSON string of UTF-8 text s, as dumps(s.decode()) writes it; 1 (nothing kept) when s is not
 * well-formed UTF-8 (the caller then decodes it with "replace"), -1 on an error. */
static int
put_string(Out *o, const unsigned char *s, Py_ssize_t n)
{
    const unsigned char *end = s + n;
    Py_ssize_t mark = o->len;
    if (reserve(o, 6 * n + 16) < 0)
        return -1;
    char *w = o->s + o->len;
    *w++ = '"';
    while (s < end) {
        uint64_t v, special;
        if (end - s >= 8) {  /* 8 bytes at a time up to the first that needs a look */
            memcpy(&v, s, 8);
            memcpy(w, s, 8);
            int plain = (special = special8(v)) ? __builtin_ctzll(special) >> 3 : 8;
            w += plain;
            s += plain;
            if (plain == 8)
                continue;
        }
        unsigned c = *s;
        if (c < 0x80) {
            char e = ESCAPE[c];
            if (!e)
                *w++ = (char)c;
            else if (e != 'u') {
                *w++ = '\\';
                *w++ = e;
            }
            else {
                memcpy(w, "\\u00", 4);
                w[4] = HEX[c >> 4];
                w[5] = HEX[c & 15];
                w += 6;
            }
            s++;
            continue;
        }
        int k = utf8_char(s, end - s);
        if (!k) {
            o->len = mark;
            return 1;
        }
        memcpy(w, s, (size_t)k);
        w += k;
        s += k;
    }
    *w++ = '"';
    o->len = w - o->s;
    return 0;
}

/* ------------------------------------------------------------------ other values */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int
put_base64(Out *o, const unsigned char *s, Py_ssize_t n)
{
    if (reserve(o, (n + 2) / 3 * 4 + 2) < 0)
        return -1;
    char *w = o->s + o->len;
    *w++ = '"';
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3) {
        unsigned x = (unsigned)s[i] << 16 | (unsigned)s[i + 1] << 8 | s[i + 2];
        *w++ = B64[x >> 18];
        *w++ = B64[(x >> 12) & 63];
        *w++ = B64[(x >> 6) & 63];
        *w++ = B64[x & 63];
    }
    if (n - i == 1) {
        unsigned x = (unsigned)s[i] << 16;
        *w++ = B64[x >> 18];
        *w++ = B64[(x >> 12) & 63];
        *w++ = '=';
        *w++ = '=';
    }
    else if (n - i == 2) {
        unsigned x = (unsigned)s[i] << 16 | (unsigned)s[i + 1] << 8;
        *w++ = B64[x >> 18];
        *w++ = B64[(x >> 12) & 63];
        *w++ = B64[(x >> 6) & 63];
        *w++ = '=';
    }
    *w++ = '"';
    o->len = w - o->s;
    return 0;
}

/* A DOUBLE's text as dumps(float(text)) writes it; the Python fallback for text strtod would not take. */
static int
put_double(Out *o, const unsigned char *s, Py_ssize_t n, PyObject *dumps, PyObject *fallback)
{
    char tmp[64];
    if (n == 0 || n >= (Py_ssize_t)sizeof tmp)
        return put_call(o, fallback, s, n);
    memcpy(tmp, s, (size_t)n);
    tmp[n] = 0;
    char *endp = NULL;
    double d = PyOS_string_to_double(tmp, &endp, NULL);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return put_call(o, fallback, s, n);
    }
    if (endp != tmp + n)
        return put_call(o, fallback, s, n);
    PyObject *f = PyFloat_FromDouble(d);
    if (f == NULL)
        return -1;
    PyObject *r = PyObject_CallOneArg(dumps, f);
    Py_DECREF(f);
    return put_result(o, r);
}

/* ------------------------------------------------------------------ packets */

/* Whether a whole row (its packets: one, or several when the first is 0xFFFFFF bytes long) starts at pos
 * in b[..end); then *next is where it ends and *size the length of its payload. */
static inline int
row_at(const unsigned char *b, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t *next, Py_ssize_t *size, int *multi)
{
    Py_ssize_t p = pos, total = 0;
    *multi = 0;
    for (;;) {
        if (end - p < 4)
            return 0;
        Py_ssize_t len = (Py_ssize_t)b[p] | (Py_ssize_t)b[p + 1] << 8 | (Py_ssize_t)b[p + 2] << 16;
        if (end - p - 4 < len)
            return 0;
        p += 4 + len;
        total += len;
        if (len != 0xFFFFFF)
            break;
        *multi = 1;
    }
    *next = p;
    *size = total;
    return 1;
}

static PyObject *
scan(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "y*n:scan", &view, &pos))
        return NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t end = view.len, next, size, rows = 0, last = -1;
    int multi, done = 0;
    if (pos < 0 || pos > end) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "scan: pos is outside the buffer");
        return NULL;
    }
    while (row_at(b, pos, end, &next, &size, &multi)) {
        unsigned first = size ? b[pos + 4] : 0;
        if (first == 0xFF) {
            done = 2;
            break;
        }
        if (first == 0xFE && size < 9) {
            done = 1;
            break;
        }
        last = pos;
        rows++;
        pos = next;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nnni)", pos, rows, last, done);
}

/* ------------------------------------------------------------------ rows to JSON */

typedef struct {
    Py_ssize_t ncols;
    const unsigned char *kinds;
    PyObject *names;   /* tuple of bytes: each column's '"name":' */
    PyObject *calls;   /* tuple: each column's converter (K_CALL), fallback (K_BIT, K_DOUBLE) or None */
    PyObject *dumps;
} Plan;

static int
bad_row(Py_ssize_t at, const char *what)
{
    PyErr_Format(PyExc_ValueError, "malformed text-protocol row at offset %zd: %s", at, what);
    return -1;
}

/* One row's payload p[0..n) as its JSON object. */
static int
put_row(Out *o, const Plan *plan, const unsigned char *p, Py_ssize_t n, Py_ssize_t at)
{
    Py_ssize_t i = 0;
    if (put(o, "{", 1) < 0)
        return -1;
    for (Py_ssize_t k = 0; k < plan->ncols; k++) {
        PyObject *name = PyTuple_GET_ITEM(plan->names, k);
        if (k && put(o, ",", 1) < 0)
            return -1;
        if (put(o, PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name)) < 0)
            return -1;
        if (i >= n)
            return bad_row(at, "fewer values than columns");
        unsigned c = p[i];
        Py_ssize_t len;
        if (c < 251) {
            len = c;
            i += 1;
        }
        else if (c == 251) {
            i += 1;
            if (put(o, "null", 4) < 0)
                return -1;
            continue;
        }
        else if (c == 252) {
            if (n - i < 3)
                return bad_row(at, "a value's length is cut short");
            len = (Py_ssize_t)p[i + 1] | (Py_ssize_t)p[i + 2] << 8;
            i += 3;
        }
        else if (c == 253) {
            if (n - i < 4)
                return bad_row(at, "a value's length is cut short");
            len = (Py_ssize_t)p[i + 1] | (Py_ssize_t)p[i + 2] << 8 | (Py_ssize_t)p[i + 3] << 16;
            i += 4;
        }
        else if (c == 254) {
            if (n - i < 9)
                return bad_row(at, "a value's length is cut short");
            uint64_t u = 0;
            for (int j = 8; j >= 1; j--)
                u = u << 8 | p[i + j];
            if (u > (uint64_t)n)
                return bad_row(at, "a value runs past the row");
            len = (Py_ssize_t)u;
            i += 9;
        }
        else
            return bad_row(at, "0xff is no value's length");
        if (n - i < len)
            return bad_row(at, "a value runs past the row");
        const unsigned char *v = p + i;
        i += len;
        int r;
        switch (plan->kinds[k]) {
        case K_RAW:
            r = put(o, v, len);
            break;
        case K_QUOTED:
            if ((r = reserve(o, len + 2)) == 0) {
                o->s[o->len++] = '"';
                memcpy(o->s + o->len, v, (size_t)len);
                o->len += len;
                o->s[o->len++] = '"';
            }
            break;
        case K_TEXT:
            r = put_string(o, v, len);
            if (r == 1) {
                PyObject *text = PyUnicode_DecodeUTF8((const char *)v, len, "replace");
                r = text == NULL ? -1 : put_result(o, PyObject_CallOneArg(plan->dumps, text));
                Py_XDECREF(text);
            }
            break;
        case K_BASE64:
            r = put_base64(o, v, len);
            break;
        case K_BIT:
            if (len <= 8) {
                uint64_t u = 0;
                for (Py_ssize_t j = 0; j < len; j++)
                    u = u << 8 | v[j];
                r = put_uint(o, u);
            }
            else
                r = put_call(o, PyTuple_GET_ITEM(plan->calls, k), v, len);
            break;
        case K_DOUBLE:
            r = put_double(o, v, len, plan->dumps, PyTuple_GET_ITEM(plan->calls, k));
            break;
        default:
            r = put_call(o, PyTuple_GET_ITEM(plan->calls, k), v, len);
        }
        if (r < 0)
            return -1;
    }
    if (i != n)
        return bad_row(at, "more values than columns");
    return put(o, "}", 1);
}

static PyObject *
lines(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer view, kinds;
    Py_ssize_t start, end;
    PyObject *plan_t, *head, *mid, *tail, *names, *calls, *dumps;
    long long first;
    if (!PyArg_ParseTuple(args, "y*nnOSOSL:lines", &view, &start, &end, &plan_t, &head, &mid, &tail, &first))
        return NULL;
    PyObject *result = NULL;
    Out o = {NULL, 0, 0};
    unsigned char *joined = NULL;
    kinds.obj = NULL;
    if (!PyArg_ParseTuple(plan_t, "y*O!O!O:lines plan", &kinds, &PyTuple_Type, &names, &PyTuple_Type, &calls,
                          &dumps))
        goto done;
    Plan plan = {kinds.len, kinds.buf, names, calls, dumps};
    if (PyTuple_GET_SIZE(names) != plan.ncols || PyTuple_GET_SIZE(calls) != plan.ncols) {
        PyErr_SetString(PyExc_ValueError, "lines: the plan's kinds, names and calls differ in length");
        goto done;
    }
    for (Py_ssize_t k = 0; k < plan.ncols; k++) {
        if (plan.kinds[k] >= K_COUNT || !PyBytes_Check(PyTuple_GET_ITEM(names, k))) {
            PyErr_SetString(PyExc_ValueError, "lines: a bad plan (a kind out of range, or a name not bytes)");
            goto done;
        }
    }
    if (mid != Py_None && !PyBytes_Check(mid)) {
        PyErr_SetString(PyExc_TypeError, "lines: mid must be bytes or None");
        goto done;
    }
    if (start < 0 || end > view.len || start > end) {
        PyErr_SetString(PyExc_ValueError, "lines: start and end are outside the buffer");
        goto done;
    }
    const unsigned char *b = view.buf;
    Py_ssize_t pos = start, next, size, cap = 0;
    long long row = first;
    int multi;
    if (reserve(&o, (end - start) * 2 + 64) < 0)
        goto done;
    while (pos < end) {
        if (!row_at(b, pos, end, &next, &size, &multi)) {
            bad_row(pos, "the row is not whole");
            goto done;
        }
        const unsigned char *p = b + pos + 4;
        if (multi) {  /* a row of 16 MiB or more: its packets' payloads joined */
            if (size > cap) {
                unsigned char *j = PyMem_Realloc(joined, (size_t)size);
                if (j == NULL) {
                    PyErr_NoMemory();
                    goto done;
                }
                joined = j;
                cap = size;
            }
            Py_ssize_t q = pos, w = 0;
            while (q < next) {
                Py_ssize_t len = (Py_ssize_t)b[q] | (Py_ssize_t)b[q + 1] << 8 | (Py_ssize_t)b[q + 2] << 16;
                memcpy(joined + w, b + q + 4, (size_t)len);
                w += len;
                q += 4 + len;
            }
            p = joined;
        }
        if (put(&o, PyBytes_AS_STRING(head), PyBytes_GET_SIZE(head)) < 0 || put_row(&o, &plan, p, size, pos) < 0)
            goto done;
        if (mid != Py_None) {
            if (put(&o, PyBytes_AS_STRING(mid), PyBytes_GET_SIZE(mid)) < 0)
                goto done;
            if (row < 0 ? put(&o, "-", 1) < 0 || put_uint(&o, (uint64_t)0 - (uint64_t)row) < 0
                        : put_uint(&o, (uint64_t)row) < 0)
                goto done;
        }
        if (put(&o, PyBytes_AS_STRING(tail), PyBytes_GET_SIZE(tail)) < 0)
            goto done;
        row++;
        pos = next;
    }
    result = PyBytes_FromStringAndSize(o.s, o.len);
done:
    PyMem_Free(o.s);
    PyMem_Free(joined);
    if (kinds.obj != NULL)
        PyBuffer_Release(&kinds);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "scan(buf, pos) -> (pos, rows, last, done): see protocol/textrows.py"},
    {"lines", lines, METH_VARARGS,
     "lines(buf, start, end, plan, head, mid, tail, first) -> bytes: see protocol/textrows.py"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, .m_name = "binlogd.protocol._textrows",
    .m_doc = "The rows of a text-protocol result set as JSON (the twin of binlogd.protocol.textrows).",
    .m_size = 0, .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__textrows(void)
{
    return PyModule_Create(&moduledef);
}

/* daemon.sinks._frames: the bus sinks' per-row framing in C, each function the twin of the Python one of
 * the same name in daemon/sinks/frames.py, with byte-identical results.
 *
 * Every function takes one block: ``lines``, n change payloads each ending in '\n' (bytes), and returns the
 * bytes of n requests, one per line, the payload without its newline. ``lines`` holding other than exactly
 * n lines: ValueError. Integers are C long long (a value or row0/seq0 + n - 1 out of range: OverflowError);
 * the other arguments are bytes (else TypeError).
 *
 * redis_xadds(head, lines, n): per line, head + "$<len>\r\n<payload>\r\n" (head: an XADD's packed RESP
 *   up to its last argument, see daemon/sinks/redis.py).
 * nats_hpubs(subject, sid, prefix, row0, seq0, lines, n): per line i, a NATS HPUB of the payload to
 *   subject with headers Nats-Msg-Id "<sid>:<prefix>:<row>", Binlogd-Source "<prefix>:<row>" and
 *   Nats-Expected-Last-Sequence "<seq>", row = row0 + i, seq = seq0 + i.
 * copy_rows(lines, n, file, pos, row0, tail): per line i, a COPY text-format line: the payload with its
 *   backslashes doubled, then "\t<file>\t<pos>\t<row0 + i>\t<tail>\n" (file and tail already in COPY text).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <string.h>

static Py_ssize_t
digits(long long v)
{
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    Py_ssize_t d = v < 0 ? 2 : 1;
    while (u >= 10) {
        u /= 10;
        d++;
    }
    return d;
}

static char *
put_int(char *p, long long v)
{
    char tmp[24];
    int k = 0;
    unsigned long long u = (unsigned long long)v;
    if (v < 0) {
        *p++ = '-';
        u = 0ULL - u;
    }
    do {
        tmp[k++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    while (k)
        *p++ = tmp[--k];
    return p;
}

static char *
put(char *p, const char *s, Py_ssize_t len)
{
    memcpy(p, s, (size_t)len);
    return p + len;
}

/* 0 when buf[0:len] is exactly n lines, each ending in '\n'; else -1 with ValueError set. */
static int
check_lines(const char *buf, Py_ssize_t len, Py_ssize_t n)
{
    Py_ssize_t count = 0;
    const char *p = buf, *end = buf + len, *nl;
    while (p < end && (nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        count++;
        p = nl + 1;
    }
    if (n < 0 || count != n || p != end) {
        PyErr_Format(PyExc_ValueError, "lines hold %zd newline-ended lines%s, not %zd", count,
                     p != end ? " and a partial one" : "", n);
        return -1;
    }
    return 0;
}

/* The bytes arguments and integers of a call, by position; -1 with an exception set when one is wrong. */
static int
arg_bytes(PyObject *const *args, Py_ssize_t i, const char **s, Py_ssize_t *len)
{
    if (!PyBytes_Check(args[i])) {
        PyErr_Format(PyExc_TypeError, "argument %zd must be bytes, not %.80s", i + 1, Py_TYPE(args[i])->tp_name);
        return -1;
    }
    *s = PyBytes_AS_STRING(args[i]);
    *len = PyBytes_GET_SIZE(args[i]);
    return 0;
}

static int
arg_int(PyObject *const *args, Py_ssize_t i, long long *v)
{
    if (!PyLong_Check(args[i])) {
        PyErr_Format(PyExc_TypeError, "argument %zd must be int, not %.80s", i + 1, Py_TYPE(args[i])->tp_name);
        return -1;
    }
    *v = PyLong_AsLongLong(args[i]);
    return *v == -1 && PyErr_Occurred() ? -1 : 0;
}

static int
nargs_is(Py_ssize_t nargs, Py_ssize_t want, const char *name)
{
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, want, nargs);
        return -1;
    }
    return 0;
}

/* -1 with OverflowError when first + n - 1 is past LLONG_MAX. */
static int
check_last(long long first, long long n)
{
    if (n > 0 && first > LLONG_MAX - (n - 1)) {
        PyErr_SetString(PyExc_OverflowError, "row or sequence number out of range");
        return -1;
    }
    return 0;
}

static PyObject *
redis_xadds(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    const char *head, *lines;
    Py_ssize_t head_len, len;
    long long n;
    if (nargs_is(nargs, 3, "redis_xadds") < 0 || arg_bytes(args, 0, &head, &head_len) < 0
        || arg_bytes(args, 1, &lines, &len) < 0 || arg_int(args, 2, &n) < 0
        || check_lines(lines, len, (Py_ssize_t)n) < 0)
        return NULL;
    const char *p = lines, *end = lines + len, *nl;
    Py_ssize_t size = 0;
    for (; p < end; p = nl + 1) {
        nl = memchr(p, '\n', (size_t)(end - p));
        size += head_len + 1 + digits(nl - p) + 2 + (nl - p) + 2;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL)
        return NULL;
    char *o = PyBytes_AS_STRING(out);
    for (p = lines; p < end; p = nl + 1) {
        nl = memchr(p, '\n', (size_t)(end - p));
        o = put(o, head, head_len);
        *o++ = '$';
        o = put_int(o, nl - p);
        o = put(o, "\r\n", 2);
        o = put(o, p, nl - p);
        o = put(o, "\r\n", 2);
    }
    return out;
}

static PyObject *
nats_hpubs(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    const char *subject, *prefix, *lines;
    Py_ssize_t subject_len, prefix_len, len;
    long long sid, row0, seq0, n;
    if (nargs_is(nargs, 7, "nats_hpubs") < 0 || arg_bytes(args, 0, &subject, &subject_len) < 0
        || arg_int(args, 1, &sid) < 0 || arg_bytes(args, 2, &prefix, &prefix_len) < 0
        || arg_int(args, 3, &row0) < 0 || arg_int(args, 4, &seq0) < 0 || arg_bytes(args, 5, &lines, &len) < 0
        || arg_int(args, 6, &n) < 0 || check_lines(lines, len, (Py_ssize_t)n) < 0
        || check_last(row0, n) < 0 || check_last(seq0, n) < 0)
        return NULL;
    static const char H1[] = "NATS/1.0\r\nNats-Msg-Id: ", H2[] = "\r\nBinlogd-Source: ",
                      H3[] = "\r\nNats-Expected-Last-Sequence: ", H4[] = "\r\n\r\n";
    /* headers: H1 sid:prefix:row H2 prefix:row H3 seq H4 */
    Py_ssize_t fixed = (Py_ssize_t)(sizeof H1 + sizeof H2 + sizeof H3 + sizeof H4 - 4) + digits(sid) + 1
                       + 2 * (prefix_len + 1);
    const char *p = lines, *end = lines + len, *nl;
    Py_ssize_t size = 0, i = 0;
    for (; p < end; p = nl + 1, i++) {
        nl = memchr(p, '\n', (size_t)(end - p));
        Py_ssize_t hdr = fixed + 2 * digits(row0 + i) + digits(seq0 + i);
        size += 5 + subject_len + 1 + digits(hdr) + 1 + digits(hdr + (nl - p)) + 2 + hdr + (nl - p) + 2;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL)
        return NULL;
    char *o = PyBytes_AS_STRING(out);
    for (p = lines, i = 0; p < end; p = nl + 1, i++) {
        nl = memchr(p, '\n', (size_t)(end - p));
        long long row = row0 + i, seq = seq0 + i;
        Py_ssize_t hdr = fixed + 2 * digits(row) + digits(seq);
        o = put(o, "HPUB ", 5);
        o = put(o, subject, subject_len);
        *o++ = ' ';
        o = put_int(o, hdr);
        *o++ = ' ';
        o = put_int(o, hdr + (nl - p));
        o = put(o, "\r\n", 2);
        o = put(o, H1, sizeof H1 - 1);
        o = put_int(o, sid);
        *o++ = ':';
        for (int twice = 0; twice < 2; twice++) {
            o = put(o, prefix, prefix_len);
            *o++ = ':';
            o = put_int(o, row);
            if (!twice)
                o = put(o, H2, sizeof H2 - 1);
        }
        o = put(o, H3, sizeof H3 - 1);
        o = put_int(o, seq);
        o = put(o, H4, sizeof H4 - 1);
        o = put(o, p, nl - p);
        o = put(o, "\r\n", 2);
    }
    return out;
}

static PyObject *
copy_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    const char *lines, *file, *tail;
    Py_ssize_t len, file_len, tail_len;
    long long n, pos, row0;
    if (nargs_is(nargs, 6, "copy_rows") < 0 || arg_bytes(args, 0, &lines, &len) < 0 || arg_int(args, 1, &n) < 0
        || arg_bytes(args, 2, &file, &file_len) < 0 || arg_int(args, 3, &pos) < 0 || arg_int(args, 4, &row0) < 0
        || arg_bytes(args, 5, &tail, &tail_len) < 0 || check_lines(lines, len, (Py_ssize_t)n) < 0
        || check_last(row0, n) < 0)
        return NULL;
    /* per line: payload (backslashes doubled) \t file \t pos \t row \t tail \n, the payload's \n reused */
    Py_ssize_t size = len + n * (1 + file_len + 1 + digits(pos) + 1 + 1 + tail_len);
    const char *p = lines, *end = lines + len, *bs;
    while (p < end && (bs = memchr(p, '\\', (size_t)(end - p))) != NULL) {
        size++;
        p = bs + 1;
    }
    for (long long i = 0; i < n; i++)
        size += digits(row0 + i);
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL)
        return NULL;
    char *o = PyBytes_AS_STRING(out);
    const char *nl;
    long long row = row0;
    for (p = lines; p < end; p = nl + 1, row++) {
        nl = memchr(p, '\n', (size_t)(end - p));
        const char *q = p;
        while (q < nl && (bs = memchr(q, '\\', (size_t)(nl - q))) != NULL) {
            o = put(o, q, bs + 1 - q);
            *o++ = '\\';
            q = bs + 1;
        }
        o = put(o, q, nl - q);
        *o++ = '\t';
        o = put(o, file, file_len);
        *o++ = '\t';
        o = put_int(o, pos);
        *o++ = '\t';
        o = put_int(o, row);
        *o++ = '\t';
        o = put(o, tail, tail_len);
        *o++ = '\n';
    }
    return out;
}

static PyMethodDef methods[] = {
    {"redis_xadds", (PyCFunction)(void (*)(void))redis_xadds, METH_FASTCALL,
     PyDoc_STR("redis_xadds(head, lines, n) -> bytes; see daemon/sinks/frames.py.")},
    {"nats_hpubs", (PyCFunction)(void (*)(void))nats_hpubs, METH_FASTCALL,
     PyDoc_STR("nats_hpubs(subject, sid, prefix, row0, seq0, lines, n) -> bytes; see daemon/sinks/frames.py.")},
    {"copy_rows", (PyCFunction)(void (*)(void))copy_rows, METH_FASTCALL,
     PyDoc_STR("copy_rows(lines, n, file, pos, row0, tail) -> bytes; see daemon/sinks/frames.py.")},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, .m_name = "binlogd.daemon.sinks._frames",
    .m_doc = "The bus sinks' per-row framing in C (Redis XADDs, NATS HPUBs, PostgreSQL COPY lines), the twins "
             "of daemon/sinks/frames.py.",
    .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__frames(void)
{
    return PyModule_Create(&moduledef);
}

/* library._jsonrows: optional C writer of row images as JSON bytes (see library/jsonrows.py). */
#include "_rowplan.h"
#include "_jsonstr.h"
#include <stddef.h>

PyDoc_STRVAR(module_doc,
"Row images written as JSON bytes in C, from the plans protocol._rowimage decodes\n"
"(rowcodec.image_plan), with no Python object per value where the value is native.\n"
"\n"
"Image(plan, null_offset, dumps) compiles a plan for JSON: each row image becomes the\n"
"bytes that dumps (library.serialize.dumps, orjson) gives for the row dict protocol._rowimage\n"
"decodes, byte for byte. Values of the plan's Python functions (OP_BYTES_CALL, OP_FIXED_CALL,\n"
"OP_JSON) and text in charsets other than UTF-8 are written from their Python value: None,\n"
"bool, int and str in C, floats by orjson.dumps, anything else with dumps(value).\n"
"\n"
"rows(first, second, data, pre, mid, post, sep, index_end[, again]) -> (bytes, rows): every row of data,\n"
"each written as pre + first image [+ mid + second image, when second is not None] + post, then\n"
"(when index_end is not None) the row's index from 0 in decimal [+ again + the index again] and\n"
"index_end; sep between rows;\n"
"rows: how many rows (update pairs) there were.\n"
"scalar(value) -> bytes writes None, a bool, an int, a float or a str as the rows hold them.\n"
"Every read is bounded: short or overrunning data raises\n"
"binlogd.protocol.errors.EventDecodeError; PARTIAL_UPDATE_ROWS is not handled here.");

typedef struct {
    PyObject_VAR_HEAD       /* ob_size: number of columns */
    Py_ssize_t nbytes;      /* null bitmap bytes */
    PyObject *dumps;        /* the fallback serialiser: dumps(value) -> bytes */
    PyObject *keys;         /* per column: b'"key":' as JSON, with a leading ',' after the first */
    PyObject *names;        /* per column: ENUM/SET names as JSON strings (a tuple of bytes), or None */
    Col cols[];             /* one per present column */
} Image;

/* ------------------------------------------------------------------ output buffer */

typedef struct {
    char *s;
    Py_ssize_t len, cap;
} Out;

/* Room for n more bytes; -1 with MemoryError. */
static int
reserve(Out *o, Py_ssize_t n)
{
    if (n <= o->cap - o->len)
        return 0;
    Py_ssize_t cap = o->cap ? o->cap : 8192;
    while (cap - o->len < n) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    char *s = PyMem_Realloc(o->s, (size_t)cap);
    if (s == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    o->s = s;
    o->cap = cap;
    return 0;
}

static int
put(Out *o, const char *s, Py_ssize_t n)
{
    if (reserve(o, n) < 0)
        return -1;
    memcpy(o->s + o->len, s, (size_t)n);
    o->len += n;
    return 0;
}

static int
put_bytes(Out *o, PyObject *bytes)
{
    return put(o, PyBytes_AS_STRING(bytes), PyBytes_GET_SIZE(bytes));
}

static char *
put_uint(char *o, uint64_t u)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    while (n)
        *o++ = tmp[--n];
    return o;
}

/* ------------------------------------------------------------------ JSON strings (as orjson writes them) */

/* A JSON string of the text in s: UTF-8, where a byte that is not part of a well-formed character
 * stands for itself as Python's "backslashreplace" writes it (\xNN), as the row dict would hold it. */
static int
put_string(Out *o, const unsigned char *s, Py_ssize_t n)
{
    const unsigned char *end = s + n;
    if (put(o, "\"", 1) < 0)
        return -1;
    while (s < end) {  /* in chunks: room for the worst case (6 bytes out per byte in) of 4 KiB at a time */
        const unsigned char *stop = end - s > 4096 ? s + 4096 : end;
        if (reserve(o, 6 * (stop - s) + 8) < 0)
            return -1;
        o->len = json_escape(o->s + o->len, &s, stop, end, 1) - o->s;
    }
    return put(o, "\"", 1);
}

/* ------------------------------------------------------------------ numbers (as orjson writes them) */

static PyObject *orjson_dumps;  /* orjson.dumps: floats are written by it (its shortest round-trip digits) */

/* The bytes fn(v) returns (a dumps function), appended. */
static int
put_dumped(Out *o, PyObject *fn, PyObject *v)
{
    PyObject *bytes = PyObject_CallOneArg(fn, v);
    if (bytes == NULL)
        return -1;
    int r = PyBytes_Check(bytes) ? put_bytes(o, bytes) : -1;
    if (r < 0 && !PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "dumps must return bytes");
    Py_DECREF(bytes);
    return r;
}

static int
put_double(Out *o, double d)
{
    PyObject *f = PyFloat_FromDouble(d);
    if (f == NULL)
        return -1;
    int r = put_dumped(o, orjson_dumps, f);
    Py_DECREF(f);
    return r;
}

static int
put_unsigned(Out *o, uint64_t u)
{
    if (reserve(o, 24) < 0)
        return -1;
    o->len = put_uint(o->s + o->len, u) - o->s;
    return 0;
}

static int
put_signed(Out *o, int64_t v)
{
    if (reserve(o, 24) < 0)
        return -1;
    o->len = put_int(o->s + o->len, v, 0) - o->s;
    return 0;
}

/* ------------------------------------------------------------------ one value */

/* A Python value as dumps would write it: None, bool, int, float and str here, the rest by dumps. */
static int
put_object(Out *o, PyObject *v, PyObject *dumps)
{
    if (v == Py_None)
        return put(o, "null", 4);
    if (v == Py_True)
        return put(o, "true", 4);
    if (v == Py_False)
        return put(o, "false", 5);
    if (PyFloat_CheckExact(v))
        return put_dumped(o, orjson_dumps, v);
    if (PyLong_CheckExact(v)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (!overflow)
            return x == -1 && PyErr_Occurred() ? -1 : put_signed(o, x);
        if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(v);
            if (!(u == (unsigned long long)-1 && PyErr_Occurred()))
                return put_unsigned(o, u);
            PyErr_Clear();
        }
    }
    else if (PyUnicode_CheckExact(v)) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(v, &n);
        if (s != NULL)
            return put_string(o, (const unsigned char *)s, n);
        PyErr_Clear();  /* surrogates: dumps raises what the reference path raises */
    }
    if (dumps == NULL) {
        PyErr_Format(PyExc_TypeError, "scalar: %R is not None, bool, int, float or str", v);
        return -1;
    }
    return put_dumped(o, dumps, v);
}

static int
put_called(Out *o, PyObject *fn, const unsigned char *s, Py_ssize_t n, PyObject *dumps)
{
    PyObject *v = call_with_bytes(fn, s, n);
    if (v == NULL)
        return -1;
    int r = put_object(o, v, dumps);
    Py_DECREF(v);
    return r;
}

/* One non-NULL value of column i, as JSON. */
static int
put_value(const Image *im, Py_ssize_t i, Buf *b, Out *o)
{
    const Col *c = &im->cols[i];
    const unsigned char *s;
    Py_ssize_t n;
    int64_t sv;
    uint64_t x;
    char *w;

    if ((s = take_value(b, c, &n)) == NULL)
        return -1;
    switch (c->op) {
    case OP_NONE:
        return put(o, "null", 4);
    case OP_INT:
        return int_value(c, s, &sv, &x) ? put_signed(o, sv) : put_unsigned(o, x);
    case OP_DOUBLE: {
        double d = PyFloat_Unpack8((const char *)s, 1);
        return d == -1.0 && PyErr_Occurred() ? -1 : put_double(o, d);
    }
    case OP_YEAR:
        return put_unsigned(o, s[0] ? 1900u + s[0] : 0);
    case OP_BIT:
        return put_unsigned(o, be(s, c->width));
    case OP_ENUM:
    case OP_SET: {
        x = le(s, c->width);
        PyObject *names = PyTuple_GET_ITEM(im->names, i);
        if (names == Py_None)
            return put_unsigned(o, x);
        n = PyTuple_GET_SIZE(names);
        if (c->op == OP_ENUM)  /* names[0] is '' */
            return x < (uint64_t)n ? put_bytes(o, PyTuple_GET_ITEM(names, (Py_ssize_t)x)) : put_unsigned(o, x);
        int first = 1;
        if (put(o, "[", 1) < 0)
            return -1;
        for (Py_ssize_t k = 0; k < n && k < 64; k++) {
            if (!(x >> k & 1))
                continue;
            if ((!first && put(o, ",", 1) < 0) || put_bytes(o, PyTuple_GET_ITEM(names, k)) < 0)
                return -1;
            first = 0;
        }
        return put(o, "]", 1);
    }
    case OP_TEXT: {
        if (c->flag)
            return put_string(o, s, n);
        PyObject *text = PyUnicode_Decode((const char *)s, n, c->codec, "backslashreplace");
        if (text == NULL)
            return -1;
        int r = put_object(o, text, im->dumps);
        Py_DECREF(text);
        return r;
    }
    case OP_JSON:
    case OP_BYTES_CALL:
    case OP_FIXED_CALL:
        return put_called(o, c->obj, s, n, im->dumps);
    case OP_RAISE:
        PyErr_SetObject(EventDecodeError, c->obj);
        return -1;
    default:  /* the dates, times and DECIMAL: a quoted text */
        if (reserve(o, TEXT_MAX + 2) < 0)
            return -1;
        w = o->s + o->len;
        *w++ = '"';
        if ((w = put_value_text(w, c, s)) == NULL)
            return -1;
        *w++ = '"';
        o->len = w - o->s;
        return 0;
    }
}

/* ------------------------------------------------------------------ images */

static int
put_image(const Image *im, Buf *b, Out *o)
{
    if (im->nbytes > b->len - b->pos) {
        PyErr_SetString(EventDecodeError, "row image null bitmap runs past the event");
        return -1;
    }
    const unsigned char *nulls = b->s + b->pos;
    b->pos += im->nbytes;
    if (put(o, "{", 1) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < Py_SIZE(im); i++) {
        const Col *c = &im->cols[i];
        if (put_bytes(o, PyTuple_GET_ITEM(im->keys, i)) < 0)
            return -1;
        if (c->nullable && nulls[c->bit >> 3] >> (c->bit & 7) & 1) {
            if (put(o, "null", 4) < 0)
                return -1;
        }
        else if (put_value(im, i, b, o) < 0)
            return -1;
    }
    return put(o, "}", 1);
}

/* The JSON string of a str, as bytes. */
static PyObject *
json_string(PyObject *text)
{
    Out o = {NULL, 0, 0};
    PyObject *r = NULL;
    Py_ssize_t n;
    const char *s;
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "column keys and ENUM/SET names must be str, not %R", text);
        return NULL;
    }
    if ((s = PyUnicode_AsUTF8AndSize(text, &n)) != NULL && put_string(&o, (const unsigned char *)s, n) == 0)
        r = PyBytes_FromStringAndSize(o.s, o.len);
    PyMem_Free(o.s);
    return r;
}

/* Column i's key as JSON bytes ('"key":', with a leading ',' after the first) and its names. */
static int
compile_column(Image *im, Py_ssize_t i)
{
    const Col *c = &im->cols[i];
    PyObject *key = json_string(c->key), *names = Py_None;
    if (key == NULL)
        return -1;
    PyObject *entry = PyBytes_FromFormat("%s%s:", i ? "," : "", PyBytes_AS_STRING(key));
    Py_DECREF(key);
    if (entry == NULL)
        return -1;
    PyTuple_SET_ITEM(im->keys, i, entry);
    if ((c->op == OP_ENUM || c->op == OP_SET) && c->obj != Py_None) {
        Py_ssize_t n = PyTuple_GET_SIZE(c->obj);
        if ((names = PyTuple_New(n)) == NULL)
            return -1;
        for (Py_ssize_t k = 0; k < n; k++) {
            PyObject *name = json_string(PyTuple_GET_ITEM(c->obj, k));
            if (name == NULL) {
                Py_DECREF(names);
                return -1;
            }
            PyTuple_SET_ITEM(names, k, name);
        }
    }
    else
        Py_INCREF(names);
    PyTuple_SET_ITEM(im->names, i, names);
    return 0;
}

static PyObject *
Image_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"plan", "null_offset", "dumps", NULL};
    PyObject *plan, *dumps;
    int null_offset;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!iO:Image", kwlist, &PyTuple_Type, &plan, &null_offset, &dumps))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(plan);
    if (null_offset < 0 || null_offset > 7 || n > 65536 || !PyCallable_Check(dumps)) {
        PyErr_SetString(PyExc_ValueError, "null_offset must be 0..7, the plan at most 65536 columns, "
                        "dumps callable");
        return NULL;
    }
    Image *im = (Image *)type->tp_alloc(type, n);  /* zeroed: a partly built image deallocates */
    if (im == NULL)
        return NULL;
    im->nbytes = (n + null_offset + 7) / 8;
    im->dumps = Py_NewRef(dumps);
    if ((im->keys = PyTuple_New(n)) == NULL || (im->names = PyTuple_New(n)) == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        im->cols[i].bit = (int)i + null_offset;
        if (parse_entry(&im->cols[i], PyTuple_GET_ITEM(plan, i)) < 0 || compile_column(im, i) < 0)
            goto fail;
    }
    return (PyObject *)im;
fail:
    Py_DECREF(im);
    return NULL;
}

static int
Image_traverse(Image *im, visitproc visit, void *arg)
{
    Py_VISIT(im->dumps);
    Py_VISIT(im->keys);
    Py_VISIT(im->names);
    for (Py_ssize_t i = 0; i < Py_SIZE(im); i++)
        if (col_traverse(&im->cols[i], visit, arg) < 0)
            return -1;
    return 0;
}

static void
Image_dealloc(Image *im)
{
    PyObject_GC_UnTrack(im);
    Py_CLEAR(im->dumps);
    Py_CLEAR(im->keys);
    Py_CLEAR(im->names);
    for (Py_ssize_t i = 0; i < Py_SIZE(im); i++)
        col_clear(&im->cols[i]);
    Py_TYPE(im)->tp_free((PyObject *)im);
}

static PyTypeObject ImageType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "binlogd.library._jsonrows.Image",
    .tp_doc = PyDoc_STR("Image(plan, null_offset, dumps): a row image plan compiled for JSON (see the module doc)."),
    .tp_basicsize = offsetof(Image, cols),
    .tp_itemsize = sizeof(Col),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = Image_new,
    .tp_dealloc = (destructor)Image_dealloc,
    .tp_traverse = (traverseproc)Image_traverse,
};

/* ------------------------------------------------------------------ rows */

static PyObject *
rows(PyObject *module, PyObject *args)
{
    Image *first;
    PyObject *second, *index_end, *again = Py_None;
    Py_buffer data, pre, mid, post, sep;
    Out o = {NULL, 0, 0};
    PyObject *result = NULL;

    (void)module;
    if (!PyArg_ParseTuple(args, "O!Oy*y*y*y*y*O|O:rows", &ImageType, &first, &second, &data, &pre, &mid, &post,
                          &sep, &index_end, &again))
        return NULL;
    if ((second != Py_None && !PyObject_TypeCheck(second, &ImageType))
            || (index_end != Py_None && !PyBytes_Check(index_end))
            || (again != Py_None && (index_end == Py_None || !PyBytes_Check(again)))) {
        PyErr_SetString(PyExc_TypeError, "rows: second must be an Image or None, index_end bytes or None, "
                        "again bytes (with index_end) or None");
        goto done;
    }
    Buf b = {data.buf, data.len, 0};
    uint64_t k = 0;  /* rows written */
    for (; b.pos < b.len; k++) {
        Py_ssize_t start = b.pos;
        if ((k && put(&o, sep.buf, sep.len) < 0) || put(&o, pre.buf, pre.len) < 0 || put_image(first, &b, &o) < 0)
            goto done;
        if (second != Py_None && (put(&o, mid.buf, mid.len) < 0 || put_image((Image *)second, &b, &o) < 0))
            goto done;
        if (put(&o, post.buf, post.len) < 0)
            goto done;
        if (index_end != Py_None && (put_unsigned(&o, k) < 0
                                     || (again != Py_None && (put_bytes(&o, again) < 0 || put_unsigned(&o, k) < 0))
                                     || put_bytes(&o, index_end) < 0))
            goto done;
        if (b.pos == start) {
            PyErr_SetString(EventDecodeError, second == Py_None
                            ? "row image is empty (no column present): the event cannot hold rows"
                            : "row images are empty (no column present): the event cannot hold rows");
            goto done;
        }
    }
    result = Py_BuildValue("(y#K)", o.s ? o.s : "", o.len, (unsigned long long)k);
done:
    PyMem_Free(o.s);
    PyBuffer_Release(&data);
    PyBuffer_Release(&pre);
    PyBuffer_Release(&mid);
    PyBuffer_Release(&post);
    PyBuffer_Release(&sep);
    return result;
}

/* scalar(value) -> bytes */
static PyObject *
scalar(PyObject *module, PyObject *value)
{
    Out o = {NULL, 0, 0};
    PyObject *result = NULL;
    (void)module;
    if (put_object(&o, value, NULL) == 0)
        result = PyBytes_FromStringAndSize(o.s, o.len);
    PyMem_Free(o.s);
    return result;
}

static PyMethodDef methods[] = {
    {"rows", rows, METH_VARARGS,
     PyDoc_STR("rows(first, second, data, pre, mid, post, sep, index_end[, again]) -> (bytes, rows) (see the module doc).")},
    {"scalar", scalar, METH_O,
     PyDoc_STR("scalar(value) -> bytes: None, a bool, an int (64-bit), a float or a str as JSON, as the rows are.")},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, .m_name = "binlogd.library._jsonrows", .m_doc = module_doc, .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__jsonrows(void)
{
    PyObject *orjson = PyImport_ImportModule("orjson");
    if (orjson == NULL)
        return NULL;
    orjson_dumps = PyObject_GetAttrString(orjson, "dumps");
    Py_DECREF(orjson);
    if (orjson_dumps == NULL || load_errors() < 0 || PyType_Ready(&ImageType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Image", (PyObject *)&ImageType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

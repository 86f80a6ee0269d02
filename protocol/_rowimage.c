/* protocol._rowimage: optional C decoder of row images (see protocol/rowcodec.py). */
#include "_rowplan.h"
#include <stddef.h>

PyDoc_STRVAR(module_doc,
"Row images decoded in C from a plan built once per TABLE_MAP and presence bitmap.\n"
"\n"
"Image(plan, null_offset) compiles a plan: a tuple with one entry per present column,\n"
"in column order, each (opcode, nullable, params, key):\n"
"  opcode    one of the OP_* constants of this module;\n"
"  nullable  true when the column's null bit is to be tested (bit k + null_offset for the\n"
"            k-th present column of the image's null bitmap);\n"
"  params    a tuple whose meaning depends on the opcode:\n"
"    OP_NONE ()                    None, no bytes (the NULL column type)\n"
"    OP_INT (width, signed)        little-endian integer of 1, 2, 3, 4 or 8 bytes\n"
"    OP_DOUBLE, OP_YEAR, OP_DATE, OP_TIMESTAMP ()   8, 1, 3, 4 bytes\n"
"    OP_DATETIME2, OP_TIMESTAMP2, OP_TIME2 (fsp,)   fsp 0..6\n"
"    OP_DECIMAL (precision, scale, strip)   NEWDECIMAL; strip: print -0 as 0\n"
"    OP_BIT (width,)               big-endian unsigned, 0..8 bytes\n"
"    OP_ENUM, OP_SET (width, names)  names: a tuple of str, or None for the number\n"
"                                  (ENUM names start with '' for index 0)\n"
"    OP_TEXT (prefix, codec)       length-prefixed text, decoded with backslashreplace\n"
"    OP_BYTES_CALL (prefix, fn)    length-prefixed value: fn(bytes)\n"
"    OP_FIXED_CALL (width, fn)     fixed-width value: fn(bytes)\n"
"    OP_JSON (prefix, index, fn, partial_fn)  partial_fn(bytes) when index is in partial\n"
"    OP_RAISE (message,)           raise EventDecodeError(message)\n"
"  key       the row dict's key for the column.\n"
"\n"
"An Image is called as image(data, pos, partial) -> (row, new_pos), like the generated\n"
"Python decoders; decode_rows(first, second, data, out) appends every row of an event\n"
"(second: None, or the after image of updates, giving (before, after) tuples) to the list\n"
"out. Every read is bounded: short or overrunning data raises\n"
"binlogd.protocol.errors.EventDecodeError.");

typedef struct {
    PyObject_VAR_HEAD       /* ob_size: number of columns */
    Py_ssize_t nbytes;      /* null bitmap bytes */
    Col cols[];             /* one per present column */
} Image;

/* ------------------------------------------------------------------ one value */

static PyObject *
ascii(const char *s, Py_ssize_t n)
{
    PyObject *u = PyUnicode_New(n, 127);
    if (u != NULL)
        memcpy(PyUnicode_1BYTE_DATA(u), s, (size_t)n);
    return u;
}

static PyObject *
value(const Col *c, Buf *b, PyObject *partial)
{
    const unsigned char *s;
    Py_ssize_t n;
    int64_t sv;
    uint64_t x;
    PyObject *v;
    char buf[TEXT_MAX], *o = buf;

    if ((s = take_value(b, c, &n)) == NULL)
        return NULL;
    switch (c->op) {
    case OP_NONE:
        Py_RETURN_NONE;
    case OP_INT:
        return int_value(c, s, &sv, &x) ? PyLong_FromLongLong(sv) : PyLong_FromUnsignedLongLong(x);
    case OP_DOUBLE: {
        double d = PyFloat_Unpack8((const char *)s, 1);
        return d == -1.0 && PyErr_Occurred() ? NULL : PyFloat_FromDouble(d);
    }
    case OP_YEAR:
        return PyLong_FromLong(s[0] ? 1900 + s[0] : 0);
    case OP_DATE: case OP_DATETIME2: case OP_TIMESTAMP2: case OP_TIME2: case OP_TIMESTAMP: case OP_DECIMAL:
        if ((o = put_value_text(o, c, s)) == NULL)
            return NULL;
        break;
    case OP_BIT:
        return PyLong_FromUnsignedLongLong(be(s, c->width));
    case OP_ENUM:
    case OP_SET:
        x = le(s, c->width);
        if (c->obj == Py_None)
            return PyLong_FromUnsignedLongLong(x);
        n = PyTuple_GET_SIZE(c->obj);
        if (c->op == OP_ENUM)  /* names[0] is '' */
            return x < (uint64_t)n ? Py_NewRef(PyTuple_GET_ITEM(c->obj, (Py_ssize_t)x))
                                   : PyLong_FromUnsignedLongLong(x);
        if ((v = PyList_New(0)) == NULL)
            return NULL;
        for (Py_ssize_t k = 0; k < n && k < 64; k++)
            if (x >> k & 1 && PyList_Append(v, PyTuple_GET_ITEM(c->obj, k)) < 0) {
                Py_DECREF(v);
                return NULL;
            }
        return v;
    case OP_TEXT:
        if (c->flag)
            return PyUnicode_DecodeUTF8((const char *)s, n, "backslashreplace");
        return PyUnicode_Decode((const char *)s, n, c->codec, "backslashreplace");
    case OP_JSON: {
        int r = partial == Py_None ? 0 : PySequence_Contains(partial, c->index);
        return r < 0 ? NULL : call_with_bytes(r ? c->obj2 : c->obj, s, n);
    }
    case OP_BYTES_CALL:
    case OP_FIXED_CALL:
        return call_with_bytes(c->obj, s, n);
    default:  /* OP_RAISE */
        PyErr_SetObject(EventDecodeError, c->obj);
        return NULL;
    }
    return ascii(buf, o - buf);
}

/* ------------------------------------------------------------------ images */

static PyObject *
new_dict(Py_ssize_t n)
{
#if PY_VERSION_HEX < 0x030D0000
    return _PyDict_NewPresized(n);
#else
    (void)n;
    return PyDict_New();
#endif
}

static PyObject *
decode_image(const Image *im, Buf *b, PyObject *partial)
{
    if (im->nbytes > b->len - b->pos) {
        PyErr_SetString(EventDecodeError, "row image null bitmap runs past the event");
        return NULL;
    }
    const unsigned char *nulls = b->s + b->pos;
    b->pos += im->nbytes;
    PyObject *row = new_dict(Py_SIZE(im));
    if (row == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < Py_SIZE(im); i++) {
        const Col *c = &im->cols[i];
        PyObject *v;
        if (c->nullable && nulls[c->bit >> 3] >> (c->bit & 7) & 1)
            v = Py_NewRef(Py_None);
        else if ((v = value(c, b, partial)) == NULL)
            goto fail;
        int r = PyDict_SetItem(row, c->key, v);
        Py_DECREF(v);
        if (r < 0)
            goto fail;
    }
    return row;
fail:
    Py_DECREF(row);
    return NULL;
}

static PyObject *
Image_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"plan", "null_offset", NULL};
    PyObject *plan;
    int null_offset = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!|i:Image", kwlist, &PyTuple_Type, &plan, &null_offset))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(plan);
    if (null_offset < 0 || null_offset > 7 || n > 65536) {
        PyErr_SetString(PyExc_ValueError, "null_offset must be 0..7 and the plan at most 65536 columns");
        return NULL;
    }
    Image *im = (Image *)type->tp_alloc(type, n);  /* zeroed: a partly built image deallocates */
    if (im == NULL)
        return NULL;
    im->nbytes = (n + null_offset + 7) / 8;
    for (Py_ssize_t i = 0; i < n; i++) {
        im->cols[i].bit = (int)i + null_offset;
        if (parse_entry(&im->cols[i], PyTuple_GET_ITEM(plan, i)) < 0) {
            Py_DECREF(im);
            return NULL;
        }
    }
    return (PyObject *)im;
}

static int
Image_traverse(Image *im, visitproc visit, void *arg)
{
    for (Py_ssize_t i = 0; i < Py_SIZE(im); i++)
        if (col_traverse(&im->cols[i], visit, arg) < 0)
            return -1;
    return 0;
}

static void
Image_dealloc(Image *im)
{
    PyObject_GC_UnTrack(im);
    for (Py_ssize_t i = 0; i < Py_SIZE(im); i++)
        col_clear(&im->cols[i]);
    Py_TYPE(im)->tp_free((PyObject *)im);
}

/* image(data, pos, partial=None) -> (row, new_pos) */
static PyObject *
Image_call(Image *im, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"data", "pos", "partial", NULL};
    Py_buffer view;
    Py_ssize_t pos;
    PyObject *partial = Py_None, *row;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*n|O:image", kwlist, &view, &pos, &partial))
        return NULL;
    if (pos < 0 || pos > view.len) {
        PyBuffer_Release(&view);
        PyErr_Format(EventDecodeError, "row image at offset %zd of %zd bytes", pos, view.len);
        return NULL;
    }
    Buf b = {view.buf, view.len, pos};
    row = decode_image(im, &b, partial);
    PyBuffer_Release(&view);
    return row == NULL ? NULL : Py_BuildValue("(Nn)", row, b.pos);
}

static PyTypeObject ImageType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "binlogd.protocol._rowimage.Image",
    .tp_doc = PyDoc_STR("Image(plan, null_offset=0): a compiled row image decoder (see the module doc)."),
    .tp_basicsize = offsetof(Image, cols),
    .tp_itemsize = sizeof(Col),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = Image_new,
    .tp_dealloc = (destructor)Image_dealloc,
    .tp_traverse = (traverseproc)Image_traverse,
    .tp_call = (ternaryfunc)Image_call,
};

/* ------------------------------------------------------------------ decode_rows */

static PyObject *
decode_rows(PyObject *module, PyObject *args)
{
    Image *first;
    PyObject *second, *out, *row = NULL, *after = NULL;
    Py_buffer view;

    (void)module;
    if (!PyArg_ParseTuple(args, "O!Oy*O!:decode_rows", &ImageType, &first, &second, &view, &PyList_Type, &out))
        return NULL;
    if (second != Py_None && !PyObject_TypeCheck(second, &ImageType)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "decode_rows: second must be an Image or None");
        return NULL;
    }
    Buf b = {view.buf, view.len, 0};
    while (b.pos < b.len) {
        Py_ssize_t start = b.pos;
        if ((row = decode_image(first, &b, Py_None)) == NULL)
            goto fail;
        if (second != Py_None) {
            if ((after = decode_image((Image *)second, &b, Py_None)) == NULL)
                goto fail;
            PyObject *pair = PyTuple_New(2);
            if (pair == NULL)
                goto fail;
            PyTuple_SET_ITEM(pair, 0, row);
            PyTuple_SET_ITEM(pair, 1, after);
            row = pair;
            after = NULL;
        }
        if (b.pos == start) {
            PyErr_SetString(EventDecodeError, second == Py_None
                            ? "row image is empty (no column present): the event cannot hold rows"
                            : "row images are empty (no column present): the event cannot hold rows");
            goto fail;
        }
        if (PyList_Append(out, row) < 0)
            goto fail;
        Py_CLEAR(row);
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(row);
    Py_XDECREF(after);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"decode_rows", decode_rows, METH_VARARGS,
     PyDoc_STR("decode_rows(first, second, data, out): append every row of data to out (see the module doc).")},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, .m_name = "binlogd.protocol._rowimage", .m_doc = module_doc, .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__rowimage(void)
{
    if (load_errors() < 0 || PyType_Ready(&ImageType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Image", (PyObject *)&ImageType) < 0)
        goto fail;
    for (int op = 0; op < OP_COUNT; op++)
        if (PyModule_AddIntConstant(m, OP_NAMES[op], op) < 0)
            goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}

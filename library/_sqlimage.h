/* library._sqlrows' Image: one image shape of a table compiled for the SQL writer (see _sqlrows.c's module
 * doc): how each column is read (its plan entry, _rowplan.h) and written (its form). */
#ifndef BINLOGD_SQLIMAGE_H
#define BINLOGD_SQLIMAGE_H

#include "_rowplan.h"
#include <stddef.h>

enum { F_NATIVE, F_FLOAT32, F_TEXT, F_HEX, F_CALL };

typedef struct {
    Col c;                 /* how the value is read: the plan entry */
    int form, pad;         /* how it is written; F_HEX: zero bytes up to pad */
    PyObject *name;        /* bytes: `name` */
    PyObject *names;       /* F_NATIVE ENUM/SET: tuple of bytes, or None */
    PyObject *render, *match;  /* F_CALL */
} Column;

typedef struct {
    PyObject_VAR_HEAD      /* ob_size: number of columns */
    Py_ssize_t nbytes;     /* null bitmap bytes */
    Py_ssize_t nkey;       /* positions in key; -1: the image does not hold the key */
    Py_ssize_t *key;
    Column cols[];
} Image;

/* The form of column i: (form, name, arg), checked against its opcode. */
static int
parse_form(Column *col, PyObject *form)
{
    static const char *const usage = "forms are (form, name bytes, arg) tuples fitting the plan's opcodes";
    PyObject *name, *arg;
    int op = col->c.op, ok;
    if (!PyTuple_Check(form) || !PyArg_ParseTuple(form, "iO!O:form", &col->form, &PyBytes_Type, &name, &arg))
        goto bad;
    col->name = Py_NewRef(name);
    switch (col->form) {
    case F_NATIVE:
        ok = op != OP_TEXT && op != OP_BYTES_CALL && op != OP_FIXED_CALL && op != OP_JSON;
        if (op == OP_ENUM || op == OP_SET) {
            ok = arg == Py_None || PyTuple_Check(arg);
            for (Py_ssize_t k = 0; ok && arg != Py_None && k < PyTuple_GET_SIZE(arg); k++)
                ok = PyBytes_Check(PyTuple_GET_ITEM(arg, k));
            col->names = Py_NewRef(arg);
        }
        break;
    case F_FLOAT32:
        ok = op == OP_FIXED_CALL && col->c.width == 4;
        break;
    case F_TEXT:
        ok = op == OP_TEXT;
        break;
    case F_HEX:
        ok = op == OP_BYTES_CALL && PyLong_Check(arg) && (col->pad = PyLong_AsLong(arg)) >= 0 && col->pad <= 65535;
        break;
    case F_CALL:
        ok = (op == OP_TEXT || op == OP_BYTES_CALL || op == OP_FIXED_CALL || op == OP_JSON)
             && PyArg_ParseTuple(arg, "OO:F_CALL arg", &col->render, &col->match)
             && PyCallable_Check(col->render) && PyCallable_Check(col->match);
        Py_XINCREF(col->render);
        Py_XINCREF(col->match);
        break;
    default:
        ok = 0;
    }
    if (ok)
        return 0;
bad:
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "%s: %R", usage, form);
    return -1;
}

static void Image_dealloc(Image *im);

static PyObject *
Image_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"plan", "null_offset", "forms", "key", NULL};
    PyObject *plan, *forms, *key;
    int null_offset;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!iO!O:Image", kwlist, &PyTuple_Type, &plan, &null_offset,
                                     &PyTuple_Type, &forms, &key))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(plan);
    if (null_offset < 0 || null_offset > 7 || n > 65536 || PyTuple_GET_SIZE(forms) != n
            || (key != Py_None && !PyTuple_Check(key))) {
        PyErr_SetString(PyExc_ValueError, "null_offset must be 0..7, the plan at most 65536 columns with one form "
                        "each, key a tuple or None");
        return NULL;
    }
    Image *im = (Image *)type->tp_alloc(type, n);  /* zeroed: a partly built image deallocates */
    if (im == NULL)
        return NULL;
    im->nbytes = (n + null_offset + 7) / 8;
    im->nkey = key == Py_None ? -1 : PyTuple_GET_SIZE(key);
    if (im->nkey > 0 && (im->key = PyMem_Calloc((size_t)im->nkey, sizeof(Py_ssize_t))) == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t k = 0; k < im->nkey; k++) {
        im->key[k] = PyLong_AsSsize_t(PyTuple_GET_ITEM(key, k));
        if (im->key[k] < 0 || im->key[k] >= n) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "key positions must be columns of the image");
            goto fail;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        im->cols[i].c.bit = (int)i + null_offset;
        if (parse_entry(&im->cols[i].c, PyTuple_GET_ITEM(plan, i)) < 0
                || parse_form(&im->cols[i], PyTuple_GET_ITEM(forms, i)) < 0)
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
    for (Py_ssize_t i = 0; i < Py_SIZE(im); i++) {
        Column *col = &im->cols[i];
        if (col_traverse(&col->c, visit, arg) < 0)
            return -1;
        Py_VISIT(col->name);
        Py_VISIT(col->names);
        Py_VISIT(col->render);
        Py_VISIT(col->match);
    }
    return 0;
}

static void
Image_dealloc(Image *im)
{
    PyObject_GC_UnTrack(im);
    for (Py_ssize_t i = 0; i < Py_SIZE(im); i++) {
        Column *col = &im->cols[i];
        col_clear(&col->c);
        Py_CLEAR(col->name);
        Py_CLEAR(col->names);
        Py_CLEAR(col->render);
        Py_CLEAR(col->match);
    }
    PyMem_Free(im->key);
    Py_TYPE(im)->tp_free((PyObject *)im);
}

static PyTypeObject ImageType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "binlogd.library._sqlrows.Image",
    .tp_doc = PyDoc_STR("Image(plan, null_offset, forms, key): a row image plan compiled for SQL (see the module doc)."),
    .tp_basicsize = offsetof(Image, cols),
    .tp_itemsize = sizeof(Column),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = Image_new,
    .tp_dealloc = (destructor)Image_dealloc,
    .tp_traverse = (traverseproc)Image_traverse,
};

#endif

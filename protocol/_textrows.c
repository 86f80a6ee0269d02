/* protocol._textrows: the scan of a text-protocol result set's rows (COM_QUERY) in C, the twin of
 * protocol/textrows.py's scan() with the same results (sans-I/O: bytes in, offsets out; the rows as JSON are
 * library/_textjson.c's).
 *
 * scan(buf, pos): walks the whole rows (a row of 16 MiB or more spans several packets) from pos; returns
 *   (pos, rows, last, done): where it stopped, how many rows it walked, where the last one starts (-1: none),
 *   and why it stopped: 0 the next row is not whole in buf, 1 an EOF packet starts at pos, 2 an ERR packet.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_textrow.h"

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

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "scan(buf, pos) -> (pos, rows, last, done): see protocol/textrows.py"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, .m_name = "binlogd.protocol._textrows",
    .m_doc = "The whole rows of a text-protocol result set, found in C (the twin of binlogd.protocol.textrows.scan).",
    .m_size = 0, .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__textrows(void)
{
    return PyModule_Create(&moduledef);
}

/* library._sqlrows: optional C writer of row images as SQL text (see library/sqlout/native.py). */
#include "_sqltext.h"
#include "_sqlimage.h"
#include <stddef.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

PyDoc_STRVAR(module_doc,
"Row images written as the SQL text of binlogd sql, in C, from the plans protocol._rowimage\n"
"decodes (rowcodec.image_plan).\n"
"\n"
"Image(plan, null_offset, forms, key) compiles one image shape. forms has one entry per plan entry,\n"
"(form, name, arg): name is the column's quoted name as bytes; form says how a value is written:\n"
"  F_NATIVE   from the decoded value, by opcode: integers, DECIMAL and YEAR as digits, DOUBLE as\n"
"             Python's repr, dates and times quoted, BIT as b'...', ENUM/SET by arg: None (the\n"
"             number) or a tuple of bytes per name (ENUM: the quoted literal, SET: escaped, unquoted)\n"
"  F_FLOAT32  a 4-byte float (OP_FIXED_CALL) as Python's repr of its exact double\n"
"  F_TEXT     OP_TEXT quoted and escaped as mysql_real_escape_string, from the text Python decodes\n"
"             (backslashreplace); compared (match) with ' COLLATE utf8mb4_bin' after it\n"
"  F_HEX      OP_BYTES_CALL's bytes as X'..', zero bytes added up to arg (an int) when shorter\n"
"  F_CALL     arg = (render, match): render(value) (match(value) when compared), a str, in UTF-8 with\n"
"             surrogateescape, where value is the Python value protocol._rowimage decodes\n"
"SQL NULL is NULL. key: a tuple of the positions in the image of the table's primary key (in key\n"
"order), or None when the image does not hold the whole key.\n"
"\n"
"rows(first, second, data, what, head, reverse) -> (bytes, rows) writes every row of data:\n"
"  W_VALUES          head, then (v,...) per row of first, ',' between rows, then ';'\n"
"  W_DELETE          head + where(first) + ';' per row, newline between rows\n"
"  W_UPDATE          head + sets(second) + where(first) + ';' (rows are first then second images)\n"
"  W_UPDATE_SWAPPED  head + sets(first) + where(second) + ';'\n"
"where(image) is ' WHERE ' + the key's `c`=v joined by ' AND ', or without a key every column's\n"
"`c`<=>v (match form) joined by ' AND ' and ' LIMIT 1'; sets(image) is `c`=v joined by ','.\n"
"reverse writes the rows last first. Every value of every row is decoded and checked as\n"
"protocol._rowimage decodes it, written or not: what it rejects raises the same kind of error.\n"
"rows_events(first, second, view, start, stop, head_len, crc_len, what, head, reverse) -> (bytes, rows)\n"
"is rows() of each rows event in view[start:stop] (events one after another, by their length fields),\n"
"whose row images are its bytes from head_len to crc_len before its end, with a newline between two\n"
"events' statements; reverse writes the events last first (their rows last first).\n"
"\n"
"keep_freed_memory() -> bool has malloc (glibc's; False elsewhere) keep the memory freed in this process for\n"
"reuse: blocks under 32 MiB come from its heap, not fresh mappings, and up to 256 MiB free at its top stay\n"
"mapped. The outputs of a few MiB the writer makes one after another then land on memory already touched,\n"
"not on new pages (a page fault each, a third of binlogd sql's time); for a process that writes and exits.\n"
"load_powers(pow5, inv) -> bool loads the powers of 5 DOUBLE and FLOAT are written with, without Python's\n"
"repr() (16-byte little-endian integers: for i < 326, 5^i in its top 125 bits; for q < 292,\n"
"2^(bit_length(5^q) - 1 + 125) // 5^q + 1); returns whether they are used (they need 128-bit integers).\n"
"\n"
"comment(raw) -> bytes: '-- ' + raw with each newline followed by '-- ' and each carriage return a space,\n"
"when raw is well-formed UTF-8 (the text Python decodes from it, encoded again); else None.\n"
"one_line(raw) -> bool: whether raw is well-formed UTF-8 without a newline or carriage return (its\n"
"comment is then '-- ' + raw).\n"
"utf8_blocks(on) -> bool: text is checked 32 bytes at a time (AVX2, where the CPU has it; library/_utf8simd.h)\n"
"when on, else byte by byte where it is not ASCII; returns whether it now is. Both give the same output.");

enum { W_VALUES, W_DELETE, W_UPDATE, W_UPDATE_SWAPPED };

/* One value of a row: its bytes (s NULL for SQL NULL) and, for F_CALL, its Python value. */
typedef struct {
    const unsigned char *s;
    Py_ssize_t n;
    PyObject *obj;
} Span;

/* ------------------------------------------------------------------ one value */

/* F_NATIVE ENUM / SET */
static int
put_enum_set(Out *o, const Column *col, const unsigned char *s)
{
    uint64_t x = le(s, col->c.width);
    if (col->names == Py_None)
        return put_digits(o, 0, 0, x);
    Py_ssize_t n = PyTuple_GET_SIZE(col->names);
    if (col->c.op == OP_ENUM)
        return x < (uint64_t)n ? add_bytes(o, PyTuple_GET_ITEM(col->names, (Py_ssize_t)x)) : put_digits(o, 0, 0, x);
    int first = 1;
    if (add(o, "'", 1) < 0)
        return -1;
    for (Py_ssize_t k = 0; k < n && k < 64; k++) {
        if (!(x >> k & 1))
            continue;
        if ((!first && add(o, ",", 1) < 0) || add_bytes(o, PyTuple_GET_ITEM(col->names, k)) < 0)
            return -1;
        first = 0;
    }
    return add(o, "'", 1);
}

static int
put_native(Out *o, const Column *col, const unsigned char *s)
{
    const Col *c = &col->c;
    int64_t sv;
    uint64_t x;
    switch (c->op) {
    case OP_NONE:
        return ADD_LITERAL(o, "NULL");
    case OP_INT:
        return int_value(c, s, &sv, &x) ? put_digits(o, 1, sv, 0) : put_digits(o, 0, 0, x);
    case OP_DOUBLE:
        return put_repr(o, PyFloat_Unpack8((const char *)s, 1));
    case OP_YEAR:
        return put_digits(o, 0, 0, s[0] ? 1900u + s[0] : 0);
    case OP_BIT: {
        char *w = room(o, 67);
        if (w == NULL)
            return -1;
        x = be(s, c->width);
        int top = 63;
        while (top > 0 && !(x >> top & 1))
            top--;
        *w++ = 'b';
        *w++ = '\'';
        for (; top >= 0; top--)
            *w++ = (char)('0' + (x >> top & 1));
        *w++ = '\'';
        o->len = w - o->s;
        return 0;
    }
    case OP_ENUM:
    case OP_SET:
        return put_enum_set(o, col, s);
    default:
        return add_value_text(o, c, s);
    }
}

/* One value as a literal: stored (match 0) or compared with <=> (match 1). */
static int
put_value(Out *o, const Column *col, const Span *v, int match)
{
    const Col *c = &col->c;
    if (v->s == NULL)
        return ADD_LITERAL(o, "NULL");
    switch (col->form) {
    case F_FLOAT32:
        return put_repr(o, PyFloat_Unpack4((const char *)v->s, 1));
    case F_HEX:
        return put_hex(o, v->s, v->n, col->pad);
    case F_CALL: {
        PyObject *text = PyObject_CallOneArg(match ? col->match : col->render, v->obj);
        if (text == NULL)
            return -1;
        int r = put_str(o, text);
        Py_DECREF(text);
        return r;
    }
    case F_TEXT: {
        int r;
        if (c->flag)
            r = put_quoted(o, v->s, v->n, o->readable);  /* v->s is in the rows' data */
        else {  /* another character set: Python decodes it, its text goes out in UTF-8 */
            PyObject *text = PyUnicode_Decode((const char *)v->s, v->n, c->codec, "backslashreplace");
            Py_ssize_t n;
            const char *utf8 = text == NULL ? NULL : PyUnicode_AsUTF8AndSize(text, &n);
            r = utf8 == NULL ? -1 : put_quoted(o, (const unsigned char *)utf8, n, NULL);
            Py_XDECREF(text);
        }
        return r < 0 || !match ? r : ADD_LITERAL(o, " COLLATE utf8mb4_bin");
    }
    default:
        return put_native(o, col, v->s);
    }
}

/* ------------------------------------------------------------------ reading rows */

/* The Python value protocol._rowimage decodes for an F_CALL column. */
static PyObject *
python_value(const Col *c, const unsigned char *s, Py_ssize_t n)
{
    if (c->op == OP_TEXT)
        return c->flag ? PyUnicode_DecodeUTF8((const char *)s, n, "backslashreplace")
                       : PyUnicode_Decode((const char *)s, n, c->codec, "backslashreplace");
    return call_with_bytes(c->obj, s, n);  /* OP_BYTES_CALL, OP_FIXED_CALL, OP_JSON (never partial here) */
}

static void
release(Span *sp, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        Py_CLEAR(sp[i].obj);
}

enum { READ_VALUES = 1, READ_CHECKS = 2 };

/* Reads one image into sp (one Span per column). With READ_VALUES, the Python values of F_CALL columns
 * are made (which checks them, as the decoder does); with READ_CHECKS, DECIMALs are checked too (a
 * DECIMAL written is checked when it is written). */
static int
read_image(const Image *im, Buf *b, Span *sp, int flags)
{
    char scratch[TEXT_MAX];
    if (im->nbytes > b->len - b->pos) {
        PyErr_SetString(EventDecodeError, "row image null bitmap runs past the event");
        return -1;
    }
    const unsigned char *nulls = b->s + b->pos;
    b->pos += im->nbytes;
    for (Py_ssize_t i = 0; i < Py_SIZE(im); i++) {
        const Column *col = &im->cols[i];
        const Col *c = &col->c;
        Span *v = &sp[i];
        if (c->nullable && nulls[c->bit >> 3] >> (c->bit & 7) & 1) {
            v->s = NULL;
            continue;
        }
        if ((v->s = take_value(b, c, &v->n)) == NULL)
            return -1;
        if (c->op == OP_NONE)
            v->s = NULL;
        else if (c->op == OP_RAISE) {
            PyErr_SetObject(EventDecodeError, c->obj);
            return -1;
        }
        else if (c->op == OP_DECIMAL && flags & READ_CHECKS && put_decimal(scratch, c, v->s) == NULL)
            return -1;
        else if (col->form == F_CALL && flags & READ_VALUES && (v->obj = python_value(c, v->s, v->n)) == NULL)
            return -1;
    }
    return 0;
}

/* The flags reading an image for writing takes: checks where only the key of it is written. */
static int
write_flags(const Image *im, int where)
{
    return READ_VALUES | (where && im->nkey >= 0 ? READ_CHECKS : 0);
}

/* One row: the first image, then the second when there is one. flags: read_image's (a pass that
 * writes nothing takes 0), or -1 for those of writing `what`. */
static int
read_row(const Image *first, const Image *second, Buf *b, Span *sp, int what, int flags)
{
    Py_ssize_t start = b->pos;
    int f1 = flags >= 0 ? flags : write_flags(first, what == W_DELETE || what == W_UPDATE);
    int f2 = flags >= 0 || second == NULL ? flags : write_flags(second, what == W_UPDATE_SWAPPED);
    if (read_image(first, b, sp, f1) < 0 || (second != NULL && read_image(second, b, sp + Py_SIZE(first), f2) < 0))
        return -1;
    if (b->pos == start) {
        PyErr_SetString(EventDecodeError, second == NULL
                        ? "row image is empty (no column present): the event cannot hold rows"
                        : "row images are empty (no column present): the event cannot hold rows");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ statements */

/* `c`=v,... (sep ",") or the key's `c`=v AND ... (sep " AND ") */
static int
put_assignments(Out *o, const Image *im, const Span *sp, const Py_ssize_t *which, Py_ssize_t n, const char *sep)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t i = which == NULL ? k : which[k];
        if ((k && add(o, sep, (Py_ssize_t)strlen(sep)) < 0) || add_bytes(o, im->cols[i].name) < 0
                || add(o, "=", 1) < 0 || put_value(o, &im->cols[i], &sp[i], 0) < 0)
            return -1;
    }
    return 0;
}

static int
put_where(Out *o, const Image *im, const Span *sp)
{
    if (ADD_LITERAL(o, " WHERE ") < 0)
        return -1;
    if (im->nkey >= 0)
        return put_assignments(o, im, sp, im->key, im->nkey, " AND ");
    for (Py_ssize_t i = 0; i < Py_SIZE(im); i++)
        if ((i && ADD_LITERAL(o, " AND ") < 0) || add_bytes(o, im->cols[i].name) < 0 || ADD_LITERAL(o, "<=>") < 0
                || put_value(o, &im->cols[i], &sp[i], 1) < 0)
            return -1;
    return ADD_LITERAL(o, " LIMIT 1");
}

static int
put_row(Out *o, int what, const Py_buffer *head, const Image *first, const Image *second, const Span *sp)
{
    const Span *sp2 = sp + Py_SIZE(first);
    if (what == W_VALUES) {  /* head is the statement's, before the first row */
        if (add(o, "(", 1) < 0)
            return -1;
        for (Py_ssize_t i = 0; i < Py_SIZE(first); i++)
            if ((i && add(o, ",", 1) < 0) || put_value(o, &first->cols[i], &sp[i], 0) < 0)
                return -1;
        return add(o, ")", 1);
    }
    if (add(o, head->buf, head->len) < 0)
        return -1;
    if (what == W_UPDATE && (put_assignments(o, second, sp2, NULL, Py_SIZE(second), ",") < 0
                             || put_where(o, first, sp) < 0))
        return -1;
    if (what == W_UPDATE_SWAPPED && (put_assignments(o, first, sp, NULL, Py_SIZE(first), ",") < 0
                                     || put_where(o, second, sp2) < 0))
        return -1;
    if (what == W_DELETE && put_where(o, first, sp) < 0)
        return -1;
    return add(o, ";", 1);
}

/* Every row from data's start, in order; or (reverse) every row's start first, then last to first. */
static int
put_rows(Out *o, int what, const Py_buffer *head, const Image *first, const Image *second, Buf *b, Span *sp,
         Py_ssize_t nspans, int reverse, Py_ssize_t *count)
{
    Py_ssize_t *starts = NULL, nstarts = 0, cap = 0;
    int r = -1;
    while (reverse && b->pos < b->len) {
        if (nstarts == cap) {
            cap = cap ? 2 * cap : 64;
            Py_ssize_t *grown = PyMem_Realloc(starts, (size_t)cap * sizeof(Py_ssize_t));
            if (grown == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            starts = grown;
        }
        starts[nstarts++] = b->pos;
        r = read_row(first, second, b, sp, what, 0);
        release(sp, nspans);
        if (r < 0)
            goto done;
    }
    r = -1;
    if (what == W_VALUES && add(o, head->buf, head->len) < 0)
        goto done;
    for (Py_ssize_t k = 0; reverse ? k < nstarts : b->pos < b->len; k++) {
        if (reverse)
            b->pos = starts[nstarts - 1 - k];
        int bad = (k && add(o, what == W_VALUES ? "," : "\n", 1) < 0) || read_row(first, second, b, sp, what, -1) < 0
                  || put_row(o, what, head, first, second, sp) < 0;
        release(sp, nspans);
        if (bad)
            goto done;
        *count = k + 1;
    }
    r = what == W_VALUES ? add(o, ";", 1) : 0;
done:
    PyMem_Free(starts);
    return r;
}

/* (bytes, rows): every row of the events' row images, base + spans[2i] for spans[2i + 1] bytes each, one
 * event after another with a newline between (reverse: the last event first, its rows last first). The
 * output starts with room for twice the images' bytes (about what their SQL takes), so that it is seldom
 * copied to grow. */
static PyObject *
write_events(Image *first, PyObject *second, int what, const Py_buffer *head, int reverse,
             const unsigned char *base, const Py_ssize_t *spans, Py_ssize_t nevents)
{
    int pairs = what == W_UPDATE || what == W_UPDATE_SWAPPED;
    if (what < W_VALUES || what > W_UPDATE_SWAPPED || (pairs ? !PyObject_TypeCheck(second, &ImageType)
                                                             : second != Py_None)) {
        PyErr_SetString(PyExc_ValueError, "an unknown what, or second not an Image for updates and None else");
        return NULL;
    }
    Py_ssize_t nspans = Py_SIZE(first) + (pairs ? Py_SIZE(second) : 0), total = 0;
    Span *sp = PyMem_Calloc((size_t)nspans + 1, sizeof(Span));
    if (sp == NULL)
        return PyErr_NoMemory();
    Out o = {NULL, NULL, 0, 0, NULL};
    PyObject *result = NULL;
    Py_ssize_t images = 0;
    for (Py_ssize_t i = 0; i < nevents; i++)
        images += spans[2 * i + 1];
    if (room(&o, images < PY_SSIZE_T_MAX / 4 ? 2 * images + head->len : 0) == NULL)
        goto done;
    for (Py_ssize_t k = 0; k < nevents; k++) {
        Py_ssize_t i = reverse ? nevents - 1 - k : k, count = 0;
        Buf b = {base + spans[2 * i], spans[2 * i + 1], 0};
        o.readable = b.s + b.len;
        if ((k && add(&o, "\n", 1) < 0)
            || put_rows(&o, what, head, first, pairs ? (Image *)second : NULL, &b, sp, nspans, reverse, &count) < 0)
            goto done;
        total += count;
    }
    PyObject *text = out_bytes(&o);
    result = text == NULL ? NULL : Py_BuildValue("(Nn)", text, total);
done:
    PyMem_Free(sp);
    Py_XDECREF(o.bytes);
    return result;
}

static PyObject *
rows(PyObject *module, PyObject *args)
{
    Image *first;
    PyObject *second;
    Py_buffer data, head;
    int what, reverse;

    (void)module;
    if (!PyArg_ParseTuple(args, "O!Oy*iy*p:rows", &ImageType, &first, &second, &data, &what, &head, &reverse))
        return NULL;
    Py_ssize_t span[2] = {0, data.len};
    PyObject *result = write_events(first, second, what, &head, reverse, data.buf, span, 1);
    PyBuffer_Release(&data);
    PyBuffer_Release(&head);
    return result;
}

static PyObject *
rows_events(PyObject *module, PyObject *args)
{
    Image *first;
    PyObject *second, *result = NULL;
    Py_buffer view, head;
    Py_ssize_t start, stop, head_len, crc_len, nevents = 0, cap = 0, *spans = NULL;
    int what, reverse;

    (void)module;
    if (!PyArg_ParseTuple(args, "O!Oy*nnnniy*p:rows_events", &ImageType, &first, &second, &view, &start, &stop,
                          &head_len, &crc_len, &what, &head, &reverse))
        return NULL;
    const unsigned char *p = view.buf;
    if (start < 0 || stop > view.len || head_len < 19 || crc_len < 0) {
        PyErr_SetString(PyExc_ValueError, "rows_events: start and stop must lie within the view");
        goto done;
    }
    for (Py_ssize_t pos = start; pos < stop; nevents++) {
        Py_ssize_t n = stop - pos >= 19 ? (Py_ssize_t)le32(p + pos + 9) : 0;
        if (n <= head_len + crc_len || n > stop - pos) {
            PyErr_Format(PyExc_ValueError, "rows_events: no rows event of that shape at %zd", pos);
            goto done;
        }
        if (nevents == cap) {
            cap = cap ? 2 * cap : 64;
            Py_ssize_t *grown = PyMem_Realloc(spans, (size_t)cap * 2 * sizeof(Py_ssize_t));
            if (grown == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            spans = grown;
        }
        spans[2 * nevents] = pos + head_len;
        spans[2 * nevents + 1] = n - head_len - crc_len;
        pos += n;
    }
    result = write_events(first, second, what, &head, reverse, p, spans, nevents);
done:
    PyMem_Free(spans);
    PyBuffer_Release(&view);
    PyBuffer_Release(&head);
    return result;
}

/* ------------------------------------------------------------------ module */

/* comment(raw) -> bytes | None */
static PyObject *
comment(PyObject *module, PyObject *arg)
{
    Py_buffer raw;
    Out o = {NULL, NULL, 0, 0, NULL};
    PyObject *result = NULL;

    (void)module;
    if (!PyArg_Parse(arg, "y*:comment", &raw))
        return NULL;
    int r = put_comment(&o, raw.buf, raw.len);
    result = r < 0 ? NULL : r > 0 ? Py_NewRef(Py_None) : out_bytes(&o);
    Py_XDECREF(o.bytes);
    PyBuffer_Release(&raw);
    return result;
}

/* one_line(raw) -> bool */
static PyObject *
one_line(PyObject *module, PyObject *arg)
{
    Py_buffer raw;

    (void)module;
    if (!PyArg_Parse(arg, "y*:one_line", &raw))
        return NULL;
    int yes = utf8_line(raw.buf, raw.len);
    PyBuffer_Release(&raw);
    return PyBool_FromLong(yes);
}

/* utf8_blocks(on) -> bool */
static PyObject *
utf8_blocks(PyObject *module, PyObject *on)
{
    (void)module;
    int yes = PyObject_IsTrue(on);
    return yes < 0 ? NULL : PyBool_FromLong(utf8_simd_set(yes));
}

/* keep_freed_memory() -> bool */
static PyObject *
keep_freed_memory(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
#if defined(__GLIBC__)
    if (mallopt(M_MMAP_THRESHOLD, 32 << 20) && mallopt(M_TRIM_THRESHOLD, 256 << 20))
        Py_RETURN_TRUE;
#endif
    Py_RETURN_FALSE;
}

/* load_powers(pow5, inv) */
static PyObject *
load_powers(PyObject *module, PyObject *args)
{
    Py_buffer pow5, inv;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*y*:load_powers", &pow5, &inv))
        return NULL;
    int r = shortest_load(pow5.buf, pow5.len, inv.buf, inv.len);
    PyBuffer_Release(&pow5);
    PyBuffer_Release(&inv);
    return r < 0 ? NULL : PyBool_FromLong(shortest_available());
}

static PyMethodDef methods[] = {
    {"load_powers", load_powers, METH_VARARGS,
     PyDoc_STR("load_powers(pow5, inv) -> bool: the powers of 5 repr() of doubles is written with (see the module doc).")},
    {"utf8_blocks", utf8_blocks, METH_O,
     PyDoc_STR("utf8_blocks(on) -> bool: text checked 32 bytes at a time when on (see the module doc).")},
    {"keep_freed_memory", keep_freed_memory, METH_NOARGS,
     PyDoc_STR("keep_freed_memory() -> bool: malloc keeps freed memory for reuse (see the module doc).")},
    {"rows", rows, METH_VARARGS,
     PyDoc_STR("rows(first, second, data, what, head, reverse) -> (bytes, rows) (see the module doc).")},
    {"rows_events", rows_events, METH_VARARGS,
     PyDoc_STR("rows_events(first, second, view, start, stop, head_len, crc_len, what, head, reverse) -> "
               "(bytes, rows) (see the module doc).")},
    {"comment", comment, METH_O,
     PyDoc_STR("comment(raw) -> bytes | None: the UTF-8 text raw as SQL comment lines (see the module doc).")},
    {"one_line", one_line, METH_O,
     PyDoc_STR("one_line(raw) -> bool: raw is well-formed UTF-8 without CR or LF (see the module doc).")},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, .m_name = "binlogd.library._sqlrows", .m_doc = module_doc, .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__sqlrows(void)
{
    static const struct { const char *name; int value; } constants[] = {
        {"F_NATIVE", F_NATIVE}, {"F_FLOAT32", F_FLOAT32}, {"F_TEXT", F_TEXT}, {"F_HEX", F_HEX}, {"F_CALL", F_CALL},
        {"W_VALUES", W_VALUES}, {"W_DELETE", W_DELETE}, {"W_UPDATE", W_UPDATE}, {"W_UPDATE_SWAPPED", W_UPDATE_SWAPPED},
    };
    init_escape();
    init_utf8_lead();
    utf8_simd_init();
    if (load_errors() < 0 || PyType_Ready(&ImageType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Image", (PyObject *)&ImageType) < 0)
        goto fail;
    for (size_t k = 0; k < sizeof(constants) / sizeof(constants[0]); k++)
        if (PyModule_AddIntConstant(m, constants[k].name, constants[k].value) < 0)
            goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}

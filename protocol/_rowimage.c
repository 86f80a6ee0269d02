/* protocol._rowimage: optional C decoder of row images (see protocol/rowcodec.py). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

#define OPCODES(X) X(OP_NONE) X(OP_INT) X(OP_DOUBLE) X(OP_YEAR) X(OP_DATE) X(OP_DATETIME2) X(OP_TIMESTAMP2) \
    X(OP_TIME2) X(OP_TIMESTAMP) X(OP_DECIMAL) X(OP_BIT) X(OP_ENUM) X(OP_SET) X(OP_TEXT) X(OP_BYTES_CALL) \
    X(OP_FIXED_CALL) X(OP_JSON) X(OP_RAISE)
#define AS_ENUM(name) name,
#define AS_NAME(name) #name,
enum { OPCODES(AS_ENUM) OP_COUNT };
static const char *const OP_NAMES[OP_COUNT] = {OPCODES(AS_NAME)};

static PyObject *EventDecodeError;  /* protocol.errors.EventDecodeError */

typedef struct {
    int op, nullable, bit;  /* bit: the column's bit in the null bitmap */
    int width;              /* bytes of a fixed-width value, -1 for the others */
    int prefix;             /* bytes of the length prefix (OP_TEXT, OP_BYTES_CALL, OP_JSON), else 0 */
    int arg, prec, flag;    /* signed, fsp or scale; DECIMAL precision; UTF-8 text or DECIMAL -0 as 0 */
    PyObject *key;          /* the row dict key */
    PyObject *obj;          /* names, codec, fn or message */
    PyObject *obj2;         /* OP_JSON: partial_fn */
    PyObject *index;        /* OP_JSON: the column index, looked up in partial */
    const char *codec;      /* OP_TEXT: UTF-8 of obj, alive as long as obj */
} Col;

typedef struct {
    PyObject_VAR_HEAD       /* ob_size: number of columns */
    Py_ssize_t nbytes;      /* null bitmap bytes */
    Col cols[];             /* one per present column */
} Image;

typedef struct {
    const unsigned char *s;
    Py_ssize_t len, pos;
} Buf;

/* ------------------------------------------------------------------ bounded reads */

/* The next n bytes, or NULL with EventDecodeError when fewer are left. */
static const unsigned char *
take(Buf *b, Py_ssize_t n, const Col *c)
{
    if (n > b->len - b->pos) {
        PyErr_Format(EventDecodeError, "column %R needs %zd bytes at row offset %zd, only %zd left",
                     c->key, n, b->pos, b->len - b->pos);
        return NULL;
    }
    b->pos += n;
    return b->s + b->pos - n;
}

static uint64_t
le(const unsigned char *s, int n)
{
    uint64_t x = 0;
    for (int i = n - 1; i >= 0; i--)
        x = x << 8 | s[i];
    return x;
}

static uint64_t
be(const unsigned char *s, int n)
{
    uint64_t x = 0;
    for (int i = 0; i < n; i++)
        x = x << 8 | s[i];
    return x;
}

/* ------------------------------------------------------------------ text helpers */

static PyObject *
ascii(const char *s, Py_ssize_t n)
{
    PyObject *u = PyUnicode_New(n, 127);
    if (u != NULL)
        memcpy(PyUnicode_1BYTE_DATA(u), s, (size_t)n);
    return u;
}

/* Python's format(v, "0{width}d"): a sign, then digits zero-padded to width in all. */
static char *
put_int(char *o, int64_t v, int width)
{
    char tmp[24];
    int n = 0;
    uint64_t u = (uint64_t)v;
    if (v < 0) {
        *o++ = '-';
        width--;
        u = 0 - u;
    }
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    for (; width > n; width--)
        *o++ = '0';
    while (n)
        *o++ = tmp[--n];
    return o;
}

/* values._fraction: f".{usec:06d}"[:fsp + 1], nothing for fsp 0. */
static char *
put_frac(char *o, int64_t usec, int fsp)
{
    char tmp[24];
    if (fsp <= 0)
        return o;
    int n = (int)(put_int(tmp, usec, 6) - tmp);
    *o++ = '.';
    if (n > fsp)
        n = fsp;
    memcpy(o, tmp, (size_t)n);
    return o + n;
}

/* "YYYY-MM-DD" and "HH:MM:SS" with Python's zero padding (and sign, for garbage values). */
static char *
put_date(char *o, int64_t year, int64_t month, int64_t day)
{
    o = put_int(o, year, 4);
    *o++ = '-';
    o = put_int(o, month, 2);
    *o++ = '-';
    return put_int(o, day, 2);
}

static char *
put_time(char *o, int64_t hour, int64_t minute, int64_t second)
{
    o = put_int(o, hour, 2);
    *o++ = ':';
    o = put_int(o, minute, 2);
    *o++ = ':';
    return put_int(o, second, 2);
}

/* Floor division and modulo, as Python's // and % (and >> / & on negative ints). */
static int64_t
floordiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int64_t
floormod(int64_t a, int64_t b)
{
    return a - floordiv(a, b) * b;
}

/* The fraction bytes of TIME2/DATETIME2/TIMESTAMP2 as microseconds (values._frac_usec). */
static int64_t
frac_usec(const unsigned char *s, int fsp)
{
    static const int64_t unit[3] = {10000, 100, 1};
    if (fsp <= 0)
        return 0;
    int n = (fsp + 1) / 2;
    return (int64_t)be(s, n) * unit[n - 1];
}

/* values.utc_text: unix seconds (0 .. 2^32-1) in UTC, 0 with no fraction being the zero timestamp. */
static PyObject *
utc_text(int64_t secs, int64_t usec, int fsp)
{
    char buf[48], *o = buf;
    if (secs == 0 && usec == 0)
        return ascii("0000-00-00 00:00:00.000000", fsp > 0 ? 20 + fsp : 19);
    /* days to civil date: H. Hinnant's algorithm, for days >= 0 */
    int64_t days = secs / 86400, rem = secs % 86400;
    int64_t z = days + 719468, era = z / 146097, doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
    int64_t day = doy - (153 * mp + 2) / 5 + 1, month = mp < 10 ? mp + 3 : mp - 9;
    int64_t year = yoe + era * 400 + (month <= 2);
    o = put_date(o, year, month, day);
    *o++ = ' ';
    o = put_time(o, rem / 3600, rem / 60 % 60, rem % 60);
    o = put_frac(o, usec, fsp);
    return ascii(buf, o - buf);
}

/* values.datetime2_text as compiled by rowcodec (fsp 6: the whole 3-byte fraction, unclipped). */
static PyObject *
datetime2(const unsigned char *s, int fsp)
{
    char buf[80], *o = buf;
    int64_t x = (int64_t)be(s, 5) - 0x8000000000LL;
    int64_t ymd = floordiv(x, 1 << 17), hms = floormod(x, 1 << 17), ym = floordiv(ymd, 32);
    o = put_date(o, floordiv(ym, 13), floormod(ym, 13), floormod(ymd, 32));
    *o++ = ' ';
    o = put_time(o, hms >> 12, hms >> 6 & 63, hms & 63);
    if (fsp == 6) {
        *o++ = '.';
        o = put_int(o, (int64_t)be(s + 5, 3), 6);
    }
    else
        o = put_frac(o, frac_usec(s + 5, fsp), fsp);
    return ascii(buf, o - buf);
}

/* values.time2_text */
static PyObject *
time2(const unsigned char *s, int fsp)
{
    char buf[48], *o = buf;
    int64_t packed;
    if (fsp >= 5)
        packed = (int64_t)be(s, 6) - 0x800000000000LL;
    else {
        int64_t intpart = (int64_t)be(s, 3) - 0x800000, frac = 0;
        int nb = (fsp + 1) / 2;  /* 0, 1 or 2 fraction bytes, stored as a signed count of 1/100^nb */
        if (nb) {
            frac = (int64_t)be(s + 3, nb);
            if (intpart < 0 && frac) {
                intpart += 1;
                frac -= (int64_t)1 << (8 * nb);
            }
            frac *= nb == 1 ? 10000 : 100;
        }
        packed = intpart * (1 << 24) + frac;
    }
    if (packed < 0) {
        *o++ = '-';
        packed = -packed;
    }
    int64_t hms = packed >> 24;
    o = put_time(o, hms >> 12 & 0x3FF, hms >> 6 & 63, hms & 63);
    o = put_frac(o, packed & 0xFFFFFF, fsp);
    return ascii(buf, o - buf);
}

/* ------------------------------------------------------------------ DECIMAL */

static const int DIG2BYTES[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};
static const uint32_t POW10[10] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000,
                                   100000000, 1000000000};

static int
decimal_size(int precision, int scale)
{
    int intg = precision - scale;
    return intg / 9 * 4 + DIG2BYTES[intg % 9] + scale / 9 * 4 + DIG2BYTES[scale % 9];
}

/* values.decimal_decoder: exact text with `scale` fraction digits, digit groups range-checked. */
static PyObject *
decimal(const Col *c, const unsigned char *s)
{
    int precision = c->prec, scale = c->arg, intg = precision - scale, size = c->width;
    unsigned char d[40];            /* at most 30 bytes (DECIMAL(65,0)) */
    char out[96], *o = out, *start;
    uint32_t groups[16];            /* integer groups (lead first), then fraction groups, tail */
    int ng = 0, nint, k, off = 0;

    memcpy(d, s, (size_t)size);
    int negative = !(d[0] & 0x80);
    if (negative)
        for (k = 0; k < size; k++)
            d[k] ^= 0xFF;
    d[0] &= 0x7F;
    if (DIG2BYTES[intg % 9]) {
        groups[ng++] = (uint32_t)be(d, DIG2BYTES[intg % 9]);
        off = DIG2BYTES[intg % 9];
        if (groups[0] >= POW10[intg % 9])
            goto bad;
    }
    for (k = 0; k < intg / 9 + scale / 9; k++, off += 4) {
        groups[ng] = (uint32_t)be(d + off, 4);
        if (groups[ng++] >= 1000000000u)
            goto bad;
    }
    nint = ng - scale / 9;
    if (DIG2BYTES[scale % 9]) {
        groups[ng] = (uint32_t)be(d + off, DIG2BYTES[scale % 9]);
        if (groups[ng++] >= POW10[scale % 9])
            goto bad;
    }
    int zero = 1;
    for (k = 0; k < ng; k++)
        zero &= groups[k] == 0;
    if (negative && !(zero && c->flag))
        *o++ = '-';
    start = o;
    for (k = 0; k < nint; k++) {     /* the integer part without leading zeros */
        if (o == start && groups[k] == 0)
            continue;
        o = put_int(o, groups[k], o == start ? 1 : 9);
    }
    if (o == start)
        *o++ = '0';
    if (scale) {
        *o++ = '.';
        for (k = nint; k < ng; k++)
            o = put_int(o, groups[k], k < nint + scale / 9 ? 9 : scale % 9);
    }
    return ascii(out, o - out);
bad:
    PyErr_Format(EventDecodeError, "DECIMAL(%d,%d) has an out-of-range digit group", precision, scale);
    return NULL;
}

/* ------------------------------------------------------------------ one value */

static PyObject *
call_with_bytes(PyObject *fn, const unsigned char *s, Py_ssize_t n)
{
    PyObject *raw = PyBytes_FromStringAndSize((const char *)s, n);
    if (raw == NULL)
        return NULL;
    PyObject *v = PyObject_CallOneArg(fn, raw);
    Py_DECREF(raw);
    return v;
}

static PyObject *
value(const Col *c, Buf *b, PyObject *partial)
{
    const unsigned char *s = NULL;
    Py_ssize_t n = c->width;
    uint64_t x;
    PyObject *v;
    char buf[24], *o = buf;

    if (c->prefix) {  /* a little-endian length, then that many bytes */
        if ((s = take(b, c->prefix, c)) == NULL)
            return NULL;
        x = le(s, c->prefix);
        n = x > (uint64_t)PY_SSIZE_T_MAX ? PY_SSIZE_T_MAX : (Py_ssize_t)x;
    }
    if (n >= 0 && (s = take(b, n, c)) == NULL)
        return NULL;
    switch (c->op) {
    case OP_NONE:
        Py_RETURN_NONE;
    case OP_INT:
        x = le(s, c->width);
        if (!c->arg || !(x >> (8 * c->width - 1) & 1))
            return PyLong_FromUnsignedLongLong(x);
        /* negative: x - 2^(8 * width), computed without overflow */
        return PyLong_FromLongLong(-(long long)(~x & (~(uint64_t)0 >> (64 - 8 * c->width))) - 1);
    case OP_DOUBLE: {
        double d = PyFloat_Unpack8((const char *)s, 1);
        return d == -1.0 && PyErr_Occurred() ? NULL : PyFloat_FromDouble(d);
    }
    case OP_YEAR:
        return PyLong_FromLong(s[0] ? 1900 + s[0] : 0);
    case OP_DATE:
        x = le(s, 3);
        o = put_date(o, (int64_t)(x >> 9), (int64_t)(x >> 5 & 15), (int64_t)(x & 31));
        return ascii(buf, o - buf);
    case OP_DATETIME2:
        return datetime2(s, c->arg);
    case OP_TIMESTAMP2:
        return utc_text((int64_t)be(s, 4), frac_usec(s + 4, c->arg), c->arg);
    case OP_TIME2:
        return time2(s, c->arg);
    case OP_TIMESTAMP:
        return utc_text((int64_t)le(s, 4), 0, 0);
    case OP_DECIMAL:
        return decimal(c, s);
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

/* Fills one column from its plan entry; 0 on success, -1 with an exception set. */
static int
parse_entry(Col *c, PyObject *entry)
{
    static const int FIXED[OP_COUNT] = {[OP_DOUBLE] = 8, [OP_YEAR] = 1, [OP_DATE] = 3, [OP_TIMESTAMP] = 4,
                                        [OP_DATETIME2] = 5, [OP_TIMESTAMP2] = 4, [OP_TIME2] = 3};
    PyObject *params, *key, *obj = NULL, *obj2 = NULL, *index = NULL;
    int bad = 0;

    if (!PyTuple_Check(entry)) {
        PyErr_SetString(PyExc_TypeError, "plan entries are (opcode, nullable, params, key) tuples");
        return -1;
    }
    if (!PyArg_ParseTuple(entry, "ipO!U:plan entry", &c->op, &c->nullable, &PyTuple_Type, &params, &key))
        return -1;
    c->key = Py_NewRef(key);
    c->width = -1;
    switch (c->op) {
    case OP_NONE: case OP_DOUBLE: case OP_YEAR: case OP_DATE: case OP_TIMESTAMP:
        if (!PyArg_ParseTuple(params, ":params"))
            return -1;
        c->width = c->op == OP_NONE ? -1 : FIXED[c->op];
        break;
    case OP_INT:
        if (!PyArg_ParseTuple(params, "ip:params", &c->width, &c->arg))
            return -1;
        bad = !(c->width >= 1 && c->width <= 4) && c->width != 8;
        break;
    case OP_DATETIME2: case OP_TIMESTAMP2: case OP_TIME2:
        if (!PyArg_ParseTuple(params, "i:params", &c->arg))
            return -1;
        bad = c->arg < 0 || c->arg > 6;
        c->width = FIXED[c->op] + (c->arg + 1) / 2;
        break;
    case OP_DECIMAL:
        if (!PyArg_ParseTuple(params, "iip:params", &c->prec, &c->arg, &c->flag))
            return -1;
        bad = !(0 < c->prec && c->prec <= 65 && 0 <= c->arg && c->arg <= 30 && c->arg <= c->prec);
        c->width = bad ? -1 : decimal_size(c->prec, c->arg);
        break;
    case OP_BIT:
        if (!PyArg_ParseTuple(params, "i:params", &c->width))
            return -1;
        bad = c->width < 0 || c->width > 8;
        break;
    case OP_ENUM: case OP_SET:
        if (!PyArg_ParseTuple(params, "iO:params", &c->width, &obj))
            return -1;
        bad = c->width < 1 || c->width > 8 || (obj != Py_None && !PyTuple_Check(obj));
        break;
    case OP_FIXED_CALL:
        if (!PyArg_ParseTuple(params, "iO:params", &c->width, &obj))
            return -1;
        bad = c->width < 0 || !PyCallable_Check(obj);
        break;
    case OP_TEXT:
        if (!PyArg_ParseTuple(params, "iU:params", &c->prefix, &obj))
            return -1;
        if ((c->codec = PyUnicode_AsUTF8(obj)) == NULL)
            return -1;
        c->flag = strcmp(c->codec, "utf-8") == 0 || strcmp(c->codec, "utf8") == 0;
        bad = c->prefix < 1 || c->prefix > 4;
        break;
    case OP_BYTES_CALL:
        if (!PyArg_ParseTuple(params, "iO:params", &c->prefix, &obj))
            return -1;
        bad = c->prefix < 1 || c->prefix > 4 || !PyCallable_Check(obj);
        break;
    case OP_JSON:
        if (!PyArg_ParseTuple(params, "iOOO:params", &c->prefix, &index, &obj, &obj2))
            return -1;
        bad = c->prefix < 1 || c->prefix > 4 || !PyCallable_Check(obj) || !PyCallable_Check(obj2);
        break;
    case OP_RAISE:
        if (!PyArg_ParseTuple(params, "U:params", &obj))
            return -1;
        break;
    default:
        PyErr_Format(PyExc_ValueError, "unknown row image opcode %d", c->op);
        return -1;
    }
    if (bad) {
        PyErr_Format(PyExc_ValueError, "invalid params %R for %s", params, OP_NAMES[c->op]);
        return -1;
    }
    c->obj = Py_XNewRef(obj);
    c->obj2 = Py_XNewRef(obj2);
    c->index = Py_XNewRef(index);
    return 0;
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
    for (Py_ssize_t i = 0; i < Py_SIZE(im); i++) {
        Py_VISIT(im->cols[i].key);
        Py_VISIT(im->cols[i].obj);
        Py_VISIT(im->cols[i].obj2);
        Py_VISIT(im->cols[i].index);
    }
    return 0;
}

static void
Image_dealloc(Image *im)
{
    PyObject_GC_UnTrack(im);
    for (Py_ssize_t i = 0; i < Py_SIZE(im); i++) {
        Py_XDECREF(im->cols[i].key);
        Py_XDECREF(im->cols[i].obj);
        Py_XDECREF(im->cols[i].obj2);
        Py_XDECREF(im->cols[i].index);
    }
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
    PyObject *errors = PyImport_ImportModule("binlogd.protocol.errors");
    if (errors == NULL)
        return NULL;
    EventDecodeError = PyObject_GetAttrString(errors, "EventDecodeError");
    Py_DECREF(errors);
    if (EventDecodeError == NULL || PyType_Ready(&ImageType) < 0)
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

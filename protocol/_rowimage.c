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
"protocol.errors.EventDecodeError.");

enum {
    OP_NONE, OP_INT, OP_DOUBLE, OP_YEAR, OP_DATE, OP_DATETIME2, OP_TIMESTAMP2, OP_TIME2,
    OP_TIMESTAMP, OP_DECIMAL, OP_BIT, OP_ENUM, OP_SET, OP_TEXT, OP_BYTES_CALL, OP_FIXED_CALL,
    OP_JSON, OP_RAISE, OP_COUNT
};
static const char *const OP_NAMES[OP_COUNT] = {
    "OP_NONE", "OP_INT", "OP_DOUBLE", "OP_YEAR", "OP_DATE", "OP_DATETIME2", "OP_TIMESTAMP2", "OP_TIME2",
    "OP_TIMESTAMP", "OP_DECIMAL", "OP_BIT", "OP_ENUM", "OP_SET", "OP_TEXT", "OP_BYTES_CALL",
    "OP_FIXED_CALL", "OP_JSON", "OP_RAISE"};

static PyObject *EventDecodeError;  /* protocol.errors.EventDecodeError */

typedef struct {
    int op, nullable, bit;  /* bit: the column's bit in the null bitmap */
    int a, b, c;            /* width or prefix; signed, fsp or scale; precision or strip */
    int flag;               /* OP_TEXT: the codec is UTF-8; OP_DECIMAL: print -0 as 0 */
    PyObject *key;          /* the row dict key */
    PyObject *obj;          /* names, codec, fn or message */
    PyObject *obj2;         /* OP_JSON: partial_fn */
    PyObject *index;        /* OP_JSON: the column index, looked up in partial */
    const char *codec;      /* OP_TEXT: UTF-8 of obj, alive as long as obj */
} Col;

typedef struct {
    PyObject_VAR_HEAD       /* ob_size: number of columns */
    Py_ssize_t nbytes;      /* null bitmap bytes */
    Col cols[1];
} Image;

typedef struct {
    const unsigned char *s;
    Py_ssize_t len, pos;
} Buf;

/* ------------------------------------------------------------------ bounded reads */

static int
need(const Buf *b, Py_ssize_t n, const Col *c)
{
    if (n <= b->len - b->pos)
        return 0;
    PyErr_Format(EventDecodeError, "column %R needs %zd bytes at row offset %zd, only %zd left",
                 c->key, n, b->pos, b->len - b->pos);
    return -1;
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
    if (secs == 0 && usec == 0) {
        memcpy(o, "0000-00-00 00:00:00", 19);
        o += 19;
        if (fsp > 0) {
            *o++ = '.';
            memset(o, '0', (size_t)fsp);
            o += fsp;
        }
        return ascii(buf, o - buf);
    }
    /* days to civil date: H. Hinnant's algorithm, for days >= 0 */
    int64_t days = secs / 86400, rem = secs % 86400;
    int64_t z = days + 719468, era = z / 146097, doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
    int64_t day = doy - (153 * mp + 2) / 5 + 1, month = mp < 10 ? mp + 3 : mp - 9;
    int64_t year = yoe + era * 400 + (month <= 2);
    o = put_int(o, year, 4);
    *o++ = '-';
    o = put_int(o, month, 2);
    *o++ = '-';
    o = put_int(o, day, 2);
    *o++ = ' ';
    o = put_int(o, rem / 3600, 2);
    *o++ = ':';
    o = put_int(o, rem / 60 % 60, 2);
    *o++ = ':';
    o = put_int(o, rem % 60, 2);
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
    o = put_int(o, floordiv(ym, 13), 4);
    *o++ = '-';
    o = put_int(o, floormod(ym, 13), 2);
    *o++ = '-';
    o = put_int(o, floormod(ymd, 32), 2);
    *o++ = ' ';
    o = put_int(o, hms >> 12, 2);
    *o++ = ':';
    o = put_int(o, hms >> 6 & 63, 2);
    *o++ = ':';
    o = put_int(o, hms & 63, 2);
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
        if (fsp == 1 || fsp == 2) {
            frac = s[3];
            if (intpart < 0 && frac) {
                intpart += 1;
                frac -= 0x100;
            }
            frac *= 10000;
        }
        else if (fsp == 3 || fsp == 4) {
            frac = (int64_t)be(s + 3, 2);
            if (intpart < 0 && frac) {
                intpart += 1;
                frac -= 0x10000;
            }
            frac *= 100;
        }
        packed = intpart * (1 << 24) + frac;
    }
    if (packed < 0) {
        *o++ = '-';
        packed = -packed;
    }
    int64_t hms = packed >> 24;
    o = put_int(o, hms >> 12 & 0x3FF, 2);
    *o++ = ':';
    o = put_int(o, hms >> 6 & 63, 2);
    *o++ = ':';
    o = put_int(o, hms & 63, 2);
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
    int precision = c->c, scale = c->b, intg = precision - scale, size = c->a;
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

/* Reads a length prefix of c->a bytes, then checks that the value fits; returns its length or -1. */
static Py_ssize_t
prefixed(const Col *c, Buf *b)
{
    if (need(b, c->a, c) < 0)
        return -1;
    uint64_t n = le(b->s + b->pos, c->a);
    b->pos += c->a;
    if (n > (uint64_t)(b->len - b->pos)) {
        PyErr_Format(EventDecodeError, "column %R: value of %llu bytes at row offset %zd, only %zd left",
                     c->key, (unsigned long long)n, b->pos, b->len - b->pos);
        return -1;
    }
    return (Py_ssize_t)n;
}

static PyObject *
value(const Col *c, Buf *b, PyObject *partial)
{
    const unsigned char *s = b->s + b->pos;
    PyObject *v;
    Py_ssize_t n;
    uint64_t x;
    int w;

    switch (c->op) {
    case OP_NONE:
        Py_RETURN_NONE;
    case OP_INT:
        if (need(b, c->a, c) < 0)
            return NULL;
        b->pos += c->a;
        x = le(s, c->a);
        if (!c->b || !(x >> (8 * c->a - 1) & 1))
            return PyLong_FromUnsignedLongLong(x);
        /* negative: x - 2^(8 * width), computed without overflow */
        return PyLong_FromLongLong(-(long long)(~x & (~(uint64_t)0 >> (64 - 8 * c->a))) - 1);
    case OP_DOUBLE: {
        if (need(b, 8, c) < 0)
            return NULL;
        b->pos += 8;
        double d = PyFloat_Unpack8((const char *)s, 1);
        return d == -1.0 && PyErr_Occurred() ? NULL : PyFloat_FromDouble(d);
    }
    case OP_YEAR:
        if (need(b, 1, c) < 0)
            return NULL;
        b->pos += 1;
        return PyLong_FromLong(s[0] ? 1900 + s[0] : 0);
    case OP_DATE: {
        char buf[24], *o = buf;
        if (need(b, 3, c) < 0)
            return NULL;
        b->pos += 3;
        x = le(s, 3);
        o = put_int(o, (int64_t)(x >> 9), 4);
        *o++ = '-';
        o = put_int(o, (int64_t)(x >> 5 & 15), 2);
        *o++ = '-';
        o = put_int(o, (int64_t)(x & 31), 2);
        return ascii(buf, o - buf);
    }
    case OP_DATETIME2:
        if (need(b, 5 + (c->b + 1) / 2, c) < 0)
            return NULL;
        b->pos += 5 + (c->b + 1) / 2;
        return datetime2(s, c->b);
    case OP_TIMESTAMP2:
        if (need(b, 4 + (c->b + 1) / 2, c) < 0)
            return NULL;
        b->pos += 4 + (c->b + 1) / 2;
        return utc_text((int64_t)be(s, 4), frac_usec(s + 4, c->b), c->b);
    case OP_TIME2:
        if (need(b, 3 + (c->b + 1) / 2, c) < 0)
            return NULL;
        b->pos += 3 + (c->b + 1) / 2;
        return time2(s, c->b);
    case OP_TIMESTAMP:
        if (need(b, 4, c) < 0)
            return NULL;
        b->pos += 4;
        return utc_text((int64_t)le(s, 4), 0, 0);
    case OP_DECIMAL:
        if (need(b, c->a, c) < 0)
            return NULL;
        b->pos += c->a;
        return decimal(c, s);
    case OP_BIT:
        if (need(b, c->a, c) < 0)
            return NULL;
        b->pos += c->a;
        return PyLong_FromUnsignedLongLong(be(s, c->a));
    case OP_ENUM:
    case OP_SET:
        if (need(b, c->a, c) < 0)
            return NULL;
        b->pos += c->a;
        x = le(s, c->a);
        if (c->obj == Py_None)
            return PyLong_FromUnsignedLongLong(x);
        n = PyTuple_GET_SIZE(c->obj);
        if (c->op == OP_ENUM) {
            if (x >= (uint64_t)n)
                return PyLong_FromUnsignedLongLong(x);
            v = PyTuple_GET_ITEM(c->obj, (Py_ssize_t)x);
            return Py_NewRef(v);
        }
        if ((v = PyList_New(0)) == NULL)
            return NULL;
        for (w = 0; w < n && w < 64; w++)
            if (x >> w & 1 && PyList_Append(v, PyTuple_GET_ITEM(c->obj, w)) < 0) {
                Py_DECREF(v);
                return NULL;
            }
        return v;
    case OP_TEXT:
        if ((n = prefixed(c, b)) < 0)
            return NULL;
        s = b->s + b->pos;
        b->pos += n;
        if (c->flag)
            return PyUnicode_DecodeUTF8((const char *)s, n, "backslashreplace");
        return PyUnicode_Decode((const char *)s, n, c->codec, "backslashreplace");
    case OP_BYTES_CALL:
    case OP_JSON:
        if ((n = prefixed(c, b)) < 0)
            return NULL;
        s = b->s + b->pos;
        b->pos += n;
        if (c->op == OP_JSON && partial != Py_None) {
            if ((w = PySequence_Contains(partial, c->index)) < 0)
                return NULL;
            if (w)
                return call_with_bytes(c->obj2, s, n);
        }
        return call_with_bytes(c->obj, s, n);
    case OP_FIXED_CALL:
        if (need(b, c->a, c) < 0)
            return NULL;
        b->pos += c->a;
        return call_with_bytes(c->obj, s, c->a);
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
    PyObject *params, *key, *obj = NULL, *obj2 = NULL, *index = NULL;
    int ok, lo = 0, hi = 0;

    if (!PyTuple_Check(entry)) {
        PyErr_SetString(PyExc_TypeError, "plan entries are (opcode, nullable, params, key) tuples");
        return -1;
    }
    if (!PyArg_ParseTuple(entry, "ipO!U:plan entry", &c->op, &c->nullable, &PyTuple_Type, &params, &key))
        return -1;
    c->key = Py_NewRef(key);
    switch (c->op) {
    case OP_NONE: case OP_DOUBLE: case OP_YEAR: case OP_DATE: case OP_TIMESTAMP:
        ok = PyArg_ParseTuple(params, ":params");
        break;
    case OP_INT:
        ok = PyArg_ParseTuple(params, "ip:params", &c->a, &c->b);
        if (ok && c->a != 1 && c->a != 2 && c->a != 3 && c->a != 4 && c->a != 8)
            lo = 1, hi = 0;
        break;
    case OP_DATETIME2: case OP_TIMESTAMP2: case OP_TIME2:
        ok = PyArg_ParseTuple(params, "i:params", &c->b);
        lo = c->b < 0, hi = c->b > 6;
        break;
    case OP_DECIMAL:
        ok = PyArg_ParseTuple(params, "iip:params", &c->c, &c->b, &c->flag);
        lo = !(0 < c->c && c->c <= 65 && 0 <= c->b && c->b <= 30 && c->b <= c->c);
        if (ok && !lo)
            c->a = decimal_size(c->c, c->b);
        break;
    case OP_BIT:
        ok = PyArg_ParseTuple(params, "i:params", &c->a);
        lo = c->a < 0, hi = c->a > 8;
        break;
    case OP_ENUM: case OP_SET:
        ok = PyArg_ParseTuple(params, "iO:params", &c->a, &obj);
        lo = c->a < 1, hi = c->a > 8;
        if (ok && obj != Py_None && !PyTuple_Check(obj))
            lo = 1;
        break;
    case OP_TEXT:
        ok = PyArg_ParseTuple(params, "iU:params", &c->a, &obj);
        lo = c->a < 1, hi = c->a > 4;
        if (ok && (c->codec = PyUnicode_AsUTF8(obj)) == NULL)
            return -1;
        c->flag = ok && (strcmp(c->codec, "utf-8") == 0 || strcmp(c->codec, "utf8") == 0);
        break;
    case OP_BYTES_CALL: case OP_FIXED_CALL:
        ok = PyArg_ParseTuple(params, "iO:params", &c->a, &obj);
        lo = c->a < (c->op == OP_FIXED_CALL ? 0 : 1), hi = c->op == OP_BYTES_CALL && c->a > 4;
        if (ok && !PyCallable_Check(obj))
            lo = 1;
        break;
    case OP_JSON:
        ok = PyArg_ParseTuple(params, "iOOO:params", &c->a, &index, &obj, &obj2);
        lo = c->a < 1, hi = c->a > 4;
        if (ok && !(PyCallable_Check(obj) && PyCallable_Check(obj2)))
            lo = 1;
        break;
    case OP_RAISE:
        ok = PyArg_ParseTuple(params, "U:params", &obj);
        break;
    default:
        PyErr_Format(PyExc_ValueError, "unknown row image opcode %d", c->op);
        return -1;
    }
    if (!ok)
        return -1;
    if (lo || hi) {
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
    .tp_name = "protocol._rowimage.Image",
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
    PyModuleDef_HEAD_INIT, .m_name = "protocol._rowimage", .m_doc = module_doc, .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__rowimage(void)
{
    PyObject *errors = PyImport_ImportModule("protocol.errors");
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

/* Row image plans and value texts shared by protocol._rowimage (row dicts) and library._jsonrows
 * (JSON bytes): the opcodes, one column's compiled plan entry, bounded reads, and the text forms
 * of dates, times and DECIMALs written into a caller's buffer (see protocol/rowcodec.py). */
#ifndef BINLOGD_ROWPLAN_H
#define BINLOGD_ROWPLAN_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define OPCODES(X) X(OP_NONE) X(OP_INT) X(OP_DOUBLE) X(OP_YEAR) X(OP_DATE) X(OP_DATETIME2) X(OP_TIMESTAMP2) \
    X(OP_TIME2) X(OP_TIMESTAMP) X(OP_DECIMAL) X(OP_BIT) X(OP_ENUM) X(OP_SET) X(OP_TEXT) X(OP_BYTES_CALL) \
    X(OP_FIXED_CALL) X(OP_JSON) X(OP_RAISE)
#define AS_ENUM(name) name,
#define AS_NAME(name) #name,
enum { OPCODES(AS_ENUM) OP_COUNT };
static const char *const OP_NAMES[OP_COUNT] = {OPCODES(AS_NAME)};

/* The most bytes a put_* text writer below produces for one value. */
#define TEXT_MAX 96

static PyObject *EventDecodeError;  /* protocol.errors.EventDecodeError, set by load_errors() */

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
    const unsigned char *s;
    Py_ssize_t len, pos;
} Buf;

static int
load_errors(void)
{
    PyObject *errors = PyImport_ImportModule("binlogd.protocol.errors");
    if (errors == NULL)
        return -1;
    EventDecodeError = PyObject_GetAttrString(errors, "EventDecodeError");
    Py_DECREF(errors);
    return EventDecodeError == NULL ? -1 : 0;
}

/* ------------------------------------------------------------------ bounded reads */

/* The 2, 4 and 8 little- and big-endian bytes at s as integers (one load each where the compiler sees the pattern). */
static inline uint32_t
le16(const unsigned char *s)
{
    return (uint32_t)s[0] | (uint32_t)s[1] << 8;
}

static inline uint32_t
le32(const unsigned char *s)
{
    return le16(s) | le16(s + 2) << 16;
}

static inline uint64_t
le64(const unsigned char *s)
{
    return le32(s) | (uint64_t)le32(s + 4) << 32;
}

static inline uint32_t
be16(const unsigned char *s)
{
    return (uint32_t)s[0] << 8 | (uint32_t)s[1];
}

static inline uint32_t
be32(const unsigned char *s)
{
    return be16(s) << 16 | be16(s + 2);
}

static inline uint64_t
be64(const unsigned char *s)
{
    return (uint64_t)be32(s) << 32 | be32(s + 4);
}

/* The little-endian integer of the n bytes (0 to 8) at s: no loop for the widths of the row formats. */
static inline uint64_t
le(const unsigned char *s, int n)
{
    switch (n) {
    case 1: return s[0];
    case 2: return le16(s);
    case 3: return le16(s) | (uint32_t)s[2] << 16;
    case 4: return le32(s);
    case 8: return le64(s);
    default: {
        uint64_t x = 0;
        for (int i = n - 1; i >= 0; i--)
            x = x << 8 | s[i];
        return x;
    }
    }
}

/* The big-endian integer of the n bytes (0 to 8) at s. */
static inline uint64_t
be(const unsigned char *s, int n)
{
    switch (n) {
    case 1: return s[0];
    case 2: return be16(s);
    case 3: return be16(s) << 8 | s[2];
    case 4: return be32(s);
    case 5: return (uint64_t)be32(s) << 8 | s[4];
    case 6: return (uint64_t)be32(s) << 16 | be16(s + 4);
    case 8: return be64(s);
    default: {
        uint64_t x = 0;
        for (int i = 0; i < n; i++)
            x = x << 8 | s[i];
        return x;
    }
    }
}

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

/* A value's bytes: its length prefix first when it has one (c->prefix), else c->width of them
 * (none for a width of -1). NULL with EventDecodeError when they run past the data. */
static const unsigned char *
take_value(Buf *b, const Col *c, Py_ssize_t *n)
{
    static const unsigned char none[1] = {0};
    *n = c->width;
    if (c->prefix) {
        const unsigned char *p = take(b, c->prefix, c);
        if (p == NULL)
            return NULL;
        /* prefix is 1 to 4: 4 bytes read and the ones past it masked off when they are in the data */
        uint64_t x = b->s + b->len - p >= 4 ? le32(p) & 0xFFFFFFFFu >> (32 - 8 * c->prefix) : le(p, c->prefix);
        *n = x > (uint64_t)PY_SSIZE_T_MAX ? PY_SSIZE_T_MAX : (Py_ssize_t)x;
    }
    return *n >= 0 ? take(b, *n, c) : none;
}

/* A little-endian integer of c->width bytes as unsigned, or (c->arg) sign-extended. */
static int
int_value(const Col *c, const unsigned char *s, int64_t *sv, uint64_t *uv)
{
    uint64_t x = le(s, c->width);
    if (!c->arg || !(x >> (8 * c->width - 1) & 1)) {
        *uv = x;
        return 0;
    }
    /* negative: x - 2^(8 * width), computed without overflow */
    *sv = -(int64_t)(~x & (~(uint64_t)0 >> (64 - 8 * c->width))) - 1;
    return 1;
}

/* ------------------------------------------------------------------ text writers */

static const char DIGIT_PAIRS[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                                 "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                                 "8081828384858687888990919293949596979899";

/* The number of decimal digits of u (1 for 0): from its bit length where the compiler gives it. */
static inline int
digit_count(uint64_t u)
{
#if defined(__GNUC__)
    static const uint64_t TENS[20] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000,
        UINT64_C(10000000000), UINT64_C(100000000000), UINT64_C(1000000000000), UINT64_C(10000000000000),
        UINT64_C(100000000000000), UINT64_C(1000000000000000), UINT64_C(10000000000000000),
        UINT64_C(100000000000000000), UINT64_C(1000000000000000000), UINT64_C(10000000000000000000)};
    int t = ((64 - __builtin_clzll(u | 1)) * 1233) >> 12;  /* floor(log10(2^bits)): the digits, or one fewer */
    return t + ((u | 1) >= TENS[t]);
#else
    int n = 1;
    for (; u >= 10000; u /= 10000)
        n += 4;
    return n + (u >= 10) + (u >= 100) + (u >= 1000);
#endif
}

/* The last n digits of u (zeros ahead of its own) at o, two at a time; returns the end. */
static inline char *
put_padded(char *o, uint64_t u, int n)
{
    char *w = o + n;
    for (; w - o >= 2; u /= 100)
        memcpy(w -= 2, DIGIT_PAIRS + 2 * (u % 100), 2);
    if (w > o)
        *o = (char)('0' + u % 10);
    return o + n;
}

/* Python's format(v, "0{width}d"): a sign, then digits zero-padded to width in all. */
static char *
put_int(char *o, int64_t v, int width)
{
    uint64_t u = (uint64_t)v;
    if (v < 0) {
        *o++ = '-';
        width--;
        u = 0 - u;
    }
    int n = digit_count(u);
    return put_padded(o, u, n > width ? n : width);
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

/* DATE's 3 bytes (year << 9 | month << 5 | day) as values.date_text does. */
static char *
put_packed_date(char *o, const unsigned char *s)
{
    uint64_t x = le(s, 3);
    return put_date(o, (int64_t)(x >> 9), (int64_t)(x >> 5 & 15), (int64_t)(x & 31));
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
static char *
put_utc(char *o, int64_t secs, int64_t usec, int fsp)
{
    if (secs == 0 && usec == 0) {
        int n = fsp > 0 ? 20 + fsp : 19;
        memcpy(o, "0000-00-00 00:00:00.000000", (size_t)n);
        return o + n;
    }
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
    return put_frac(o, usec, fsp);
}

/* values.datetime2_text as compiled by rowcodec (fsp 6: the whole 3-byte fraction, unclipped). */
static char *
put_datetime2(char *o, const unsigned char *s, int fsp)
{
    int64_t x = (int64_t)be(s, 5) - 0x8000000000LL;
    int64_t ymd = floordiv(x, 1 << 17), hms = floormod(x, 1 << 17), ym = floordiv(ymd, 32);
    o = put_date(o, floordiv(ym, 13), floormod(ym, 13), floormod(ymd, 32));
    *o++ = ' ';
    o = put_time(o, hms >> 12, hms >> 6 & 63, hms & 63);
    if (fsp == 6) {
        *o++ = '.';
        return put_int(o, (int64_t)be(s + 5, 3), 6);
    }
    return put_frac(o, frac_usec(s + 5, fsp), fsp);
}

/* values.time2_text */
static char *
put_time2(char *o, const unsigned char *s, int fsp)
{
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
    return put_frac(o, packed & 0xFFFFFF, fsp);
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

/* The digit group of nb bytes (1 to 4) at s + off of a DECIMAL: flipped (mask) when it is negative, the sign bit
 * of the first byte taken off. */
static inline uint32_t
decimal_group(const unsigned char *s, int off, int nb, uint32_t mask)
{
    uint32_t x = (uint32_t)be(s + off, nb) ^ (mask >> (32 - 8 * nb));
    return off == 0 ? x ^ 0x80u << (8 * nb - 8) : x;
}

/* values.decimal_decoder: exact text with `scale` fraction digits, digit groups range-checked.
 * NULL with EventDecodeError for an out-of-range group. */
static char *
put_decimal(char *o, const Col *c, const unsigned char *s)
{
    int precision = c->prec, scale = c->arg, intg = precision - scale;
    int lead = DIG2BYTES[intg % 9], tail = DIG2BYTES[scale % 9];
    uint32_t groups[16];            /* integer groups (lead first), then fraction groups, tail */
    uint32_t mask = s[0] & 0x80 ? 0 : 0xFFFFFFFFu, any = 0;
    int ng = 0, nint, k, off = 0;
    char *start;

    if (lead) {
        groups[ng++] = decimal_group(s, 0, lead, mask);
        off = lead;
        if (groups[0] >= POW10[intg % 9])
            goto bad;
    }
    for (k = 0; k < intg / 9 + scale / 9; k++, off += 4) {
        groups[ng] = decimal_group(s, off, 4, mask);
        if (groups[ng++] >= 1000000000u)
            goto bad;
    }
    nint = ng - scale / 9;
    if (tail) {
        groups[ng] = decimal_group(s, off, tail, mask);
        if (groups[ng++] >= POW10[scale % 9])
            goto bad;
    }
    for (k = 0; k < ng; k++)
        any |= groups[k];
    if (mask && !(any == 0 && c->flag))
        *o++ = '-';
    start = o;
    for (k = 0; k < nint; k++) {     /* the integer part without leading zeros */
        if (o == start && groups[k] == 0)
            continue;
        o = o == start ? put_padded(o, groups[k], digit_count(groups[k])) : put_padded(o, groups[k], 9);
    }
    if (o == start)
        *o++ = '0';
    if (scale) {
        *o++ = '.';
        for (k = nint; k < ng; k++)
            o = put_padded(o, groups[k], k < nint + scale / 9 ? 9 : scale % 9);
    }
    return o;
bad:
    PyErr_Format(EventDecodeError, "DECIMAL(%d,%d) has an out-of-range digit group", precision, scale);
    return NULL;
}

/* The text of a date, time or DECIMAL value (OP_DATE, OP_DATETIME2, OP_TIMESTAMP2, OP_TIME2, OP_TIMESTAMP,
 * OP_DECIMAL), at most TEXT_MAX bytes at o: its end, or NULL with EventDecodeError (a bad DECIMAL). */
static char *
put_value_text(char *o, const Col *c, const unsigned char *s)
{
    switch (c->op) {
    case OP_DATE:
        return put_packed_date(o, s);
    case OP_DATETIME2:
        return put_datetime2(o, s, c->arg);
    case OP_TIMESTAMP2:
        return put_utc(o, (int64_t)be(s, 4), frac_usec(s + 4, c->arg), c->arg);
    case OP_TIME2:
        return put_time2(o, s, c->arg);
    case OP_TIMESTAMP:
        return put_utc(o, (int64_t)le(s, 4), 0, 0);
    default:  /* OP_DECIMAL */
        return put_decimal(o, c, s);
    }
}

/* ------------------------------------------------------------------ plan entries */

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

static int
col_traverse(const Col *c, visitproc visit, void *arg)
{
    Py_VISIT(c->key);
    Py_VISIT(c->obj);
    Py_VISIT(c->obj2);
    Py_VISIT(c->index);
    return 0;
}

static void
col_clear(Col *c)
{
    Py_CLEAR(c->key);
    Py_CLEAR(c->obj);
    Py_CLEAR(c->obj2);
    Py_CLEAR(c->index);
}

/* A call of fn with the value's bytes (OP_BYTES_CALL, OP_FIXED_CALL, OP_JSON). */
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

#endif

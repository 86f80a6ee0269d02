/* library._textjson: the rows of a text-protocol result set (COM_QUERY) as JSON, in C; the twin of
 * library/textjson.py's lines(), with the same results byte for byte (see there for the contract; bytes in,
 * bytes out). The rows are found as protocol/_textrow.h frames them; strings are written by _jsonstr.h.
 *
 * lines(buf, start, end, plan, head, mid, tail, first[, into[, again]]): the rows from start to end as JSON bytes;
 *   with a bytearray into, written at its start (it grows when too short, never shrinks) and their length
 *   returned; with again, the row's number is written twice, again between.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_jsonstr.h"
#include "_textrow.h"

enum { K_RAW, K_QUOTED, K_TEXT, K_BASE64, K_BIT, K_DOUBLE, K_CALL, K_COUNT };

/* ------------------------------------------------------------------ output buffer */

/* The output, written straight into a bytes object, or the caller's bytearray (into): s is its buffer, sized
 * ahead so that it seldom grows; growing takes the GIL when the conversion runs without it (see lines()). */
typedef struct {
    PyObject *bytes;
    int into;
    char *s;
    Py_ssize_t len, cap;
    int nogil;             /* the GIL is released around the loop: hold() before touching Python, drop() after */
    PyThreadState *save;
    const char *err;       /* a malformed row (or no memory), reported once the GIL is held; NULL: see PyErr */
    Py_ssize_t err_at;
} Out;

static const char NO_MEMORY[] = "no memory";
static const char PY_ERROR[] = "";   /* the Python exception set says what */

static int
fail(Out *o, Py_ssize_t at, const char *what)
{
    o->err = what;
    o->err_at = at;
    return -1;
}

static inline void
hold(Out *o)
{
    if (o->nogil)
        PyEval_RestoreThread(o->save);
}

static inline void
drop(Out *o)
{
    if (o->nogil)
        o->save = PyEval_SaveThread();
}

static int
reserve(Out *o, Py_ssize_t n)
{
    if (o->len + n <= o->cap)
        return 0;
    Py_ssize_t cap = o->cap ? o->cap : 1 << 16;
    while (cap < o->len + n)
        cap *= 2;
    hold(o);
    int ok = o->into ? PyByteArray_Resize(o->bytes, cap) == 0
             : o->bytes == NULL ? (o->bytes = PyBytes_FromStringAndSize(NULL, cap)) != NULL
             : _PyBytes_Resize(&o->bytes, cap) == 0;
    if (ok)
        o->s = o->into ? PyByteArray_AS_STRING(o->bytes) : PyBytes_AS_STRING(o->bytes);
    drop(o);
    if (!ok)
        return fail(o, 0, PY_ERROR);
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

/* The bytes object r (a new reference, or NULL on an error) appended, then released; with the GIL held. */
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

/* What fn returns for arg (a new reference, or NULL on an error; released here), appended; with the GIL held. */
static int
put_call_with(Out *o, PyObject *fn, PyObject *arg)
{
    if (arg == NULL)
        return -1;
    int r = put_result(o, PyObject_CallOneArg(fn, arg));
    Py_DECREF(arg);
    return r;
}

/* What fn returns for the bytes v[0..n), appended. */
static int
put_call(Out *o, PyObject *fn, const unsigned char *v, Py_ssize_t n)
{
    hold(o);
    int r = put_call_with(o, fn, PyBytes_FromStringAndSize((const char *)v, n));
    drop(o);
    return r;
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

/* The JSON string of UTF-8 text s, as dumps(s.decode()) writes it; 1 (nothing kept) when s is not
 * well-formed UTF-8 (the caller then decodes it with "replace"), -1 on an error. Kept out of put_row (noinline):
 * inlined there, the row loop's registers are worse spent (2% more instructions for a row of text). */
static __attribute__((noinline)) int
put_string(Out *o, const unsigned char *s, Py_ssize_t n)
{
    if (reserve(o, 6 * n + 16) < 0)
        return -1;
    char *w = o->s + o->len;
    *w++ = '"';
    if ((w = json_escape(w, &s, s + n, s + n, 0)) == NULL)
        return 1;
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

/* ------------------------------------------------------------------ DOUBLE text to a double */

/* 10^e for E10_MIN <= e <= E10_MAX as 128-bit mantissas rounded down (the top bit set): each as its high
 * and low 64 bits, loaded by load_powers() (computed exactly by Python's integers); until then none. */
#define E10_MIN (-342)
#define E10_MAX 308
static uint64_t POW10[E10_MAX - E10_MIN + 1][2];
static int pow10_loaded;

/* The double nearest w * 10^e10 (w > 0) by the Eisel-Lemire algorithm (D. Lemire, "Number Parsing at a
 * Gigabyte per Second", 2021; as Go's strconv has it); 0 when it cannot tell (then the caller uses strtod). */
static int
eisel_lemire(uint64_t w, int e10, int neg, double *out)
{
#if defined(__SIZEOF_INT128__)
    if (!pow10_loaded || e10 < E10_MIN || e10 > E10_MAX)
        return 0;
    const uint64_t *p = POW10[e10 - E10_MIN];
    int clz = __builtin_clzll(w);
    w <<= clz;
    uint64_t exp2 = (uint64_t)(((217706 * e10) >> 16) + 64 + 1023) - (uint64_t)clz;
    unsigned __int128 x = (unsigned __int128)w * p[0];
    uint64_t hi = (uint64_t)(x >> 64), lo = (uint64_t)x;
    if ((hi & 0x1FF) == 0x1FF && lo + w < w) {
        unsigned __int128 y = (unsigned __int128)w * p[1];
        uint64_t yhi = (uint64_t)(y >> 64), ylo = (uint64_t)y;
        uint64_t mhi = hi, mlo = lo + yhi;
        if (mlo < lo)
            mhi++;
        if ((mhi & 0x1FF) == 0x1FF && mlo + 1 == 0 && ylo + w < w)
            return 0;
        hi = mhi;
        lo = mlo;
    }
    uint64_t msb = hi >> 63;
    uint64_t mant = hi >> (msb + 9);
    exp2 -= 1 ^ msb;
    if (lo == 0 && (hi & 0x1FF) == 0 && (mant & 3) == 1)
        return 0;
    mant += mant & 1;
    mant >>= 1;
    if (mant >> 53) {
        mant >>= 1;
        exp2 += 1;
    }
    if (exp2 - 1 >= 0x7FF - 1)
        return 0;
    uint64_t bits = exp2 << 52 | (mant & 0x000FFFFFFFFFFFFFULL) | (uint64_t)neg << 63;
    memcpy(out, &bits, 8);
    return 1;
#else
    (void)w; (void)e10; (void)neg; (void)out;
    return 0;
#endif
}

/* The double nearest w * 10^e10 (w > 0): by Clinger's fast path when w and 10^|e10| are exact doubles (one
 * correctly rounded operation), else by eisel_lemire(); 0 when neither can tell. */
static int
to_double(uint64_t w, int e10, int neg, double *out)
{
    static const double P10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14,
                                 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    if (w <= (1ULL << 53) && e10 >= -22 && e10 <= 22) {
        double d = (double)w;
        d = e10 < 0 ? d / P10[-e10] : d * P10[e10];
        *out = neg ? -d : d;
        return 1;
    }
    return eisel_lemire(w, e10, neg, out);
}

/* A DOUBLE's text [-]digits[.digits][e[+-]digits] with at most 19 significant digits: its sign, digits w
 * (0 for zero) and exponent e10 (the value is w * 10^e10); 0 when the text has another form. */
static int
parse_decimal(const unsigned char *s, Py_ssize_t n, int *neg, uint64_t *wp, int *e10p)
{
    Py_ssize_t i = 0;
    int nd = 0, digits = 0, e10 = 0;
    uint64_t w = 0;
    *neg = 0;
    if (i < n && s[i] == '-') {
        *neg = 1;
        i++;
    }
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++, digits++) {
        if (w == 0 && s[i] == '0')
            continue;
        if (++nd > 19)
            return 0;
        w = w * 10 + (s[i] - '0');
    }
    if (i < n && s[i] == '.') {
        for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++, digits++) {
            e10--;
            if (w == 0 && s[i] == '0')
                continue;
            if (++nd > 19)
                return 0;
            w = w * 10 + (s[i] - '0');
        }
    }
    if (!digits)
        return 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        int eneg = 0, e = 0, ed = 0;
        i++;
        if (i < n && (s[i] == '-' || s[i] == '+'))
            eneg = s[i++] == '-';
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
            if (++ed > 5)
                return 0;
            else
                e = e * 10 + (s[i] - '0');
        if (!ed)
            return 0;
        e10 += eneg ? -e : e;
    }
    *wp = w;
    *e10p = e10;
    return i == n;
}

/* A DOUBLE's text as a double, the one float(text) gives; 0 when the fast way cannot tell. */
static int
parse_double(const unsigned char *s, Py_ssize_t n, double *out)
{
    int neg, e10;
    uint64_t w;
    if (!parse_decimal(s, n, &neg, &w, &e10))
        return 0;
    if (w == 0) {
        *out = neg ? -0.0 : 0.0;
        return 1;
    }
    return to_double(w, e10, neg, out);
}

/* 1 when w * 10^e10 (w > 0) reads as the double whose bits are want, 0 when not, -1 when it cannot tell. */
static int
reads_as(uint64_t w, int e10, int neg, uint64_t want)
{
    double d;
    uint64_t bits;
    if (!to_double(w, e10, neg, &d))
        return -1;
    memcpy(&bits, &d, 8);
    return bits == want;
}

/* 1 when w is the integer nearest |d| / 10^e10 (d's bits given), 0 when it is not, -1 when that cannot be told
 * here (exact 128-bit arithmetic: |e10| small enough; an exact tie). */
static int
nearest_is(uint64_t w, int e10, uint64_t bits)
{
#if defined(__SIZEOF_INT128__)
    typedef unsigned __int128 u128;
    int be = (int)(bits >> 52 & 0x7FF);
    uint64_t m = bits & 0x000FFFFFFFFFFFFFULL;
    if (be == 0)
        return -1;
    m |= 1ULL << 52;
    int q = be - 1075;   /* |d| = m * 2^q */
    u128 n, r, half;
    if (e10 <= 0) {      /* |d| / 10^e10 = m * 10^-e10 * 2^q */
        if (e10 < -22)
            return -1;
        u128 x = m;
        for (int i = 0; i < -e10; i++)
            x *= 10;
        if (q >= 0)
            return q < 12 && (x << q) == (u128)w;
        if (q <= -127)
            return -1;
        n = x >> -q;
        r = x - (n << -q);
        half = (u128)1 << (-q - 1);
        if (r == half)
            return -1;
        return n + (r > half) == (u128)w;
    }
    if (e10 > 38 || q > 74)   /* |d| / 10^e10 = (m << q) / 10^e10 */
        return -1;
    u128 p = 1;
    for (int i = 0; i < e10; i++)
        p *= 10;
    u128 y = q >= 0 ? (u128)m << q : (u128)(m >> (-q < 64 ? -q : 63));
    if (q < 0 && (-q >= 64 || (m & ((1ULL << -q) - 1))))
        return -1;
    n = y / p;
    r = y - n * p;
    if (2 * r == p)
        return -1;
    return n + (2 * r > p) == (u128)w;
#else
    (void)w; (void)e10; (void)bits;
    return -1;
#endif
}

/* A DOUBLE's text as orjson.dumps(float(text)) writes it, into w (at least 32 bytes): its length, or 0 when
 * the fast way cannot tell. orjson writes the shortest digits that read back as the double (the closest of
 * them); the text's own digits (trailing zeros dropped) are those when they read back as it, neither of the
 * two numbers with one digit fewer around them does (the numbers that read back as a double form an
 * interval: no shorter one does then), and they are the nearest to the double of those with as many digits
 * (nearest_is()), or else the only one of those that reads back as it (neither neighbour does). Then laid out as orjson does (as Ryu's format64):
 * 1234e7 -> 12340000000.0, 1234e-2 -> 12.34, 1234e-6 -> 0.001234, else 1.234e33 (1e33 for one digit),
 * positional while the decimal point falls within 16 digits, from 5 zeros after it; a positive exponent with
 * its + sign (exp_plus) or without, as the dumps in use writes it (orjson's versions differ: see calibrate()). */
static int
double_text(const unsigned char *s, Py_ssize_t n, char *out, int exp_plus)
{
    int neg, e10;
    uint64_t w, bits;
    double d;
    if (!parse_decimal(s, n, &neg, &w, &e10))
        return 0;
    char *o = out;
    if (neg)
        *o++ = '-';
    if (w == 0) {
        memcpy(o, "0.0", 3);
        return (int)(o - out) + 3;
    }
    if (!to_double(w, e10, neg, &d))
        return 0;
    memcpy(&bits, &d, 8);
    if ((bits & 0x7FF0000000000000ULL) == 0x7FF0000000000000ULL)
        return 0;
    while (w % 10 == 0) {
        w /= 10;
        e10++;
    }
    char digits[24];
    int len = 0;
    for (uint64_t v = w; v; v /= 10)
        digits[len++] = (char)('0' + v % 10);
    if (len > 17)
        return 0;
    if (len > 1) {
        int a = reads_as(w / 10, e10 + 1, neg, bits), b = reads_as(w / 10 + 1, e10 + 1, neg, bits);
        if (a || b)   /* a shorter text reads back as it too (or it cannot tell) */
            return 0;
    }
    int nearest = nearest_is(w, e10, bits);
    if (nearest == 0)  /* another text as short is closer (and orjson's if it reads back as the double) */
        return 0;
    if (nearest < 0) { /* then it must be the only one as short that reads back as the double */
        int a = w > 1 ? reads_as(w - 1, e10, neg, bits) : 0, b = reads_as(w + 1, e10, neg, bits);
        if (a || b)
            return 0;
    }
    for (int i = 0, j = len - 1; i < j; i++, j--) {
        char t = digits[i];
        digits[i] = digits[j];
        digits[j] = t;
    }
    int kk = len + e10;   /* the decimal point's place after the first digit */
    if (e10 >= 0 && kk <= 16) {
        memcpy(o, digits, (size_t)len);
        o += len;
        memset(o, '0', (size_t)e10);
        o += e10;
        memcpy(o, ".0", 2);
        o += 2;
    }
    else if (kk > 0 && kk <= 16) {
        memcpy(o, digits, (size_t)kk);
        o += kk;
        *o++ = '.';
        memcpy(o, digits + kk, (size_t)(len - kk));
        o += len - kk;
    }
    else if (kk > -5 && kk <= 0) {
        memcpy(o, "0.", 2);
        o += 2;
        memset(o, '0', (size_t)-kk);
        o += -kk;
        memcpy(o, digits, (size_t)len);
        o += len;
    }
    else {
        *o++ = digits[0];
        if (len > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)(len - 1));
            o += len - 1;
        }
        o += sprintf(o, exp_plus ? "e%+d" : "e%d", kk - 1);
    }
    return (int)(o - out);
}

static PyObject *
load_powers(PyObject *Py_UNUSED(self), PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (view.len != (Py_ssize_t)sizeof POW10) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "load_powers: %zd bytes, not %zd", view.len, (Py_ssize_t)sizeof POW10);
        return NULL;
    }
    const unsigned char *b = view.buf;
    for (int i = 0; i < E10_MAX - E10_MIN + 1; i++)
        for (int half = 0; half < 2; half++) {
            uint64_t v = 0;
            for (int j = 7; j >= 0; j--)
                v = v << 8 | b[16 * i + 8 * half + j];
            POW10[i][half] = v;
        }
    pow10_loaded = 1;
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* Whether double_text() writes what dumps writes: 1 in the layout without a + in positive exponents, 2 with
 * it, 0 in neither (then it is not used); checked on numbers of each form, once for each dumps function in
 * turn (the last one is kept, with a reference); -1 on an error of dumps. */
static PyObject *calibrated_for;
static int calibrated_as;

static int
calibrate(PyObject *dumps)
{
    static const char *const probes[] = {"1e16", "1e15", "1e-5", "1e-4", "0.0001234", "1.5e300", "1.25e-7",
                                         "123456789012345.6", "-0", "100", "1.2345678901234567e300", "-9.87654321e+250",
                                         "2.5e-200", "-123456789.12345679", "4.997731522e17", "1e22"};
    if (dumps == calibrated_for)
        return calibrated_as;
    int as = 0;
    for (int plus = 0; plus < 2 && !as; plus++) {
        int ok = 1;
        for (size_t i = 0; i < sizeof probes / sizeof probes[0] && ok; i++) {
            char out[32];
            int n = double_text((const unsigned char *)probes[i], (Py_ssize_t)strlen(probes[i]), out, plus);
            PyObject *f = PyFloat_FromDouble(PyOS_string_to_double(probes[i], NULL, NULL));
            PyObject *r = f ? PyObject_CallOneArg(dumps, f) : NULL;
            Py_XDECREF(f);
            if (r == NULL)
                return -1;
            ok = n > 0 && PyBytes_Check(r) && PyBytes_GET_SIZE(r) == n && memcmp(PyBytes_AS_STRING(r), out, n) == 0;
            Py_DECREF(r);
        }
        as = ok ? 1 + plus : 0;
    }
    Py_INCREF(dumps);
    Py_XSETREF(calibrated_for, dumps);
    calibrated_as = as;
    return as;
}

/* A DOUBLE's text as dumps(float(text)) writes it: by double_text(), else (with the GIL) by dumps of
 * strtod's double, else by the column's Python function (text strtod does not take). */
static int
put_double(Out *o, const unsigned char *s, Py_ssize_t n, PyObject *dumps, PyObject *fallback, int layout)
{
    char tmp[64];
    if (reserve(o, 32) < 0)
        return -1;
    int fast = layout ? double_text(s, n, o->s + o->len, layout == 2) : 0;
    if (fast) {
        o->len += fast;
        return 0;
    }
    double d;
    if (!parse_double(s, n, &d)) {
        if (n == 0 || n >= (Py_ssize_t)sizeof tmp)
            return put_call(o, fallback, s, n);
        memcpy(tmp, s, (size_t)n);
        tmp[n] = 0;
        char *endp = NULL;
        hold(o);
        d = PyOS_string_to_double(tmp, &endp, NULL);
        int bad = d == -1.0 && PyErr_Occurred();
        PyErr_Clear();
        drop(o);
        if (bad || endp != tmp + n)
            return put_call(o, fallback, s, n);
    }
    hold(o);
    int r = put_call_with(o, dumps, PyFloat_FromDouble(d));
    drop(o);
    return r;
}

/* ------------------------------------------------------------------ rows to JSON */

typedef struct {
    Py_ssize_t ncols;
    const unsigned char *kinds;
    PyObject *names;   /* tuple of bytes: each column's '"name":' */
    PyObject *calls;   /* tuple: each column's converter (K_CALL), fallback (K_BIT, K_DOUBLE) or None */
    PyObject *dumps;
    int fast_double;   /* double_text() writes as dumps does: calibrate()'s answer */
} Plan;

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
            return fail(o, at, "fewer values than columns");
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
                return fail(o, at, "a value's length is cut short");
            len = (Py_ssize_t)p[i + 1] | (Py_ssize_t)p[i + 2] << 8;
            i += 3;
        }
        else if (c == 253) {
            if (n - i < 4)
                return fail(o, at, "a value's length is cut short");
            len = (Py_ssize_t)p[i + 1] | (Py_ssize_t)p[i + 2] << 8 | (Py_ssize_t)p[i + 3] << 16;
            i += 4;
        }
        else if (c == 254) {
            if (n - i < 9)
                return fail(o, at, "a value's length is cut short");
            uint64_t u = 0;
            for (int j = 8; j >= 1; j--)
                u = u << 8 | p[i + j];
            if (u > (uint64_t)n)
                return fail(o, at, "a value runs past the row");
            len = (Py_ssize_t)u;
            i += 9;
        }
        else
            return fail(o, at, "0xff is no value's length");
        if (n - i < len)
            return fail(o, at, "a value runs past the row");
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
            if (r == 1) {  /* not well-formed UTF-8: decoded with "replace", written by dumps */
                hold(o);
                PyObject *text = PyUnicode_DecodeUTF8((const char *)v, len, "replace");
                r = text == NULL ? -1 : put_result(o, PyObject_CallOneArg(plan->dumps, text));
                Py_XDECREF(text);
                drop(o);
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
            r = put_double(o, v, len, plan->dumps, PyTuple_GET_ITEM(plan->calls, k), plan->fast_double);
            break;
        default:
            r = put_call(o, PyTuple_GET_ITEM(plan->calls, k), v, len);
        }
        if (r < 0)
            return -1;
    }
    if (i != n)
        return fail(o, at, "more values than columns");
    return put(o, "}", 1);
}

/* A row number in decimal, with its sign. */
static int
put_row_number(Out *o, long long row)
{
    return row < 0 ? (put(o, "-", 1) < 0 || put_uint(o, (uint64_t)0 - (uint64_t)row) < 0 ? -1 : 0)
                   : put_uint(o, (uint64_t)row);
}

static PyObject *
lines(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer view, kinds;
    Py_ssize_t start, end;
    PyObject *plan_t, *head, *mid, *tail, *names, *calls, *dumps, *into = Py_None, *again = Py_None;
    long long first;
    if (!PyArg_ParseTuple(args, "y*nnOSOSL|OO:lines", &view, &start, &end, &plan_t, &head, &mid, &tail, &first,
                          &into, &again))
        return NULL;
    PyObject *result = NULL;
    Out o = {NULL, 0, NULL, 0, 0, 0, NULL, NULL, 0};
    if (into != Py_None) {
        if (!PyByteArray_Check(into)) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_TypeError, "lines: into must be a bytearray or None");
            return NULL;
        }
        o.bytes = into;   /* borrowed: the caller's */
        o.into = 1;
        o.s = PyByteArray_AS_STRING(into);
        o.cap = PyByteArray_GET_SIZE(into);
    }
    unsigned char *joined = NULL;
    kinds.obj = NULL;
    if (!PyArg_ParseTuple(plan_t, "y*O!O!O:lines plan", &kinds, &PyTuple_Type, &names, &PyTuple_Type, &calls,
                          &dumps))
        goto done;
    Plan plan = {kinds.len, kinds.buf, names, calls, dumps, 0};
    int calls_python = 0;
    if (PyTuple_GET_SIZE(names) != plan.ncols || PyTuple_GET_SIZE(calls) != plan.ncols) {
        PyErr_SetString(PyExc_ValueError, "lines: the plan's kinds, names and calls differ in length");
        goto done;
    }
    for (Py_ssize_t k = 0; k < plan.ncols; k++) {
        if (plan.kinds[k] >= K_COUNT || !PyBytes_Check(PyTuple_GET_ITEM(names, k))) {
            PyErr_SetString(PyExc_ValueError, "lines: a bad plan (a kind out of range, or a name not bytes)");
            goto done;
        }
        calls_python |= plan.kinds[k] == K_CALL;
    }
    if ((plan.fast_double = calibrate(dumps)) < 0)
        goto done;
    if ((mid != Py_None && !PyBytes_Check(mid)) || (again != Py_None && (mid == Py_None || !PyBytes_Check(again)))) {
        PyErr_SetString(PyExc_TypeError, "lines: mid must be bytes or None, again bytes (with mid) or None");
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
    /* A large buffer is converted without the GIL (another thread may read the next one meanwhile) unless a
     * column calls Python for each value; the rare value that needs Python takes it back (hold/drop). Every
     * object used is held by the arguments, and the buffer's export keeps it from resizing. */
    Py_ssize_t rows_guess = 0, per_row = PyBytes_GET_SIZE(head) + PyBytes_GET_SIZE(tail) + 24
        + (mid != Py_None ? PyBytes_GET_SIZE(mid) : 0) + (again != Py_None ? PyBytes_GET_SIZE(again) + 24 : 0) + 2;
    for (Py_ssize_t k = 0; k < plan.ncols; k++)
        per_row += PyBytes_GET_SIZE(PyTuple_GET_ITEM(names, k)) + 1;
    for (Py_ssize_t q = start; q < end && row_at(b, q, end, &next, &size, &multi); q = next)
        rows_guess++;
    if (reserve(&o, (end - start) * 3 / 2 + rows_guess * per_row + 64) < 0)   /* seldom outgrown */
        goto loop_done;
    o.nogil = !calls_python && end - start >= (1 << 16);
    if (o.nogil)
        o.save = PyEval_SaveThread();
    while (pos < end) {
        if (!row_at(b, pos, end, &next, &size, &multi)) {
            fail(&o, pos, "the row is not whole");
            goto loop_done;
        }
        const unsigned char *p = b + pos + 4;
        if (multi) {  /* a row of 16 MiB or more: its packets' payloads joined */
            if (size > cap) {
                unsigned char *j = PyMem_RawRealloc(joined, (size_t)size);
                if (j == NULL) {
                    fail(&o, pos, NO_MEMORY);
                    goto loop_done;
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
            goto loop_done;
        if (mid != Py_None) {
            if (put(&o, PyBytes_AS_STRING(mid), PyBytes_GET_SIZE(mid)) < 0)
                goto loop_done;
            if (put_row_number(&o, row) < 0)
                goto loop_done;
            if (again != Py_None && (put(&o, PyBytes_AS_STRING(again), PyBytes_GET_SIZE(again)) < 0
                                     || put_row_number(&o, row) < 0))
                goto loop_done;
        }
        if (put(&o, PyBytes_AS_STRING(tail), PyBytes_GET_SIZE(tail)) < 0)
            goto loop_done;
        row++;
        pos = next;
    }
    if (o.nogil)
        PyEval_RestoreThread(o.save);
    o.nogil = 0;
    if (o.into)
        result = PyLong_FromSsize_t(o.len);
    else if (_PyBytes_Resize(&o.bytes, o.len) == 0) {
        result = o.bytes;
        o.bytes = NULL;
    }
loop_done:
    if (o.nogil)
        PyEval_RestoreThread(o.save);
    if (o.err == NO_MEMORY)
        PyErr_NoMemory();
    else if (o.err != NULL && o.err != PY_ERROR)
        PyErr_Format(PyExc_ValueError, "malformed text-protocol row at offset %zd: %s", o.err_at, o.err);
done:
    if (!o.into)
        Py_XDECREF(o.bytes);
    PyMem_RawFree(joined);
    if (kinds.obj != NULL)
        PyBuffer_Release(&kinds);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *
double_(PyObject *Py_UNUSED(self), PyObject *arg)
{
    double d;
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "double: bytes expected");
        return NULL;
    }
    if (!parse_double((const unsigned char *)PyBytes_AS_STRING(arg), PyBytes_GET_SIZE(arg), &d))
        Py_RETURN_NONE;
    return PyFloat_FromDouble(d);
}

static PyObject *
double_json(PyObject *Py_UNUSED(self), PyObject *args)
{
    char out[32];
    PyObject *arg, *dumps;
    if (!PyArg_ParseTuple(args, "SO:double_json", &arg, &dumps))
        return NULL;
    int layout = calibrate(dumps);
    if (layout < 0)
        return NULL;
    if (!layout)
        Py_RETURN_NONE;
    int n = double_text((const unsigned char *)PyBytes_AS_STRING(arg), PyBytes_GET_SIZE(arg), out, layout == 2);
    if (!n)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize(out, n);
}

static PyMethodDef methods[] = {
    {"lines", lines, METH_VARARGS,
     "lines(buf, start, end, plan, head, mid, tail, first[, into[, again]]) -> bytes or length: see library/textjson.py"},
    {"load_powers", load_powers, METH_O,
     "load_powers(table): 10^e for -342 <= e <= 308 as 128-bit mantissas rounded down, each 16 bytes: the "
     "high then the low 64 bits, little-endian (the fast DOUBLE parse; without it strtod does all)"},
    {"double", double_, METH_O, "double(text) -> float: a DOUBLE's text parsed the fast way, None if it cannot"},
    {"double_json", double_json, METH_VARARGS,
     "double_json(text, dumps) -> bytes: dumps(float(text)) the fast way (no Python), None if it cannot tell "
     "or writes another layout than dumps"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, .m_name = "binlogd.library._textjson",
    .m_doc = "The rows of a text-protocol result set as JSON (the twin of binlogd.library.textjson.lines).",
    .m_size = 0, .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__textjson(void)
{
    return PyModule_Create(&moduledef);
}

/* The SQL text library._sqlrows writes, apart from its plans: the output buffer, quoted text (as
 * library/sqlout/literals.py quotes it), comment lines, and the literals of numbers, dates, times and bytes. */
#ifndef BINLOGD_SQLTEXT_H
#define BINLOGD_SQLTEXT_H

#include "_rowplan.h"
#include "_shortest.h"
#include "_utf8simd.h"
#include <math.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* ------------------------------------------------------------------ output */

/* The output, written straight into a bytes object (o->bytes NULL until the first byte); readable: the end
 * of the input it is written from (put_quoted may read ahead up to it), or NULL. */
typedef struct {
    PyObject *bytes;
    char *s;
    Py_ssize_t len, cap;
    const unsigned char *readable;
} Out;

/* room() when the output must grow: a bytes object of twice the size (64 KiB at first). */
static char *
grow(Out *o, Py_ssize_t n)
{
    Py_ssize_t cap = o->cap < 65536 ? 65536 : o->cap;
    while (cap - o->len < n && cap <= PY_SSIZE_T_MAX / 2)
        cap *= 2;
    if (cap - o->len < n) {
        PyErr_NoMemory();
        return NULL;
    }
    if (o->bytes == NULL ? (o->bytes = PyBytes_FromStringAndSize(NULL, cap)) == NULL
                         : _PyBytes_Resize(&o->bytes, cap) < 0)
        return NULL;
    o->s = PyBytes_AS_STRING(o->bytes);
    o->cap = cap;
    return o->s + o->len;
}

/* Where n more bytes can be written (then o->len is set by the caller), or NULL with MemoryError. */
static inline char *
room(Out *o, Py_ssize_t n)
{
    return o->bytes != NULL && o->cap - o->len >= n ? o->s + o->len : grow(o, n);
}

/* The bytes written (a new reference; the Out is emptied), or NULL. */
static PyObject *
out_bytes(Out *o)
{
    PyObject *bytes = o->bytes;
    o->bytes = NULL;
    if (bytes == NULL)
        return PyBytes_FromStringAndSize(NULL, 0);
    return _PyBytes_Resize(&bytes, o->len) < 0 ? NULL : bytes;
}

static inline int
add(Out *o, const void *s, Py_ssize_t n)
{
    char *w = room(o, n);
    if (w == NULL)
        return -1;
    memcpy(w, s, (size_t)n);
    o->len += n;
    return 0;
}

#define ADD_LITERAL(o, text) add((o), (text), (Py_ssize_t)sizeof(text) - 1)

static int
add_bytes(Out *o, PyObject *bytes)
{
    return add(o, PyBytes_AS_STRING(bytes), PyBytes_GET_SIZE(bytes));
}

/* ------------------------------------------------------------------ quoted text */

/* What quote() (library/sqlout/literals.py) writes after a backslash for each byte; 0 for a byte kept as
 * it is; 1 for the bytes of multi-byte UTF-8, which are kept only inside a well-formed character. */
static unsigned char ESCAPE[256];

static void
init_escape(void)
{
    for (int c = 0x80; c < 256; c++)
        ESCAPE[c] = 1;
    ESCAPE['\\'] = '\\';
    ESCAPE['\''] = '\'';
    ESCAPE[0] = '0';
    ESCAPE['\n'] = 'n';
    ESCAPE['\r'] = 'r';
    ESCAPE[0x1a] = 'Z';
}

/* For each byte that starts a multi-byte UTF-8 character: its length, the range its second byte must be in
 * (from lo to lo + span; Unicode's table of well-formed byte sequences), and 0xC0 in more3 and more4 when it has
 * a third and a fourth byte (each then 10xxxxxx). len 0 for the other bytes. */
static struct { unsigned char len, lo, span, more3, more4; } UTF8_LEAD[256];

static void
init_utf8_lead(void)
{
    for (int c = 0xC2; c <= 0xF4; c++) {
        UTF8_LEAD[c].len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        UTF8_LEAD[c].lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
        UTF8_LEAD[c].span = (unsigned char)((c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF) - UTF8_LEAD[c].lo);
        UTF8_LEAD[c].more3 = c >= 0xE0 ? 0xC0 : 0;
        UTF8_LEAD[c].more4 = c >= 0xF0 ? 0xC0 : 0;
    }
}

/* The length of the well-formed UTF-8 character at s (left bytes there), or 0 when Python's UTF-8
 * decoder would not take it. */
static inline int
utf8_length(const unsigned char *s, Py_ssize_t left)
{
    int len = UTF8_LEAD[s[0]].len;
    if (len == 0 || left < len || (unsigned char)(s[1] - UTF8_LEAD[s[0]].lo) > UTF8_LEAD[s[0]].span)
        return 0;
    if (len > 2 && ((s[2] & 0xC0) != 0x80 || (len > 3 && (s[3] & 0xC0) != 0x80)))
        return 0;
    return len;
}

/* utf8_length() with at least 4 bytes readable at s (the ones after the character are not used): the bytes
 * are checked together, without a branch on the character's length. */
static inline int
utf8_length4(const unsigned char *s)
{
    const unsigned char c = s[0];
    int bad = ((unsigned char)(s[1] - UTF8_LEAD[c].lo) > UTF8_LEAD[c].span)
              | (((s[2] ^ 0x80) & UTF8_LEAD[c].more3) != 0) | (((s[3] ^ 0x80) & UTF8_LEAD[c].more4) != 0);
    return bad ? 0 : UTF8_LEAD[c].len;
}

#if defined(__SSE2__)
/* The 16 bytes at p copied to w; returns a bit for each to look at: below ' ' (the signed compare takes the
 * bytes that are not ASCII too), ' and \. */
static inline unsigned
copy_block(char *w, const unsigned char *p)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)p);
    _mm_storeu_si128((__m128i *)w, v);
    return (unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_cmpgt_epi8(_mm_set1_epi8(' '), v),
                                       _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\'')),
                                                    _mm_cmpeq_epi8(v, _mm_set1_epi8('\\')))));
}
#endif

/* Copies to w the bytes at s (from before stop) that quote() keeps as they are: ASCII but the six it escapes,
 * and well-formed UTF-8 characters (the last may run past stop, up to end); returns how many. Bytes up to
 * readable (at least end) may be read, not used; w has room for 5 * (stop - s) + 16 bytes. */
static Py_ssize_t
copy_plain(char *w, const unsigned char *s, const unsigned char *stop, const unsigned char *end,
           const unsigned char *readable)
{
    const unsigned char *p = s + utf8_clean(w, s, stop - s, CLEAN_QUOTED);
#if defined(__SSE2__)
    for (;;) {  /* 16 at a time, copied before they are looked at */
        unsigned look = 0;
        while (stop - p >= 16 && (look = copy_block(w + (p - s), p)) == 0)
            p += 16;
        int ahead = 16, next;  /* the block's bytes before stop; where the next block starts */
        if (stop - p < 16) {  /* the last few, in a block reaching past them */
            if (p >= stop || readable - p < 16)
                break;
            ahead = (int)(stop - p);
            look = copy_block(w + (p - s), p) & ((1u << ahead) - 1);
        }
        for (next = ahead; look; look &= ~0u << next) {
            int i = __builtin_ctz(look), k = 1;  /* k: the bytes at i kept as they are */
            if (p[i] < 0x80 ? ESCAPE[p[i]] != 0 : (k = utf8_length(p + i, end - (p + i))) == 0)
                return p - s + i;
            if (i + k > ahead) {  /* a character running past the block or stop: its bytes after the block too */
                for (int j = 16; j < i + k; j++)
                    w[p - s + j] = (char)p[j];
                next = i + k;
                break;
            }
            next = i + k;
        }
        p += next > ahead ? next : ahead;
    }
#endif
    while (p < stop) {
        int k = 1;
        if (*p < 0x80 ? ESCAPE[*p] != 0 : (k = utf8_length(p, end - p)) == 0)
            break;
        memcpy(w + (p - s), p, (size_t)k);
        p += k;
    }
    return p - s;
}

/* quote() of the text Python decodes from these UTF-8 bytes with backslashreplace: a byte outside a
 * well-formed character is the 4 characters \xNN there, whose backslash quote() doubles. The bytes
 * up to readable (NULL or at least s + n) may be read ahead. */
static int
put_quoted(Out *o, const unsigned char *s, Py_ssize_t n, const unsigned char *readable)
{
    static const char HEX[] = "0123456789abcdef";
    const unsigned char *end = s + n;
    if (readable == NULL)
        readable = end;
    if (add(o, "'", 1) < 0)
        return -1;
    while (s < end) {
        const unsigned char *stop = end - s > 4096 ? s + 4096 : end;
        char *w = room(o, 5 * (stop - s) + 16);  /* 5 bytes out per byte in at most; 16 copied at once */
        if (w == NULL)
            return -1;
        while (s < stop) {
            Py_ssize_t plain = copy_plain(w, s, stop, end, readable);
            w += plain;
            s += plain;
            if (s >= stop)
                break;
            unsigned char e = ESCAPE[*s];
            if (e != 1) {
                *w++ = '\\';
                *w++ = (char)e;
            }
            else {  /* not in a well-formed character */
                memcpy(w, "\\\\x", 3);
                w[3] = HEX[*s >> 4];
                w[4] = HEX[*s & 15];
                w += 5;
            }
            s++;
        }
        o->len = w - o->s;
    }
    return add(o, "'", 1);
}

/* A str's UTF-8 (surrogateescape: the bytes it stands for) appended. */
static int
put_str(Out *o, PyObject *text)
{
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "a renderer returned %R, not a str", text);
        return -1;
    }
    PyObject *raw = PyUnicode_AsEncodedString(text, "utf-8", "surrogateescape");
    if (raw == NULL)
        return -1;
    int r = add_bytes(o, raw);
    Py_DECREF(raw);
    return r;
}

/* ------------------------------------------------------------------ one value */

static int
put_repr(Out *o, double d)
{
    if (shortest_available() && isfinite(d)) {
        char *w = room(o, SHORTEST_MAX);
        if (w == NULL)
            return -1;
        o->len = put_shortest(w, d) - o->s;
        return 0;
    }
    char *text = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (text == NULL)
        return -1;
    int r = add(o, text, (Py_ssize_t)strlen(text));
    PyMem_Free(text);
    return r;
}

/* An integer in decimal: -sv when negative, else uv. */
static int
put_digits(Out *o, int negative, int64_t sv, uint64_t uv)
{
    char *w = room(o, 21);
    if (w == NULL)
        return -1;
    if (negative) {
        *w++ = '-';
        uv = 0 - (uint64_t)sv;
    }
    o->len = put_padded(w, uv, digit_count(uv)) - o->s;
    return 0;
}

/* F_NATIVE: the dates, times and DECIMAL as their text (quoted for the dates and times). */
static int
add_value_text(Out *o, const Col *c, const unsigned char *s)
{
    char *w = room(o, TEXT_MAX + 2);
    if (w == NULL)
        return -1;
    int quoted = c->op != OP_DECIMAL;
    if (quoted)
        *w++ = '\'';
    if ((w = put_value_text(w, c, s)) == NULL)  /* a DECIMAL was checked when the row was read */
        return -1;
    if (quoted)
        *w++ = '\'';
    o->len = w - o->s;
    return 0;
}

static int
put_hex(Out *o, const unsigned char *s, Py_ssize_t n, Py_ssize_t pad)
{
    static const char HEX[] = "0123456789abcdef";
    Py_ssize_t zeros = pad > n ? pad - n : 0;
    if (n > (PY_SSIZE_T_MAX - 3) / 2 - zeros) {
        PyErr_NoMemory();
        return -1;
    }
    char *w = room(o, 2 * (n + zeros) + 3);
    if (w == NULL)
        return -1;
    *w++ = 'X';
    *w++ = '\'';
    for (Py_ssize_t k = 0; k < n; k++) {
        *w++ = HEX[s[k] >> 4];
        *w++ = HEX[s[k] & 15];
    }
    memset(w, '0', (size_t)(2 * zeros));
    w += 2 * zeros;
    *w++ = '\'';
    o->len = w - o->s;
    return 0;
}

/* ------------------------------------------------------------------ comment lines */


#if defined(__SSE2__)
/* A bit for each of the 16 bytes at p to look at: the bytes that are not ASCII and, when lines, the bytes
 * below 14, where CR and LF are (one signed compare takes both; a tab or another control byte is then
 * looked at and passed over). */
static inline unsigned
utf8_block(const unsigned char *p, int lines)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)p);
    return (unsigned)_mm_movemask_epi8(lines ? _mm_cmpgt_epi8(_mm_set1_epi8(14), v) : v);
}

/* utf8_block() of the 64 bytes at p. */
static inline uint64_t
utf8_block64(const unsigned char *p, int lines)
{
    return (uint64_t)utf8_block(p, lines) | (uint64_t)utf8_block(p + 16, lines) << 16
           | (uint64_t)utf8_block(p + 32, lines) << 32 | (uint64_t)utf8_block(p + 48, lines) << 48;
}

/* The characters at the bits of look (from utf8_block() of the width bytes at p) checked: where the text after
 * the block starts (width, or after a character running past it), or -1 - i when the byte at i is not in
 * well-formed UTF-8 or is a CR or LF. */
static inline int
utf8_chars(const unsigned char *p, uint64_t look, int width, const unsigned char *end)
{
    int next = width;
    while (look) {
        int i = __builtin_ctzll(look), k = 1;  /* k: the bytes of the character at i */
        if (p[i] < 0x80 ? p[i] == '\n' || p[i] == '\r'
                        : (k = end - (p + i) >= 4 ? utf8_length4(p + i) : utf8_length(p + i, end - (p + i))) == 0)
            return -1 - i;
        if ((next = i + k) >= width)
            return next;
        look &= ~(uint64_t)0 << next;
    }
    return width;
}
#endif

/* The length of the well-formed UTF-8 text at the start of s (n bytes), or, when lines, of its well-formed
 * text before a CR or LF: n when it is all such text. */
static inline Py_ssize_t
utf8_scan(const unsigned char *s, Py_ssize_t n, int lines)
{
    const unsigned char *p = s + utf8_clean(NULL, s, n, lines ? CLEAN_LINE : CLEAN_TEXT), *end = s + n;
#if defined(__SSE2__)
    for (int width = 64; width >= 16; width -= 48) {  /* 64 bytes at a time, then 16 */
        while (end - p >= width) {
            uint64_t look = width == 64 ? utf8_block64(p, lines) : utf8_block(p, lines);
            int next = look ? utf8_chars(p, look, width, end) : width;
            if (next < 0)
                return p - s + (-1 - next);
            p += next;
        }
    }
#endif
    while (p < end) {
        int k = 1;
        if (*p < 0x80 ? lines && (*p == '\n' || *p == '\r') : (k = utf8_length(p, end - p)) == 0)
            break;
        p += k;
    }
    return p - s;
}

/* The length of the well-formed UTF-8 text at the start of s: all of it when it is all such text. */
static Py_ssize_t
utf8_prefix(const unsigned char *s, Py_ssize_t n)
{
    return utf8_scan(s, n, 0);
}

/* Whether s (n bytes) is well-formed UTF-8 without a CR or LF. */
static int
utf8_line(const unsigned char *s, Py_ssize_t n)
{
    return utf8_scan(s, n, 1) == n;
}

/* Appends the comment lines of the UTF-8 text s (n bytes): '-- ' before each line, a carriage return as a space.
 * 1 (nothing appended) when s is not all well-formed UTF-8; -1 with MemoryError. */
static int
put_comment(Out *o, const unsigned char *s, Py_ssize_t n)
{
    const unsigned char *end = s + n;
    if (utf8_prefix(s, n) < n)
        return 1;
    if (room(o, n + 3) == NULL || ADD_LITERAL(o, "-- ") < 0)  /* all of it at once when it is one line */
        return -1;
    const unsigned char *nl = memchr(s, '\n', (size_t)n), *cr = memchr(s, '\r', (size_t)n);
    while (s < end) {
        const unsigned char *stop = nl == NULL ? cr : cr == NULL || nl < cr ? nl : cr;
        if (stop == NULL)
            stop = end;
        if (add(o, s, stop - s) < 0 || (stop < end && (*stop == '\n' ? ADD_LITERAL(o, "\n-- ") : add(o, " ", 1)) < 0))
            return -1;
        s = stop + (stop < end);
        if (nl != NULL && nl < s)
            nl = memchr(s, '\n', (size_t)(end - s));
        if (cr != NULL && cr < s)
            cr = memchr(s, '\r', (size_t)(end - s));
    }
    return 0;
}

#endif

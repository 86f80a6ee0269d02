/* library/_jsonstr.h: the one C writer of JSON strings, as orjson writes a str (the same escapes, UTF-8 kept
 * as it is), for library/_jsonrows.c (row images) and library/_textjson.c (text-protocol rows). Include it
 * after Python.h. */
#ifndef BINLOGD_JSONSTR_H
#define BINLOGD_JSONSTR_H

#include <stdint.h>
#include <string.h>

static const char JSON_HEX[] = "0123456789abcdef";

/* 0: copied as is; 'u': \u00XX; else the letter after the backslash. */
static const char JSON_ESCAPE[128] = {
    'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'b', 't', 'n', 'u', 'f', 'r', 'u', 'u',
    'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u',
    0, 0, '"', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, '\\', 0, 0, 0,
};

/* The top bit of each of the 8 bytes of v that may need a look: non-ASCII, a control character, '"'
 * or '\\'. A byte below 0x20 (x - 0x20) or equal to one of those (x ^ c, minus 1) wraps and sets its
 * top bit; its borrow may flag bytes above it too, but never one below: the lowest flag is exact. */
static inline uint64_t
json_special8(uint64_t v)
{
    const uint64_t ones = 0x0101010101010101ULL;
    return (v | (v - ones * 0x20) | ((v ^ ones * '"') - ones) | ((v ^ ones * '\\') - ones)) & ones * 0x80;
}

/* The length of the well-formed UTF-8 character at s (n bytes left), 0 when there is none there:
 * the bytes Python's strict UTF-8 decoder rejects (overlongs, surrogates, past U+10FFFF, cut short). */
static inline int
json_utf8_char(const unsigned char *s, Py_ssize_t n)
{
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    if (c < 0xC2 || c > 0xF4)
        return 0;
    if (c < 0xE0)
        return n >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c < 0xF0) {
        lo = c == 0xE0 ? 0xA0 : 0x80;
        hi = c == 0xED ? 0x9F : 0xBF;
        return n >= 3 && s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 ? 3 : 0;
    }
    lo = c == 0xF0 ? 0x90 : 0x80;
    hi = c == 0xF4 ? 0x8F : 0xBF;
    return n >= 4 && s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 && (s[3] & 0xC0) == 0x80 ? 4 : 0;
}

/* The inside of the JSON string of the UTF-8 text from *sp up to stop (stop <= end), written at w, which has
 * room for 6 bytes per byte in plus 8 (a character may run up to 3 bytes past stop, never past end); *sp
 * moves past what was written. A byte that starts no well-formed character: with backslashreplace, the text
 * Python's "backslashreplace" decoding makes of it (\xNN, its backslash escaped); without, the write stops
 * there and NULL is returned (*sp at that byte). Returns where the written bytes end. */
static inline char *
json_escape(char *w, const unsigned char **sp, const unsigned char *stop, const unsigned char *end,
            int backslashreplace)
{
    const unsigned char *s = *sp;
    while (s < stop) {
        uint64_t v, special;
        if (stop - s >= 8) {  /* 8 bytes at a time up to the first that needs a look */
            memcpy(&v, s, 8);
            memcpy(w, s, 8);
            int plain = (special = json_special8(v)) ? __builtin_ctzll(special) >> 3 : 8;
            w += plain;
            s += plain;
            if (plain == 8)
                continue;
        }
        unsigned c = *s;
        if (c < 0x80) {
            char e = JSON_ESCAPE[c];
            if (!e)
                *w++ = (char)c;
            else if (e != 'u') {
                *w++ = '\\';
                *w++ = e;
            }
            else {
                memcpy(w, "\\u00", 4);
                w[4] = JSON_HEX[c >> 4];
                w[5] = JSON_HEX[c & 15];
                w += 6;
            }
            s++;
            continue;
        }
        int k = json_utf8_char(s, end - s);
        if (k) {
            memcpy(w, s, (size_t)k);
            w += k;
            s += k;
        }
        else if (backslashreplace) {
            memcpy(w, "\\\\x", 3);
            w[3] = JSON_HEX[c >> 4];
            w[4] = JSON_HEX[c & 15];
            w += 5;
            s++;
        }
        else {
            *sp = s;
            return NULL;
        }
    }
    *sp = s;
    return w;
}

#endif

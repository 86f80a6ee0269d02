/* The longest start of a text, 32 bytes at a time, that is whole well-formed UTF-8 characters and holds none of
 * the ASCII bytes a caller looks for: utf8_clean(). It only shortens the work of the byte-at-a-time code of
 * _sqltext.h, which goes on from where it stops and alone decides what is written.
 *
 * Text with a multi-byte character every few dozen bytes (names, addresses, most languages but English) is where
 * that code is slow: it takes each such character with a branch the CPU cannot predict. Here each block is
 * checked as a whole, by the table lookups of Keiser and Lemire ("Validating UTF-8 in less than one instruction
 * per byte", 2021): three 16-entry tables, looked up by the high and low half of the byte before and the high
 * half of the byte itself, flag each pair of bytes that cannot follow each other (a lead byte not followed by a
 * continuation byte, a continuation byte after an ASCII byte, an overlong form, a surrogate, a code point above
 * U+10FFFF), and the bytes two and three back say where a third or fourth byte of a character must be.
 * It needs AVX2, which the CPU is asked for at run time. */
#ifndef BINLOGD_UTF8SIMD_H
#define BINLOGD_UTF8SIMD_H

#include <Python.h>

enum { CLEAN_TEXT, CLEAN_LINE, CLEAN_QUOTED };  /* what else stops utf8_clean(): see there */

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

static int utf8_simd_cpu, utf8_simd;  /* the CPU has AVX2; utf8_clean() uses it (utf8_simd_set()) */

static void
utf8_simd_init(void)
{
    __builtin_cpu_init();
    utf8_simd = utf8_simd_cpu = __builtin_cpu_supports("avx2");
}

/* Turns utf8_clean() off, or on where the CPU has AVX2 (for tests: both ways give the same results); returns
 * whether it is on. */
static int
utf8_simd_set(int on)
{
    return utf8_simd = on && utf8_simd_cpu;
}

/* What is wrong with a byte after the one before it; the last four flags also need the byte's high half, so they
 * share bits. */
#define TOO_SHORT 0x01       /* a lead byte followed by an ASCII or another lead byte */
#define TOO_LONG 0x02        /* an ASCII byte followed by a continuation byte */
#define OVERLONG_3 0x04      /* E0 80..9F */
#define TOO_LARGE 0x08       /* F4 90..BF, F5..FF 90..BF */
#define SURROGATE 0x10       /* ED A0..BF */
#define OVERLONG_2 0x20      /* C0..C1 and a continuation byte */
#define TOO_LARGE_1000 0x40  /* F5..FF 80..8F */
#define OVERLONG_4 0x40      /* F0 80..8F */
#define TWO_CONTS 0x80       /* two continuation bytes: wrong unless a third or fourth byte belongs there */
#define CARRY (TOO_SHORT | TOO_LONG | TWO_CONTS)
#define BIG (CARRY | TOO_LARGE | TOO_LARGE_1000)
#define CONT (TOO_LONG | OVERLONG_2 | TWO_CONTS)
#define TABLE(...) _mm256_setr_epi8(__VA_ARGS__, __VA_ARGS__)  /* the same 16 entries in both lanes */

/* A byte not 0 for each byte of v that is not where it may be after the bytes before it (the end of before). */
__attribute__((target("avx2"))) static inline __m256i
utf8_errors(__m256i v, __m256i before)
{
    const __m256i low = _mm256_set1_epi8(0x0F);
    const __m256i high1 = TABLE(TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG,
                                TWO_CONTS, TWO_CONTS, TWO_CONTS, TWO_CONTS, TOO_SHORT | OVERLONG_2, TOO_SHORT,
                                TOO_SHORT | OVERLONG_3 | SURROGATE, TOO_SHORT | TOO_LARGE | TOO_LARGE_1000 | OVERLONG_4);
    const __m256i low1 = TABLE(CARRY | OVERLONG_3 | OVERLONG_2 | OVERLONG_4, CARRY | OVERLONG_2, CARRY, CARRY,
                               CARRY | TOO_LARGE, BIG, BIG, BIG, BIG, BIG, BIG, BIG, BIG, BIG | SURROGATE, BIG, BIG);
    const __m256i high2 = TABLE(TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT,
                                CONT | OVERLONG_3 | TOO_LARGE_1000 | OVERLONG_4, CONT | OVERLONG_3 | TOO_LARGE,
                                CONT | SURROGATE | TOO_LARGE, CONT | SURROGATE | TOO_LARGE,
                                TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT);
    __m256i joined = _mm256_permute2x128_si256(before, v, 0x21);  /* before's high lane, v's low lane */
    __m256i prev1 = _mm256_alignr_epi8(v, joined, 15);
    __m256i pairs = _mm256_and_si256(
        _mm256_and_si256(_mm256_shuffle_epi8(high1, _mm256_and_si256(_mm256_srli_epi16(prev1, 4), low)),
                         _mm256_shuffle_epi8(low1, _mm256_and_si256(prev1, low))),
        _mm256_shuffle_epi8(high2, _mm256_and_si256(_mm256_srli_epi16(v, 4), low)));
    /* 0x80 where the byte two back leads three bytes or more, or the byte three back four: a continuation byte */
    __m256i third = _mm256_subs_epu8(_mm256_alignr_epi8(v, joined, 14), _mm256_set1_epi8((char)(0xE0 - 0x80)));
    __m256i fourth = _mm256_subs_epu8(_mm256_alignr_epi8(v, joined, 13), _mm256_set1_epi8((char)(0xF0 - 0x80)));
    __m256i must = _mm256_and_si256(_mm256_or_si256(third, fourth), _mm256_set1_epi8((char)0x80));
    return _mm256_xor_si256(must, pairs);
}

/* A byte not 0 for each byte of v that `what` names (see utf8_clean()). */
__attribute__((target("avx2"))) static inline __m256i
utf8_stops(__m256i v, int what)
{
    if (what == CLEAN_LINE)
        return _mm256_or_si256(_mm256_cmpeq_epi8(v, _mm256_set1_epi8('\n')), _mm256_cmpeq_epi8(v, _mm256_set1_epi8('\r')));
    if (what == CLEAN_QUOTED)  /* below 0x20, ' or \ */
        return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_min_epu8(v, _mm256_set1_epi8(0x1F)), v),
                               _mm256_or_si256(_mm256_cmpeq_epi8(v, _mm256_set1_epi8('\'')),
                                               _mm256_cmpeq_epi8(v, _mm256_set1_epi8('\\'))));
    return _mm256_setzero_si256();
}

/* How many of the n bytes at s (a character starts there) are whole well-formed UTF-8 characters without any of
 * what `what` names: CLEAN_QUOTED, a byte below 0x20, ' or \; CLEAN_LINE, CR or LF; CLEAN_TEXT, nothing more.
 * A multiple of 32 less the bytes of a character the last block cut; 0 without AVX2. With w not NULL, the blocks
 * looked at are copied there (room for n rounded up to 32 bytes). Reads no byte at or past s + n. */
__attribute__((target("avx2"))) static Py_ssize_t
utf8_clean(char *w, const unsigned char *s, Py_ssize_t n, int what)
{
    if (!utf8_simd)
        return 0;
    __m256i before = _mm256_setzero_si256();
    Py_ssize_t i = 0;
    for (; n - i >= 32; i += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(s + i));
        if (w != NULL)
            _mm256_storeu_si256((__m256i *)(w + i), v);
        __m256i bad = utf8_stops(v, what);
        if (_mm256_movemask_epi8(_mm256_or_si256(v, before)))  /* not all ASCII: the characters checked */
            bad = _mm256_or_si256(bad, utf8_errors(v, before));
        if (!_mm256_testz_si256(bad, bad))
            break;
        before = v;
    }
    for (int k = 1; k <= 3 && k <= i; k++) {  /* a character the last block cut: left to the caller's code */
        if (s[i - k] < 0x80)
            break;
        if (s[i - k] >= 0xC0) {
            i -= k;
            break;
        }
    }
    return i;
}

#undef TOO_SHORT
#undef TOO_LONG
#undef OVERLONG_3
#undef TOO_LARGE
#undef SURROGATE
#undef OVERLONG_2
#undef TOO_LARGE_1000
#undef OVERLONG_4
#undef TWO_CONTS
#undef CARRY
#undef BIG
#undef CONT
#undef TABLE

#else

static void
utf8_simd_init(void)
{
}

static int
utf8_simd_set(int on)
{
    (void)on;
    return 0;
}

static inline Py_ssize_t
utf8_clean(char *w, const unsigned char *s, Py_ssize_t n, int what)
{
    (void)w, (void)s, (void)n, (void)what;
    return 0;
}

#endif
#endif

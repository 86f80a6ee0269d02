/* The text Python's repr() gives a finite double, without its dtoa: the shortest decimal that reads back as
 * the double (the closest of those, an exact tie to the even one), found with 128-bit approximations of
 * powers of 5 after the Ryu algorithm (U. Adams, "Ryu: fast float-to-string conversion", PLDI 2018), then
 * laid out as Python lays out repr(). The powers are computed exactly by the caller (Python integers) and
 * loaded with shortest_load(); until then, or without 128-bit integers, shortest_available() is 0. */
#ifndef BINLOGD_SHORTEST_H
#define BINLOGD_SHORTEST_H

#include <stdint.h>
#include <string.h>

#define SHORTEST_POW5_BITS 125  /* the approximations' precision */
#define SHORTEST_POW5 326       /* 5^i, i < 326: the doubles whose binary exponent is negative */
#define SHORTEST_POW5_INV 292   /* 2^k / 5^q, q < 292: the others */
#define SHORTEST_MAX 26         /* the most characters put_shortest writes ("-2.2250738585072014e-308") */

#if defined(__SIZEOF_INT128__)

typedef unsigned __int128 shortest_u128;

/* 5^i in its top 125 bits (zeros below when it has fewer), and floor(2^(bits(5^q) - 1 + 125) / 5^q) + 1:
 * each as its low and high 64 bits. */
static uint64_t SHORTEST_POW5_TABLE[SHORTEST_POW5][2], SHORTEST_INV_TABLE[SHORTEST_POW5_INV][2];
static int shortest_loaded;

static int
shortest_available(void)
{
    return shortest_loaded;
}

/* The two tables, as little-endian 16-byte integers; -1 with ValueError when they have other sizes. */
static int
shortest_load(const unsigned char *pow5, Py_ssize_t pow5_len, const unsigned char *inv, Py_ssize_t inv_len)
{
    if (pow5_len != 16 * SHORTEST_POW5 || inv_len != 16 * SHORTEST_POW5_INV) {
        PyErr_SetString(PyExc_ValueError, "the tables of powers of 5 have other sizes");
        return -1;
    }
    for (int i = 0; i < SHORTEST_POW5; i++)
        for (int half = 0; half < 2; half++) {
            SHORTEST_POW5_TABLE[i][half] = le(pow5 + 16 * i + 8 * half, 8);
            if (i < SHORTEST_POW5_INV)
                SHORTEST_INV_TABLE[i][half] = le(inv + 16 * i + 8 * half, 8);
        }
    shortest_loaded = 1;
    return 0;
}

/* floor(e * log10(2)), floor(e * log10(5)) and the bit length of 5^e, for the exponents of doubles */
static int
floor_log10_pow2(int e)
{
    return (int)(((uint64_t)e * 78913) >> 18);
}

static int
floor_log10_pow5(int e)
{
    return (int)(((uint64_t)e * 732923) >> 20);
}

static int
pow5_bits(int e)
{
    return (int)((((uint64_t)e * 1217359) >> 19) + 1);
}

/* (m * factor) >> shift, m below 2^55 and shift at least 64 */
static uint64_t
mul_shift(uint64_t m, const uint64_t factor[2], int shift)
{
    shortest_u128 low = (shortest_u128)m * factor[0], high = (shortest_u128)m * factor[1];
    return (uint64_t)(((low >> 64) + high) >> (shift - 64));
}

static int
multiple_of_pow5(uint64_t x, int p)
{
    for (; p > 0; p--, x /= 5)
        if (x % 5)
            return 0;
    return 1;
}

/* The digits and decimal exponent of the shortest decimal that rounds to the finite, non-zero double
 * with these bits (sign ignored). */
static uint64_t
shortest_decimal(uint64_t bits, int *exponent)
{
    uint64_t fraction = bits & ((UINT64_C(1) << 52) - 1);
    int biased = (int)(bits >> 52 & 0x7FF);
    uint64_t m2 = biased ? fraction | UINT64_C(1) << 52 : fraction;
    int e2 = (biased ? biased : 1) - 1023 - 52 - 2;  /* the double is (4 m2) 2^e2 */
    int even = !(m2 & 1);          /* the interval's ends read back as the double too */
    int wide = fraction != 0 || biased <= 1;  /* the gap below is as wide as the one above */
    uint64_t mv = 4 * m2, low = mv - 1 - wide, vr, vp, vm;
    int e10, low_exact = 0, exact = 0;  /* the lower end, the double, scaled by 10^-e10 are integers */

    if (e2 >= 0) {
        int q = floor_log10_pow2(e2) - (e2 > 3), shift = -e2 + q + SHORTEST_POW5_BITS + pow5_bits(q) - 1;
        const uint64_t *f = SHORTEST_INV_TABLE[q];
        e10 = q;
        vr = mul_shift(mv, f, shift);
        vp = mul_shift(mv + 2, f, shift);
        vm = mul_shift(low, f, shift);
        if (q <= 22) {  /* 5^23 is above every mv: only then can one of them be a multiple of 5^q */
            if (mv % 5 == 0)
                exact = multiple_of_pow5(mv, q);
            else if (even)
                low_exact = multiple_of_pow5(low, q);
            else
                vp -= multiple_of_pow5(mv + 2, q);  /* the upper end, exact and excluded */
        }
    }
    else {
        int q = floor_log10_pow5(-e2) - (-e2 > 1), i = -e2 - q, shift = q - (pow5_bits(i) - SHORTEST_POW5_BITS);
        const uint64_t *f = SHORTEST_POW5_TABLE[i];
        e10 = q + e2;
        vr = mul_shift(mv, f, shift);
        vp = mul_shift(mv + 2, f, shift);
        vm = mul_shift(low, f, shift);
        if (q <= 1) {  /* the scaled values are mv 5^i / 2^q: mv has two factors 2, low one when wide */
            exact = 1;
            if (even)
                low_exact = wide;
            else
                vp--;
        }
        else if (q < 63)
            exact = (mv & ((UINT64_C(1) << q) - 1)) == 0;
    }

    int removed = 0, last = 0;  /* the last digit taken off vr */
    if (low_exact || exact) {
        while (vp / 10 > vm / 10) {
            low_exact &= vm % 10 == 0;
            exact &= last == 0;
            last = (int)(vr % 10);
            vr /= 10, vp /= 10, vm /= 10, removed++;
        }
        while (low_exact && vm % 10 == 0) {  /* an exact lower end that may be kept: shorter still */
            exact &= last == 0;
            last = (int)(vr % 10);
            vr /= 10, vp /= 10, vm /= 10, removed++;
        }
        if (exact && last == 5 && vr % 2 == 0)
            last = 4;  /* exactly halfway: the even one */
        vr += (vr == vm && (!even || !low_exact)) || last >= 5;
    }
    else {
        while (vp / 10 > vm / 10) {
            last = (int)(vr % 10);
            vr /= 10, vp /= 10, vm /= 10, removed++;
        }
        vr += vr == vm || last >= 5;
    }
    for (; vr && vr % 10 == 0; vr /= 10)
        removed++;
    *exponent = e10 + removed;
    return vr;
}

/* repr(d) of a finite double d, written at w (SHORTEST_MAX characters at most); returns the end. */
static char *
put_shortest(char *w, double d)
{
    uint64_t bits;
    char digits[20];
    int n = 0, exponent;

    memcpy(&bits, &d, sizeof bits);
    if (bits >> 63)
        *w++ = '-';
    if (!(bits << 1)) {
        memcpy(w, "0.0", 3);
        return w + 3;
    }
    for (uint64_t x = shortest_decimal(bits, &exponent); x; x /= 10)
        digits[19 - n++] = (char)('0' + x % 10);
    const char *s = digits + 20 - n;
    int point = n + exponent;  /* the digits are 0.ddd times 10^point */
    if (point <= -4 || point > 16) {
        int e = point - 1;
        *w++ = s[0];
        if (n > 1) {
            *w++ = '.';
            memcpy(w, s + 1, (size_t)(n - 1));
            w += n - 1;
        }
        *w++ = 'e';
        *w++ = e < 0 ? '-' : '+';
        e = e < 0 ? -e : e;
        if (e >= 100)
            *w++ = (char)('0' + e / 100);
        *w++ = (char)('0' + e / 10 % 10);
        *w++ = (char)('0' + e % 10);
    }
    else if (point <= 0) {
        memcpy(w, "0.000", (size_t)(2 - point));
        w += 2 - point;
        memcpy(w, s, (size_t)n);
        w += n;
    }
    else if (point >= n) {
        memcpy(w, s, (size_t)n);
        memset(w + n, '0', (size_t)(point - n));
        w += point;
        memcpy(w, ".0", 2);
        w += 2;
    }
    else {
        memcpy(w, s, (size_t)point);
        w[point] = '.';
        memcpy(w + point + 1, s + point, (size_t)(n - point));
        w += n + 1;
    }
    return w;
}

#else  /* no 128-bit integers: repr() itself */

static int
shortest_available(void)
{
    return 0;
}

static int
shortest_load(const unsigned char *pow5, Py_ssize_t pow5_len, const unsigned char *inv, Py_ssize_t inv_len)
{
    (void)pow5, (void)pow5_len, (void)inv, (void)inv_len;
    return 0;
}

static char *
put_shortest(char *w, double d)
{
    (void)d;
    return w;
}

#endif
#endif

/* protocol/_textrow.h: where a text-protocol row's packets end, shared by protocol/_textrows.c (the scan of a
 * result set) and library/_textjson.c (its rows as JSON). Include it after Python.h. */
#ifndef BINLOGD_TEXTROW_H
#define BINLOGD_TEXTROW_H

/* Whether a whole row (its packets: one, or several when the first is 0xFFFFFF bytes long) starts at pos
 * in b[..end); then *next is where it ends, *size the length of its payload and *multi whether it spans
 * several packets. */
static inline int
row_at(const unsigned char *b, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t *next, Py_ssize_t *size, int *multi)
{
    Py_ssize_t p = pos, total = 0;
    *multi = 0;
    for (;;) {
        if (end - p < 4)
            return 0;
        Py_ssize_t len = (Py_ssize_t)b[p] | (Py_ssize_t)b[p + 1] << 8 | (Py_ssize_t)b[p + 2] << 16;
        if (end - p - 4 < len)
            return 0;
        p += 4 + len;
        total += len;
        if (len != 0xFFFFFF)
            break;
        *multi = 1;
    }
    *next = p;
    *size = total;
    return 1;
}

#endif

/* JSON lexing for the native scanner: validate and skip values, find string and number spans.

Strict RFC 8259 syntax (the general path's orjson decides the same way); UTF-8 is checked apart, once for the
whole document (by kineto_scan.py, or by a stream's feeder as the bytes arrive: stream.c). Shared by scan.c only,
as static inline functions.
*/
#ifndef ATBPROF_LEX_H
#define ATBPROF_LEX_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define MAX_DEPTH 512

typedef struct {
    const char *p;
    const char *end;
    int depth;
} Cursor;


static inline int is_ws(unsigned char ch) { return ch <= ' ' && (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t'); }

static inline void skip_ws(Cursor *c) {
    const char *p = c->p, *end = c->end;
    if (p >= end || !is_ws((unsigned char)*p)) return; /* most often: a value or a key follows at once */
    while (p < end && is_ws((unsigned char)*p)) p++;
    c->p = p;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
#define HAS_ZERO(v) (((v) - ONES) & ~(v) & HIGHS)
#define HAS_LESS(v, n) (((v) - ONES * (n)) & ~(v) & HIGHS)

static inline int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* At an opening quote: move past the closing one. *escaped says whether the string held a backslash. The UTF-8 of
   the bytes is checked apart (once, for the whole document). */
static inline int lex_string(Cursor *c, const char **body, size_t *len, int *escaped) {
    const char *p = c->p + 1, *end = c->end;
    int esc = 0;
    for (;;) {
#ifdef __SSE2__
        /* sixteen bytes at a time: jump to the first '"', '\\' or control character */
        while (p + 16 <= end) {
            __m128i v = _mm_loadu_si128((const __m128i *)p);
            __m128i hit = _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\')));
            hit = _mm_or_si128(hit, _mm_cmpeq_epi8(_mm_max_epu8(v, _mm_set1_epi8(0x1f)), _mm_set1_epi8(0x1f)));
            int mask = _mm_movemask_epi8(hit);
            if (mask) {
                p += __builtin_ctz((unsigned)mask);
                break;
            }
            p += 16;
        }
#endif
        while (p + 8 <= end) {  /* eight bytes at a time while none is '"', '\\' or a control character */
            uint64_t v;
            memcpy(&v, p, 8);
            if (HAS_ZERO(v ^ (ONES * '"')) | HAS_ZERO(v ^ (ONES * '\\')) | HAS_LESS(v, 0x20)) break;
            p += 8;
        }
        if (p >= end) return 0;
        unsigned char ch = (unsigned char)*p;
        if (ch == '"') break;
        if (ch < 0x20) return 0;
        if (ch == '\\') {
            esc = 1;
            if (p + 1 >= end) return 0;
            char e = p[1];
            if (e == 'u') {
                if (p + 6 > end) return 0;
                for (int k = 2; k < 6; k++)
                    if (hexval(p[k]) < 0) return 0;
                p += 6;
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' ||
                       e == 't') {
                p += 2;
            } else {
                return 0;
            }
            continue;
        }
        p++;
    }
    *body = c->p + 1;
    *len = (size_t)(p - (c->p + 1));
    *escaped = esc;
    c->p = p + 1;
    return 1;
}

/* A JSON number: its span, whether it is an integer literal, and its fraction / exponent positions. */
typedef struct {
    const char *start;
    size_t len;
    int is_int;
    const char *dot;  /* NULL if none */
    int has_exp;
} Number;

static inline int finite_number(const char *text, size_t len) {
    char small[64], *buf = len < sizeof(small) ? small : malloc(len + 1);
    if (!buf) return 0;
    memcpy(buf, text, len);
    buf[len] = 0;
    int finite = isfinite(strtod(buf, NULL));
    if (buf != small) free(buf);
    return finite;
}

static inline int lex_number(Cursor *c, Number *num) {
    const char *p = c->p, *end = c->end;
    num->start = p;
    num->dot = NULL;
    num->has_exp = 0;
    if (p < end && *p == '-') p++;
    if (p >= end) return 0;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') p++;
    } else {
        return 0;
    }
    if (p < end && *p == '.') {
        num->dot = p++;
        if (p >= end || *p < '0' || *p > '9') return 0;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        num->has_exp = 1;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return 0;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    num->len = (size_t)(p - num->start);
    num->is_int = num->dot == NULL && !num->has_exp;
    c->p = p;
    /* orjson refuses numbers beyond double (1e400, 400 digits): so does the scanner, to accept only what it does */
    return (!num->has_exp && num->len < 300) || finite_number(num->start, num->len);
}

static inline int lex_literal(Cursor *c, const char *word, size_t n) {
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return 0;
    c->p += n;
    return 1;
}

/* Containers, one member at a time:
     int more = enter(c, '}');              at '{' or '[': 1 members follow, 0 empty (consumed), -1 too deep
     while (more > 0) { member_key(...); <the value>; more = next_member(c, '}'); }
     more == 0: closed; -1: not valid JSON */
static inline int enter(Cursor *c, char close) {
    if (++c->depth > MAX_DEPTH) return -1;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        c->depth--;
        return 0;
    }
    return 1;
}

/* `"key" :` of an object member; *key / *len: the key's body as written, *escaped: it holds a backslash */
static inline int member_key(Cursor *c, const char **key, size_t *len, int *escaped) {
    if (c->p >= c->end || *c->p != '"' || !lex_string(c, key, len, escaped)) return 0;
    skip_ws(c);
    if (c->p >= c->end || *c->p != ':') return 0;
    c->p++;
    skip_ws(c);
    return 1;
}

static inline int next_member(Cursor *c, char close) {
    skip_ws(c);
    if (c->p >= c->end) return -1;
    if (*c->p == ',') {
        c->p++;
        skip_ws(c);
        return 1;
    }
    if (*c->p == close) {
        c->p++;
        c->depth--;
        return 0;
    }
    return -1;
}

static inline int skip_value(Cursor *c);

static inline int skip_container(Cursor *c, char close) {
    int more = enter(c, close);
    while (more > 0) {
        const char *key;
        size_t len;
        int escaped;
        if ((close == '}' && !member_key(c, &key, &len, &escaped)) || !skip_value(c)) return 0;
        more = next_member(c, close);
    }
    return more == 0;
}

static inline int skip_value(Cursor *c) {
    if (c->p >= c->end) return 0;
    switch (*c->p) {
        case '"': {
            const char *b;
            size_t l;
            int e;
            return lex_string(c, &b, &l, &e);
        }
        case '{':
            return skip_container(c, '}');
        case '[':
            return skip_container(c, ']');
        case 't':
            return lex_literal(c, "true", 4);
        case 'f':
            return lex_literal(c, "false", 5);
        case 'n':
            return lex_literal(c, "null", 4);
        default: {
            Number n;
            return lex_number(c, &n);
        }
    }
}

#endif

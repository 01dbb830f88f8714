/* The scanner's data structures: growable C arrays (the columns) and an interner (a byte span -> a dense code, so
that each distinct string or raw value becomes one Python object at the end). The interner keeps a copy of each
distinct span (the scanner's window moves on, stream.h). Used by scan.c only. */
#ifndef ATBPROF_INTERN_H
#define ATBPROF_INTERN_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- growable arrays ---------------------------------------------------------------------------------------- */

typedef struct {
    char *data;
    size_t item, len, cap;
} Vec;

static inline int vec_init(Vec *v, size_t item) {
    v->item = item;
    v->len = 0;
    v->cap = 1024;
    v->data = malloc(item * v->cap);
    return v->data != NULL;
}

static inline int vec_grow(Vec *v, size_t len) {
    if (len <= v->cap) return 1;
    size_t cap = v->cap;
    while (cap < len) cap *= 2;
    char *d = realloc(v->data, v->item * cap);
    if (!d) return 0;
    v->data = d;
    v->cap = cap;
    return 1;
}

/* ---- interning: raw byte span -> code ------------------------------------------------------------------------ */

typedef struct {
    const char *p;
    size_t len;
    uint64_t hash;
} Span;

/* Copies of the distinct spans, in blocks that never move (spans point into them). */
typedef struct Block {
    struct Block *next;
    size_t used, cap;
    char data[];
} Block;

typedef struct {
    Span *spans;     /* code -> span (a copy, in blocks) */
    Block *blocks;   /* the newest first */
    size_t count, spans_cap;
    int32_t *slots;  /* open addressing, -1 empty */
    size_t mask;
} Interner;

static inline int interner_init(Interner *t) {
    t->count = 0;
    t->blocks = NULL;
    t->spans_cap = 256;
    t->spans = malloc(sizeof(Span) * t->spans_cap);
    t->mask = 1023;
    t->slots = malloc(sizeof(int32_t) * (t->mask + 1));
    if (!t->spans || !t->slots) return 0;
    memset(t->slots, 0xff, sizeof(int32_t) * (t->mask + 1));
    return 1;
}

static inline void interner_free(Interner *t) {
    free(t->spans);
    free(t->slots);
    while (t->blocks) {
        Block *next = t->blocks->next;
        free(t->blocks);
        t->blocks = next;
    }
}

/* A lasting copy of `len` bytes; NULL: no memory. */
static inline const char *interner_copy(Interner *t, const char *p, size_t len) {
    Block *b = t->blocks;
    if (!b || b->cap - b->used < len) {
        size_t cap = len > 65536 ? len : 65536;
        b = malloc(sizeof(Block) + cap);
        if (!b) return NULL;
        b->next = t->blocks;
        b->used = 0;
        b->cap = cap;
        t->blocks = b;
    }
    char *at = b->data + b->used;
    if (len) memcpy(at, p, len);
    b->used += len;
    return at;
}

static inline uint64_t hash_bytes(const char *p, size_t n) {
    /* eight bytes per step (names are long: kernel signatures, framework ops) */
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 29);
}

static inline int interner_rehash(Interner *t) {
    size_t mask = t->mask * 2 + 1;
    int32_t *slots = malloc(sizeof(int32_t) * (mask + 1));
    if (!slots) return 0;
    memset(slots, 0xff, sizeof(int32_t) * (mask + 1));
    for (size_t c = 0; c < t->count; c++) {
        size_t s = t->spans[c].hash & mask;
        while (slots[s] >= 0) s = (s + 1) & mask;
        slots[s] = (int32_t)c;
    }
    free(t->slots);
    t->slots = slots;
    t->mask = mask;
    return 1;
}

/* the code of a span, added if new; -1 on memory failure */
static inline int32_t intern(Interner *t, const char *p, size_t len) {
    uint64_t h = hash_bytes(p, len);
    size_t s = h & t->mask;
    for (;;) {
        int32_t c = t->slots[s];
        if (c < 0) break;
        Span *e = &t->spans[c];
        if (e->hash == h && e->len == len && memcmp(e->p, p, len) == 0) return c;
        s = (s + 1) & t->mask;
    }
    if (t->count >= 0x7fffffff) return -1;
    if (t->count == t->spans_cap) {
        Span *d = realloc(t->spans, sizeof(Span) * t->spans_cap * 2);
        if (!d) return -1;
        t->spans = d;
        t->spans_cap *= 2;
    }
    const char *copy = interner_copy(t, p, len);
    if (!copy) return -1;
    int32_t code = (int32_t)t->count++;
    t->spans[code] = (Span){copy, len, h};
    t->slots[s] = code;
    if (t->count * 2 > t->mask && !interner_rehash(t)) return -1;
    return code;
}

#endif

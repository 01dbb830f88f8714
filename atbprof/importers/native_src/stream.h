/* A document that is still being written: the bytes an inflating thread hands over (stream.c), read by the scanner
as they arrive (scan.c), so that inflating a gzip trace and scanning it share the wall time instead of adding up.

Only a window of the document is held: a buffer of `cap` bytes holding the document's bytes [base, avail). The
feeder appends at `avail` while there is room and waits while the window is full; the scanner, which needs nothing
before the item it is at (strings it keeps are copied out, intern.h), slides the window forward to that item when
it needs bytes past the window's end, and doubles it when one item does not fit. A whole inflated trace is never
held: its first touch (page faults on tens of MB) and its freeing cost more than inflating it, and a window of
about a MB stays in the cache between the two threads.

The scanner never reads past `avail`: a value cut by that edge fails to parse (a JSON value is always followed by a
byte that closes or separates it), and the scanner then waits for more and reads the item again.

The feeder also checks that the bytes are UTF-8 (the scanner leaves that to it), so that the scan needs no second
pass over a document it no longer holds.
*/
#ifndef ATBPROF_STREAM_H
#define ATBPROF_STREAM_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { STREAM_RUNNING = 0, STREAM_COMPLETE = 1, STREAM_ABORTED = 2 };

/* A UTF-8 check that can stop anywhere and go on with the next chunk: `need` continuation bytes still to come,
   the next one within [lo, hi] (the first continuation byte's range excludes overlong forms, surrogates and code
   points past U+10FFFF, as Python's strict decoder does). */
typedef struct {
    int need;
    unsigned char lo, hi;
    int bad;
} Utf8;

typedef struct {
    char *buf;       /* the window: the document's bytes [base, avail) at buf[0 .. avail - base) */
    size_t cap;      /* the window's size */
    size_t base;     /* the document offset of buf[0] */
    size_t total;    /* the document's size */
    size_t avail;    /* written by the feeder (release, under mu), read by the scanner (acquire) */
    /* buf, cap and base change only in the scanner's thread, under mu (the feeder copies under mu) */
    int state;       /* under mu */
    int closed;      /* under mu: the scanner reads no more; the feeder then only counts the bytes */
    int scanned;     /* a stream is scanned once */
    size_t margin;   /* bytes the scanner asks for ahead of an item */
    Utf8 utf8;       /* the feeder's alone */
    pthread_mutex_t mu;
    pthread_cond_t cv;
} Stream;

#define STREAM_CAPSULE "atbprof._native.Stream"

/* Wait until the document's bytes up to offset `want` are final (or the stream ended); the offset final now.
   `want` must lie within the window (base + cap), which the feeder can always fill. */
static inline size_t stream_wait(Stream *s, size_t want) {
    if (want > s->total) want = s->total;
    size_t avail = __atomic_load_n(&s->avail, __ATOMIC_ACQUIRE);
    if (avail >= want) return avail;
    pthread_mutex_lock(&s->mu);
    while (s->avail < want && s->state == STREAM_RUNNING) pthread_cond_wait(&s->cv, &s->mu);
    avail = s->avail;
    pthread_mutex_unlock(&s->mu);
    return avail;
}

/* Wait until the stream ended; its state. */
static inline int stream_finish(Stream *s) {
    pthread_mutex_lock(&s->mu);
    while (s->state == STREAM_RUNNING) pthread_cond_wait(&s->cv, &s->mu);
    int state = s->state;
    pthread_mutex_unlock(&s->mu);
    return state;
}

/* The scanner reads no more: the feeder stops waiting for room (and only counts what it is given). */
static inline void stream_close(Stream *s) {
    pthread_mutex_lock(&s->mu);
    s->closed = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Keep the document from offset `from` (<= avail) on: move it to the window's start. The scanner's only. */
static inline void stream_slide(Stream *s, size_t from) {
    pthread_mutex_lock(&s->mu);
    if (from > s->base) {
        memmove(s->buf, s->buf + (from - s->base), s->avail - from);
        s->base = from;
        pthread_cond_broadcast(&s->cv); /* room for the feeder */
    }
    pthread_mutex_unlock(&s->mu);
}

/* A window of at least `cap` bytes; 0: no memory. The scanner's only. */
static inline int stream_grow(Stream *s, size_t cap) {
    if (cap <= s->cap) return 1;
    size_t to = s->cap ? s->cap : 1;
    while (to < cap) to *= 2;
    pthread_mutex_lock(&s->mu);
    char *buf = realloc(s->buf, to);
    if (buf) {
        s->buf = buf;
        s->cap = to;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return buf != NULL;
}

#endif

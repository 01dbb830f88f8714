/* A document that is still being written: the bytes an inflating thread hands over (stream.c), read by the scanner
as they arrive (scan.c), so that inflating a gzip trace and scanning it share the wall time instead of adding up.

The buffer is a bytes object of the size the gzip trailer gives, filled front to back; `avail` says how much of it
is final. The scanner never reads past `avail`: a value cut by that edge fails to parse (a JSON value is always
followed by a byte that closes or separates it), and the scanner then waits for the rest and reads the item again.
*/
#ifndef ATBPROF_STREAM_H
#define ATBPROF_STREAM_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stddef.h>

enum { STREAM_RUNNING = 0, STREAM_COMPLETE = 1, STREAM_ABORTED = 2 };

typedef struct {
    PyObject *bytes; /* owns the buffer; handed to Python only once complete */
    char *buf;
    size_t total;
    size_t avail;    /* written by the feeder (release), read by the scanner (acquire) */
    int state;       /* under mu */
    int scanned;     /* a stream is scanned once */
    size_t margin;   /* bytes the scanner asks for ahead of an item */
    pthread_mutex_t mu;
    pthread_cond_t cv;
} Stream;

#define STREAM_CAPSULE "atbprof._native.Stream"

/* Wait until `want` bytes are final (or the stream ended); the bytes final now. */
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

#endif

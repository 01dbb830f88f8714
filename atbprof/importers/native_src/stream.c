/* The feeding side of a Stream (stream.h): made, filled and ended from Python (kineto_scan.inflate_and_scan, whose
inflating thread calls stream_feed); scan.c's scan_stream reads it. */
#include "stream.h"

#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

static void stream_destroy(PyObject *capsule) {
    Stream *s = PyCapsule_GetPointer(capsule, STREAM_CAPSULE);
    if (!s) return;
    free(s->buf);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

Stream *stream_of(PyObject *capsule) { return PyCapsule_GetPointer(capsule, STREAM_CAPSULE); }

/* stream_new(size, window) -> a stream of a `size`-byte document, held `window` bytes at a time (more where one
   item needs it) */
PyObject *stream_new(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t total, window;
    if (!PyArg_ParseTuple(args, "nn", &total, &window)) return NULL;
    if (total < 0 || window < 1) {
        PyErr_SetString(PyExc_ValueError, "a stream's size is not negative and its window at least 1");
        return NULL;
    }
    Stream *s = calloc(1, sizeof(Stream));
    if (!s) return PyErr_NoMemory();
    s->cap = (size_t)window < (size_t)total ? (size_t)window : (size_t)total;
    if (s->cap == 0) s->cap = 1;
    s->buf = malloc(s->cap);
    if (!s->buf) {
        free(s);
        return PyErr_NoMemory();
    }
    s->total = (size_t)total;
    s->utf8 = (Utf8){0, 0x80, 0xbf, 0};
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    PyObject *capsule = PyCapsule_New(s, STREAM_CAPSULE, stream_destroy);
    if (!capsule) {
        free(s->buf);
        free(s);
    }
    return capsule;
}

/* UTF-8 of `n` more bytes (Unicode's table 3-7 of well-formed sequences). */
static void utf8_check(Utf8 *u, const unsigned char *p, size_t n) {
    const unsigned char *end = p + n;
    int need = u->need;
    unsigned char lo = u->lo, hi = u->hi;
    while (p < end) {
        if (need == 0) {
#ifdef __SSE2__
            while (p + 16 <= end && !_mm_movemask_epi8(_mm_loadu_si128((const __m128i *)p))) p += 16;
#endif
            while (p < end && *p < 0x80) p++;
            if (p >= end) break;
            unsigned char b = *p++;
            lo = 0x80;
            hi = 0xbf;
            if (b >= 0xc2 && b <= 0xdf) {
                need = 1;
            } else if (b >= 0xe0 && b <= 0xef) {
                need = 2;
                if (b == 0xe0) lo = 0xa0;
                if (b == 0xed) hi = 0x9f;
            } else if (b >= 0xf0 && b <= 0xf4) {
                need = 3;
                if (b == 0xf0) lo = 0x90;
                if (b == 0xf4) hi = 0x8f;
            } else {
                u->bad = 1;
                return;
            }
            continue;
        }
        unsigned char b = *p++;
        if (b < lo || b > hi) {
            u->bad = 1;
            return;
        }
        lo = 0x80;
        hi = 0xbf;
        need--;
    }
    u->need = need;
    u->lo = lo;
    u->hi = hi;
}

static void stream_end_state(Stream *s, int state) {
    pthread_mutex_lock(&s->mu);
    if (s->state == STREAM_RUNNING) s->state = state;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* stream_feed(stream, chunk) -> False when the chunk would pass the stream's size (the stream is then aborted).
   Waits while the window is full. */
PyObject *stream_feed(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule;
    Py_buffer chunk;
    if (!PyArg_ParseTuple(args, "Oy*", &capsule, &chunk)) return NULL;
    Stream *s = stream_of(capsule);
    if (!s) {
        PyBuffer_Release(&chunk);
        return NULL;
    }
    const char *p = chunk.buf;
    size_t len = (size_t)chunk.len;
    int fits = s->state == STREAM_RUNNING && len <= s->total - s->avail; /* the one feeder alone writes avail */
    if (fits && len) {
        Py_BEGIN_ALLOW_THREADS
        if (!s->utf8.bad && !s->closed) utf8_check(&s->utf8, (const unsigned char *)p, len); /* closed: unread */
        pthread_mutex_lock(&s->mu);
        while (len && s->state == STREAM_RUNNING) {
            size_t room = s->closed ? len : s->base + s->cap - s->avail, n = len < room ? len : room;
            if (!n) {
                pthread_cond_wait(&s->cv, &s->mu); /* the scanner slides or grows the window */
                continue;
            }
            if (!s->closed) memcpy(s->buf + (s->avail - s->base), p, n);
            __atomic_store_n(&s->avail, s->avail + n, __ATOMIC_RELEASE);
            pthread_cond_broadcast(&s->cv);
            p += n;
            len -= n;
        }
        pthread_mutex_unlock(&s->mu);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&chunk);
    if (!fits) stream_end_state(s, STREAM_ABORTED);
    return PyBool_FromLong(fits);
}

/* stream_end(stream, ok): no more bytes; complete when ok and every byte came, else aborted */
PyObject *stream_end(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule;
    int ok;
    if (!PyArg_ParseTuple(args, "Op", &capsule, &ok)) return NULL;
    Stream *s = stream_of(capsule);
    if (!s) return NULL;

    stream_end_state(s, ok && s->avail == s->total ? STREAM_COMPLETE : STREAM_ABORTED);
    Py_RETURN_NONE;
}

/* stream_close(stream): no scan will read it (the feeder then stops waiting for room) */
PyObject *stream_close_py(PyObject *self, PyObject *arg) {
    (void)self;
    Stream *s = stream_of(arg);
    if (!s) return NULL;
    stream_close(s);
    Py_RETURN_NONE;
}

/* stream_window(stream) -> the window's size now (the tests check that it stays small) */
PyObject *stream_window(PyObject *self, PyObject *arg) {
    (void)self;
    Stream *s = stream_of(arg);
    if (!s) return NULL;
    pthread_mutex_lock(&s->mu);
    size_t cap = s->cap;
    pthread_mutex_unlock(&s->mu);
    return PyLong_FromSize_t(cap);
}

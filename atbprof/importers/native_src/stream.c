/* The feeding side of a Stream (stream.h): made, filled and ended from Python (kineto_scan.inflate_and_scan, whose
inflating thread calls stream_feed); scan.c's scan_stream reads it. */
#include "stream.h"

#include <string.h>

static void stream_destroy(PyObject *capsule) {
    Stream *s = PyCapsule_GetPointer(capsule, STREAM_CAPSULE);
    if (!s) return;
    Py_XDECREF(s->bytes);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

Stream *stream_of(PyObject *capsule) { return PyCapsule_GetPointer(capsule, STREAM_CAPSULE); }

PyObject *stream_new(PyObject *self, PyObject *arg) {
    (void)self;
    Py_ssize_t total = PyLong_AsSsize_t(arg);
    if (total < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a stream's size is not negative");
        return NULL;
    }
    Stream *s = calloc(1, sizeof(Stream));
    if (!s) return PyErr_NoMemory();
    s->bytes = PyBytes_FromStringAndSize(NULL, total);
    if (!s->bytes) {
        free(s);
        return NULL;
    }
    s->buf = PyBytes_AS_STRING(s->bytes);
    s->total = (size_t)total;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    PyObject *capsule = PyCapsule_New(s, STREAM_CAPSULE, stream_destroy);
    if (!capsule) {
        Py_DECREF(s->bytes);
        free(s);
    }
    return capsule;
}

static void stream_end_state(Stream *s, int state) {
    pthread_mutex_lock(&s->mu);
    if (s->state == STREAM_RUNNING) s->state = state;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* stream_feed(stream, chunk) -> False when the chunk would pass the stream's size (the stream is then aborted) */
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
    size_t len = (size_t)chunk.len, at = s->avail; /* the one feeder is the only writer of avail */
    int fits = s->state == STREAM_RUNNING && len <= s->total - at;
    if (fits && len) {
        Py_BEGIN_ALLOW_THREADS
        memcpy(s->buf + at, chunk.buf, len);
        pthread_mutex_lock(&s->mu);
        __atomic_store_n(&s->avail, at + len, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&s->cv);
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

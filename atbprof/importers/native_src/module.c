/* atbprof.importers._native: the native helpers of the importers, each with a pure-Python twin that gives the same
results (tests/importers/test_native.py). An optional build (pyproject.toml); atbprof/importers/native.py loads it.

  scan_kineto (scan.c, lex.h, intern.h)  a Kineto trace's bytes -> columns, without a Python object per event
  stream_*, scan_stream (stream.c/.h)    the same scan while another thread inflates the bytes
  nest (nest.c)                          per-thread nesting of framework ops
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyObject *scan_kineto(PyObject *self, PyObject *arg);
PyObject *nest(PyObject *self, PyObject *args);
PyObject *scan_stream(PyObject *self, PyObject *args);
PyObject *stream_new(PyObject *self, PyObject *arg);
PyObject *stream_feed(PyObject *self, PyObject *args);
PyObject *stream_end(PyObject *self, PyObject *args);
PyObject *stream_window(PyObject *self, PyObject *arg);
PyObject *stream_close_py(PyObject *self, PyObject *arg);

static PyMethodDef methods[] = {
    {"scan_kineto", scan_kineto, METH_O,
     "scan_kineto(data) -> dict of column buffers, or None when the bytes are not a plain, valid Kineto trace."},
    {"stream_new", stream_new, METH_VARARGS,
     "stream_new(size, window) -> a stream of a `size`-byte document, held `window` bytes at a time (stream.h)."},
    {"stream_feed", stream_feed, METH_VARARGS,
     "stream_feed(stream, chunk) -> False when the chunk would pass the stream's size (it is then aborted)."},
    {"stream_end", stream_end, METH_VARARGS, "stream_end(stream, ok): no more bytes (complete only if ok and full)."},
    {"stream_close", stream_close_py, METH_O, "stream_close(stream): no scan will read it; the feeder stops waiting."},
    {"stream_window", stream_window, METH_O, "stream_window(stream) -> the size of the window held now."},
    {"scan_stream", scan_stream, METH_VARARGS,
     "scan_stream(stream, margin) -> columns as the stream arrives; False: not the plain case; None: aborted."},
    {"nest", nest, METH_VARARGS,
     "nest(order, thread, start, end, index, depth_out, parent_out): assemble.nesting_python in C (int64 arrays)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }

/* atbprof.importers._native: the native helpers of the importers, each with a pure-Python twin that gives the same
results (tests/importers/test_native.py). An optional build (pyproject.toml); atbprof/importers/native.py loads it.

  scan_kineto (scan.c, lex.h, intern.h)  a Kineto trace's bytes -> columns, without a Python object per event
  nest (nest.c)                          per-thread nesting of framework ops
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyObject *scan_kineto(PyObject *self, PyObject *arg);
PyObject *nest(PyObject *self, PyObject *args);

static PyMethodDef methods[] = {
    {"scan_kineto", scan_kineto, METH_O,
     "scan_kineto(data) -> dict of column buffers, or None when the bytes are not a plain, valid Kineto trace."},
    {"nest", nest, METH_VARARGS,
     "nest(order, thread, start, end, index, depth_out, parent_out): assemble.nesting_python in C (int64 arrays)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }

/* nest: depth and parent of framework ops per thread, the loop of assemble.nesting_python in C. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int int64_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t n, int writable) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return 0;
    if (view->itemsize != 8 || view->len != n * 8 || !view->format || (strcmp(view->format, "l") != 0 &&
        strcmp(view->format, "q") != 0 && strcmp(view->format, "<q") != 0 && strcmp(view->format, "<l") != 0)) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_TypeError, "nest: int64 arrays of equal length expected");
        return 0;
    }
    return 1;
}

PyObject *nest(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[7];
    if (!PyArg_ParseTuple(args, "OOOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5], &objs[6]))
        return NULL;
    Py_buffer v[7];
    Py_ssize_t n = PyObject_Length(objs[0]);
    if (n < 0) return NULL;
    int got = 0;
    for (; got < 7; got++)
        if (!int64_buffer(objs[got], &v[got], n, got >= 5)) break;
    if (got < 7) {
        for (int k = 0; k < got; k++) PyBuffer_Release(&v[k]);
        return NULL;
    }
    const int64_t *order = v[0].buf, *thread = v[1].buf, *start = v[2].buf, *end = v[3].buf, *index = v[4].buf;
    int64_t *depth = v[5].buf, *parent = v[6].buf;
    int64_t *stack_end = malloc(sizeof(int64_t) * (size_t)(n + 1)), *stack_ix = malloc(sizeof(int64_t) * (size_t)(n + 1));
    int bad = !stack_end || !stack_ix;
    if (!bad) {
        Py_BEGIN_ALLOW_THREADS
        Py_ssize_t top = 0;
        int64_t current = 0;
        for (Py_ssize_t k = 0; k < n && !bad; k++) {
            int64_t i = order[k];
            if (i < 0 || i >= n) {
                bad = 1;
                break;
            }
            if (k == 0 || thread[i] != current) {
                current = thread[i];
                top = 0;
            }
            int64_t s = start[i], e = end[i];
            while (top && (stack_end[top - 1] <= s || stack_end[top - 1] < e)) top--;
            depth[i] = top;
            parent[i] = top ? stack_ix[top - 1] : -1;
            stack_end[top] = e;
            stack_ix[top] = index[i];
            top++;
        }
        Py_END_ALLOW_THREADS
    }
    free(stack_end);
    free(stack_ix);
    for (int k = 0; k < 7; k++) PyBuffer_Release(&v[k]);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "nest: an order entry out of range (or no memory)");
        return NULL;
    }
    Py_RETURN_NONE;
}


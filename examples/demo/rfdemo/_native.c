/* rfdemo._native: two small functions implemented in C. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *rfdemo_add(PyObject *self, PyObject *args) {
    long long a, b;
    if (!PyArg_ParseTuple(args, "LL", &a, &b)) {
        return NULL;
    }
    return PyLong_FromLongLong(a + b);
}

static PyObject *rfdemo_fib(PyObject *self, PyObject *args) {
    long n;
    if (!PyArg_ParseTuple(args, "l", &n)) {
        return NULL;
    }
    if (n < 0 || n > 92) {
        PyErr_SetString(PyExc_ValueError, "fib(n) needs 0 <= n <= 92");
        return NULL;
    }
    long long a = 0, b = 1;
    for (long i = 0; i < n; i++) {
        long long t = a + b;
        a = b;
        b = t;
    }
    return PyLong_FromLongLong(a);
}

static PyMethodDef rfdemo_methods[] = {
    {"add", rfdemo_add, METH_VARARGS, "add(a, b) -> a + b"},
    {"fib", rfdemo_fib, METH_VARARGS, "fib(n) -> the n-th Fibonacci number"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef rfdemo_module = {
    PyModuleDef_HEAD_INIT, "rfdemo._native", "C half of rfdemo.", -1, rfdemo_methods,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&rfdemo_module); }

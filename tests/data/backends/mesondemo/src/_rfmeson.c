#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* __FILE__ is the compiler's path of this file: a build path unless prefix-mapped. */
static PyObject *where(PyObject *self, PyObject *args) { return PyUnicode_FromString(__FILE__); }

static PyObject *mul(PyObject *self, PyObject *args) {
    long a, b;
    if (!PyArg_ParseTuple(args, "ll", &a, &b)) return NULL;
    return PyLong_FromLong(a * b);
}

static PyMethodDef methods[] = {
    {"where", where, METH_NOARGS, "The source path compiled in."},
    {"mul", mul, METH_VARARGS, "Multiply two integers."},
    {NULL, NULL, 0, NULL},
};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rfmeson", NULL, -1, methods};
PyMODINIT_FUNC PyInit__rfmeson(void) { return PyModule_Create(&module); }

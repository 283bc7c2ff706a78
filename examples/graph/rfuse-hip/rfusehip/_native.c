/* rfusehip._native: exposes the host side of the HIP object built against rfbase. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

int rfusehip_factor(void);

static PyObject *factor(PyObject *self, PyObject *args) { return PyLong_FromLong(rfusehip_factor()); }

static PyMethodDef methods[] = {
    {"factor", factor, METH_NOARGS, "The RFBASE_SCALE the HIP kernel is launched with."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "rfusehip._native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }

/* rfuse._native: C compiled against rfbase's header, linked with rfbase's library. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <rfbase.h>

static PyObject *rfuse_scaled(PyObject *self, PyObject *args) {
    long long x;
    if (!PyArg_ParseTuple(args, "L", &x)) {
        return NULL;
    }
    return PyLong_FromLongLong(rfbase_scaled(x));
}

static PyMethodDef methods[] = {
    {"scaled", rfuse_scaled, METH_VARARGS, "x times the RFBASE_SCALE of the linked rfbase."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "rfuse._native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }

/* Python bindings: add(a, b) runs the HIP kernel; errors become hipsdkdemo.HipError. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>

extern const char* hipdemo_error_name(int err);
extern const char* hipdemo_error_string(int err);
extern int hipdemo_device_count(int* count);
extern int hipdemo_add(const float* a, const float* b, float* out, int n);

static PyObject* HipError;

static PyObject* raise_hip(int err) {
  PyObject* args = Py_BuildValue("(iss)", err, hipdemo_error_name(err), hipdemo_error_string(err));
  if (args) {
    PyErr_SetObject(HipError, args);
    Py_DECREF(args);
  }
  return NULL;
}

static float* floats(PyObject* seq, Py_ssize_t n) {
  float* out = malloc(n ? n * sizeof(float) : 1);
  if (!out) return (float*)PyErr_NoMemory();
  for (Py_ssize_t i = 0; i < n; i++) {
    double v = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
    if (v == -1.0 && PyErr_Occurred()) { free(out); return NULL; }
    out[i] = (float)v;
  }
  return out;
}

static PyObject* add(PyObject* self, PyObject* args) {
  PyObject *pa, *pb;
  if (!PyArg_ParseTuple(args, "OO", &pa, &pb)) return NULL;
  PyObject* sa = PySequence_Fast(pa, "a must be a sequence");
  PyObject* sb = sa ? PySequence_Fast(pb, "b must be a sequence") : NULL;
  PyObject* result = NULL;
  float *a = NULL, *b = NULL, *out = NULL;
  if (!sb) goto done;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(sa);
  if (n != PySequence_Fast_GET_SIZE(sb) || n > 1 << 30) {
    PyErr_SetString(PyExc_ValueError, "a and b must have the same length");
    goto done;
  }
  if (!(a = floats(sa, n)) || !(b = floats(sb, n))) goto done;
  if (!(out = malloc(n ? n * sizeof(float) : 1))) { PyErr_NoMemory(); goto done; }
  int err;
  Py_BEGIN_ALLOW_THREADS
  err = hipdemo_add(a, b, out, (int)n);
  Py_END_ALLOW_THREADS
  if (err != 0) { raise_hip(err); goto done; }
  result = PyList_New(n);
  for (Py_ssize_t i = 0; result && i < n; i++) PyList_SET_ITEM(result, i, PyFloat_FromDouble(out[i]));
done:
  free(a); free(b); free(out);
  Py_XDECREF(sa); Py_XDECREF(sb);
  return result;
}

static PyObject* device_count(PyObject* self, PyObject* noargs) {
  int count = 0;
  int err = hipdemo_device_count(&count);
  if (err != 0) return raise_hip(err);
  return PyLong_FromLong(count);
}

static PyMethodDef methods[] = {
  {"add", add, METH_VARARGS, "add(a, b) -> list: elementwise a + b computed on the GPU."},
  {"device_count", device_count, METH_NOARGS, "Number of HIP devices (raises HipError without one)."},
  {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "hipsdkdemo._hip", NULL, -1, methods};

PyMODINIT_FUNC PyInit__hip(void) {
  PyObject* m = PyModule_Create(&module);
  if (!m) return NULL;
  HipError = PyErr_NewExceptionWithDoc(
      "hipsdkdemo._hip.HipError", "A HIP runtime call failed: args are (code, name, message).",
      PyExc_RuntimeError, NULL);
  if (!HipError || PyModule_AddObject(m, "HipError", HipError) < 0) { Py_DECREF(m); return NULL; }
  Py_INCREF(HipError);
  return m;
}

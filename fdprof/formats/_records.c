/* Record framing in C: the offsets of the complete records of a record file's bytes.
 *
 * Records vary in length, so finding them is a serial walk over 8-byte headers; in Python that
 * walk was the largest single cost of loading a native run. The rules are those of
 * records.iter_records (record_offsets is the pure-Python twin and the reference): a zero kind
 * skips to the next chunk, a record running past the end of the data ends the walk.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEADER_SIZE 8

/* One walk: counts up to `limit` records, and stores their offsets when `out` is not NULL
 * (the limit keeps a buffer that changed between two walks from overrunning `out`). */
static Py_ssize_t walk(const uint8_t *data, Py_ssize_t size, Py_ssize_t off, Py_ssize_t chunk,
                       int64_t *out, Py_ssize_t limit) {
    Py_ssize_t count = 0;
    while (off + HEADER_SIZE <= size && count < limit) {
        if (data[off] == 0) {
            off = (off / chunk + 1) * chunk;
            continue;
        }
        Py_ssize_t end = off + HEADER_SIZE + (data[off + 2] | data[off + 3] << 8);
        if (end > size) break;
        if (out) out[count] = off;
        count++;
        off = end;
    }
    return count;
}

/* offsets(data, start, chunk) -> bytes of native int64 offsets. Two walks (count, then fill)
 * so the result is allocated once at its size: no growth, no copy. */
static PyObject *offsets(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t start, chunk, count;
    if (!PyArg_ParseTuple(args, "y*nn", &buf, &start, &chunk)) return NULL;
    if (start < 0 || chunk <= 0) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "offsets: start >= 0 and chunk > 0");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    count = walk(buf.buf, buf.len, start, chunk, NULL, PY_SSIZE_T_MAX);
    Py_END_ALLOW_THREADS
    PyObject *result = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
    if (result) {
        int64_t *out = (int64_t *)PyBytes_AS_STRING(result);
        Py_ssize_t filled;
        Py_BEGIN_ALLOW_THREADS
        filled = walk(buf.buf, buf.len, start, chunk, out, count);
        Py_END_ALLOW_THREADS
        if (filled < count) _PyBytes_Resize(&result, filled * (Py_ssize_t)sizeof(int64_t));
    }
    PyBuffer_Release(&buf);
    return result;
}

static PyMethodDef methods[] = {
    {"offsets", offsets, METH_VARARGS,
     "offsets(data, start, chunk) -> bytes of int64 offsets of the complete records."},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "fdprof.formats._records",
    "Record framing in C (twin of fdprof.formats.records.record_offsets).", -1, methods,
};

PyMODINIT_FUNC PyInit__records(void) { return PyModule_Create(&module); }

/* The native recorder in C: the twin of recorder.py, writing the identical format
 * (see records.py) into a shared file mapping, so a span costs a few stores, not a Python
 * allocation. Every method runs under the GIL, which is the only lock it needs.
 *
 * Records are published payload first, header last (kind byte last of all), so a reader
 * tailing the file while it is written never sees a header whose payload is not there yet.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (1u << 20)
#define PID_SHIFT 40
#define HEADER_SIZE 8
#define FILE_HEADER_SIZE 68
#define MAX_PAYLOAD 65535
#define NO_SEQ (-1)
#define SYNC_KEYED 1

enum { K_STRING = 1, K_SPAN_BEGIN, K_SPAN_END, K_ATTR_INT, K_ATTR_FLOAT, K_ATTR_STR,
       K_ATTR_INTS, K_SYNC, K_THREAD_NAME, K_CONTEXT };
enum { OP_RELEASE = 1, OP_ACQUIRE = 2 };

static __thread uint32_t cached_tid;
/* Bumped in a forked child: a recorder made before the fork belongs to the parent (whose
 * mapping the child shares), so in the child it records nothing until configure() again. */
static unsigned long fork_generation;

static void after_fork_child(void) {
    cached_tid = 0;
    fork_generation++;
}

static inline uint32_t native_tid(void) {
    if (!cached_tid) cached_tid = (uint32_t)syscall(SYS_gettid);
    return cached_tid;
}

static inline int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

typedef struct {
    PyObject_HEAD
    int fd;
    char *buf;            /* current chunk */
    size_t off;           /* write offset in the current chunk */
    size_t base;          /* file offset of the current chunk */
    char **maps;
    size_t nmaps;
    uint64_t next_id;
    unsigned long generation;
    unsigned long long records;
    PyObject *path;
    PyObject *strings;    /* text -> id */
    PyObject *handles;    /* Name/Key/Obj handle -> id (identity-hashed handles) */
} Recorder;

static PyObject *closed_error(void) {
    PyErr_SetString(PyExc_ValueError, "recorder is closed");
    return NULL;
}

static int grow(Recorder *r) {
    char **maps = PyMem_Realloc(r->maps, (r->nmaps + 1) * sizeof(char *));
    if (!maps) { PyErr_NoMemory(); return -1; }
    r->maps = maps;
    size_t base = r->nmaps * (size_t)CHUNK;
    if (ftruncate(r->fd, (off_t)(base + CHUNK)) != 0) { PyErr_SetFromErrno(PyExc_OSError); return -1; }
    void *m = mmap(NULL, CHUNK, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, (off_t)base);
    if (m == MAP_FAILED) { PyErr_SetFromErrno(PyExc_OSError); return -1; }
    r->maps[r->nmaps++] = m;
    r->buf = m;
    r->base = base;
    r->off = 0;
    return 0;
}

/* Room for a record with `payload` bytes; returns the payload pointer, or NULL: an error
 * is set, or none when this is a forked child's inherited recorder (the record is skipped). */
static char *reserve(Recorder *r, size_t payload) {
    if (!r->buf) { closed_error(); return NULL; }
    if (r->generation != fork_generation) return NULL;
    size_t size = HEADER_SIZE + payload;
    if (r->off + size > CHUNK && grow(r) != 0) return NULL;
    char *p = r->buf + r->off + HEADER_SIZE;
    return p;
}

static void publish(Recorder *r, uint8_t kind, uint8_t flags, size_t payload) {
    char *h = r->buf + r->off;
    uint16_t len = (uint16_t)payload;
    uint32_t tid = native_tid();
    h[1] = (char)flags;
    memcpy(h + 2, &len, 2);
    memcpy(h + 4, &tid, 4);
    __atomic_store_n((uint8_t *)h, kind, __ATOMIC_RELEASE);
    r->off += HEADER_SIZE + payload;
    r->records++;
}

#define PUT(p, off, v) memcpy((p) + (off), &(v), sizeof(v))
/* what a writer returns when reserve() gave no room: -1 on error, 0 for a skipped record */
#define SKIPPED() (PyErr_Occurred() ? -1 : 0)

static int put_string(Recorder *r, uint32_t sid, const char *data, Py_ssize_t n) {
    if (n > MAX_PAYLOAD - 4) {
        n = MAX_PAYLOAD - 4;
        while (n > 0 && ((unsigned char)data[n] & 0xC0) == 0x80) n--; /* whole UTF-8 chars */
    }
    char *p = reserve(r, 4 + (size_t)n);
    if (!p) return SKIPPED();
    PUT(p, 0, sid);
    memcpy(p + 4, data, (size_t)n);
    publish(r, K_STRING, 0, 4 + (size_t)n);
    return 0;
}

/* Id of `text`, writing its STRING record the first time; 0 on error. */
static uint32_t intern_text(Recorder *r, PyObject *text) {
    PyObject *known = PyDict_GetItemWithError(r->strings, text);
    if (known) return (uint32_t)PyLong_AsUnsignedLong(known);
    if (PyErr_Occurred()) return 0;
    Py_ssize_t n;
    const char *data = PyUnicode_AsUTF8AndSize(text, &n);
    if (!data) return 0;
    uint32_t sid = (uint32_t)PyDict_GET_SIZE(r->strings) + 1;
    if (put_string(r, sid, data, n) != 0) return 0;
    PyObject *v = PyLong_FromUnsignedLong(sid);
    if (!v) return 0;
    int rc = PyDict_SetItem(r->strings, text, v);
    Py_DECREF(v);
    return rc == 0 ? sid : 0;
}

/* Id of a Name/Key/Obj handle (its ``text``), cached per handle object. */
static uint32_t handle_id(Recorder *r, PyObject *handle) {
    PyObject *known = PyDict_GetItemWithError(r->handles, handle);
    if (known) return (uint32_t)PyLong_AsUnsignedLong(known);
    if (PyErr_Occurred()) return 0;
    PyObject *text = PyObject_GetAttrString(handle, "text");
    if (!text) return 0;
    if (!PyUnicode_Check(text)) {
        Py_DECREF(text);
        PyErr_SetString(PyExc_TypeError, "handle text must be str");
        return 0;
    }
    uint32_t iid = intern_text(r, text);
    Py_DECREF(text);
    if (!iid) return 0;
    PyObject *v = PyLong_FromUnsignedLong(iid);
    if (!v) return 0;
    int rc = PyDict_SetItem(r->handles, handle, v);
    Py_DECREF(v);
    return rc == 0 ? iid : 0;
}

/* ---- record writers shared by the low-level and the handle methods ---- */

static int w_span_begin(Recorder *r, uint64_t sid, uint64_t parent, uint32_t name, int64_t t0) {
    char *p = reserve(r, 32);
    if (!p) return SKIPPED();
    uint32_t pad = 0;
    PUT(p, 0, sid); PUT(p, 8, parent); PUT(p, 16, name); PUT(p, 20, pad); PUT(p, 24, t0);
    publish(r, K_SPAN_BEGIN, 0, 32);
    return 0;
}

static int w_span_end(Recorder *r, uint64_t sid, int64_t t1) {
    char *p = reserve(r, 16);
    if (!p) return SKIPPED();
    PUT(p, 0, sid); PUT(p, 8, t1);
    publish(r, K_SPAN_END, 0, 16);
    return 0;
}

static int w_attr8(Recorder *r, uint8_t kind, uint64_t sid, uint32_t key, const void *v8) {
    char *p = reserve(r, 24);
    if (!p) return SKIPPED();
    uint32_t pad = 0;
    PUT(p, 0, sid); PUT(p, 8, key); PUT(p, 12, pad); memcpy(p + 16, v8, 8);
    publish(r, kind, 0, 24);
    return 0;
}

static int w_attr_str(Recorder *r, uint64_t sid, uint32_t key, PyObject *value) {
    if (!PyUnicode_Check(value)) { PyErr_SetString(PyExc_TypeError, "value must be str"); return -1; }
    uint32_t vid = intern_text(r, value);
    if (!vid) return -1;
    char *p = reserve(r, 16);
    if (!p) return SKIPPED();
    PUT(p, 0, sid); PUT(p, 8, key); PUT(p, 12, vid);
    publish(r, K_ATTR_STR, 0, 16);
    return 0;
}

static int w_attr_ints(Recorder *r, uint64_t sid, uint32_t key, PyObject *values) {
    PyObject *seq = PySequence_Fast(values, "values must be a sequence of ints");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > (MAX_PAYLOAD - 16) / 4) n = (MAX_PAYLOAD - 16) / 4;
    char *p = reserve(r, 16 + 4 * (size_t)n);
    if (!p) { Py_DECREF(seq); return SKIPPED(); }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        long v = PyLong_AsLong(items[i]);
        if (v == -1 && PyErr_Occurred()) { Py_DECREF(seq); return -1; }
        int32_t v32 = (int32_t)v;
        PUT(p, 16 + 4 * i, v32);
    }
    Py_DECREF(seq);
    uint32_t count = (uint32_t)n;
    PUT(p, 0, sid); PUT(p, 8, key); PUT(p, 12, count);
    publish(r, K_ATTR_INTS, 0, 16 + 4 * (size_t)n);
    return 0;
}

/* an unkeyed sync stores NO_SEQ: its seq means nothing */
static int w_sync(Recorder *r, uint64_t sid, uint32_t obj, uint32_t op, int64_t seq, int64_t t,
                  int keyed) {
    char *p = reserve(r, 32);
    if (!p) return SKIPPED();
    if (!keyed) seq = NO_SEQ;
    PUT(p, 0, sid); PUT(p, 8, obj); PUT(p, 12, op); PUT(p, 16, seq); PUT(p, 24, t);
    publish(r, K_SYNC, keyed ? SYNC_KEYED : 0, 32);
    return 0;
}

/* ---- construction ---- */

static int Recorder_init(Recorder *r, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"path", "role", "dp_rank", "tp_rank", "mode", NULL};
    PyObject *path_arg;
    const char *role;
    Py_ssize_t role_len;
    int dp_rank = -1, tp_rank = -1, mode = 0600;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Os#|iii", kwlist, &path_arg, &role, &role_len,
                                     &dp_rank, &tp_rank, &mode))
        return -1;
    PyObject *pathlib = PyImport_ImportModule("pathlib");
    if (!pathlib) return -1;
    PyObject *path = PyObject_CallMethod(pathlib, "Path", "O", path_arg);
    Py_DECREF(pathlib);
    if (!path) return -1;
    PyObject *fspath = PyOS_FSPath(path);
    if (!fspath) { Py_DECREF(path); return -1; }
    PyObject *encoded = NULL;
    if (!PyUnicode_FSConverter(fspath, &encoded)) { Py_DECREF(fspath); Py_DECREF(path); return -1; }
    Py_DECREF(fspath);
    /* a new file, as fdprof.files.create_new makes one: whatever had the name (a file, a
       symbolic link planted there) is removed, never opened; then the caller's mode */
    const char *name = PyBytes_AS_STRING(encoded);
    if (unlink(name) != 0 && errno != ENOENT) r->fd = -1;
    else r->fd = open(name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (r->fd >= 0 && fchmod(r->fd, (mode_t)mode) != 0) { close(r->fd); r->fd = -1; }
    if (r->fd < 0) {
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path);
        Py_DECREF(encoded); Py_DECREF(path); return -1;
    }
    Py_DECREF(encoded);
    r->path = path;
    r->strings = PyDict_New();
    r->handles = PyDict_New();
    if (!r->strings || !r->handles) return -1;
    r->next_id = ((uint64_t)getpid() << PID_SHIFT) + 1;
    r->generation = fork_generation;
    if (grow(r) != 0) return -1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t epoch = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    int64_t mono = mono_ns();
    uint32_t pid = (uint32_t)getpid();
    int32_t dp = dp_rank, tp = tp_rank;
    memcpy(r->buf, "FDPROF2\n", 8);
    PUT(r->buf, 8, pid);
    PUT(r->buf, 12, mono);
    PUT(r->buf, 20, epoch);
    memset(r->buf + 28, 0, 32);
    memcpy(r->buf + 28, role, role_len < 32 ? (size_t)role_len : 32);
    PUT(r->buf, 60, dp);
    PUT(r->buf, 64, tp);
    r->off = FILE_HEADER_SIZE;
    return 0;
}

static void unmap_all(Recorder *r) {
    for (size_t i = 0; i < r->nmaps; i++) munmap(r->maps[i], CHUNK);
    r->nmaps = 0;
    r->buf = NULL;
}

static void Recorder_dealloc(Recorder *r) {
    if (r->buf) {
        unmap_all(r);
        close(r->fd);
    }
    PyMem_Free(r->maps);
    Py_XDECREF(r->path);
    Py_XDECREF(r->strings);
    Py_XDECREF(r->handles);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

/* ---- the low-level methods: the same signatures as recorder.Recorder ---- */

static PyObject *Recorder_intern(Recorder *r, PyObject *text) {
    if (!PyUnicode_Check(text)) { PyErr_SetString(PyExc_TypeError, "text must be str"); return NULL; }
    uint32_t sid = intern_text(r, text);
    return sid ? PyLong_FromUnsignedLong(sid) : NULL;
}

static PyObject *Recorder_name_thread(Recorder *r, PyObject *name) {
    if (!PyUnicode_Check(name)) { PyErr_SetString(PyExc_TypeError, "name must be str"); return NULL; }
    uint32_t sid = intern_text(r, name);
    if (!sid) return NULL;
    char *p = reserve(r, 4);
    if (!p) { if (PyErr_Occurred()) return NULL; Py_RETURN_NONE; }
    PUT(p, 0, sid);
    publish(r, K_THREAD_NAME, 0, 4);
    Py_RETURN_NONE;
}

static PyObject *Recorder_span_begin(Recorder *r, PyObject *const *a, Py_ssize_t n) {
    unsigned long long sid, parent; unsigned int name; long long t0;
    if (n != 4) { PyErr_SetString(PyExc_TypeError, "span_begin(span_id, parent_id, name_id, t0)"); return NULL; }
    sid = PyLong_AsUnsignedLongLong(a[0]); parent = PyLong_AsUnsignedLongLong(a[1]);
    name = (unsigned int)PyLong_AsUnsignedLong(a[2]); t0 = PyLong_AsLongLong(a[3]);
    if (PyErr_Occurred()) return NULL;
    if (w_span_begin(r, sid, parent, name, t0) != 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Recorder_span_end(Recorder *r, PyObject *const *a, Py_ssize_t n) {
    if (n != 2) { PyErr_SetString(PyExc_TypeError, "span_end(span_id, t1)"); return NULL; }
    unsigned long long sid = PyLong_AsUnsignedLongLong(a[0]);
    long long t1 = PyLong_AsLongLong(a[1]);
    if (PyErr_Occurred()) return NULL;
    if (w_span_end(r, sid, t1) != 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Recorder_attr_int(Recorder *r, PyObject *const *a, Py_ssize_t n) {
    if (n != 3) { PyErr_SetString(PyExc_TypeError, "attr_int(span_id, key_id, value)"); return NULL; }
    uint64_t sid = PyLong_AsUnsignedLongLong(a[0]);
    uint32_t key = (uint32_t)PyLong_AsUnsignedLong(a[1]);
    int64_t v = PyLong_AsLongLong(a[2]);
    if (PyErr_Occurred()) return NULL;
    if (w_attr8(r, K_ATTR_INT, sid, key, &v) != 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Recorder_attr_float(Recorder *r, PyObject *const *a, Py_ssize_t n) {
    if (n != 3) { PyErr_SetString(PyExc_TypeError, "attr_float(span_id, key_id, value)"); return NULL; }
    uint64_t sid = PyLong_AsUnsignedLongLong(a[0]);
    uint32_t key = (uint32_t)PyLong_AsUnsignedLong(a[1]);
    double v = PyFloat_AsDouble(a[2]);
    if (PyErr_Occurred()) return NULL;
    if (w_attr8(r, K_ATTR_FLOAT, sid, key, &v) != 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Recorder_attr_str(Recorder *r, PyObject *const *a, Py_ssize_t n) {
    if (n != 3) { PyErr_SetString(PyExc_TypeError, "attr_str(span_id, key_id, value)"); return NULL; }
    uint64_t sid = PyLong_AsUnsignedLongLong(a[0]);
    uint32_t key = (uint32_t)PyLong_AsUnsignedLong(a[1]);
    if (PyErr_Occurred()) return NULL;
    if (w_attr_str(r, sid, key, a[2]) != 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Recorder_attr_ints(Recorder *r, PyObject *const *a, Py_ssize_t n) {
    if (n != 3) { PyErr_SetString(PyExc_TypeError, "attr_ints(span_id, key_id, values)"); return NULL; }
    uint64_t sid = PyLong_AsUnsignedLongLong(a[0]);
    uint32_t key = (uint32_t)PyLong_AsUnsignedLong(a[1]);
    if (PyErr_Occurred()) return NULL;
    if (w_attr_ints(r, sid, key, a[2]) != 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Recorder_sync(Recorder *r, PyObject *const *a, Py_ssize_t n) {
    if (n != 6) { PyErr_SetString(PyExc_TypeError, "sync(span_id, obj_id, op, seq, t, keyed)"); return NULL; }
    uint64_t sid = PyLong_AsUnsignedLongLong(a[0]);
    uint32_t obj = (uint32_t)PyLong_AsUnsignedLong(a[1]);
    uint32_t op = (uint32_t)PyLong_AsUnsignedLong(a[2]);
    int64_t seq = PyLong_AsLongLong(a[3]);
    int64_t t = PyLong_AsLongLong(a[4]);
    int keyed = PyObject_IsTrue(a[5]);
    if (PyErr_Occurred()) return NULL;
    if (w_sync(r, sid, obj, op, seq, t, keyed) != 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Recorder_context(Recorder *r, PyObject *const *a, Py_ssize_t n) {
    if (n != 4) { PyErr_SetString(PyExc_TypeError, "context(span_id, trace_id, remote_span, link)"); return NULL; }
    uint64_t sid = PyLong_AsUnsignedLongLong(a[0]);
    uint64_t remote = PyLong_AsUnsignedLongLong(a[2]);
    int link = PyObject_IsTrue(a[3]);
    if (PyErr_Occurred()) return NULL;
    if (!PyBytes_Check(a[1]) || PyBytes_GET_SIZE(a[1]) != 16) {
        PyErr_SetString(PyExc_ValueError, "trace_id must be 16 bytes");
        return NULL;
    }
    char *p = reserve(r, 32);
    if (!p) { if (PyErr_Occurred()) return NULL; Py_RETURN_NONE; }
    PUT(p, 0, sid);
    memcpy(p + 8, PyBytes_AS_STRING(a[1]), 16);
    PUT(p, 24, remote);
    publish(r, K_CONTEXT, link ? 1 : 0, 32);
    Py_RETURN_NONE;
}

static PyObject *Recorder_close(Recorder *r, PyObject *unused) {
    if (!r->buf) Py_RETURN_NONE;
    size_t used = r->base + r->off;
    unmap_all(r);
    int rc = ftruncate(r->fd, (off_t)used);
    close(r->fd);
    if (rc != 0) return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

/* ---- the handle methods: what Probe binds directly when no other sink is on ---- */

static uint64_t begin_span(Recorder *r, PyObject *name, uint64_t parent) {
    uint32_t nid = handle_id(r, name);
    if (!nid) return 0;
    uint64_t sid = r->next_id++;
    if (w_span_begin(r, sid, parent, nid, mono_ns()) != 0) return 0;
    return sid;
}

static PyObject *Recorder_begin(Recorder *r, PyObject *const *a, Py_ssize_t n) {
    if (n < 1 || n > 2) { PyErr_SetString(PyExc_TypeError, "begin(name, parent=0)"); return NULL; }
    uint64_t parent = n == 2 ? PyLong_AsUnsignedLongLong(a[1]) : 0;
    if (PyErr_Occurred()) return NULL;
    uint64_t sid = begin_span(r, a[0], parent);
    return sid ? PyLong_FromUnsignedLongLong(sid) : NULL;
}

static PyObject *Recorder_end(Recorder *r, PyObject *sid_obj) {
    uint64_t sid = PyLong_AsUnsignedLongLong(sid_obj);
    if (PyErr_Occurred()) return NULL;
    if (w_span_end(r, sid, mono_ns()) != 0) return NULL;
    Py_RETURN_NONE;
}

static int span_key(Recorder *r, PyObject *const *a, Py_ssize_t n, const char *sig,
                    uint64_t *sid, uint32_t *key) {
    if (n != 3) { PyErr_SetString(PyExc_TypeError, sig); return -1; }
    *sid = PyLong_AsUnsignedLongLong(a[0]);
    if (PyErr_Occurred()) return -1;
    *key = handle_id(r, a[1]);
    return *key ? 0 : -1;
}

static PyObject *Recorder_set_int(Recorder *r, PyObject *const *a, Py_ssize_t n) {
    uint64_t sid; uint32_t key;
    if (span_key(r, a, n, "set_int(span_id, key, value)", &sid, &key) != 0) return NULL;
    int64_t v = PyLong_AsLongLong(a[2]);
    if (PyErr_Occurred()) return NULL;
    if (w_attr8(r, K_ATTR_INT, sid, key, &v) != 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Recorder_set_float(Recorder *r, PyObject *const *a, Py_ssize_t n) {
    uint64_t sid; uint32_t key;
    if (span_key(r, a, n, "set_float(span_id, key, value)", &sid, &key) != 0) return NULL;
    double v = PyFloat_AsDouble(a[2]);
    if (PyErr_Occurred()) return NULL;
    if (w_attr8(r, K_ATTR_FLOAT, sid, key, &v) != 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Recorder_set_str(Recorder *r, PyObject *const *a, Py_ssize_t n) {
    uint64_t sid; uint32_t key;
    if (span_key(r, a, n, "set_str(span_id, key, value)", &sid, &key) != 0) return NULL;
    if (w_attr_str(r, sid, key, a[2]) != 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Recorder_set_ints(Recorder *r, PyObject *const *a, Py_ssize_t n) {
    uint64_t sid; uint32_t key;
    if (span_key(r, a, n, "set_ints(span_id, key, values)", &sid, &key) != 0) return NULL;
    if (w_attr_ints(r, sid, key, a[2]) != 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *sync_op(Recorder *r, PyObject *const *a, Py_ssize_t n, uint32_t op) {
    if (n < 1 || n > 3) { PyErr_SetString(PyExc_TypeError, "release/acquire(obj, seq=None, sid=0)"); return NULL; }
    int keyed = n >= 2 && a[1] != Py_None;
    int64_t seq = keyed ? PyLong_AsLongLong(a[1]) : NO_SEQ;
    uint64_t sid = n == 3 ? PyLong_AsUnsignedLongLong(a[2]) : 0;
    if (PyErr_Occurred()) return NULL;
    uint32_t obj = handle_id(r, a[0]);
    if (!obj) return NULL;
    if (w_sync(r, sid, obj, op, seq, mono_ns(), keyed) != 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Recorder_release(Recorder *r, PyObject *const *a, Py_ssize_t n) {
    return sync_op(r, a, n, OP_RELEASE);
}

static PyObject *Recorder_acquire(Recorder *r, PyObject *const *a, Py_ssize_t n) {
    return sync_op(r, a, n, OP_ACQUIRE);
}

/* ---- span(name, parent=0): a context manager yielding the span id ---- */

typedef struct {
    PyObject_HEAD
    Recorder *rec;
    PyObject *name;
    uint64_t parent;
    uint64_t sid;
} SpanCtx;

static PyTypeObject SpanCtxType;

static PyObject *Recorder_span(Recorder *r, PyObject *const *a, Py_ssize_t n) {
    if (n < 1 || n > 2) { PyErr_SetString(PyExc_TypeError, "span(name, parent=0)"); return NULL; }
    uint64_t parent = n == 2 ? PyLong_AsUnsignedLongLong(a[1]) : 0;
    if (PyErr_Occurred()) return NULL;
    SpanCtx *s = PyObject_New(SpanCtx, &SpanCtxType);
    if (!s) return NULL;
    Py_INCREF(r);
    s->rec = r;
    Py_INCREF(a[0]);
    s->name = a[0];
    s->parent = parent;
    s->sid = 0;
    return (PyObject *)s;
}

static void SpanCtx_dealloc(SpanCtx *s) {
    Py_DECREF(s->rec);
    Py_DECREF(s->name);
    PyObject_Free(s);
}

static PyObject *SpanCtx_enter(SpanCtx *s, PyObject *unused) {
    s->sid = begin_span(s->rec, s->name, s->parent);
    return s->sid ? PyLong_FromUnsignedLongLong(s->sid) : NULL;
}

static PyObject *SpanCtx_exit(SpanCtx *s, PyObject *const *a, Py_ssize_t n) {
    if (w_span_end(s->rec, s->sid, mono_ns()) != 0) return NULL;
    Py_RETURN_FALSE;
}

static PyMethodDef SpanCtx_methods[] = {
    {"__enter__", (PyCFunction)SpanCtx_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))SpanCtx_exit, METH_FASTCALL, NULL},
    {NULL},
};

static PyTypeObject SpanCtxType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fdprof.probe.sdk._recorder.SpanContext",
    .tp_basicsize = sizeof(SpanCtx),
    .tp_dealloc = (destructor)SpanCtx_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Context manager for one span; __enter__ returns its id.",
    .tp_methods = SpanCtx_methods,
};

static PyObject *Recorder_get_records(Recorder *r, void *unused) {
    return PyLong_FromUnsignedLongLong(r->records);
}

static PyObject *Recorder_get_path(Recorder *r, void *unused) {
    Py_INCREF(r->path);
    return r->path;
}

#define FAST(name) {#name, (PyCFunction)(void (*)(void))Recorder_##name, METH_FASTCALL, NULL}

static PyMethodDef Recorder_methods[] = {
    {"intern", (PyCFunction)Recorder_intern, METH_O, "Id of text; writes its STRING record once."},
    {"name_thread", (PyCFunction)Recorder_name_thread, METH_O, NULL},
    FAST(span_begin), FAST(span_end), FAST(attr_int), FAST(attr_float), FAST(attr_str),
    FAST(attr_ints), FAST(sync), FAST(context),
    {"close", (PyCFunction)Recorder_close, METH_NOARGS, "Unmap and trim the file."},
    FAST(begin),
    {"end", (PyCFunction)Recorder_end, METH_O, NULL},
    FAST(set_int), FAST(set_float), FAST(set_str), FAST(set_ints), FAST(release),
    FAST(acquire), FAST(span),
    {NULL},
};

static PyGetSetDef Recorder_getset[] = {
    {"records", (getter)Recorder_get_records, NULL, "records written", NULL},
    {"path", (getter)Recorder_get_path, NULL, "the record file", NULL},
    {NULL},
};

static PyTypeObject RecorderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fdprof.probe.sdk._recorder.Recorder",
    .tp_basicsize = sizeof(Recorder),
    .tp_dealloc = (destructor)Recorder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Appends records for one process (C twin of fdprof.probe.sdk.recorder.Recorder).",
    .tp_methods = Recorder_methods,
    .tp_getset = Recorder_getset,
    .tp_init = (initproc)Recorder_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "fdprof.probe.sdk._recorder",
    "The native recorder in C (twin of fdprof.probe.sdk.recorder).", -1, NULL,
};

PyMODINIT_FUNC PyInit__recorder(void) {
    if (PyType_Ready(&RecorderType) < 0 || PyType_Ready(&SpanCtxType) < 0) return NULL;
    pthread_atfork(NULL, NULL, after_fork_child);
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&RecorderType);
    if (PyModule_AddObject(m, "Recorder", (PyObject *)&RecorderType) < 0) return NULL;
    return m;
}

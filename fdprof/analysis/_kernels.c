/* The detector's inner loops in C: the vector-clock worklist and the search for unordered
 * conflicting accesses.
 *
 * Why C: both are serial walks with one small step per event (a clock join, a window bound,
 * a comparison) over 10^6-10^7 events; in Python each step costs microseconds, here
 * nanoseconds. The rules are those of fdprof/analysis/kernels.py, whose Python twins are the
 * reference (the tests run the oracles against both). Arrays come in through the buffer
 * protocol (numpy arrays, C-contiguous, the dtypes kernels.py hands over), so nothing here
 * needs numpy's headers; results go back as bytes of int64.
 *
 * The worklist is written once (run) and parameterised by a step: happens-before (hb_step)
 * and weak causal precedence (wcp_step, with the paper's rule (b) queues) each say what an
 * event does to its lane's clock.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- buffers ------------------------------------------------------------------------- */

typedef struct {
    Py_buffer view[32];
    int used;
} Views;

static void release_views(Views *v) {
    for (int i = 0; i < v->used; i++) PyBuffer_Release(&v->view[i]);
    v->used = 0;
}

/* The data of a buffer argument of at least `count` items of `itemsize` bytes. */
static void *get(Views *v, PyObject *obj, int writable, Py_ssize_t count, Py_ssize_t itemsize,
                 const char *what) {
    if (v->used >= 32) {
        PyErr_SetString(PyExc_RuntimeError, "_kernels: too many buffers");
        return NULL;
    }
    Py_buffer *b = &v->view[v->used];
    if (PyObject_GetBuffer(obj, b, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    v->used++;
    if (b->itemsize != itemsize || b->len < count * itemsize) {
        PyErr_Format(PyExc_ValueError, "_kernels: %s holds %zd bytes of %zd-byte items, "
                     "needs %zd of %zd", what, b->len, b->itemsize, count * itemsize, itemsize);
        return NULL;
    }
    return b->buf;
}

/* Whether off[0..k] starts at 0 and never decreases. */
static int offsets_ok(const int64_t *off, Py_ssize_t k) {
    if (off[0] != 0) return 0;
    for (Py_ssize_t i = 0; i < k; i++)
        if (off[i + 1] < off[i]) return 0;
    return 1;
}

typedef struct {
    int64_t *data;
    Py_ssize_t size, cap;
} Vec;

static int push(Vec *v, int64_t x) {
    if (v->size == v->cap) {
        Py_ssize_t cap = v->cap ? 2 * v->cap : 1024;
        int64_t *data = realloc(v->data, cap * sizeof(int64_t));
        if (!data) return -1;
        v->data = data;
        v->cap = cap;
    }
    v->data[v->size++] = x;
    return 0;
}

static PyObject *vec_bytes(Vec *v) {
    PyObject *out = PyBytes_FromStringAndSize((const char *)v->data, v->size * sizeof(int64_t));
    free(v->data);
    v->data = NULL;
    v->size = v->cap = 0;
    return out;
}

static inline void join(int64_t *clock, const int64_t *other, Py_ssize_t k) {
    for (Py_ssize_t j = 0; j < k; j++)
        if (other[j] > clock[j]) clock[j] = other[j];
}

/* ---- the worklist -------------------------------------------------------------------- */

/* Lane l's items are items[offsets[l]:offsets[l+1]] in program order; wait[item] is the item
 * whose output it needs first (-1: none). out[item] (k entries) is the lane's clock after the
 * item. pos (per lane) and clock (k x k, a row per lane) are the state a run resumes from. */
typedef struct {
    Py_ssize_t k, n;
    const int64_t *items, *offsets, *wait;
    int64_t *out, *pos, *clock;
    uint8_t *done;
} Worklist;

typedef void (*Step)(void *ctx, const Worklist *w, int64_t item, int64_t lane, int64_t *clock);

/* Runs every lane as far as it can, a lane waiting on an item parked until that item is
 * done; returns how many items are left (0 unless the waits form a cycle), -1 on no memory. */
static Py_ssize_t run(Worklist *w, Step step, void *ctx) {
    Py_ssize_t k = w->k, left = 0;
    int64_t *head = malloc((w->n > 0 ? w->n : 1) * sizeof(int64_t));
    int64_t *next = malloc((k > 0 ? k : 1) * sizeof(int64_t));
    int64_t *queue = malloc((k > 0 ? k : 1) * sizeof(int64_t));
    if (!head || !next || !queue) {
        free(head), free(next), free(queue);
        return -1;
    }
    for (Py_ssize_t i = 0; i < w->n; i++) head[i] = -1;
    Py_ssize_t qhead = 0, qsize = 0;
    for (Py_ssize_t l = 0; l < k; l++) {
        Py_ssize_t todo = w->offsets[l + 1] - w->offsets[l] - w->pos[l];
        left += todo;
        if (todo > 0) queue[(qhead + qsize++) % k] = l;
    }
    while (qsize) {
        int64_t lane = queue[qhead];
        qhead = (qhead + 1) % k, qsize--;
        int64_t *clock = w->clock + lane * k;
        const int64_t *mine = w->items + w->offsets[lane];
        Py_ssize_t p = w->pos[lane], count = w->offsets[lane + 1] - w->offsets[lane];
        while (p < count) {
            int64_t item = mine[p], wt = w->wait[item];
            if (wt >= 0 && !w->done[wt]) {
                next[lane] = head[wt];
                head[wt] = lane;
                break;
            }
            step(ctx, w, item, lane, clock);
            memcpy(w->out + item * k, clock, k * sizeof(int64_t));
            w->done[item] = 1;
            left--, p++;
            for (int64_t l = head[item], nl; l >= 0; l = nl) {
                nl = next[l];
                queue[(qhead + qsize++) % k] = l;
            }
            head[item] = -1;
        }
        w->pos[lane] = p;
    }
    free(head), free(next), free(queue);
    return left;
}

/* Parses the worklist arguments shared by both steps. */
static int worklist_args(Views *v, Worklist *w, Py_ssize_t k, Py_ssize_t n, PyObject *items,
                         PyObject *offsets, PyObject *wait, PyObject *out, PyObject *done,
                         PyObject *pos, PyObject *clock) {
    w->k = k, w->n = n;
    if (!(w->offsets = get(v, offsets, 0, k + 1, 8, "offsets"))) return -1;
    if (!offsets_ok(w->offsets, k)) {
        PyErr_SetString(PyExc_ValueError, "_kernels: offsets out of order");
        return -1;
    }
    if (!(w->items = get(v, items, 0, w->offsets[k], 8, "items"))) return -1;
    if (!(w->wait = get(v, wait, 0, n, 8, "wait"))) return -1;
    if (!(w->out = get(v, out, 1, n * k, 8, "out"))) return -1;
    if (!(w->done = get(v, done, 1, n, 1, "done"))) return -1;
    if (!(w->pos = get(v, pos, 1, k, 8, "pos"))) return -1;
    if (!(w->clock = get(v, clock, 1, k * k, 8, "clock"))) return -1;
    for (Py_ssize_t i = 0; i < w->offsets[k]; i++)
        if (w->items[i] < 0 || w->items[i] >= n) {
            PyErr_SetString(PyExc_ValueError, "_kernels: an item out of range");
            return -1;
        }
    for (Py_ssize_t i = 0; i < n; i++)
        if (w->wait[i] >= n) {
            PyErr_SetString(PyExc_ValueError, "_kernels: a wait out of range");
            return -1;
        }
    return 0;
}

static PyObject *finish_run(Views *v, Worklist *w, Step step, void *ctx) {
    Py_ssize_t left;
    Py_BEGIN_ALLOW_THREADS
    left = run(w, step, ctx);
    Py_END_ALLOW_THREADS
    release_views(v);
    if (left < 0) return PyErr_NoMemory();
    return PyLong_FromSsize_t(left);
}

/* happens-before: a release counts on its lane's own entry; an acquire joins its release's
 * clock (the item it waits on). */
static void hb_step(void *ctx, const Worklist *w, int64_t item, int64_t lane, int64_t *clock) {
    const uint8_t *release = ctx;
    if (release[item]) clock[lane]++;
    else if (w->wait[item] >= 0) join(clock, w->out + w->wait[item] * w->k, w->k);
}

/* hb_worklist(k, items, offsets, wait, release, out, done, pos, clock) -> items left */
static PyObject *hb_worklist(PyObject *self, PyObject *args) {
    Py_ssize_t k, n;
    PyObject *items, *offsets, *wait, *release, *out, *done, *pos, *clock;
    if (!PyArg_ParseTuple(args, "nnOOOOOOOO", &k, &n, &items, &offsets, &wait, &release, &out,
                          &done, &pos, &clock))
        return NULL;
    Views v = {.used = 0};
    Worklist w;
    const uint8_t *rel;
    if (worklist_args(&v, &w, k, n, items, offsets, wait, out, done, pos, clock) < 0 ||
        !(rel = get(&v, release, 0, n, 1, "release"))) {
        release_views(&v);
        return NULL;
    }
    return finish_run(&v, &w, hb_step, (void *)rel);
}

/* WCP: items 0..n_sync-1 are sync rows, the rest rule-(a) landings (a clock joined at a span
 * start). A lock acquire joins the WCP clock of its release (the item it waits on), a hard
 * acquire the happens-before clock of its release; a release that ends a hold applies rule
 * (b) over its lock's queue of holds. */
typedef struct {
    Py_ssize_t n_sync;
    const int64_t *landing, *src, *h_rows, *end_lock, *end_order;
    const uint8_t *release, *lock_edge;
    const int64_t *q_off, *q_lane, *q_epoch, *q_rel, *q_skip;
    int64_t *prefix;
    uint8_t *q_done;
} Wcp;

/* Rule (b) at the release ending hold `order` of `lock` on `lane`: every earlier hold whose
 * acquire is WCP-before it (clock[its lane] >= its epoch) has its release joined, until none
 * is left; prefix[lock, lane] is the first hold not yet joined on this lane, q_done the ones
 * joined beyond it. A hold whose acquire is not reached jumps to q_skip: the acquires up to
 * there are not reached either. */
static void rule_b(const Wcp *c, Py_ssize_t k, int64_t *clock, int64_t lock, int64_t order,
                   int64_t lane) {
    int64_t base = c->q_off[lock], *prefix = c->prefix + lock * k + lane;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int64_t j = *prefix; j < order;) {
            int64_t h = base + j;
            if (c->q_done[h * k + lane]) {
                j++;
            } else if (clock[c->q_lane[h]] >= c->q_epoch[h]) {
                join(clock, c->q_rel + h * k, k);
                c->q_done[h * k + lane] = 1;
                changed = 1;
                j++;
            } else {
                j = c->q_skip[h];
            }
        }
    }
    while (*prefix < order && c->q_done[(base + *prefix) * k + lane]) (*prefix)++;
}

static void wcp_step(void *ctx, const Worklist *w, int64_t item, int64_t lane, int64_t *clock) {
    const Wcp *c = ctx;
    Py_ssize_t k = w->k;
    if (item >= c->n_sync) {
        join(clock, c->landing + (item - c->n_sync) * k, k);
        return;
    }
    int64_t s = c->src[item];
    if (c->lock_edge[item]) join(clock, w->out + s * k, k);
    else if (s >= 0 && !c->release[item]) join(clock, c->h_rows + s * k, k);
    if (c->end_lock[item] >= 0) rule_b(c, k, clock, c->end_lock[item], c->end_order[item], lane);
}

/* wcp_worklist(k, n, n_sync, items, offsets, wait, out, done, pos, clock, landing, src,
 *              release, lock_edge, h_rows, end_lock, end_order, q_off, q_lane, q_epoch, q_rel,
 *              q_skip, prefix, q_done, n_locks, n_holds) -> items left */
static PyObject *wcp_worklist(PyObject *self, PyObject *args) {
    Py_ssize_t k, n, n_sync, n_locks, n_holds;
    PyObject *items, *offsets, *wait, *out, *done, *pos, *clock, *landing, *src, *release,
        *lock_edge, *h_rows, *end_lock, *end_order, *q_off, *q_lane, *q_epoch, *q_rel, *q_skip,
        *prefix, *q_done;
    if (!PyArg_ParseTuple(args, "nnnOOOOOOOOOOOOOOOOOOOOOnn", &k, &n, &n_sync, &items, &offsets,
                          &wait, &out, &done, &pos, &clock, &landing, &src, &release, &lock_edge,
                          &h_rows, &end_lock, &end_order, &q_off, &q_lane, &q_epoch, &q_rel,
                          &q_skip, &prefix, &q_done, &n_locks, &n_holds))
        return NULL;
    Views v = {.used = 0};
    Worklist w;
    Wcp c = {.n_sync = n_sync};
    if (worklist_args(&v, &w, k, n, items, offsets, wait, out, done, pos, clock) < 0 ||
        !(c.landing = get(&v, landing, 0, (n - n_sync) * k, 8, "landing")) ||
        !(c.src = get(&v, src, 0, n_sync, 8, "src")) ||
        !(c.release = get(&v, release, 0, n_sync, 1, "release")) ||
        !(c.lock_edge = get(&v, lock_edge, 0, n_sync, 1, "lock_edge")) ||
        !(c.h_rows = get(&v, h_rows, 0, n_sync * k, 8, "h_rows")) ||
        !(c.end_lock = get(&v, end_lock, 0, n_sync, 8, "end_lock")) ||
        !(c.end_order = get(&v, end_order, 0, n_sync, 8, "end_order")) ||
        !(c.q_off = get(&v, q_off, 0, n_locks + 1, 8, "q_off")) ||
        !(c.q_lane = get(&v, q_lane, 0, n_holds, 8, "q_lane")) ||
        !(c.q_epoch = get(&v, q_epoch, 0, n_holds, 8, "q_epoch")) ||
        !(c.q_rel = get(&v, q_rel, 0, n_holds * k, 8, "q_rel")) ||
        !(c.q_skip = get(&v, q_skip, 0, n_holds, 8, "q_skip")) ||
        !(c.prefix = get(&v, prefix, 1, n_locks * k, 8, "prefix")) ||
        !(c.q_done = get(&v, q_done, 1, n_holds * k, 1, "q_done"))) {
        release_views(&v);
        return NULL;
    }
    int ok = n_sync <= n && offsets_ok(c.q_off, n_locks) && c.q_off[n_locks] <= n_holds;
    for (Py_ssize_t e = 0; ok && e < n_sync; e++) {
        int64_t s = c.src[e], lock = c.end_lock[e];
        ok = s < n_sync && (!c.lock_edge[e] || (s >= 0 && w.wait[e] == s)) && lock < n_locks &&
             (lock < 0 || (c.end_order[e] >= 0 &&
                           c.end_order[e] <= c.q_off[lock + 1] - c.q_off[lock]));
    }
    for (Py_ssize_t h = 0; ok && h < n_holds; h++) ok = c.q_lane[h] >= 0 && c.q_lane[h] < k;
    for (Py_ssize_t j = 0; ok && j < n_locks; j++)
        for (int64_t h = c.q_off[j]; ok && h < c.q_off[j + 1]; h++)
            ok = c.q_skip[h] > h - c.q_off[j] && c.q_skip[h] <= c.q_off[j + 1] - c.q_off[j];
    if (!ok) {
        release_views(&v);
        PyErr_SetString(PyExc_ValueError, "_kernels: WCP inputs out of range");
        return NULL;
    }
    return finish_run(&v, &w, wcp_step, &c);
}

/* ---- the race search ----------------------------------------------------------------- */

/* First index in [lo, hi) with a[i] >= x (a sorted); without branches on the data (a
 * conditional move per step), as the searches here are too random to predict. */
static inline Py_ssize_t lower(const int64_t *a, Py_ssize_t lo, Py_ssize_t hi, int64_t x) {
    if (lo >= hi) return lo;
    const int64_t *p = a + lo;
    for (size_t n = hi - lo; n > 1;) {
        size_t half = n >> 1;
        p = p[half] < x ? p + half : p;
        n -= half;
    }
    return (p - a) + (*p < x);
}

/* First index in [lo, hi) with a[i] > x (a sorted). */
static inline Py_ssize_t upper(const int64_t *a, Py_ssize_t lo, Py_ssize_t hi, int64_t x) {
    if (lo >= hi) return lo;
    const int64_t *p = a + lo;
    for (size_t n = hi - lo; n > 1;) {
        size_t half = n >> 1;
        p = p[half] <= x ? p + half : p;
        n -= half;
    }
    return (p - a) + (*p <= x);
}

/* One group's accesses of one lane, in start order: rows, starts, ends and the running
 * maximum of ends, as positions [lo, hi) of the group's scratch arrays. */
typedef struct {
    int64_t lane;
    Py_ssize_t lo, hi, wlo, whi; /* all accesses; writes only */
} Run;

typedef struct {
    Py_ssize_t k;
    const int64_t *key, *lane, *start, *end, *lo, *hi;
    int64_t *at, *epoch; /* per row: its place among its lane's events, 1 + its releases */
    const uint8_t *write;
    const int64_t *ev_off, *times, *rel_off, *rel, *tb, *ta_off, *ta;
    int alarms;
    Vec rx, ry, ax, ay;
} Search;

/* Pairs (x, y) of one group: x on lane a, y on a later lane b with an access in the group,
 * conflicting (one writes) with layers that meet: racy when y starts before tA (x does not
 * happen before y) and ends after tB (y does not happen before x); with alarms, the ordered
 * ones that overlap x in time. */
static int search_group(Search *s, const int64_t *rows, Py_ssize_t m, Run *runs, Py_ssize_t nruns,
                        int64_t *srow, int64_t *sstart, int64_t *send, int64_t *smax) {
    Py_ssize_t k = s->k;
    for (Py_ssize_t r = 0; r < nruns; r++) {
        Run *run = &runs[r];
        int64_t top = INT64_MIN;
        for (Py_ssize_t i = run->lo; i < run->hi; i++) {
            int64_t row = rows[i];
            srow[i] = row, sstart[i] = s->start[row], send[i] = s->end[row];
            top = send[i] > top ? send[i] : top;
            smax[i] = top;
        }
        /* writes of the run, stored after the group's m rows */
        Py_ssize_t w = m + run->lo;
        run->wlo = w;
        top = INT64_MIN;
        for (Py_ssize_t i = run->lo; i < run->hi; i++) {
            int64_t row = rows[i];
            if (!s->write[row]) continue;
            srow[w] = row, sstart[w] = s->start[row], send[w] = s->end[row];
            top = send[w] > top ? send[w] : top;
            smax[w++] = top;
        }
        run->whi = w;
    }
    for (Py_ssize_t r = 0; r < nruns; r++) {
        int64_t a = runs[r].lane;
        Py_ssize_t ev0 = s->ev_off[a];
        for (Py_ssize_t i = runs[r].lo; i < runs[r].hi; i++) {
            int64_t x = rows[i], xs = s->start[x], xe = s->end[x];
            int64_t at = s->at[x];
            const int64_t *ta = s->ta + (s->ta_off[a] + s->epoch[x]) * k;
            const int64_t *tb = at >= 0 ? s->tb + (ev0 + at) * k : NULL;
            int xw = s->write[x];
            for (Py_ssize_t q = r + 1; q < nruns; q++) {
                int64_t b = runs[q].lane;
                Py_ssize_t lo = xw ? runs[q].lo : runs[q].wlo, hi = xw ? runs[q].hi : runs[q].whi;
                if (lo == hi) continue;
                /* y happens before x iff y ends at or before tB, the time of the last release
                 * of lane b x's entry clock knows (INT64_MIN: none); x before y iff y starts
                 * at or after tA, the time of lane b's first event that knows x's epoch
                 * (INT64_MAX: none): read, not looked up, as no access is at those times */
                int64_t tB = tb ? tb[b] : INT64_MIN, tA = ta[b];
                Py_ssize_t from = upper(smax, lo, hi, tB), to = lower(sstart, lo, hi, tA);
                for (Py_ssize_t j = from; j < to; j++) {
                    int64_t y = srow[j];
                    if (send[j] > tB && s->lo[x] < s->hi[y] && s->lo[y] < s->hi[x])
                        if (push(&s->rx, x) < 0 || push(&s->ry, y) < 0) return -1;
                }
                if (!s->alarms) continue;
                from = upper(smax, lo, hi, xs), to = lower(sstart, lo, hi, xe);
                for (Py_ssize_t j = from; j < to; j++) {
                    int64_t y = srow[j];
                    int racy = sstart[j] < tA && send[j] > tB;
                    if (!racy && send[j] > xs && s->lo[x] < s->hi[y] && s->lo[y] < s->hi[x])
                        if (push(&s->ax, x) < 0 || push(&s->ay, y) < 0) return -1;
                }
            }
        }
    }
    return 0;
}

/* Each row's place among its lane's clock events (the last at or before its start, -1 none)
 * and its epoch (1 + its lane's releases before its end), walking the rows in time order: a
 * merge per lane, where a binary search per row missed the cache at every step. */
static void positions(Search *s, const int64_t *by_time, Py_ssize_t n, int64_t *ev_at,
                      int64_t *rel_at) {
    for (Py_ssize_t a = 0; a < s->k; a++) ev_at[a] = s->ev_off[a], rel_at[a] = s->rel_off[a];
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t x = by_time[i], a = s->lane[x], t = s->start[x], e = s->end[x];
        int64_t p = ev_at[a], q;
        while (p < s->ev_off[a + 1] && s->times[p] <= t) p++;
        ev_at[a] = p;
        s->at[x] = p - s->ev_off[a] - 1;
        /* ends are not sorted where spans nest: from the merge's place, either way */
        q = rel_at[a];
        while (q < s->rel_off[a + 1] && s->rel[q] < e) q++;
        while (q > s->rel_off[a] && s->rel[q - 1] >= e) q--;
        rel_at[a] = q;
        s->epoch[x] = q - s->rel_off[a] + 1;
    }
}

static int search_all(Search *s, const int64_t *perm, Py_ssize_t n) {
    Py_ssize_t biggest = 0;
    for (Py_ssize_t g = 0, h; g < n; g = h) {
        for (h = g + 1; h < n && s->key[perm[h]] == s->key[perm[g]]; h++) {}
        if (h - g > biggest) biggest = h - g;
    }
    Py_ssize_t cap = 2 * biggest + 1;
    int64_t *srow = malloc(cap * sizeof(int64_t)), *sstart = malloc(cap * sizeof(int64_t));
    int64_t *send = malloc(cap * sizeof(int64_t)), *smax = malloc(cap * sizeof(int64_t));
    Run *runs = malloc((biggest + 1) * sizeof(Run));
    int rc = 0;
    if (!srow || !sstart || !send || !smax || !runs) rc = -1;
    for (Py_ssize_t g = 0, h; rc == 0 && g < n; g = h) {
        for (h = g + 1; h < n && s->key[perm[h]] == s->key[perm[g]]; h++) {}
        Py_ssize_t nruns = 0;
        for (Py_ssize_t i = g, j; i < h; i = j) {
            for (j = i + 1; j < h && s->lane[perm[j]] == s->lane[perm[i]]; j++) {}
            runs[nruns++] = (Run){.lane = s->lane[perm[i]], .lo = i - g, .hi = j - g};
        }
        if (nruns > 1) rc = search_group(s, perm + g, h - g, runs, nruns, srow, sstart, send, smax);
    }
    free(srow), free(sstart), free(send), free(smax), free(runs);
    return rc;
}

/* unordered(k, n, perm, by_time, key, lane, start, end, write, lo, hi, ev_off, times, rel_off,
 *           rel, tb, ta_off, ta, alarms) -> (racy x, racy y, alarm x, alarm y) as bytes of
 * int64. perm: the access rows to search, sorted by (key, lane, start), by_time the same rows
 * sorted by start; no access may start at
 * INT64_MAX or end at INT64_MIN (they stand for none below). Lane a's clock events are
 * times[ev_off[a]:ev_off[a+1]], its releases rel[rel_off[a]:rel_off[a+1]].
 * tb[e * k + b]: the time of the last release of lane b that event e's clock knows
 * (INT64_MIN: none); ta[(ta_off[a] + e) * k + b]: the time of lane b's first event whose clock
 * has entry a >= e (INT64_MAX: none). */
static PyObject *unordered(PyObject *self, PyObject *args) {
    Py_ssize_t k, n, rows = 0;
    int alarms;
    PyObject *perm_o, *time_o, *key, *lane, *start, *end, *write, *lo, *hi, *ev_off, *times,
        *rel_off, *rel, *tb, *ta_off, *ta;
    if (!PyArg_ParseTuple(args, "nnOOOOOOOOOOOOOOOOp", &k, &n, &perm_o, &time_o, &key, &lane,
                          &start, &end, &write, &lo, &hi, &ev_off, &times, &rel_off, &rel, &tb,
                          &ta_off, &ta, &alarms))
        return NULL;
    Views v = {.used = 0};
    Search s = {.k = k, .alarms = alarms};
    const int64_t *perm = get(&v, perm_o, 0, n, 8, "perm");
    const int64_t *by_time = perm ? get(&v, time_o, 0, n, 8, "by_time") : NULL;
    int64_t *ev_at = NULL, *rel_at = NULL;
    if (!by_time) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) rows = perm[i] >= rows ? perm[i] + 1 : rows;
    if (!(s.key = get(&v, key, 0, rows, 8, "key")) || !(s.lane = get(&v, lane, 0, rows, 8, "lane")) ||
        !(s.start = get(&v, start, 0, rows, 8, "start")) ||
        !(s.end = get(&v, end, 0, rows, 8, "end")) ||
        !(s.write = get(&v, write, 0, rows, 1, "write")) ||
        !(s.lo = get(&v, lo, 0, rows, 8, "lo")) || !(s.hi = get(&v, hi, 0, rows, 8, "hi")) ||
        !(s.ev_off = get(&v, ev_off, 0, k + 1, 8, "ev_off")) ||
        !(s.times = get(&v, times, 0, s.ev_off[k], 8, "times")) ||
        !(s.tb = get(&v, tb, 0, s.ev_off[k] * k, 8, "tb")) ||
        !(s.rel_off = get(&v, rel_off, 0, k + 1, 8, "rel_off")) ||
        !(s.rel = get(&v, rel, 0, s.rel_off[k], 8, "rel")) ||
        !(s.ta_off = get(&v, ta_off, 0, k + 1, 8, "ta_off")) ||
        !(s.ta = get(&v, ta, 0, s.ta_off[k] * k, 8, "ta")))
        goto fail;
    if (!offsets_ok(s.ev_off, k) || !offsets_ok(s.rel_off, k) || !offsets_ok(s.ta_off, k)) {
        PyErr_SetString(PyExc_ValueError, "_kernels: offsets out of order");
        goto fail;
    }
    for (Py_ssize_t a = 0; a < k; a++)
        if (s.ta_off[a + 1] - s.ta_off[a] != s.rel_off[a + 1] - s.rel_off[a] + 2) {
            PyErr_SetString(PyExc_ValueError, "_kernels: a reach table of the wrong size");
            goto fail;
        }
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t x = perm[i], a = x >= 0 && x < rows ? s.lane[x] : -1;
        if (x < 0 || a < 0 || a >= k) {
            PyErr_SetString(PyExc_ValueError, "_kernels: an access row out of range");
            goto fail;
        }
        if (s.start[x] == INT64_MAX || s.end[x] == INT64_MIN) {
            PyErr_SetString(PyExc_ValueError, "_kernels: an access at the end of time");
            goto fail;
        }
        int64_t y = by_time[i];
        if (y < 0 || y >= rows || s.lane[y] < 0 || s.lane[y] >= k ||
            (i > 0 && s.start[by_time[i - 1]] > s.start[y])) {
            PyErr_SetString(PyExc_ValueError, "_kernels: by_time out of range or order");
            goto fail;
        }
        if (i > 0) {
            int64_t w = perm[i - 1];
            if (s.key[w] > s.key[x] || (s.key[w] == s.key[x] && (s.lane[w] > a ||
                (s.lane[w] == a && s.start[w] > s.start[x])))) {
                PyErr_SetString(PyExc_ValueError,
                                "_kernels: rows not sorted by (key, lane, start)");
                goto fail;
            }
        }
    }
    /* by_time holds the rows of perm: each row once (else some would keep no place) */
    s.at = malloc((rows ? rows : 1) * sizeof(int64_t));
    s.epoch = malloc((rows ? rows : 1) * sizeof(int64_t));
    ev_at = malloc((k ? k : 1) * sizeof(int64_t)), rel_at = malloc((k ? k : 1) * sizeof(int64_t));
    if (!s.at || !s.epoch || !ev_at || !rel_at) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < rows; i++) s.at[i] = INT64_MIN;
    for (Py_ssize_t i = 0; i < n; i++) s.at[by_time[i]] = -2;
    for (Py_ssize_t i = 0; i < n; i++)
        if (s.at[perm[i]] != -2) {
            PyErr_SetString(PyExc_ValueError, "_kernels: by_time does not hold perm's rows");
            goto fail;
        } else {
            s.at[perm[i]] = -3;
        }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    positions(&s, by_time, n, ev_at, rel_at);
    rc = search_all(&s, perm, n);
    Py_END_ALLOW_THREADS
    free(s.at), free(s.epoch), free(ev_at), free(rel_at);
    release_views(&v);
    if (rc < 0) {
        free(s.rx.data), free(s.ry.data), free(s.ax.data), free(s.ay.data);
        return PyErr_NoMemory();
    }
    PyObject *rx = vec_bytes(&s.rx), *ry = vec_bytes(&s.ry), *ax = vec_bytes(&s.ax),
             *ay = vec_bytes(&s.ay);
    if (!rx || !ry || !ax || !ay) {
        Py_XDECREF(rx), Py_XDECREF(ry), Py_XDECREF(ax), Py_XDECREF(ay);
        return NULL;
    }
    return Py_BuildValue("(NNNN)", rx, ry, ax, ay);
fail:
    free(s.at), free(s.epoch), free(ev_at), free(rel_at);
    release_views(&v);
    return NULL;
}

/* ---- WCP rule (a) ---------------------------------------------------------------------- */

/* rule_a(k, m, group, hold, cls, class_lo, class_hi, n_classes, write, rel_row, h_full, n_sync,
 *        span) -> (span rows, clocks) as bytes of int64.
 * The m (hold, access) pairs sorted by group (one lock and one block) and, within it, by the
 * hold's place in its lock's order. For each pair, the join of the release clocks
 * (h_full[rel_row]) of the earlier holds of its group with a conflicting access: a write
 * conflicts with any access whose layer range meets its own, a read with such writes; per
 * layer class, the running join of the earlier holds' releases, all accesses and writes apart.
 * Pairs whose join is not all zero come back, as (the access's span, the join). */
static PyObject *rule_a(PyObject *self, PyObject *args) {
    Py_ssize_t k, m, n_classes, n_sync;
    PyObject *group_o, *hold_o, *cls_o, *clo_o, *chi_o, *write_o, *rel_o, *h_o, *span_o;
    if (!PyArg_ParseTuple(args, "nnOOOOOnOOOnO", &k, &m, &group_o, &hold_o, &cls_o, &clo_o,
                          &chi_o, &n_classes, &write_o, &rel_o, &h_o, &n_sync, &span_o))
        return NULL;
    Views v = {.used = 0};
    const int64_t *group, *hold, *cls, *clo, *chi, *rel, *h, *span;
    const uint8_t *write;
    if (!(group = get(&v, group_o, 0, m, 8, "group")) || !(hold = get(&v, hold_o, 0, m, 8, "hold")) ||
        !(cls = get(&v, cls_o, 0, m, 8, "cls")) ||
        !(clo = get(&v, clo_o, 0, n_classes, 8, "class_lo")) ||
        !(chi = get(&v, chi_o, 0, n_classes, 8, "class_hi")) ||
        !(write = get(&v, write_o, 0, m, 1, "write")) || !(rel = get(&v, rel_o, 0, m, 8, "rel_row")) ||
        !(h = get(&v, h_o, 0, n_sync * k, 8, "h_full")) || !(span = get(&v, span_o, 0, m, 8, "span"))) {
        release_views(&v);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < m; i++)
        if (cls[i] < 0 || cls[i] >= n_classes || rel[i] < 0 || rel[i] >= n_sync ||
            (i > 0 && (group[i] < group[i - 1] || (group[i] == group[i - 1] && hold[i] < hold[i - 1])))) {
            release_views(&v);
            PyErr_SetString(PyExc_ValueError, "_kernels: rule (a) pairs out of range or order");
            return NULL;
        }
    Py_ssize_t width = n_classes * k;
    int64_t *all = calloc(width + 1, sizeof(int64_t)), *wr = calloc(width + 1, sizeof(int64_t));
    int64_t *joined = calloc(k + 1, sizeof(int64_t));
    Vec spans = {0}, clocks = {0};
    int rc = all && wr && joined ? 0 : -1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t g0 = 0, g1; rc == 0 && g0 < m; g0 = g1) {
        for (g1 = g0 + 1; g1 < m && group[g1] == group[g0]; g1++) {}
        memset(all, 0, width * sizeof(int64_t)), memset(wr, 0, width * sizeof(int64_t));
        for (Py_ssize_t s0 = g0, s1; rc == 0 && s0 < g1; s0 = s1) {
            for (s1 = s0 + 1; s1 < g1 && hold[s1] == hold[s0]; s1++) {}
            for (Py_ssize_t i = s0; rc == 0 && i < s1; i++) { /* what earlier holds give */
                int64_t lo = clo[cls[i]], hi = chi[cls[i]], any = 0;
                memset(joined, 0, k * sizeof(int64_t));
                for (Py_ssize_t c = 0; c < n_classes; c++)
                    if (clo[c] < hi && lo < chi[c]) join(joined, (write[i] ? all : wr) + c * k, k);
                for (Py_ssize_t j = 0; j < k; j++) any |= joined[j];
                if (!any) continue;
                if (push(&spans, span[i]) < 0) rc = -1;
                for (Py_ssize_t j = 0; rc == 0 && j < k; j++)
                    if (push(&clocks, joined[j]) < 0) rc = -1;
            }
            for (Py_ssize_t i = s0; i < s1; i++) { /* then this hold joins the group's past */
                const int64_t *r = h + rel[i] * k;
                join(all + cls[i] * k, r, k);
                if (write[i]) join(wr + cls[i] * k, r, k);
            }
        }
    }
    Py_END_ALLOW_THREADS
    free(all), free(wr), free(joined);
    release_views(&v);
    if (rc < 0) {
        free(spans.data), free(clocks.data);
        return PyErr_NoMemory();
    }
    return Py_BuildValue("(NN)", vec_bytes(&spans), vec_bytes(&clocks));
}

/* counting_sort(codes, n_codes) -> bytes of int64: the rows of codes (each in [0, n_codes))
 * in stable order of code, in O(rows + n_codes). */
static PyObject *counting_sort(PyObject *self, PyObject *args) {
    PyObject *codes_o;
    Py_ssize_t n, n_codes;
    if (!PyArg_ParseTuple(args, "Onn", &codes_o, &n, &n_codes)) return NULL;
    Views v = {.used = 0};
    const int64_t *codes = get(&v, codes_o, 0, n, 8, "codes");
    if (!codes) goto fail;
    for (Py_ssize_t i = 0; i < n; i++)
        if (codes[i] < 0 || codes[i] >= n_codes) {
            PyErr_SetString(PyExc_ValueError, "_kernels: a code out of range");
            goto fail;
        }
    int64_t *count = calloc(n_codes + 1, sizeof(int64_t));
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    if (!count || !out) {
        free(count);
        Py_XDECREF(out);
        release_views(&v);
        return PyErr_NoMemory();
    }
    int64_t *order = (int64_t *)PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) count[codes[i] + 1]++;
    for (Py_ssize_t c = 0; c < n_codes; c++) count[c + 1] += count[c];
    for (Py_ssize_t i = 0; i < n; i++) order[count[codes[i]]++] = i;
    Py_END_ALLOW_THREADS
    free(count);
    release_views(&v);
    return out;
fail:
    release_views(&v);
    return NULL;
}

static PyMethodDef methods[] = {
    {"counting_sort", counting_sort, METH_VARARGS, "stable counting sort of dense codes"},
    {"rule_a", rule_a, METH_VARARGS, "WCP rule (a): the joins landing at span starts"},
    {"hb_worklist", hb_worklist, METH_VARARGS, "happens-before clocks by worklist"},
    {"wcp_worklist", wcp_worklist, METH_VARARGS, "WCP clocks by worklist"},
    {"unordered", unordered, METH_VARARGS, "unordered conflicting access pairs"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels", NULL, -1, methods};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }

/* A Chrome trace's common events as columns, in C: the fast path of fdprof/trace/chrome.py.
 *
 * Why: a trace of 10^7 events is a gigabyte of JSON; decoding it into a Python dict per event
 * and reading the dicts back into columns cost ~10 us per event, most of a hazard check's
 * time. scan() reads a piece of the traceEvents array (the text jsonstream cuts between two
 * events) straight into typed columns, with no Python object per event. It accepts a piece
 * only if every event in it is one it reads exactly as the Python path does: a complete slice
 * ("X") whose fields and args have the plain types that path expects, or a sync instant
 * ("i", "I", "n", "R" with sync.op / sync.obj args); it declines anything else (returns None)
 * and the piece is decoded by the Python path, which also says what is wrong with bad input.
 * chrome.py's _Builder.fast_batch turns the columns into the same trace the Python path builds;
 * the tests compare the two on every trace they have.
 *
 * Numbers: integers in int64; timestamps in microseconds are converted to nanoseconds exactly
 * as Python's Decimal does (x * 1000 rounded half to even, at most 28 significant digits, no
 * exponent, else declined); other non-integers as doubles (strtod: correctly rounded, as
 * float(Decimal) is).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* attribute value kinds (chrome.py reads the same codes) */
enum { T_INT, T_FLOAT, T_STR, T_BOOL, T_LIST_INT, T_LIST_STR, T_LIST_EMPTY, T_NULL, T_OTHER };
/* event kinds */
enum { E_SPAN, E_SYNC };

#define DECLINE 1 /* not an event this path reads: the Python path takes the piece */
#define NOMEM 2
#define MAX_DEPTH 64

typedef struct {
    char *data;
    Py_ssize_t size, cap;
} Bytes;

static int grow(Bytes *b, Py_ssize_t n) {
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->size + n) cap *= 2;
    char *data = realloc(b->data, cap);
    if (!data) return NOMEM;
    b->data = data, b->cap = cap;
    return 0;
}

/* n bytes at the end of b, to be written in place (NULL: no memory). */
static inline void *reserve(Bytes *b, Py_ssize_t n) {
    if (b->size + n > b->cap && grow(b, n)) return NULL;
    b->size += n;
    return b->data + b->size - n;
}

static inline int bytes_add(Bytes *b, const void *src, Py_ssize_t n) {
    if (b->size + n > b->cap && grow(b, n)) return NOMEM;
    memcpy(b->data + b->size, src, n);
    b->size += n;
    return 0;
}

/* A growable column of 8-byte items. */
typedef struct {
    Bytes b;
} Col;

static inline int col_i(Col *c, int64_t x) { return bytes_add(&c->b, &x, 8); }
static inline Py_ssize_t col_len(Col *c) { return c->b.size / 8; }

/* Distinct strings of a piece, each with a code (its index). */
typedef struct {
    Bytes text;   /* the strings, back to back */
    Col offsets;  /* start of string i; the total size at the end */
    int64_t *slots; /* open addressing: code + 1, 0 empty */
    Py_ssize_t nslots, count;
} Strings;

static uint64_t hash_bytes(const char *s, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

static const char *str_at(Strings *t, int64_t code, Py_ssize_t *len) {
    const int64_t *off = (const int64_t *)t->offsets.b.data;
    *len = off[code + 1] - off[code];
    return t->text.data + off[code];
}

static int grow_slots(Strings *t) {
    Py_ssize_t n = t->nslots ? 2 * t->nslots : 256;
    int64_t *slots = calloc(n, sizeof(int64_t));
    if (!slots) return NOMEM;
    for (Py_ssize_t i = 0; i < t->nslots; i++) {
        if (!t->slots[i]) continue;
        Py_ssize_t len;
        const char *s = str_at(t, t->slots[i] - 1, &len);
        uint64_t j = hash_bytes(s, len) & (n - 1);
        while (slots[j]) j = (j + 1) & (n - 1);
        slots[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = slots, t->nslots = n;
    return 0;
}

/* The code of string s (added if new), or -1 on no memory. */
static int64_t intern(Strings *t, const char *s, Py_ssize_t n) {
    if (2 * (t->count + 1) > t->nslots && grow_slots(t)) return -1;
    if (t->count == 0 && col_len(&t->offsets) == 0 && col_i(&t->offsets, 0)) return -1;
    uint64_t j = hash_bytes(s, n) & (t->nslots - 1);
    while (t->slots[j]) {
        Py_ssize_t len;
        const char *have = str_at(t, t->slots[j] - 1, &len);
        if (len == n && memcmp(have, s, n) == 0) return t->slots[j] - 1;
        j = (j + 1) & (t->nslots - 1);
    }
    if (bytes_add(&t->text, s, n) || col_i(&t->offsets, t->text.size)) return -1;
    t->slots[j] = ++t->count;
    return t->count - 1;
}

/* ---- JSON ------------------------------------------------------------------------------ */

/* A string: its bytes, in the input where it had no escape, else in Cur.scratch. */
typedef struct {
    const char *data;
    Py_ssize_t size;
} View;

typedef struct {
    const char *p, *end;
    View s;        /* the last string read */
    Bytes scratch; /* where a string with escapes is decoded */
} Cur;

static inline void ws(Cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static inline int eat(Cur *c, char ch) {
    ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char ch = p[i];
        v <<= 4;
        if (ch >= '0' && ch <= '9') v |= ch - '0';
        else if (ch >= 'a' && ch <= 'f') v |= ch - 'a' + 10;
        else if (ch >= 'A' && ch <= 'F') v |= ch - 'A' + 10;
        else return -1;
    }
    *out = v;
    return 0;
}

static int put_utf8(Bytes *b, unsigned cp) {
    char buf[4];
    int n;
    if (cp < 0x80) buf[0] = cp, n = 1;
    else if (cp < 0x800) buf[0] = 0xC0 | cp >> 6, buf[1] = 0x80 | (cp & 0x3F), n = 2;
    else if (cp < 0x10000)
        buf[0] = 0xE0 | cp >> 12, buf[1] = 0x80 | (cp >> 6 & 0x3F), buf[2] = 0x80 | (cp & 0x3F),
        n = 3;
    else
        buf[0] = 0xF0 | cp >> 18, buf[1] = 0x80 | (cp >> 12 & 0x3F),
        buf[2] = 0x80 | (cp >> 6 & 0x3F), buf[3] = 0x80 | (cp & 0x3F), n = 4;
    return bytes_add(b, buf, n);
}

/* A string at the cursor, as c->s (lone surrogates and raw control characters declined: the
 * Python path says what it makes of them). */
static int string(Cur *c) {
    ws(c);
    if (c->p >= c->end || *c->p != '"') return DECLINE;
    const char *first = ++c->p;
    while (c->p < c->end && *c->p != '"' && *c->p != '\\' && (unsigned char)*c->p >= 0x20) c->p++;
    if (c->p < c->end && *c->p == '"') { /* no escape: the input's own bytes */
        c->s.data = first, c->s.size = c->p - first;
        c->p++;
        return 0;
    }
    c->p = first;
    c->scratch.size = 0;
    for (;;) {
        const char *run = c->p;
        while (c->p < c->end && *c->p != '"' && *c->p != '\\' && (unsigned char)*c->p >= 0x20)
            c->p++;
        if (c->p > run && bytes_add(&c->scratch, run, c->p - run)) return NOMEM;
        if (c->p >= c->end || (unsigned char)*c->p < 0x20) return DECLINE;
        if (*c->p == '"') {
            c->p++;
            c->s.data = c->scratch.data, c->s.size = c->scratch.size;
            return 0;
        }
        if (c->end - c->p < 2) return DECLINE;
        char esc = c->p[1], out;
        c->p += 2;
        switch (esc) {
        case '"': out = '"'; break;
        case '\\': out = '\\'; break;
        case '/': out = '/'; break;
        case 'b': out = '\b'; break;
        case 'f': out = '\f'; break;
        case 'n': out = '\n'; break;
        case 'r': out = '\r'; break;
        case 't': out = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (c->end - c->p < 4 || hex4(c->p, &cp)) return DECLINE;
            c->p += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return DECLINE;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (c->end - c->p < 6 || c->p[0] != '\\' || c->p[1] != 'u' || hex4(c->p + 2, &lo) ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    return DECLINE;
                c->p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (put_utf8(&c->scratch, cp)) return NOMEM;
            continue;
        }
        default: return DECLINE;
        }
        if (bytes_add(&c->scratch, &out, 1)) return NOMEM;
    }
}

/* A number's text, read by the JSON grammar. */
typedef struct {
    const char *start;
    int neg, is_int, has_exp;
    const char *int_p, *frac_p; /* digits */
    int int_n, frac_n;
    Py_ssize_t len;
} Num;

static int number(Cur *c, Num *n) {
    ws(c);
    const char *p = c->p;
    memset(n, 0, sizeof *n);
    n->start = p;
    if (p < c->end && *p == '-') n->neg = 1, p++;
    n->int_p = p;
    if (p >= c->end || *p < '0' || *p > '9') return DECLINE;
    if (*p == '0') p++;
    else
        while (p < c->end && *p >= '0' && *p <= '9') p++;
    n->int_n = (int)(p - n->int_p);
    n->is_int = 1;
    if (p < c->end && *p == '.') {
        p++;
        n->frac_p = p;
        while (p < c->end && *p >= '0' && *p <= '9') p++;
        n->frac_n = (int)(p - n->frac_p);
        if (!n->frac_n) return DECLINE;
        n->is_int = 0;
    }
    if (p < c->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < c->end && (*p == '+' || *p == '-')) p++;
        const char *digits = p;
        while (p < c->end && *p >= '0' && *p <= '9') p++;
        if (p == digits) return DECLINE;
        n->is_int = 0, n->has_exp = 1;
    }
    n->len = p - n->start;
    c->p = p;
    return 0;
}

/* An integer number as int64 (0), or DECLINE when it is not one or does not fit. */
static int num_int(const Num *n, int64_t *out) {
    if (!n->is_int) return DECLINE;
    uint64_t v = 0;
    for (int i = 0; i < n->int_n; i++) {
        unsigned d = n->int_p[i] - '0';
        if (v > (UINT64_MAX - d) / 10) return DECLINE;
        v = v * 10 + d;
    }
    if (n->neg) {
        if (v > (uint64_t)INT64_MAX + 1) return DECLINE;
        *out = (int64_t)(0 - v);
    } else {
        if (v > INT64_MAX) return DECLINE;
        *out = (int64_t)v;
    }
    return 0;
}

/* A non-integer number as a double (one past a double's range is the Python path's to refuse). */
static int num_double(const Num *n, double *out) {
    char buf[128];
    if (n->len >= (Py_ssize_t)sizeof buf) return DECLINE;
    memcpy(buf, n->start, n->len);
    buf[n->len] = 0;
    *out = strtod(buf, NULL);
    return isfinite(*out) ? 0 : DECLINE;
}

/* Microseconds to nanoseconds as chrome.ns does it: x * 1000, rounded half to even (Decimal's
 * default context: 28 significant digits, so longer numbers are declined). */
static int num_ns(const Num *n, int64_t *out) {
    if (n->has_exp) return DECLINE;
    int lead = 0; /* leading zeros are not significant */
    while (lead < n->int_n && n->int_p[lead] == '0') lead++;
    if (lead == n->int_n)
        while (lead - n->int_n < n->frac_n && n->frac_p[lead - n->int_n] == '0') lead++;
    if (n->int_n + n->frac_n - lead > 28 || n->int_n > 16) return DECLINE; /* > 19 digits */
    uint64_t v = 0; /* at most 19 digits: no overflow of uint64 */
    for (int i = 0; i < n->int_n; i++) v = v * 10 + (unsigned)(n->int_p[i] - '0');
    for (int i = 0; i < 3; i++) v = v * 10 + (i < n->frac_n ? (unsigned)(n->frac_p[i] - '0') : 0);
    if (n->frac_n > 3) { /* the digits past the nanosecond: half to even */
        const char *rest = n->frac_p + 3;
        int rn = n->frac_n - 3, above = 0, half = rest[0] == '5';
        for (int i = 1; i < rn && !above; i++) above = rest[i] != '0';
        if (rest[0] > '5' || (half && above) || (half && !above && (v & 1))) v++;
    }
    if (v > (uint64_t)INT64_MAX + (n->neg ? 1 : 0)) return DECLINE;
    *out = n->neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

static int skip(Cur *c, int depth);

static int skip_container(Cur *c, int depth, char close, int object) {
    if (depth > MAX_DEPTH) return DECLINE;
    c->p++;
    if (eat(c, close)) return 0;
    for (;;) {
        int rc;
        if (object) {
            if ((rc = string(c))) return rc;
            if (!eat(c, ':')) return DECLINE;
        }
        if ((rc = skip(c, depth + 1))) return rc;
        if (eat(c, ',')) continue;
        return eat(c, close) ? 0 : DECLINE;
    }
}

/* Skips (and checks) any value. */
static int skip(Cur *c, int depth) {
    ws(c);
    if (c->p >= c->end) return DECLINE;
    switch (*c->p) {
    case '{': return skip_container(c, depth, '}', 1);
    case '[': return skip_container(c, depth, ']', 0);
    case '"': return string(c);
    case 't':
        if (c->end - c->p >= 4 && !memcmp(c->p, "true", 4)) return c->p += 4, 0;
        return DECLINE;
    case 'f':
        if (c->end - c->p >= 5 && !memcmp(c->p, "false", 5)) return c->p += 5, 0;
        return DECLINE;
    case 'n':
        if (c->end - c->p >= 4 && !memcmp(c->p, "null", 4)) return c->p += 4, 0;
        return DECLINE;
    default: {
        Num n;
        return number(c, &n);
    }
    }
}

static int literal(Cur *c, const char *word, int len) {
    if (c->end - c->p >= len && !memcmp(c->p, word, len)) {
        c->p += len;
        return 1;
    }
    return 0;
}

/* ---- events ---------------------------------------------------------------------------- */

/* One value of the trace's columns, as read: kind (T_*), an int (value, bool, string code or
 * list start), a double (T_FLOAT), a length (lists). */
typedef struct {
    int tag;
    int64_t i, len;
    double f;
} Val;

/* One event, as the columns read it (chromescan.EVENT). */
typedef struct {
    int64_t kind, ts, dur, pid, tid, name, cat, sid, has_sid, parent, trace, lane, role;
    int64_t op, obj, seq, keyed, span;
} EvRec;

/* One attribute value of a span (chromescan.ARG): event, key, kind, value (an int, a bool,
 * a string code or a list's start), a list's length, a double. */
typedef struct {
    int64_t ev, key, tag, val, len;
    double f;
} ArgRec;

/* What the pieces fed since the last take hold. */
typedef struct {
    Strings strings;
    Bytes events, args; /* EvRec, ArgRec */
    Col l_int, l_str;   /* list elements: ints, string codes */
    Cur cur;
} Scan;

/* A value of an args object: scalars and flat lists of ints or strings read, anything else
 * checked and marked T_OTHER. */
static int arg_value(Scan *s, Val *v) {
    Cur *c = &s->cur;
    ws(c);
    if (c->p >= c->end) return DECLINE;
    char ch = *c->p;
    int rc;
    v->len = 0, v->i = 0, v->f = 0.0;
    if (ch == '"') {
        if ((rc = string(c))) return rc;
        v->tag = T_STR;
        return (v->i = intern(&s->strings, c->s.data, c->s.size)) < 0 ? NOMEM : 0;
    }
    if (ch == 't' || ch == 'f') {
        v->tag = T_BOOL, v->i = ch == 't';
        return literal(c, ch == 't' ? "true" : "false", ch == 't' ? 4 : 5) ? 0 : DECLINE;
    }
    if (ch == 'n') {
        v->tag = T_NULL;
        return literal(c, "null", 4) ? 0 : DECLINE;
    }
    if (ch == '{') {
        v->tag = T_OTHER;
        return skip(c, 1);
    }
    if (ch == '[') {
        const char *open = c->p;
        c->p++;
        if (eat(c, ']')) {
            v->tag = T_LIST_EMPTY;
            return 0;
        }
        ws(c);
        int strs = c->p < c->end && *c->p == '"';
        Col *into = strs ? &s->l_str : &s->l_int;
        Py_ssize_t mark = into->b.size;
        v->tag = strs ? T_LIST_STR : T_LIST_INT;
        v->i = col_len(into);
        for (;;) {
            ws(c);
            int64_t x;
            if (strs) {
                if (c->p >= c->end || *c->p != '"') break;
                if ((rc = string(c))) return rc;
                if ((x = intern(&s->strings, c->s.data, c->s.size)) < 0) return NOMEM;
            } else {
                Num n;
                if (c->p >= c->end || !(*c->p == '-' || (*c->p >= '0' && *c->p <= '9'))) break;
                if ((rc = number(c, &n))) return rc;
                if (num_int(&n, &x)) break;
            }
            if (col_i(into, x)) return NOMEM;
            v->len++;
            if (eat(c, ',')) continue;
            if (eat(c, ']')) return 0;
            return DECLINE;
        }
        /* a list of other elements: checked, kept as T_OTHER */
        into->b.size = mark;
        c->p = open;
        v->tag = T_OTHER, v->len = 0;
        return skip(c, 1);
    }
    Num n;
    if ((rc = number(c, &n))) return rc;
    if (n.is_int) {
        v->tag = num_int(&n, &v->i) ? T_OTHER : T_INT; /* beyond int64: not ours */
        return 0;
    }
    v->tag = T_FLOAT;
    return num_double(&n, &v->f);
}

/* keys of the args an event's columns read rather than its attributes */
enum { A_SPAN_ID, A_TID, A_SPAN_LANE, A_PARENT, A_TRACE, A_ROLE, A_OP, A_OBJ, A_SEQ, A_SPAN,
       A_LANE, A_SPECIAL };
static const char *SPECIAL[A_SPECIAL] = {"fd.span_id", "fd.tid", "fd.span_lane", "fd.parent_id",
                                         "fd.trace_id", "fd.span_role", "sync.op", "sync.obj",
                                         "sync.seq", "sync.span", "fd.lane"};
/* categories whose events are GPU work: their lanes come from args (the Python path) */
static const char *DEVICE_CATS[] = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"};

typedef struct {
    int64_t key;
    Val v;
} Arg;

#define MAX_ARGS 256

typedef struct {
    int seen_ph, seen_name, seen_cat, seen_pid, seen_tid, seen_ts, seen_dur, seen_args;
    char ph;
    Val name, cat, pid, tid;
    Num ts, dur;
    int dur_null;
    int nargs;
    Arg args[MAX_ARGS];
    int special[A_SPECIAL]; /* index into args + 1 */
} Event;

#define is_key(k, word) \
    ((k)->size == (Py_ssize_t)sizeof(word) - 1 && !memcmp((k)->data, word, sizeof(word) - 1))

static int parse_args(Scan *s, Event *e) {
    Cur *c = &s->cur;
    ws(c);
    if (literal(c, "null", 4)) return 0;
    if (c->p >= c->end || *c->p != '{') return DECLINE;
    c->p++;
    if (eat(c, '}')) return 0;
    for (;;) {
        int rc;
        if ((rc = string(c))) return rc;
        if (e->nargs == MAX_ARGS) return DECLINE;
        Arg *a = &e->args[e->nargs];
        int special = -1;
        char first = c->s.size > 3 ? c->s.data[0] : 0;
        if (first == 'f' || first == 's')
            for (int i = 0; i < A_SPECIAL; i++)
                if ((size_t)c->s.size == strlen(SPECIAL[i]) &&
                    !memcmp(c->s.data, SPECIAL[i], c->s.size))
                    special = i;
        if ((a->key = intern(&s->strings, c->s.data, c->s.size)) < 0) return NOMEM;
        for (int i = 0; i < e->nargs; i++)
            if (e->args[i].key == a->key) return DECLINE; /* a key twice: the last wins there */
        if (!eat(c, ':')) return DECLINE;
        if ((rc = arg_value(s, &a->v))) return rc;
        if (special >= 0) e->special[special] = e->nargs + 1;
        e->nargs++;
        if (eat(c, ',')) continue;
        return eat(c, '}') ? 0 : DECLINE;
    }
}

/* pid / tid: an integer, or null / absent (0); a name (string) is the Python path's to number */
static int ident(Val *v, int seen, int64_t *out) {
    if (!seen || v->tag == T_NULL) return *out = 0, 0;
    if (v->tag != T_INT) return DECLINE;
    return *out = v->i, 0;
}

static int parse_event(Scan *s, Event *e) {
    Cur *c = &s->cur;
    memset(e, 0, offsetof(Event, args));
    for (int i = 0; i < A_SPECIAL; i++) e->special[i] = 0;
    if (!eat(c, '{')) return DECLINE;
    if (eat(c, '}')) return DECLINE;
    for (;;) {
        int rc;
        if ((rc = string(c))) return rc;
        if (!eat(c, ':')) return DECLINE;
        View key = c->s, *k = &key;
        int *seen = NULL;
        if (is_key(k, "ph")) {
            seen = &e->seen_ph;
            if ((rc = string(c))) return rc;
            if (c->s.size != 1) return DECLINE;
            e->ph = c->s.data[0];
        } else if (is_key(k, "name")) {
            seen = &e->seen_name;
            if ((rc = arg_value(s, &e->name))) return rc;
        } else if (is_key(k, "cat")) {
            seen = &e->seen_cat;
            if ((rc = arg_value(s, &e->cat))) return rc;
        } else if (is_key(k, "pid")) {
            seen = &e->seen_pid;
            if ((rc = arg_value(s, &e->pid))) return rc;
        } else if (is_key(k, "tid")) {
            seen = &e->seen_tid;
            if ((rc = arg_value(s, &e->tid))) return rc;
        } else if (is_key(k, "ts")) {
            seen = &e->seen_ts;
            if ((rc = number(c, &e->ts))) return rc;
        } else if (is_key(k, "dur")) {
            seen = &e->seen_dur;
            ws(c);
            if (literal(c, "null", 4)) e->dur_null = 1;
            else if ((rc = number(c, &e->dur))) return rc;
        } else if (is_key(k, "args")) {
            seen = &e->seen_args;
            if ((rc = parse_args(s, e))) return rc;
        } else if ((rc = skip(c, 1))) {
            return rc;
        }
        if (seen) {
            if (*seen) return DECLINE; /* a key twice */
            *seen = 1;
        }
        if (eat(c, ',')) continue;
        return eat(c, '}') ? 0 : DECLINE;
    }
}

static Val *special(Event *e, int which) {
    return e->special[which] ? &e->args[e->special[which] - 1].v : NULL;
}

/* An optional string arg (-1: absent or null). */
static int opt_str(Event *e, int which, int64_t *out) {
    Val *v = special(e, which);
    if (!v || v->tag == T_NULL) return *out = -1, 0;
    return v->tag == T_STR ? (*out = v->i, 0) : DECLINE;
}

static int str_is(Scan *s, int64_t code, const char *word) {
    Py_ssize_t len;
    const char *have = str_at(&s->strings, code, &len);
    return (size_t)len == strlen(word) && !memcmp(have, word, len);
}

static int emit_span(Scan *s, Event *e, int64_t index) {
    int64_t pid, tid, ts, dur = 0, name, cat = -1, sid = 0, has_sid = 0, parent = 0, trace, lane,
                                 role;
    if (!e->seen_ts || num_ns(&e->ts, &ts)) return DECLINE;
    if (e->seen_dur && !e->dur_null && num_ns(&e->dur, &dur)) return DECLINE;
    if (!e->seen_name) {
        if ((name = intern(&s->strings, "", 0)) < 0) return NOMEM;
    } else if (e->name.tag == T_STR) {
        name = e->name.i;
    } else {
        return DECLINE;
    }
    if (e->seen_cat && e->cat.tag != T_NULL) {
        if (e->cat.tag != T_STR) return DECLINE;
        cat = e->cat.i;
        for (int i = 0; i < 4; i++)
            if (str_is(s, cat, DEVICE_CATS[i])) return DECLINE;
    }
    if (ident(&e->pid, e->seen_pid, &pid) || ident(&e->tid, e->seen_tid, &tid)) return DECLINE;
    Val *v;
    if ((v = special(e, A_TID)) && v->tag != T_NULL) {
        if (v->tag != T_INT) return DECLINE;
        tid = v->i;
    }
    if ((v = special(e, A_SPAN_ID)) && v->tag != T_NULL) {
        if (v->tag != T_INT) return DECLINE;
        sid = v->i, has_sid = 1;
    }
    if ((v = special(e, A_PARENT))) {
        if (v->tag != T_INT) return DECLINE;
        parent = v->i;
    }
    if (opt_str(e, A_TRACE, &trace) || opt_str(e, A_ROLE, &role) || opt_str(e, A_SPAN_LANE, &lane))
        return DECLINE;
    if (lane >= 0 && str_is(s, lane, "")) lane = -1; /* "" is no lane there */
    EvRec *ev = reserve(&s->events, sizeof(EvRec));
    if (!ev) return NOMEM;
    *ev = (EvRec){E_SPAN, ts, dur, pid, tid, name, cat, sid, has_sid, parent, trace, lane, role,
                  0, -1, -1, 0, 0};
    for (int i = 0; i < e->nargs; i++) {
        int is_special = 0;
        for (int j = A_SPAN_ID; j <= A_ROLE; j++)
            if (e->special[j] == i + 1) is_special = 1;
        if (is_special) continue;
        Val *a = &e->args[i].v;
        if (a->tag == T_NULL || a->tag == T_OTHER) return DECLINE; /* JSON-kind values */
        ArgRec *rec = reserve(&s->args, sizeof(ArgRec));
        if (!rec) return NOMEM;
        *rec = (ArgRec){index, e->args[i].key, a->tag, a->i, a->len, a->tag == T_FLOAT ? a->f : 0};
    }
    return 0;
}

static int emit_sync(Scan *s, Event *e) {
    int64_t pid, tid, ts, op, obj, seq = -1, keyed = 0, span = 0, lane;
    Val *v;
    if (!e->seen_ts || num_ns(&e->ts, &ts)) return DECLINE;
    if (!(v = special(e, A_OP)) || v->tag != T_STR) return DECLINE;
    if (str_is(s, v->i, "release")) op = 0;
    else if (str_is(s, v->i, "acquire")) op = 1;
    else return DECLINE;
    if (!(v = special(e, A_OBJ)) || v->tag != T_STR || str_is(s, v->i, "")) return DECLINE;
    obj = v->i;
    if ((v = special(e, A_SEQ))) {
        if (v->tag != T_INT) return DECLINE;
        seq = v->i, keyed = 1;
    }
    if ((v = special(e, A_SPAN))) {
        if (v->tag != T_INT) return DECLINE;
        span = v->i;
    }
    if (opt_str(e, A_LANE, &lane)) return DECLINE;
    if (ident(&e->pid, e->seen_pid, &pid) || ident(&e->tid, e->seen_tid, &tid)) return DECLINE;
    if ((v = special(e, A_TID))) { /* present, even null (then thread 0), as the Python path */
        if (v->tag == T_NULL) tid = 0;
        else if (v->tag == T_INT) tid = v->i;
        else return DECLINE;
    }
    EvRec *ev = reserve(&s->events, sizeof(EvRec));
    if (!ev) return NOMEM;
    *ev = (EvRec){E_SYNC, ts, 0, pid, tid, -1, -1, 0, 0, 0, -1, lane, -1, op, obj, seq, keyed, span};
    return 0;
}

static int scan_piece(Scan *s) {
    Cur *c = &s->cur;
    if (!eat(c, '[')) return DECLINE;
    Event *e = malloc(sizeof(Event));
    if (!e) return NOMEM;
    int rc = 0;
    int64_t index = s->events.size / (Py_ssize_t)sizeof(EvRec);
    if (!eat(c, ']')) {
        for (;; index++) {
            if ((rc = parse_event(s, e))) break;
            if (e->ph == 'X') rc = emit_span(s, e, index);
            else if (e->ph == 'i' || e->ph == 'I' || e->ph == 'n' || e->ph == 'R')
                rc = e->seen_args && (special(e, A_OP) || special(e, A_OBJ)) ? emit_sync(s, e)
                                                                             : DECLINE;
            else rc = DECLINE;
            if (rc) break;
            if (eat(c, ',')) continue;
            if (!eat(c, ']')) rc = DECLINE;
            break;
        }
    }
    free(e);
    if (!rc) {
        ws(c);
        if (c->p != c->end) rc = DECLINE;
    }
    return rc;
}

/* Empties the columns, keeping their memory for the next pieces (no page faults anew). */
static void reset(Scan *s) {
    s->strings.text.size = s->strings.offsets.b.size = s->strings.count = 0;
    if (s->strings.slots) memset(s->strings.slots, 0, s->strings.nslots * sizeof(int64_t));
    s->events.size = s->args.size = s->l_int.b.size = s->l_str.b.size = 0;
}

static void release(Scan *s) {
    free(s->strings.text.data), free(s->strings.offsets.b.data), free(s->strings.slots);
    free(s->events.data), free(s->args.data), free(s->l_int.b.data), free(s->l_str.b.data);
    free(s->cur.scratch.data);
    memset(s, 0, sizeof *s);
}

typedef struct {
    PyObject_HEAD
    Scan scan;
} Scanner;

static void scanner_dealloc(Scanner *self) {
    release(&self->scan);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* feed(piece: bytes) -> bool: read the piece's events into the columns, or leave them as they
 * were and return False where the Python path must read it. */
static PyObject *scanner_feed(Scanner *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    Scan *s = &self->scan;
    Py_ssize_t events = s->events.size, argsz = s->args.size, ints = s->l_int.b.size,
               strs = s->l_str.b.size;
    s->cur.p = buf.buf, s->cur.end = (const char *)buf.buf + buf.len;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = scan_piece(s);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    if (rc) { /* strings interned meanwhile stay: unused, harmless */
        s->events.size = events, s->args.size = argsz, s->l_int.b.size = ints;
        s->l_str.b.size = strs;
    }
    if (rc == NOMEM) return PyErr_NoMemory();
    return PyBool_FromLong(rc == 0);
}

static PyObject *scanner_len(Scanner *self, PyObject *unused) {
    return PyLong_FromSsize_t(self->scan.events.size / (Py_ssize_t)sizeof(EvRec));
}

static PyObject *as_bytes(Bytes *b) { return PyBytes_FromStringAndSize(b->data, b->size); }

/* Records of `fields` int64s each, as bytes holding one column after another. */
static PyObject *columns(Bytes *b, int fields) {
    Py_ssize_t rows = b->size / (fields * 8);
    PyObject *out = PyBytes_FromStringAndSize(NULL, b->size);
    if (!out) return NULL;
    const int64_t *in = (const int64_t *)b->data;
    int64_t *col = (int64_t *)PyBytes_AS_STRING(out);
    /* a block of records at a time, so the records read stay in cache across the fields */
    for (Py_ssize_t r0 = 0; r0 < rows; r0 += 256) {
        Py_ssize_t r1 = r0 + 256 < rows ? r0 + 256 : rows;
        for (int f = 0; f < fields; f++)
            for (Py_ssize_t r = r0; r < r1; r++) col[f * rows + r] = in[r * fields + f];
    }
    return out;
}

/* take() -> (strings, events, args, list ints, list string codes): what the pieces fed since
 * the last take hold (events and args as bytes of columns, one after another: EvRec's fields
 * then ArgRec's), then all of it dropped. */
static PyObject *scanner_take(Scanner *self, PyObject *unused) {
    Scan *s = &self->scan;
    PyObject *strings = PyList_New(s->strings.count), *out = NULL;
    if (!strings) return NULL;
    for (Py_ssize_t i = 0; i < s->strings.count; i++) {
        Py_ssize_t len;
        const char *text = str_at(&s->strings, i, &len);
        PyObject *str = PyUnicode_DecodeUTF8(text, len, NULL);
        if (!str) {
            Py_DECREF(strings);
            return NULL;
        }
        PyList_SET_ITEM(strings, i, str);
    }
    out = Py_BuildValue("(NNNNN)", strings, columns(&s->events, sizeof(EvRec) / 8),
                        columns(&s->args, sizeof(ArgRec) / 8), as_bytes(&s->l_int.b),
                        as_bytes(&s->l_str.b));
    reset(s);
    return out;
}

static PyMethodDef scanner_methods[] = {
    {"feed", (PyCFunction)scanner_feed, METH_VARARGS, "read a piece's events, or decline"},
    {"take", (PyCFunction)scanner_take, METH_NOARGS, "the columns so far, then empty"},
    {"events", (PyCFunction)scanner_len, METH_NOARGS, "how many events the columns hold"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "fdprof.trace._chromescan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)scanner_dealloc,
    .tp_methods = scanner_methods,
    .tp_doc = "Chrome trace events read into columns, a piece at a time",
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_chromescan", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__chromescan(void) {
    if (PyType_Ready(&ScannerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

/* NVTX capture without Nsight Systems: an NVTX injection library (NVTX_INJECTION64_PATH)
 * that appends every range, mark and name to a per-process file in $FDPROF_NVTX_DIR.
 *
 * The file is a shared mapping: an event is in the page cache the moment its call returns,
 * so a process leaving through os._exit or killed by SIGKILL loses nothing already recorded.
 * The file is sized to its capacity up front (sparse) and never trimmed by the process, since
 * another thread may still be writing at exit; fdprof.capture.nvtx.trim() trims it afterwards.
 * Records are reserved with one atomic add (threads never block each other) and published
 * payload first, kind byte last; the reader stops at the first record not yet published.
 * The format is decoded by fdprof/trace/nvtx_capture.py; the two must change together.
 *
 * Handles (domains, registered strings) and range ids carry the pid in their upper 32 bits,
 * so a forked child, which starts a file of its own, never reuses its parent's.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtPayload.h>

#define EXPORT __attribute__((visibility("default")))
#define HEADER_SIZE 8
#define FILE_HEADER_SIZE 64
#define DROPPED_OFFSET 40
#define MAX_TEXT 4096
#define EVENT_SIZE 56

enum { K_DOMAIN = 1, K_STRING, K_CATEGORY, K_THREAD_NAME, K_START, K_PUSH, K_MARK, K_END, K_POP };

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static int fd = -1;
static char *base;
static size_t capacity;
static size_t offset;         /* next free byte; atomic */
static uint64_t next_handle;  /* low 32 bits of handles and range ids; atomic */
static uint64_t pid_bits;
static __thread int depth;
static __thread uint32_t cached_tid;

static inline uint32_t os_tid(void) {
    if (!cached_tid) cached_tid = (uint32_t)syscall(SYS_gettid);
    return cached_tid;
}

static inline int64_t clock_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t new_id(void) {
    return pid_bits | (__atomic_add_fetch(&next_handle, 1, __ATOMIC_RELAXED) & 0xffffffffu);
}

/* Payload pointer for a record of `size` payload bytes, or NULL (file full: counted). */
static char *reserve(size_t size, size_t *at) {
    if (!base) return NULL;
    size_t off = __atomic_fetch_add(&offset, HEADER_SIZE + size, __ATOMIC_RELAXED);
    if (off + HEADER_SIZE + size > capacity) {
        __atomic_add_fetch((uint64_t *)(base + DROPPED_OFFSET), 1, __ATOMIC_RELAXED);
        return NULL;
    }
    *at = off;
    return base + off + HEADER_SIZE;
}

static void publish(size_t at, uint8_t kind, size_t size) {
    char *h = base + at;
    uint16_t len = (uint16_t)size;
    uint32_t tid = os_tid();
    h[1] = 0;
    memcpy(h + 2, &len, 2);
    memcpy(h + 4, &tid, 4);
    __atomic_store_n((uint8_t *)h, kind, __ATOMIC_RELEASE);
}

#define PUT(p, off, v) memcpy((p) + (off), &(v), sizeof(v))

static size_t text_len(const char *s) {
    return s ? strnlen(s, MAX_TEXT) : 0;
}

/* A record of fixed fields `head` (n bytes) followed by text. */
static void put_named(uint8_t kind, const void *head, size_t n, const char *text) {
    size_t len = text_len(text), at;
    char *p = reserve(n + len, &at);
    if (!p) return;
    memcpy(p, head, n);
    if (len) memcpy(p + n, text, len);
    publish(at, kind, n + len);
}

static void open_file(void) {
    const char *dir = getenv("FDPROF_NVTX_DIR");
    if (!dir || !*dir) return;
    const char *cap = getenv("FDPROF_NVTX_CAPACITY_MB");
    capacity = (size_t)(cap && atol(cap) > 0 ? atol(cap) : 64) << 20;
    char path[4096];
    pid_t pid = getpid();
    snprintf(path, sizeof path, "%s/nvtx-%d.cap", dir, (int)pid);
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    if (ftruncate(fd, (off_t)capacity) != 0) { close(fd); fd = -1; return; }
    void *m = mmap(NULL, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) { close(fd); fd = -1; return; }
    base = m;
    pid_bits = (uint64_t)(uint32_t)pid << 32;
    uint32_t upid = (uint32_t)pid, ppid = (uint32_t)getppid();
    int64_t mono = clock_ns(CLOCK_MONOTONIC), epoch = clock_ns(CLOCK_REALTIME);
    uint64_t cap64 = capacity;
    memcpy(base, "FDNVTX1\n", 8);
    PUT(base, 8, upid);
    PUT(base, 12, ppid);
    PUT(base, 16, mono);
    PUT(base, 24, epoch);
    PUT(base, 32, cap64);
    offset = FILE_HEADER_SIZE;
}

/* A forked child inherits the parent's mapping: it must write a file of its own. */
static void after_fork_child(void) {
    cached_tid = 0;
    depth = 0;
    if (!base) return;
    munmap(base, capacity);
    close(fd);
    base = NULL;
    fd = -1;
    open_file();
}

/* ---- events ---- */

static void put_event(uint8_t kind, uint64_t range_id, nvtxDomainHandle_t domain,
                      const nvtxEventAttributes_t *a, const char *ascii) {
    uint32_t category = 0, msg_type = 0, pad = 0;
    int32_t payload_type = 0;
    uint64_t payload = 0, msg_handle = 0;
    const char *text = ascii;
    if (a) {
        category = a->category;
        payload_type = a->payloadType;
        memcpy(&payload, &a->payload, 8);
        msg_type = a->messageType;
        if (msg_type == NVTX_MESSAGE_TYPE_ASCII) text = a->message.ascii;
        else if (msg_type == NVTX_MESSAGE_TYPE_REGISTERED)
            msg_handle = (uint64_t)(uintptr_t)a->message.registered;
    } else if (ascii) {
        msg_type = NVTX_MESSAGE_TYPE_ASCII;
    }
    size_t len = (msg_type == NVTX_MESSAGE_TYPE_ASCII) ? text_len(text) : 0, at;
    char *p = reserve(EVENT_SIZE + len, &at);
    if (!p) return;
    uint64_t dom = (uint64_t)(uintptr_t)domain;
    int64_t t = clock_ns(CLOCK_MONOTONIC);
    PUT(p, 0, range_id); PUT(p, 8, dom); PUT(p, 16, t); PUT(p, 24, category);
    PUT(p, 28, payload_type); PUT(p, 32, payload); PUT(p, 40, msg_type); PUT(p, 44, pad);
    PUT(p, 48, msg_handle);
    if (len) memcpy(p + EVENT_SIZE, text, len);
    publish(at, kind, EVENT_SIZE + len);
}

static void put_end(uint8_t kind, uint64_t id_or_domain) {
    size_t at;
    char *p = reserve(16, &at);
    if (!p) return;
    int64_t t = clock_ns(CLOCK_MONOTONIC);
    PUT(p, 0, id_or_domain); PUT(p, 8, t);
    publish(at, kind, 16);
}

static void mark_ex(const nvtxEventAttributes_t *a) { put_event(K_MARK, 0, NULL, a, NULL); }
static void mark_a(const char *m) { put_event(K_MARK, 0, NULL, NULL, m); }

static nvtxRangeId_t start_ex(const nvtxEventAttributes_t *a) {
    uint64_t id = new_id();
    put_event(K_START, id, NULL, a, NULL);
    return id;
}

static nvtxRangeId_t start_a(const char *m) {
    uint64_t id = new_id();
    put_event(K_START, id, NULL, NULL, m);
    return id;
}

static void range_end(nvtxRangeId_t id) { put_end(K_END, id); }

static int push_ex(const nvtxEventAttributes_t *a) {
    put_event(K_PUSH, 0, NULL, a, NULL);
    return depth++;
}

static int push_a(const char *m) {
    put_event(K_PUSH, 0, NULL, NULL, m);
    return depth++;
}

static int pop(void) {
    if (depth == 0) return -1;
    put_end(K_POP, 0);
    return --depth;
}

static void name_category(nvtxDomainHandle_t domain, uint32_t category, const char *name) {
    char head[16];
    uint64_t dom = (uint64_t)(uintptr_t)domain;
    uint32_t pad = 0;
    PUT(head, 0, dom); PUT(head, 8, category); PUT(head, 12, pad);
    put_named(K_CATEGORY, head, 16, name);
}

static void name_category_a(uint32_t category, const char *name) {
    name_category(NULL, category, name);
}

static void name_os_thread_a(uint32_t tid, const char *name) {
    char head[8];
    uint32_t pad = 0;
    PUT(head, 0, tid); PUT(head, 4, pad);
    put_named(K_THREAD_NAME, head, 8, name);
}

static void d_mark_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
    put_event(K_MARK, 0, d, a, NULL);
}

static nvtxRangeId_t d_start_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
    uint64_t id = new_id();
    put_event(K_START, id, d, a, NULL);
    return id;
}

static void d_end(nvtxDomainHandle_t d, nvtxRangeId_t id) { (void)d; put_end(K_END, id); }

static int d_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
    put_event(K_PUSH, 0, d, a, NULL);
    return depth++;
}

static int d_pop(nvtxDomainHandle_t d) {
    if (depth == 0) return -1;
    put_end(K_POP, (uint64_t)(uintptr_t)d);
    return --depth;
}

static nvtxStringHandle_t d_register_string_a(nvtxDomainHandle_t d, const char *s) {
    uint64_t h = new_id();
    char head[16];
    uint64_t dom = (uint64_t)(uintptr_t)d;
    PUT(head, 0, h); PUT(head, 8, dom);
    put_named(K_STRING, head, 16, s);
    return (nvtxStringHandle_t)(uintptr_t)h;
}

static nvtxDomainHandle_t d_create_a(const char *name) {
    uint64_t h = new_id();
    char head[8];
    PUT(head, 0, h);
    put_named(K_DOMAIN, head, 8, name);
    return (nvtxDomainHandle_t)(uintptr_t)h;
}

static void d_destroy(nvtxDomainHandle_t d) { (void)d; /* handles stay valid: events may follow */ }

/* ---- registration ---- */

static void set_slot(NvtxFunctionTable table, unsigned size, unsigned id, NvtxFunctionPointer fn) {
    if (table && id < size && table[id]) *table[id] = fn;
}

#define FN(f) ((NvtxFunctionPointer)(f))

static void ensure_file(void) {
    pthread_mutex_lock(&init_lock);
    if (!initialized) {
        initialized = 1;
        open_file();
        pthread_atfork(NULL, NULL, after_fork_child);
    }
    pthread_mutex_unlock(&init_lock);
}

EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
    ensure_file();
    const NvtxExportTableCallbacks *cb = get_table(NVTX_ETID_CALLBACKS);
    if (!cb || !cb->GetModuleFunctionTable) return 0;
    NvtxFunctionTable t = NULL;
    unsigned n = 0;
    if (cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &t, &n)) {
        set_slot(t, n, NVTX_CBID_CORE_MarkEx, FN(mark_ex));
        set_slot(t, n, NVTX_CBID_CORE_MarkA, FN(mark_a));
        set_slot(t, n, NVTX_CBID_CORE_RangeStartEx, FN(start_ex));
        set_slot(t, n, NVTX_CBID_CORE_RangeStartA, FN(start_a));
        set_slot(t, n, NVTX_CBID_CORE_RangeEnd, FN(range_end));
        set_slot(t, n, NVTX_CBID_CORE_RangePushEx, FN(push_ex));
        set_slot(t, n, NVTX_CBID_CORE_RangePushA, FN(push_a));
        set_slot(t, n, NVTX_CBID_CORE_RangePop, FN(pop));
        set_slot(t, n, NVTX_CBID_CORE_NameCategoryA, FN(name_category_a));
        set_slot(t, n, NVTX_CBID_CORE_NameOsThreadA, FN(name_os_thread_a));
    }
    t = NULL;
    n = 0;
    if (cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &t, &n)) {
        set_slot(t, n, NVTX_CBID_CORE2_DomainMarkEx, FN(d_mark_ex));
        set_slot(t, n, NVTX_CBID_CORE2_DomainRangeStartEx, FN(d_start_ex));
        set_slot(t, n, NVTX_CBID_CORE2_DomainRangeEnd, FN(d_end));
        set_slot(t, n, NVTX_CBID_CORE2_DomainRangePushEx, FN(d_push_ex));
        set_slot(t, n, NVTX_CBID_CORE2_DomainRangePop, FN(d_pop));
        set_slot(t, n, NVTX_CBID_CORE2_DomainNameCategoryA, FN(name_category));
        set_slot(t, n, NVTX_CBID_CORE2_DomainRegisterStringA, FN(d_register_string_a));
        set_slot(t, n, NVTX_CBID_CORE2_DomainCreateA, FN(d_create_a));
        set_slot(t, n, NVTX_CBID_CORE2_DomainDestroy, FN(d_destroy));
    }
    return 1;
}

/* The payload extension: answering IsEnabled is what makes the Python nvtx package emit. */
static uint8_t domain_is_enabled(nvtxDomainHandle_t d) { (void)d; return base != NULL; }

static uint64_t schema_register(nvtxDomainHandle_t d, const void *attr) {
    (void)d; (void)attr;
    static uint64_t next_schema = NVTX_PAYLOAD_SCHEMA_ID_DYNAMIC_START;
    return __atomic_fetch_add(&next_schema, 1, __ATOMIC_RELAXED);
}

EXPORT int InitializeInjectionNvtxExtension(nvtxExtModuleInfo_t *info) {
    ensure_file();
    if (!info || info->moduleId != NVTX_EXT_PAYLOAD_MODULEID) return 1;
    for (size_t i = 0; i < info->segmentsCount; i++) {
        nvtxExtModuleSegment_t *s = &info->segments[i];
        if (s->slotCount > NVTX3EXT_CBID_nvtxDomainIsEnabled)
            s->functionSlots[NVTX3EXT_CBID_nvtxDomainIsEnabled] = (intptr_t)domain_is_enabled;
        if (s->slotCount > NVTX3EXT_CBID_nvtxPayloadSchemaRegister)
            s->functionSlots[NVTX3EXT_CBID_nvtxPayloadSchemaRegister] = (intptr_t)schema_register;
    }
    return 1;
}

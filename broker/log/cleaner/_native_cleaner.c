/* broker.log.cleaner._native_cleaner: the log cleaner's record scan and offset map in C.
 *
 * The C twin of the pure-Python cleaner (broker/log/cleaner/offset_map.py's OffsetMap,
 * batch_filter.BatchFilter._kept_records, batch_rewrite.split_records/rebuild_batch's record
 * loop); the Python cleaner stays the reference a property test compares this with, byte
 * for byte (tests/property/test_cleaner_native.py).
 *
 * OffsetMap(capacity, seed) maps record keys to the offset of their latest record:
 *
 *   - open addressing, linear probing, over a power-of-two table of 40-byte slots
 *     {64-bit hash, offset, key length, the key itself when it has at most 16 bytes (so a
 *     lookup of a short key touches one cache line), else its position in an arena}; the
 *     table doubles when it is 3/4 full, so memory follows the keys mapped (53-107 bytes of
 *     table per key, plus longer keys' bytes in the arena), not the capacity; the scans
 *     compute the hashes of a batch's records first and prefetch the slots a few records
 *     ahead;
 *   - keys are kept *exactly* (the slot or the arena holds their bytes and a lookup compares
 *     them after the hash), as the Python map does: no hash collision can ever make the
 *     cleaner drop a live record. Kafka's SkimpyOffsetMap keeps only a 16-byte MD5 digest
 *     per key, so two keys with one digest share an entry and the older key's latest record
 *     is deleted; MD5 collisions can be made on purpose, so a producer could delete
 *     another's records. Here
 *     the hash (a seeded 64-bit multiply-mix) only picks the slot: a collision costs one
 *     more key comparison, never a wrong answer; the seed (random per map) keeps crafted
 *     keys from piling onto one probe chain;
 *   - `capacity` bounds the number of keys, as log.cleaner.dedupe.buffer.size does Kafka's
 *     (map_capacity in offset_map.py): a round stops mapping when the map is full.
 *
 * map_records(records, count, base_offset, start_offset) maps the records of one
 * uncompressed records section (a batch's bytes after its 61-byte header, decompressed by
 * the caller): every keyed record at or after start_offset; it returns False, having mapped
 * the records before it, when a record finds the map full (the round ends there).
 *
 * filter_records(records, count, base_offset, retain_deletes, first_timestamp,
 * has_horizon, new_horizon) decides which records of a data batch stay (a record past
 * latest_offset; a keyed record whose offset is at least its key's mapped offset, unless it
 * is a tombstone and retain_deletes is false) and rebuilds the kept records section as
 * batch_rewrite.rebuild_batch does (timestamp deltas rebased on the new firstTimestamp:
 * new_horizon when a tombstone is kept in a batch without a delete horizon (KIP-534), the
 * old one when the batch has a horizon, else the first kept record's timestamp). It returns
 * (kept, records or None, first_timestamp, max_timestamp, stamped): records is None when
 * nothing stays or everything stays unchanged.
 *
 * records(records, count) lists the records as batch_rewrite.RawRecord fields (tests).
 *
 * Record layout (v2): length varint, attributes int8, timestampDelta varlong, offsetDelta
 * varint, keyLength varint (-1 = null), key, valueLength varint (-1 = null), value,
 * headerCount varint, headers. Every read is bounds-checked: a record must lie within the
 * section, its key and value within the record, varints within 5 (varlong 10) bytes, and
 * the records must fill the section exactly; anything else raises the error class given to
 * _set_error_class (the broker's CorruptRecordError; ValueError until then), never reads
 * out of bounds. Headers are not parsed: a rewrite copies them with the record's tail.
 *
 * Concurrency: map_records and filter_records release the GIL while they scan (the records
 * buffer stays exported). One OffsetMap belongs to one cleaning round in one thread; a
 * second call while one scans raises RuntimeError instead of racing.
 *
 * Uses only the stable ABI of Python 3.11.
 */
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030B0000
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static PyObject *corrupt_error = NULL; /* strong reference */

/* ---- records ---------------------------------------------------------------------------- */

typedef struct {
    uint64_t hash;    /* of its key (filled by the map's scans) */
    size_t start;     /* the record's length varint */
    size_t body;      /* its keyLength varint: from here on a rewrite copies the bytes */
    size_t end;       /* one past its last byte */
    size_t key;       /* its key's first byte */
    int64_t key_len;  /* -1: null key */
    int64_t ts_delta;
    int64_t off_delta;
    unsigned char attributes;
    unsigned char has_value;
} Rec;

typedef struct {
    const unsigned char *p;
    size_t len;
    size_t pos;
    const char *msg; /* the error, when one was met */
} Cursor;

/* a zigzag varint of at most max_bytes bytes (5: 32 bits, 10: 64 bits) before limit */
static int read_varint(Cursor *c, size_t limit, int max_bytes, int64_t *out)
{
    uint64_t raw = 0;
    int shift = 0, n = 0;
    for (;;) {
        unsigned char b;
        if (c->pos >= limit) {
            c->msg = "truncated varint";
            return -1;
        }
        if (n == max_bytes) {
            c->msg = max_bytes == 5 ? "varint is too long" : "varlong is too long";
            return -1;
        }
        b = c->p[c->pos++];
        n++;
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80))
            break;
        shift += 7;
    }
    if (max_bytes == 5) {
        uint32_t v = (uint32_t)raw;
        *out = (int64_t)(int32_t)((v >> 1) ^ (uint32_t)(-(int32_t)(v & 1)));
    } else {
        *out = (int64_t)((raw >> 1) ^ (uint64_t)(-(int64_t)(raw & 1)));
    }
    return 0;
}

/* one record at c->pos; c->pos ends past it */
static int read_record(Cursor *c, Rec *r)
{
    int64_t length, value_len;
    size_t end;
    r->start = c->pos;
    if (read_varint(c, c->len, 5, &length) < 0)
        return -1;
    if (length < 1 || (uint64_t)length > c->len - c->pos) {
        c->msg = "record runs past the end of its batch";
        return -1;
    }
    end = c->pos + (size_t)length;
    r->end = end;
    r->attributes = c->p[c->pos++];
    if (read_varint(c, end, 10, &r->ts_delta) < 0 || read_varint(c, end, 5, &r->off_delta) < 0)
        return -1;
    r->body = c->pos;
    if (read_varint(c, end, 5, &r->key_len) < 0)
        return -1;
    if (r->key_len < -1 || (r->key_len > 0 && (uint64_t)r->key_len > end - c->pos)) {
        c->msg = "record key runs past the end of its record";
        return -1;
    }
    r->key = c->pos;
    if (r->key_len > 0)
        c->pos += (size_t)r->key_len;
    if (read_varint(c, end, 5, &value_len) < 0)
        return -1;
    if (value_len < -1 || (value_len > 0 && (uint64_t)value_len > end - c->pos)) {
        c->msg = "record value runs past the end of its record";
        return -1;
    }
    r->has_value = value_len >= 0;
    c->pos = end;
    return 0;
}

/* all `count` records of the section into recs (count entries) */
static int read_records(Cursor *c, Rec *recs, int64_t count)
{
    for (int64_t i = 0; i < count; i++) {
        if (read_record(c, &recs[i]) < 0)
            return -1;
    }
    if (c->pos != c->len) {
        c->msg = "record batch holds bytes past its last record";
        return -1;
    }
    return 0;
}

/* ---- the offset map --------------------------------------------------------------------- */

#define INLINE_KEY 16

typedef struct {
    uint64_t hash; /* 0: an empty slot (a key's hash is never 0) */
    int64_t offset;
    uint32_t len;  /* of the key */
    uint32_t unused;
    union {
        unsigned char bytes[INLINE_KEY]; /* len <= INLINE_KEY: the key */
        uint64_t pos;                    /* else: where the key starts in the arena */
    } key;
} Slot;

typedef struct {
    PyObject_HEAD
    Slot *slots;
    size_t mask; /* slots - 1 */
    size_t count;
    unsigned char *arena;
    size_t arena_len;
    size_t arena_cap;
    int64_t capacity;
    int64_t latest_offset;
    uint64_t seed;
    int busy;
    int ready;
} OffsetMap;

#define INITIAL_SLOTS 1024

static inline uint64_t mix(uint64_t a, uint64_t b)
{
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static inline uint64_t load64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint64_t hash_key(const unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t h = seed ^ mix(n + 0x9E3779B97F4A7C15ULL, 0xA0761D6478BD642FULL);
    while (n >= 16) {
        h = mix(load64(p) ^ 0xE7037ED1A0B428DBULL, load64(p + 8) ^ h);
        p += 16;
        n -= 16;
    }
    if (n >= 8) {
        h = mix(load64(p) ^ 0x8EBC6AF09C88C6E3ULL, h ^ 0x589965CC75374CC3ULL);
        p += 8;
        n -= 8;
    }
    if (n > 0) {
        uint64_t tail = 0;
        memcpy(&tail, p, n);
        h = mix(tail ^ 0x1D8E4E27C47D124FULL, h ^ 0xE7037ED1A0B428DBULL);
    }
    h = mix(h, 0xA0761D6478BD642FULL);
    return h ? h : 1;
}

static inline int key_equals(const OffsetMap *m, const Slot *s, const unsigned char *key,
                             size_t n)
{
    if (s->len != n)
        return 0;
    if (n <= INLINE_KEY)
        return memcmp(s->key.bytes, key, n) == 0;
    return memcmp(m->arena + s->key.pos, key, n) == 0;
}

/* the slot of key (its own, or the empty one where it would go) */
static inline Slot *find_slot(const OffsetMap *m, const unsigned char *key, size_t n,
                              uint64_t h)
{
    size_t i = (size_t)h & m->mask;
    for (;;) {
        Slot *s = &m->slots[i];
        if (s->hash == 0 || (s->hash == h && key_equals(m, s, key, n)))
            return s;
        i = (i + 1) & m->mask;
    }
}

static inline int64_t map_get_hashed(const OffsetMap *m, const unsigned char *key, size_t n,
                                     uint64_t h)
{
    Slot *s = find_slot(m, key, n, h);
    return s->hash ? s->offset : -1;
}

static int64_t map_get(const OffsetMap *m, const unsigned char *key, size_t n)
{
    return map_get_hashed(m, key, n, hash_key(key, n, m->seed));
}

static inline void prefetch_slot(const OffsetMap *m, uint64_t h)
{
#if defined(__GNUC__)
    __builtin_prefetch(&m->slots[(size_t)h & m->mask], 1);
#else
    (void)m;
    (void)h;
#endif
}

#define PREFETCH_AHEAD 8

static int grow_table(OffsetMap *m)
{
    size_t slots = (m->mask + 1) * 2;
    Slot *fresh, *old = m->slots;
    if (slots > SIZE_MAX / sizeof(Slot))
        return -1;
    fresh = calloc(slots, sizeof(Slot));
    if (fresh == NULL)
        return -1;
    for (size_t i = 0; i <= m->mask; i++) {
        if (old[i].hash) {
            size_t j = (size_t)old[i].hash & (slots - 1);
            while (fresh[j].hash)
                j = (j + 1) & (slots - 1);
            fresh[j] = old[i];
        }
    }
    free(old);
    m->slots = fresh;
    m->mask = slots - 1;
    return 0;
}

/* 0, or -1 out of memory (the map is unchanged then); the caller checks capacity and that
 * n fits 32 bits */
static int map_put_hashed(OffsetMap *m, const unsigned char *key, size_t n, int64_t offset,
                          uint64_t h)
{
    Slot *s = find_slot(m, key, n, h);
    size_t need;
    if (s->hash) {
        s->offset = offset;
        return 0;
    }
    if (n <= INLINE_KEY) {
        memcpy(s->key.bytes, key, n);
        goto placed;
    }
    need = m->arena_len + n;
    if (need > m->arena_cap) {
        size_t cap = m->arena_cap ? m->arena_cap : 65536;
        unsigned char *p;
        while (cap < need) {
            if (cap > SIZE_MAX / 2)
                return -1;
            cap *= 2;
        }
        p = realloc(m->arena, cap);
        if (p == NULL)
            return -1;
        m->arena = p;
        m->arena_cap = cap;
    }
    memcpy(m->arena + m->arena_len, key, n);
    s->key.pos = m->arena_len;
    m->arena_len = need;
placed:
    s->hash = h;
    s->offset = offset;
    s->len = (uint32_t)n;
    m->count++;
    if (m->count * 4 >= (m->mask + 1) * 3 && grow_table(m) < 0) {
        /* the key is in; the table stays fuller than we like, which only slows probes,
         * but a full table would loop: refuse once nearly full */
        if (m->count + 1 > m->mask)
            return -1;
    }
    return 0;
}

static int map_put(OffsetMap *m, const unsigned char *key, size_t n, int64_t offset)
{
    return map_put_hashed(m, key, n, offset, hash_key(key, n, m->seed));
}

/* the hashes of the keyed records (keys lie within the section: read_records checked) */
static void hash_records(const OffsetMap *m, const unsigned char *p, Rec *recs, int64_t count)
{
    for (int64_t i = 0; i < count; i++) {
        Rec *r = &recs[i];
        if (r->key_len >= 0)
            r->hash = hash_key(p + r->key, (size_t)r->key_len, m->seed);
    }
}

static inline void prefetch_ahead(const OffsetMap *m, const Rec *recs, int64_t i, int64_t count)
{
    if (i + PREFETCH_AHEAD < count && recs[i + PREFETCH_AHEAD].key_len >= 0)
        prefetch_slot(m, recs[i + PREFETCH_AHEAD].hash);
}

enum { OK = 0, E_CORRUPT = 1, E_NOMEM = 2, FULL = 3 };

static int do_map_records(OffsetMap *m, Cursor *c, Rec *recs, int64_t count, int64_t base,
                          int64_t start)
{
    if (read_records(c, recs, count) < 0)
        return E_CORRUPT;
    hash_records(m, c->p, recs, count);
    for (int64_t i = 0; i < PREFETCH_AHEAD && i < count; i++) {
        if (recs[i].key_len >= 0)
            prefetch_slot(m, recs[i].hash);
    }
    for (int64_t i = 0; i < count; i++) {
        const Rec *r = &recs[i];
        int64_t offset = (int64_t)((uint64_t)base + (uint64_t)r->off_delta);
        prefetch_ahead(m, recs, i, count);
        if (r->key_len < 0 || offset < start)
            continue;
        if ((int64_t)m->count >= m->capacity)
            return FULL;
        if (map_put_hashed(m, c->p + r->key, (size_t)r->key_len, offset, r->hash) < 0)
            return E_NOMEM;
    }
    return OK;
}

/* ---- the rewrite ------------------------------------------------------------------------ */

typedef struct {
    unsigned char *data;
    size_t len;
    size_t cap;
} Out;

static int out_reserve(Out *o, size_t more)
{
    size_t need = o->len + more, cap = o->cap ? o->cap : 4096;
    unsigned char *p;
    if (need < o->len)
        return -1;
    if (need <= o->cap)
        return 0;
    while (cap < need) {
        if (cap > SIZE_MAX / 2)
            return -1;
        cap *= 2;
    }
    p = realloc(o->data, cap);
    if (p == NULL)
        return -1;
    o->data = p;
    o->cap = cap;
    return 0;
}

/* the zigzag varint of v (as batch_rewrite._put_varint) into buf; its length */
static int put_varint(unsigned char *buf, int64_t value)
{
    uint64_t v = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    int n = 0;
    while (v >= 0x80) {
        buf[n++] = (unsigned char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    buf[n++] = (unsigned char)v;
    return n;
}

typedef struct {
    int64_t base_offset;
    int retain_deletes;
    int64_t first_timestamp;
    int has_horizon;
    int64_t new_horizon;
    /* results */
    int64_t kept;
    int rewrite;
    int64_t base_ts;
    int64_t max_ts;
    int stamped;
} FilterArgs;

static int do_filter(const OffsetMap *m, Cursor *c, Rec *recs, int64_t count, FilterArgs *a,
                     unsigned char *keep, Out *out)
{
    int64_t latest = m->latest_offset, first_kept = -1, kept = 0;
    int kept_tombstone = 0;
    const unsigned char *p = c->p;
    if (read_records(c, recs, count) < 0)
        return E_CORRUPT;
    hash_records(m, p, recs, count);
    for (int64_t i = 0; i < PREFETCH_AHEAD && i < count; i++) {
        if (recs[i].key_len >= 0)
            prefetch_slot(m, recs[i].hash);
    }
    for (int64_t i = 0; i < count; i++) {
        const Rec *r = &recs[i];
        int64_t offset = (int64_t)((uint64_t)a->base_offset + (uint64_t)r->off_delta);
        int k;
        prefetch_ahead(m, recs, i, count);
        if (offset > latest)
            k = 1;
        else if (r->key_len < 0)
            k = 0;
        else
            k = offset >= map_get_hashed(m, p + r->key, (size_t)r->key_len, r->hash) &&
                (r->has_value || a->retain_deletes);
        keep[i] = (unsigned char)k;
        if (k) {
            if (first_kept < 0)
                first_kept = i;
            kept++;
            if (!r->has_value)
                kept_tombstone = 1;
        }
    }
    a->kept = kept;
    a->stamped = !a->has_horizon && kept_tombstone;
    a->rewrite = kept > 0 && (kept != count || a->stamped);
    if (!a->rewrite)
        return OK;
    if (a->stamped)
        a->base_ts = a->new_horizon;
    else if (a->has_horizon)
        a->base_ts = a->first_timestamp;
    else
        a->base_ts = (int64_t)((uint64_t)a->first_timestamp + (uint64_t)recs[first_kept].ts_delta);
    a->max_ts = -1;
    for (int64_t i = first_kept; i < count; i++) {
        const Rec *r = &recs[i];
        int64_t ts, delta;
        if (!keep[i])
            continue;
        ts = (int64_t)((uint64_t)a->first_timestamp + (uint64_t)r->ts_delta);
        if (ts > a->max_ts)
            a->max_ts = ts;
        delta = (int64_t)((uint64_t)ts - (uint64_t)a->base_ts);
        if (delta == r->ts_delta) {
            size_t n = r->end - r->start;
            if (out_reserve(out, n) < 0)
                return E_NOMEM;
            memcpy(out->data + out->len, p + r->start, n);
            out->len += n;
        } else {
            unsigned char head[21];
            unsigned char lenbuf[5];
            size_t tail = r->end - r->body;
            int hn = 0, ln;
            head[hn++] = r->attributes;
            hn += put_varint(head + hn, delta);
            hn += put_varint(head + hn, r->off_delta);
            if ((uint64_t)hn + tail > INT32_MAX)
                return E_CORRUPT;
            ln = put_varint(lenbuf, (int64_t)(hn + tail));
            if (out_reserve(out, (size_t)ln + (size_t)hn + tail) < 0)
                return E_NOMEM;
            memcpy(out->data + out->len, lenbuf, (size_t)ln);
            memcpy(out->data + out->len + ln, head, (size_t)hn);
            memcpy(out->data + out->len + ln + hn, p + r->body, tail);
            out->len += (size_t)ln + (size_t)hn + tail;
        }
    }
    return OK;
}

/* ---- the Python type -------------------------------------------------------------------- */

static int check_usable(OffsetMap *self)
{
    if (!self->ready) {
        PyErr_SetString(PyExc_RuntimeError, "OffsetMap.__init__ was not called");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "OffsetMap is in use by another thread");
        return -1;
    }
    return 0;
}

static int raise_for(int rc, const Cursor *c)
{
    if (rc == E_CORRUPT)
        PyErr_Format(corrupt_error ? corrupt_error : PyExc_ValueError,
                     "%s (at byte %zd of the records section)",
                     c->msg ? c->msg : "a record is too long", (Py_ssize_t)c->pos);
    else
        PyErr_NoMemory();
    return -1;
}

/* scratch for `count` records, or NULL with an exception set */
static Rec *alloc_recs(int64_t count, size_t buf_len)
{
    Rec *recs;
    if (count < 0) {
        PyErr_SetString(PyExc_ValueError, "negative record count");
        return NULL;
    }
    /* each record takes at least 2 bytes: more records than that cannot fit */
    if ((uint64_t)count > buf_len / 2 + 1) {
        PyErr_Format(corrupt_error ? corrupt_error : PyExc_ValueError,
                     "record batch declares %lld records in %zd bytes", (long long)count,
                     (Py_ssize_t)buf_len);
        return NULL;
    }
    recs = malloc(((size_t)count + 1) * sizeof(Rec));
    if (recs == NULL)
        PyErr_NoMemory();
    return recs;
}

static int OffsetMap_init(PyObject *op, PyObject *args, PyObject *kwds)
{
    OffsetMap *self = (OffsetMap *)op;
    static char *kwlist[] = {"capacity", "seed", NULL};
    long long capacity;
    unsigned long long seed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "L|K:OffsetMap", kwlist, &capacity, &seed))
        return -1;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "OffsetMap is in use by another thread");
        return -1;
    }
    if (capacity < 0) {
        PyErr_SetString(PyExc_ValueError, "capacity must be >= 0");
        return -1;
    }
    free(self->slots);
    free(self->arena);
    self->arena = NULL;
    self->arena_len = self->arena_cap = 0;
    self->slots = calloc(INITIAL_SLOTS, sizeof(Slot));
    if (self->slots == NULL) {
        self->ready = 0;
        PyErr_NoMemory();
        return -1;
    }
    self->mask = INITIAL_SLOTS - 1;
    self->count = 0;
    self->capacity = capacity;
    self->latest_offset = -1;
    self->seed = seed;
    self->ready = 1;
    return 0;
}

static void OffsetMap_dealloc(PyObject *op)
{
    OffsetMap *self = (OffsetMap *)op;
    PyTypeObject *tp = Py_TYPE(op);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    free(self->slots);
    free(self->arena);
    tp_free(op);
    Py_DECREF(tp);
}

static Py_ssize_t OffsetMap_len(PyObject *op)
{
    return (Py_ssize_t)((OffsetMap *)op)->count;
}

static int key_arg(PyObject *key, Py_buffer *view)
{
    return PyObject_GetBuffer(key, view, PyBUF_SIMPLE);
}

static PyObject *OffsetMap_put(PyObject *op, PyObject *args)
{
    OffsetMap *self = (OffsetMap *)op;
    Py_buffer key;
    long long offset;
    int rc;
    if (!PyArg_ParseTuple(args, "y*L:put", &key, &offset))
        return NULL;
    if (check_usable(self) < 0 || key.len > UINT32_MAX) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "key too long");
        PyBuffer_Release(&key);
        return NULL;
    }
    rc = map_put(self, key.buf, (size_t)key.len, offset);
    PyBuffer_Release(&key);
    if (rc < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *OffsetMap_get(PyObject *op, PyObject *keyobj)
{
    OffsetMap *self = (OffsetMap *)op;
    Py_buffer key;
    int64_t offset;
    if (check_usable(self) < 0 || key_arg(keyobj, &key) < 0)
        return NULL;
    offset = map_get(self, key.buf, (size_t)key.len);
    PyBuffer_Release(&key);
    return PyLong_FromLongLong(offset);
}

static PyObject *OffsetMap_update_latest_offset(PyObject *op, PyObject *arg)
{
    OffsetMap *self = (OffsetMap *)op;
    long long offset = PyLong_AsLongLong(arg);
    if (offset == -1 && PyErr_Occurred())
        return NULL;
    if (offset > self->latest_offset)
        self->latest_offset = offset;
    Py_RETURN_NONE;
}

static PyObject *OffsetMap_map_records(PyObject *op, PyObject *args)
{
    OffsetMap *self = (OffsetMap *)op;
    Py_buffer records;
    long long count, base, start;
    Cursor c = {NULL, 0, 0, NULL};
    Rec *recs;
    int rc;
    if (!PyArg_ParseTuple(args, "y*LLL:map_records", &records, &count, &base, &start))
        return NULL;
    if (check_usable(self) < 0 || (recs = alloc_recs(count, (size_t)records.len)) == NULL) {
        PyBuffer_Release(&records);
        return NULL;
    }
    c.p = records.buf;
    c.len = (size_t)records.len;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = do_map_records(self, &c, recs, count, base, start);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    free(recs);
    PyBuffer_Release(&records);
    if (rc == OK)
        Py_RETURN_TRUE;
    if (rc == FULL)
        Py_RETURN_FALSE;
    raise_for(rc, &c);
    return NULL;
}

static PyObject *OffsetMap_filter_records(PyObject *op, PyObject *args)
{
    OffsetMap *self = (OffsetMap *)op;
    Py_buffer records;
    long long count;
    FilterArgs a;
    Cursor c = {NULL, 0, 0, NULL};
    Out out = {NULL, 0, 0};
    Rec *recs;
    unsigned char *keep;
    PyObject *body, *result;
    int rc;
    memset(&a, 0, sizeof(a));
    if (!PyArg_ParseTuple(args, "y*LLpLpL:filter_records", &records, &count, &a.base_offset,
                          &a.retain_deletes, &a.first_timestamp, &a.has_horizon,
                          &a.new_horizon))
        return NULL;
    if (check_usable(self) < 0 || (recs = alloc_recs(count, (size_t)records.len)) == NULL) {
        PyBuffer_Release(&records);
        return NULL;
    }
    keep = malloc((size_t)count + 1);
    if (keep == NULL) {
        free(recs);
        PyBuffer_Release(&records);
        return PyErr_NoMemory();
    }
    c.p = records.buf;
    c.len = (size_t)records.len;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = do_filter(self, &c, recs, count, &a, keep, &out);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    free(recs);
    free(keep);
    PyBuffer_Release(&records);
    if (rc != OK) {
        free(out.data);
        raise_for(rc, &c);
        return NULL;
    }
    if (a.rewrite) {
        body = PyBytes_FromStringAndSize((const char *)out.data, (Py_ssize_t)out.len);
        free(out.data);
        if (body == NULL)
            return NULL;
    } else {
        free(out.data);
        body = Py_NewRef(Py_None);
    }
    result = Py_BuildValue("(LNLLO)", (long long)a.kept, body, (long long)a.base_ts,
                           (long long)a.max_ts, a.stamped ? Py_True : Py_False);
    return result;
}

static PyObject *get_capacity(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromLongLong(((OffsetMap *)op)->capacity);
}

static PyObject *get_full(PyObject *op, void *closure)
{
    OffsetMap *self = (OffsetMap *)op;
    (void)closure;
    return PyBool_FromLong((int64_t)self->count >= self->capacity);
}

static PyObject *get_latest_offset(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromLongLong(((OffsetMap *)op)->latest_offset);
}

static int set_latest_offset(PyObject *op, PyObject *value, void *closure)
{
    long long v;
    (void)closure;
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "latest_offset cannot be deleted");
        return -1;
    }
    v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred())
        return -1;
    ((OffsetMap *)op)->latest_offset = v;
    return 0;
}

static PyObject *get_memory_bytes(PyObject *op, void *closure)
{
    OffsetMap *self = (OffsetMap *)op;
    (void)closure;
    return PyLong_FromSize_t((self->mask + 1) * sizeof(Slot) + self->arena_cap);
}

static PyMethodDef OffsetMap_methods[] = {
    {"put", OffsetMap_put, METH_VARARGS, "put(key, offset)\n\nMap key to offset."},
    {"get", OffsetMap_get, METH_O, "get(key) -> int\n\nThe mapped offset of key, -1 if none."},
    {"update_latest_offset", OffsetMap_update_latest_offset, METH_O,
     "update_latest_offset(offset)\n\nlatest_offset = max(latest_offset, offset)."},
    {"map_records", OffsetMap_map_records, METH_VARARGS,
     "map_records(records, count, base_offset, start_offset) -> bool\n\nMap the keyed "
     "records at or after start_offset; False when the map filled (the round ends there)."},
    {"filter_records", OffsetMap_filter_records, METH_VARARGS,
     "filter_records(records, count, base_offset, retain_deletes, first_timestamp, "
     "has_horizon, new_horizon) -> (kept, records | None, first_timestamp, max_timestamp, "
     "stamped)\n\nThe records of a data batch that stay, rebuilt (see the module doc)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef OffsetMap_getset[] = {
    {"capacity", get_capacity, NULL, "keys the map may hold", NULL},
    {"full", get_full, NULL, "whether the map holds capacity keys", NULL},
    {"latest_offset", get_latest_offset, set_latest_offset, "the end of the mapped section",
     NULL},
    {"memory_bytes", get_memory_bytes, NULL, "bytes allocated (table and key arena)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot OffsetMap_slots[] = {
    {Py_tp_doc, "OffsetMap(capacity, seed=0)\n\nkey -> latest offset of one cleaning round "
                "(the native twin of offset_map.OffsetMap). One thread at a time."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, OffsetMap_init},
    {Py_tp_dealloc, OffsetMap_dealloc},
    {Py_tp_methods, OffsetMap_methods},
    {Py_tp_getset, OffsetMap_getset},
    {Py_sq_length, OffsetMap_len},
    {0, NULL},
};

static PyType_Spec OffsetMap_spec = {
    "broker.log.cleaner._native_cleaner.OffsetMap",
    sizeof(OffsetMap),
    0,
    Py_TPFLAGS_DEFAULT,
    OffsetMap_slots,
};

/* ---- the module ------------------------------------------------------------------------- */

static PyObject *records_list(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer records;
    long long count;
    Cursor c = {NULL, 0, 0, NULL};
    Rec *recs;
    PyObject *list = NULL;
    int rc;
    if (!PyArg_ParseTuple(args, "y*L:records", &records, &count))
        return NULL;
    if ((recs = alloc_recs(count, (size_t)records.len)) == NULL) {
        PyBuffer_Release(&records);
        return NULL;
    }
    c.p = records.buf;
    c.len = (size_t)records.len;
    rc = read_records(&c, recs, count) < 0 ? E_CORRUPT : OK;
    if (rc != OK) {
        raise_for(rc, &c);
        goto done;
    }
    list = PyList_New((Py_ssize_t)count);
    if (list == NULL)
        goto done;
    for (long long i = 0; i < count; i++) {
        const Rec *r = &recs[i];
        PyObject *key, *item;
        if (r->key_len < 0)
            key = Py_NewRef(Py_None);
        else
            key = PyBytes_FromStringAndSize((const char *)c.p + r->key, (Py_ssize_t)r->key_len);
        if (key == NULL) {
            Py_CLEAR(list);
            goto done;
        }
        item = Py_BuildValue("(nnniLLNO)", (Py_ssize_t)r->start, (Py_ssize_t)r->end,
                             (Py_ssize_t)r->body, (int)r->attributes, (long long)r->ts_delta,
                             (long long)r->off_delta, key, r->has_value ? Py_True : Py_False);
        if (item == NULL) {
            Py_CLEAR(list);
            goto done;
        }
        PyList_SetItem(list, (Py_ssize_t)i, item);
    }
done:
    free(recs);
    PyBuffer_Release(&records);
    return list;
}

static PyObject *set_error_class(PyObject *Py_UNUSED(module), PyObject *cls)
{
    int sub;
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "_set_error_class needs an exception class");
        return NULL;
    }
    sub = PyObject_IsSubclass(cls, PyExc_Exception);
    if (sub < 0)
        return NULL;
    if (!sub) {
        PyErr_SetString(PyExc_TypeError, "_set_error_class needs an Exception subclass");
        return NULL;
    }
    Py_INCREF(cls);
    Py_XDECREF(corrupt_error);
    corrupt_error = cls;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"records", records_list, METH_VARARGS,
     "records(records, count) -> list\n\nThe records as RawRecord fields (start, end, body, "
     "attributes, timestamp_delta, offset_delta, key, has_value)."},
    {"_set_error_class", set_error_class, METH_O,
     "_set_error_class(cls)\n\nThe exception class raised for malformed records."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "broker.log.cleaner._native_cleaner",
    "The log cleaner's record scan and offset map (see broker/log/cleaner/native.py).",
    -1,
    module_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__native_cleaner(void)
{
    PyObject *m = PyModule_Create(&module_def);
    PyObject *tp;
    if (m == NULL)
        return NULL;
    tp = PyType_FromSpec(&OffsetMap_spec);
    if (tp == NULL || PyModule_AddObject(m, "OffsetMap", tp) < 0) {
        Py_XDECREF(tp);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

/* spark_connector.records._native_records: Kafka v2 records decoded into Arrow column buffers.
 *
 * The C twin of spark_connector.records.decoder.PyColumns (read that module's docstring for
 * the record format and the strictness rules): Columns(with_headers).add(records, count,
 * base_offset, base_timestamp, max_timestamp, log_append_time, from_offset, until_offset)
 * decodes `count` records from an uncompressed records section into growable malloc'd
 * buffers already in Arrow's little-endian layout, keeping the records whose offset is in
 * [from_offset, until_offset); take() hands them over, without a copy, as read-only
 * memoryviews (equal byte for byte to PyColumns' bytes; an empty one is b"") and empties the
 * builder, whose next rows grow new buffers from the same capacities.
 *
 * add_batches(blob, start, from_offset, until_offset, max_rows, max_bytes) runs that loop
 * over a whole Fetch response's uncompressed batches in one call (the twin of
 * decoder.add_batches_reference), and scan_batches(blob) counts its complete batches (the
 * twin of decoder.scan_batches_reference), so a reading task spends no Python per batch.
 *
 * Every read is bounds-checked against the record's own length; malformed input raises the
 * error class record_batches hands over with _set_error_class (CorruptRecords; ValueError
 * until then) and leaves the builder as it was. A binary column (or the header list) past
 * 2**31-1 bytes (entries) raises OverflowError.
 *
 * Concurrency: add() releases the GIL while decoding (the records buffer stays exported,
 * so it cannot be resized meanwhile). One Columns belongs to one thread at a time; a second
 * add() or take() while one is decoding raises RuntimeError instead of racing.
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

/* ---- growable buffers ------------------------------------------------------------------ */

typedef struct {
    char *data;
    size_t len; /* bytes in use (bitmaps: unused, their size follows the entry count) */
    size_t cap;
    size_t hint; /* the capacity handed over with the last take(): where growth starts again */
} Buf;

static int buf_grow(Buf *b, size_t need)
{
    size_t cap = b->cap ? b->cap : (b->hint ? b->hint : 256);
    char *p;
    while (cap < need) {
        if (cap > SIZE_MAX / 2)
            return -1;
        cap *= 2;
    }
    p = realloc(b->data, cap);
    if (p == NULL)
        return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

/* room for `need` bytes in total */
static inline int buf_reserve(Buf *b, size_t need)
{
    return need <= b->cap ? 0 : buf_grow(b, need);
}

static inline int buf_append(Buf *b, const unsigned char *src, size_t n)
{
    if (buf_reserve(b, b->len + n) < 0)
        return -1;
    if (n)
        memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static inline void put_i64(Buf *b, size_t index, int64_t v)
{
    uint64_t u = (uint64_t)v;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    u = __builtin_bswap64(u);
#endif
    memcpy(b->data + 8 * index, &u, 8);
}

static inline void put_i32(Buf *b, size_t index, int32_t v)
{
    uint32_t u = (uint32_t)v;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    u = __builtin_bswap32(u);
#endif
    memcpy(b->data + 4 * index, &u, 4);
}

/* set or clear bit `i` of a bitmap with room for it (bits past the count are don't-care) */
static inline void put_bit(Buf *b, size_t i, int valid)
{
    unsigned char *p = (unsigned char *)b->data + (i >> 3);
    unsigned char mask = (unsigned char)(1u << (i & 7));
    if (valid)
        *p |= mask;
    else
        *p &= (unsigned char)~mask;
}

/* ---- the builder ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    int ready;        /* __init__ ran */
    int busy;         /* an add() is decoding without the GIL */
    int with_headers;
    size_t rows;
    size_t headers;   /* header entries held */
    int64_t data_bytes;
    Buf offsets, timestamps, types;                 /* int64, int64, int32 per row */
    Buf key_valid, key_offs, key_data;              /* bitmap, int32 rows+1, bytes */
    Buf value_valid, value_offs, value_data;
    Buf header_valid, header_list_offs;             /* bitmap, int32 rows+1 */
    Buf hkey_offs, hkey_data;                       /* int32 headers+1, bytes */
    Buf hvalue_valid, hvalue_offs, hvalue_data;     /* bitmap, int32 headers+1, bytes */
} Columns;

#define N_BUFS 16

static Buf *bufs(Columns *c, int i)
{
    Buf *all[N_BUFS] = {
        &c->offsets, &c->timestamps, &c->types, &c->key_valid, &c->key_offs, &c->key_data,
        &c->value_valid, &c->value_offs, &c->value_data, &c->header_valid,
        &c->header_list_offs, &c->hkey_offs, &c->hkey_data, &c->hvalue_valid,
        &c->hvalue_offs, &c->hvalue_data,
    };
    return all[i];
}

/* empty the builder; the offset buffers keep their leading 0 entry */
static int columns_reset(Columns *c)
{
    Buf *zeroed[5] = {&c->key_offs, &c->value_offs, &c->header_list_offs, &c->hkey_offs,
                      &c->hvalue_offs};
    int i;
    for (i = 0; i < N_BUFS; i++)
        bufs(c, i)->len = 0;
    for (i = 0; i < 5; i++) {
        if (buf_reserve(zeroed[i], 4) < 0)
            return -1;
        put_i32(zeroed[i], 0, 0);
    }
    c->rows = 0;
    c->headers = 0;
    c->data_bytes = 0;
    return 0;
}

/* ---- decoding (no GIL) ------------------------------------------------------------------ */

enum { OK = 0, E_CORRUPT = 1, E_NOMEM = 2, E_OVERFLOW = 3 };

typedef struct {
    const unsigned char *p;
    const char *msg; /* E_CORRUPT's reason */
} Cursor;

#define CORRUPT(cur, text) \
    do { \
        (cur)->msg = (text); \
        return E_CORRUPT; \
    } while (0)

/* zigzag varint, 32-bit: at most 5 bytes, raw value below 2**32 */
static inline int read_varint(Cursor *cur, const unsigned char *end, int32_t *out)
{
    const unsigned char *p = cur->p;
    uint64_t raw = 0;
    int i;
    if (p < end && !(*p & 0x80)) {
        uint32_t u = *p;
        *out = (int32_t)((u >> 1) ^ (0u - (u & 1)));
        cur->p = p + 1;
        return OK;
    }
    for (i = 0; i < 5; i++) {
        unsigned b;
        if (p >= end)
            CORRUPT(cur, "truncated varint");
        b = *p++;
        raw |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            uint32_t u;
            if (raw > 0xffffffffu)
                CORRUPT(cur, "varint out of range");
            u = (uint32_t)raw;
            *out = (int32_t)((u >> 1) ^ (0u - (u & 1)));
            cur->p = p;
            return OK;
        }
    }
    CORRUPT(cur, "varint longer than 5 bytes");
}

/* zigzag varlong: at most 10 bytes, raw value below 2**64 */
static inline int read_varlong(Cursor *cur, const unsigned char *end, int64_t *out)
{
    const unsigned char *p = cur->p;
    uint64_t raw = 0;
    int i;
    for (i = 0; i < 10; i++) {
        unsigned b;
        if (p >= end)
            CORRUPT(cur, "truncated varlong");
        b = *p++;
        if (i == 9 && !(b & 0x80) && (b & 0x7f) > 1)
            CORRUPT(cur, "varlong out of range");
        raw |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = (int64_t)((raw >> 1) ^ (0u - (raw & 1)));
            cur->p = p;
            return OK;
        }
    }
    CORRUPT(cur, "varlong longer than 10 bytes");
}

/* a length-prefixed field: *len -1 is null (no bytes), below -1 corrupt */
static inline int read_field(Cursor *cur, const unsigned char *end, const unsigned char **at,
                             int32_t *len)
{
    int rc = read_varint(cur, end, len);
    if (rc)
        return rc;
    if (*len == -1) {
        *at = NULL;
        return OK;
    }
    if (*len < -1 || *len > end - cur->p)
        CORRUPT(cur, "bad record field length");
    *at = cur->p;
    cur->p += *len;
    return OK;
}

/* strict UTF-8, as Python's bytes.decode("utf-8") accepts it */
static int valid_utf8(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) {
            if (n - i < 2 || (s[i + 1] & 0xc0) != 0x80)
                return 0;
            i += 2;
        }
        else if (c >= 0xe0 && c <= 0xef) {
            unsigned lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
            if (n - i < 3 || s[i + 1] < lo || s[i + 1] > hi || (s[i + 2] & 0xc0) != 0x80)
                return 0;
            i += 3;
        }
        else if (c >= 0xf0 && c <= 0xf4) {
            unsigned lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
            if (n - i < 4 || s[i + 1] < lo || s[i + 1] > hi || (s[i + 2] & 0xc0) != 0x80 ||
                (s[i + 3] & 0xc0) != 0x80)
                return 0;
            i += 4;
        }
        else
            return 0;
    }
    return 1;
}

typedef struct {
    Py_ssize_t count;
    int64_t base_offset, base_timestamp, max_timestamp, from_offset, until_offset;
    int log_append_time;
} AddArgs;

/* Decode a records section into the builder; on error the caller rolls back. */
static int decode(Columns *c, const unsigned char *data, size_t size, const AddArgs *a,
                  size_t *added, Cursor *cur)
{
    const unsigned char *end = data + size;
    const int with_headers = c->with_headers;
    const int32_t ts_type = a->log_append_time ? 1 : 0;
    size_t most = a->count < 0 ? 0 : (size_t)a->count;
    size_t row = c->rows, rows_cap, bitmap_cap;
    Py_ssize_t i;

    cur->p = data;
    if (a->count < 0)
        CORRUPT(cur, "negative record count");
    /* a record takes at least 7 bytes, so no more rows than that can come of this section */
    if (most > size / 7 + 1)
        most = size / 7 + 1;
    rows_cap = row + most;
    bitmap_cap = (rows_cap + 7) / 8;
    if (buf_reserve(&c->offsets, 8 * rows_cap) || buf_reserve(&c->timestamps, 8 * rows_cap) ||
        buf_reserve(&c->types, 4 * rows_cap) || buf_reserve(&c->key_valid, bitmap_cap) ||
        buf_reserve(&c->key_offs, 4 * (rows_cap + 1)) ||
        buf_reserve(&c->value_valid, bitmap_cap) ||
        buf_reserve(&c->value_offs, 4 * (rows_cap + 1)))
        return E_NOMEM;
    if (with_headers && (buf_reserve(&c->header_valid, bitmap_cap) ||
                         buf_reserve(&c->header_list_offs, 4 * (rows_cap + 1))))
        return E_NOMEM;

    for (i = 0; i < a->count; i++) {
        int32_t length, offset_delta, key_len, value_len, n_headers, h;
        int64_t ts_delta, offset, ts_ms, ts_us;
        const unsigned char *rend, *key, *value;
        size_t row_headers = 0;
        int keep, rc;

        if ((rc = read_varint(cur, end, &length)))
            return rc;
        if (length < 0 || length > end - cur->p)
            CORRUPT(cur, "record runs past the end of its batch");
        rend = cur->p + length;
        if (cur->p >= rend)
            CORRUPT(cur, "truncated record");
        cur->p++; /* attributes */
        if ((rc = read_varlong(cur, rend, &ts_delta)) ||
            (rc = read_varint(cur, rend, &offset_delta)))
            return rc;
        if (__builtin_add_overflow(a->base_offset, (int64_t)offset_delta, &offset))
            CORRUPT(cur, "record offset out of range");
        if (a->log_append_time)
            ts_ms = a->max_timestamp;
        else if (__builtin_add_overflow(a->base_timestamp, ts_delta, &ts_ms))
            CORRUPT(cur, "record timestamp out of range");
        if (__builtin_mul_overflow(ts_ms, (int64_t)1000, &ts_us))
            CORRUPT(cur, "record timestamp out of range");
        keep = a->from_offset <= offset && offset < a->until_offset;
        if ((rc = read_field(cur, rend, &key, &key_len)) ||
            (rc = read_field(cur, rend, &value, &value_len)) ||
            (rc = read_varint(cur, rend, &n_headers)))
            return rc;
        if (n_headers < 0)
            CORRUPT(cur, "negative header count");
        for (h = 0; h < n_headers; h++) {
            int32_t hk_len, hv_len;
            const unsigned char *hkey, *hvalue;
            if ((rc = read_varint(cur, rend, &hk_len)))
                return rc;
            if (hk_len < 0 || hk_len > rend - cur->p)
                CORRUPT(cur, "bad header key length");
            hkey = cur->p;
            cur->p += hk_len;
            if ((rc = read_field(cur, rend, &hvalue, &hv_len)))
                return rc;
            if (!with_headers)
                continue;
            if (!valid_utf8(hkey, (size_t)hk_len))
                CORRUPT(cur, "header key is not UTF-8");
            if (keep) {
                size_t e = c->headers + row_headers;
                if (buf_reserve(&c->hkey_offs, 4 * (e + 2)) ||
                    buf_reserve(&c->hvalue_offs, 4 * (e + 2)) ||
                    buf_reserve(&c->hvalue_valid, (e + 8) / 8) ||
                    buf_append(&c->hkey_data, hkey, (size_t)hk_len) ||
                    buf_append(&c->hvalue_data, hvalue, hv_len < 0 ? 0 : (size_t)hv_len))
                    return E_NOMEM;
                put_i32(&c->hkey_offs, e + 1, (int32_t)c->hkey_data.len);
                put_i32(&c->hvalue_offs, e + 1, (int32_t)c->hvalue_data.len);
                put_bit(&c->hvalue_valid, e, hvalue != NULL);
                c->data_bytes += (int64_t)hk_len + (hv_len < 0 ? 0 : hv_len);
                row_headers++;
            }
        }
        if (cur->p != rend)
            CORRUPT(cur, "record length does not match its fields");
        if (!keep)
            continue;
        if (buf_append(&c->key_data, key, key_len < 0 ? 0 : (size_t)key_len) ||
            buf_append(&c->value_data, value, value_len < 0 ? 0 : (size_t)value_len))
            return E_NOMEM;
        c->data_bytes += (int64_t)(key_len < 0 ? 0 : key_len) + (value_len < 0 ? 0 : value_len);
        if (with_headers)
            c->headers += row_headers;
        if (c->key_data.len > INT32_MAX || c->value_data.len > INT32_MAX ||
            c->headers > INT32_MAX || c->hkey_data.len > INT32_MAX ||
            c->hvalue_data.len > INT32_MAX)
            return E_OVERFLOW;
        put_i64(&c->offsets, row, offset);
        put_i64(&c->timestamps, row, ts_us);
        put_i32(&c->types, row, ts_type);
        put_bit(&c->key_valid, row, key != NULL);
        put_i32(&c->key_offs, row + 1, (int32_t)c->key_data.len);
        put_bit(&c->value_valid, row, value != NULL);
        put_i32(&c->value_offs, row + 1, (int32_t)c->value_data.len);
        if (with_headers) {
            put_bit(&c->header_valid, row, row_headers > 0);
            put_i32(&c->header_list_offs, row + 1, (int32_t)c->headers);
        }
        row++;
        c->rows = row;
        (*added)++;
    }
    if (cur->p != end)
        CORRUPT(cur, "bytes after the batch's last record");
    return OK;
}

/* decode() all or nothing: on an error the builder is left as it was before the call. */
static int decode_whole(Columns *c, const unsigned char *data, size_t size, const AddArgs *a,
                        size_t *added, Cursor *cur)
{
    size_t saved_lens[N_BUFS];
    size_t saved_rows = c->rows, saved_headers = c->headers;
    int64_t saved_data_bytes = c->data_bytes;
    int i, rc;

    for (i = 0; i < N_BUFS; i++)
        saved_lens[i] = bufs(c, i)->len;
    rc = decode(c, data, size, a, added, cur);
    if (rc != OK) {
        for (i = 0; i < N_BUFS; i++)
            bufs(c, i)->len = saved_lens[i];
        c->rows = saved_rows;
        c->headers = saved_headers;
        c->data_bytes = saved_data_bytes;
    }
    return rc;
}

/* ---- a Fetch response's batches (no GIL) ------------------------------------------------ */

enum { RUN_DONE = 0, RUN_FULL = 1, RUN_PYTHON = 2, RUN_UNTIL = 3 };

static inline uint32_t be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t be64(const unsigned char *p)
{
    return ((uint64_t)be32(p) << 32) | be32(p + 4);
}

typedef struct {
    int64_t from_offset, until_offset, max_bytes;
    size_t max_rows;
} RunArgs;

/* Batch header fields (v2): base offset @0, length @8, magic @16, attributes @21, last
 * offset delta @23, base timestamp @27, max timestamp @35, record count @57, records @61. */
#define BATCH_HEADER 61
#define BATCH_OVERHEAD 12

enum { FRAME_OK = 0, FRAME_PARTIAL = 1, FRAME_IRREGULAR = 2 };

/* The batch at byte p of blob[0:n]: FRAME_OK with *end (its end) and *next (the offset after
 * it); FRAME_PARTIAL when the blob ends inside it (a Fetch's truncated last batch) or before
 * its magic byte; FRAME_IRREGULAR for a header the Python reference path must report (not
 * magic 2, a length below 49) or offsets past int64. decoder.iter_batches' framing. */
static int frame_batch(const unsigned char *blob, size_t n, size_t p, size_t *end,
                       int64_t *next)
{
    const unsigned char *b = blob + p;
    uint32_t length;
    int64_t last;
    if (n - p < BATCH_OVERHEAD + 5)
        return FRAME_PARTIAL;
    length = be32(b + 8);
    if (b[16] != 2 || length < BATCH_HEADER - BATCH_OVERHEAD || length > (uint32_t)INT32_MAX)
        return FRAME_IRREGULAR;
    *end = p + BATCH_OVERHEAD + (size_t)length;
    if (*end > n)
        return FRAME_PARTIAL;
    if (__builtin_add_overflow((int64_t)be64(b), (int64_t)(int32_t)be32(b + 23), &last) ||
        __builtin_add_overflow(last, (int64_t)1, next))
        return FRAME_IRREGULAR;
    return FRAME_OK;
}

/* Decode the uncompressed batches of `blob` from byte *pos on (see add_batches' doc). Each
 * batch decodes whole or not at all; on an error *pos is the failing batch's start and
 * *section_at the error's byte within its records section. */
static int decode_run(Columns *c, const unsigned char *blob, size_t n, const RunArgs *r,
                      size_t *pos, int *status, Cursor *cur, Py_ssize_t *section_at)
{
    size_t p = *pos;

    *status = RUN_DONE;
    for (;;) {
        const unsigned char *b = blob + p;
        int64_t base, next;
        unsigned attributes;
        size_t end, added = 0;
        AddArgs a;
        int rc, framed = frame_batch(blob, n, p, &end, &next);

        if (framed == FRAME_PARTIAL)
            break;
        if (framed == FRAME_IRREGULAR) {
            *status = RUN_PYTHON; /* the reference path raises the right error */
            break;
        }
        base = (int64_t)be64(b);
        attributes = ((unsigned)b[21] << 8) | b[22];
        if (next <= r->from_offset) {
            p = end;
            continue;
        }
        if (base >= r->until_offset) {
            *status = RUN_UNTIL;
            break;
        }
        if (attributes & 32) { /* a control batch: never a row */
            p = end;
            continue;
        }
        if (attributes & 7) { /* compressed: decompressed by the caller */
            *status = RUN_PYTHON;
            break;
        }
        a.count = (Py_ssize_t)(int32_t)be32(b + 57);
        a.base_offset = base;
        a.base_timestamp = (int64_t)be64(b + 27);
        a.max_timestamp = (int64_t)be64(b + 35);
        a.log_append_time = (attributes & 8) != 0;
        a.from_offset = r->from_offset;
        a.until_offset = r->until_offset;
        rc = decode_whole(c, b + BATCH_HEADER, end - p - BATCH_HEADER, &a, &added, cur);
        if (rc != OK) {
            *section_at = cur->p ? (Py_ssize_t)(cur->p - (b + BATCH_HEADER)) : 0;
            *pos = p;
            return rc;
        }
        p = end;
        if (c->rows >= r->max_rows || c->data_bytes >= r->max_bytes) {
            *status = RUN_FULL;
            break;
        }
    }
    *pos = p;
    return OK;
}

/* ---- the Python type -------------------------------------------------------------------- */

static int Columns_init(PyObject *op, PyObject *args, PyObject *kwds)
{
    Columns *self = (Columns *)op;
    static char *kwlist[] = {"with_headers", NULL};
    int with_headers;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "p:Columns", kwlist, &with_headers))
        return -1;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Columns is in use by another thread");
        return -1;
    }
    self->with_headers = with_headers;
    if (columns_reset(self) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    self->ready = 1;
    return 0;
}

static void Columns_dealloc(PyObject *op)
{
    Columns *self = (Columns *)op;
    PyTypeObject *tp = Py_TYPE(op);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    int i;
    for (i = 0; i < N_BUFS; i++)
        free(bufs(self, i)->data);
    tp_free(op);
    Py_DECREF(tp);
}

static int check_usable(Columns *self)
{
    if (!self->ready) {
        PyErr_SetString(PyExc_RuntimeError, "Columns.__init__ was not called");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Columns is in use by another thread");
        return -1;
    }
    return 0;
}

/* The exception for a failed decode (rc), `at` the byte of the records section; NULL. */
static PyObject *decode_error(int rc, const Cursor *cur, Py_ssize_t at)
{
    if (rc == E_CORRUPT)
        PyErr_Format(corrupt_error, "%s (at byte %zd of the records section)", cur->msg, at);
    else if (rc == E_OVERFLOW)
        PyErr_SetString(PyExc_OverflowError, "a column passed 2**31-1 bytes: take() sooner");
    else
        PyErr_NoMemory();
    return NULL;
}

static PyObject *Columns_add(PyObject *op, PyObject *args)
{
    Columns *self = (Columns *)op;
    Py_buffer records;
    AddArgs a;
    Cursor cur = {NULL, NULL};
    size_t added = 0;
    int rc;

    if (!PyArg_ParseTuple(args, "y*nLLLpLL:add", &records, &a.count, &a.base_offset,
                          &a.base_timestamp, &a.max_timestamp, &a.log_append_time,
                          &a.from_offset, &a.until_offset))
        return NULL;
    if (check_usable(self) < 0) {
        PyBuffer_Release(&records);
        return NULL;
    }
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = decode_whole(self, (const unsigned char *)records.buf, (size_t)records.len, &a, &added,
                      &cur);
    Py_END_ALLOW_THREADS
    self->busy = 0;

    if (rc != OK) {
        Py_ssize_t at = cur.p ? (Py_ssize_t)(cur.p - (const unsigned char *)records.buf) : 0;
        PyBuffer_Release(&records);
        return decode_error(rc, &cur, at);
    }
    PyBuffer_Release(&records);
    return PyLong_FromSize_t(added);
}

static PyObject *Columns_add_batches(PyObject *op, PyObject *args)
{
    Columns *self = (Columns *)op;
    Py_buffer blob;
    Py_ssize_t start, max_rows, section_at = 0;
    RunArgs r;
    Cursor cur = {NULL, NULL};
    size_t pos;
    int status = RUN_DONE, rc;

    if (!PyArg_ParseTuple(args, "y*nLLnL:add_batches", &blob, &start, &r.from_offset,
                          &r.until_offset, &max_rows, &r.max_bytes))
        return NULL;
    if (check_usable(self) < 0) {
        PyBuffer_Release(&blob);
        return NULL;
    }
    if (start < 0 || start > blob.len || max_rows < 1) {
        PyBuffer_Release(&blob);
        PyErr_SetString(PyExc_ValueError, "add_batches: start outside the blob or max_rows < 1");
        return NULL;
    }
    r.max_rows = (size_t)max_rows;
    pos = (size_t)start;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = decode_run(self, (const unsigned char *)blob.buf, (size_t)blob.len, &r, &pos, &status,
                    &cur, &section_at);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyBuffer_Release(&blob);
    if (rc != OK)
        return decode_error(rc, &cur, section_at);
    return Py_BuildValue("(ni)", (Py_ssize_t)pos, status);
}

/* ---- take(): the buffers handed over, not copied --------------------------------------- */

/* A read-only buffer owning memory a Columns builder filled (freed with it): take() hands
 * its buffers over as memoryviews of Chunks, so pyarrow wraps them without a copy. */
typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t len;
} Chunk;

static PyObject *chunk_type = NULL; /* strong reference, set at module init */

static int Chunk_getbuffer(PyObject *op, Py_buffer *view, int flags)
{
    Chunk *self = (Chunk *)op;
    return PyBuffer_FillInfo(view, op, self->data, self->len, 1, flags);
}

static void Chunk_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    free(((Chunk *)op)->data);
    tp_free(op);
    Py_DECREF(tp);
}

static PyType_Slot Chunk_slots[] = {
    {Py_tp_doc, "Memory a Columns builder filled, handed over by take() (read-only buffer)."},
    {Py_tp_dealloc, Chunk_dealloc},
    {Py_bf_getbuffer, Chunk_getbuffer},
    {0, NULL},
};

static PyType_Spec Chunk_spec = {
    "spark_connector.records._native_records.Chunk",
    sizeof(Chunk),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    Chunk_slots,
};

/* The first `n` bytes of `b` as a memoryview, the memory handed over (the builder's next
 * rows grow a new buffer from the same capacity); b"" when empty. */
static PyObject *bytes_of(Buf *b, size_t n)
{
    Chunk *chunk;
    PyObject *view;
    if (n == 0)
        return PyBytes_FromStringAndSize(NULL, 0);
    chunk = (Chunk *)PyType_GenericAlloc((PyTypeObject *)chunk_type, 0);
    if (chunk == NULL)
        return NULL;
    chunk->data = b->data;
    chunk->len = (Py_ssize_t)n;
    b->hint = b->cap;
    b->data = NULL;
    b->cap = 0;
    b->len = 0;
    view = PyMemoryView_FromObject((PyObject *)chunk);
    Py_DECREF(chunk);
    return view;
}

/* a validity bitmap of `bits` entries, the unused bits of its last byte zeroed */
static PyObject *bitmap_of(Buf *b, size_t bits)
{
    size_t n = (bits + 7) / 8;
    if (n && bits % 8) {
        unsigned char *last = (unsigned char *)b->data + n - 1;
        *last = (unsigned char)(*last & ((1u << (bits % 8)) - 1));
    }
    return bytes_of(b, n);
}

static PyObject *Columns_take(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    Columns *self = (Columns *)op;
    PyObject *items[17];
    PyObject *out;
    size_t n, h;
    int i, k = 0;

    if (check_usable(self) < 0)
        return NULL;
    n = self->rows;
    h = self->headers;
    memset(items, 0, sizeof(items));
    items[k++] = PyLong_FromSize_t(n);
    items[k++] = bytes_of(&self->offsets, 8 * n);
    items[k++] = bytes_of(&self->timestamps, 8 * n);
    items[k++] = bytes_of(&self->types, 4 * n);
    items[k++] = bitmap_of(&self->key_valid, n);
    items[k++] = bytes_of(&self->key_offs, 4 * (n + 1));
    items[k++] = bytes_of(&self->key_data, self->key_data.len);
    items[k++] = bitmap_of(&self->value_valid, n);
    items[k++] = bytes_of(&self->value_offs, 4 * (n + 1));
    items[k++] = bytes_of(&self->value_data, self->value_data.len);
    if (self->with_headers) {
        items[k++] = bitmap_of(&self->header_valid, n);
        items[k++] = bytes_of(&self->header_list_offs, 4 * (n + 1));
        items[k++] = bytes_of(&self->hkey_offs, 4 * (h + 1));
        items[k++] = bytes_of(&self->hkey_data, self->hkey_data.len);
        items[k++] = bitmap_of(&self->hvalue_valid, h);
        items[k++] = bytes_of(&self->hvalue_offs, 4 * (h + 1));
        items[k++] = bytes_of(&self->hvalue_data, self->hvalue_data.len);
    }
    else {
        for (; k < 17; k++)
            items[k] = Py_NewRef(Py_None);
    }
    for (i = 0; i < 17; i++) {
        if (items[i] == NULL)
            goto fail;
    }
    out = PyTuple_New(17);
    if (out == NULL)
        goto fail;
    for (i = 0; i < 17; i++)
        PyTuple_SetItem(out, i, items[i]); /* steals */
    if (columns_reset(self) < 0) {
        Py_DECREF(out);
        return PyErr_NoMemory();
    }
    return out;
fail:
    for (i = 0; i < 17; i++)
        Py_XDECREF(items[i]);
    /* some buffers went with the freed items: the rows are gone, the builder starts over */
    if (columns_reset(self) < 0 && !PyErr_Occurred())
        PyErr_NoMemory();
    return NULL;
}

static PyObject *Columns_get_rows(PyObject *op, void *Py_UNUSED(closure))
{
    return PyLong_FromSize_t(((Columns *)op)->rows);
}

static PyObject *Columns_get_data_bytes(PyObject *op, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(((Columns *)op)->data_bytes);
}

static PyObject *Columns_get_with_headers(PyObject *op, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(((Columns *)op)->with_headers);
}

static PyMethodDef Columns_methods[] = {
    {"add", Columns_add, METH_VARARGS,
     "add(records, count, base_offset, base_timestamp, max_timestamp, log_append_time, "
     "from_offset, until_offset) -> int\n\nDecode `count` records, keeping those whose offset "
     "is in [from_offset, until_offset); returns how many were kept."},
    {"add_batches", Columns_add_batches, METH_VARARGS,
     "add_batches(blob, start, from_offset, until_offset, max_rows, max_bytes) -> "
     "(pos, status)\n\nDecode a Fetch response's uncompressed batches from byte `start` "
     "(see decoder.add_batches_reference); status 0 done, 1 full, 2 the batch at pos needs "
     "the caller, 3 a batch at or past until_offset."},
    {"take", Columns_take, METH_NOARGS,
     "take() -> tuple\n\nThe held rows as Arrow buffers (bytes); empties the builder."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Columns_getset[] = {
    {"rows", Columns_get_rows, NULL, "rows held", NULL},
    {"data_bytes", Columns_get_data_bytes, NULL, "key, value and header bytes held", NULL},
    {"with_headers", Columns_get_with_headers, NULL, "whether headers are kept", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Columns_slots[] = {
    {Py_tp_doc, "Columns(with_headers)\n\nKafka v2 records decoded into Arrow column buffers "
                "(the native twin of record_batches.PyColumns). One thread at a time."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, Columns_init},
    {Py_tp_dealloc, Columns_dealloc},
    {Py_tp_methods, Columns_methods},
    {Py_tp_getset, Columns_getset},
    {0, NULL},
};

static PyType_Spec Columns_spec = {
    "spark_connector.records._native_records.Columns",
    sizeof(Columns),
    0,
    Py_TPFLAGS_DEFAULT,
    Columns_slots,
};

/* ---- the module ------------------------------------------------------------------------- */

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

static PyObject *scan_batches(PyObject *Py_UNUSED(module), PyObject *arg)
{
    Py_buffer blob;
    const unsigned char *buf;
    size_t n, p = 0;
    Py_ssize_t count = 0;
    int64_t next, last = -1;
    size_t end;
    int framed;

    if (PyObject_GetBuffer(arg, &blob, PyBUF_SIMPLE) < 0)
        return NULL;
    buf = (const unsigned char *)blob.buf;
    n = (size_t)blob.len;
    while ((framed = frame_batch(buf, n, p, &end, &next)) == FRAME_OK) {
        count++;
        last = next;
        p = end;
    }
    PyBuffer_Release(&blob);
    if (framed == FRAME_IRREGULAR)
        return Py_BuildValue("(nL)", (Py_ssize_t)-1, (long long)-1);
    return Py_BuildValue("(nL)", count, (long long)last);
}

static PyMethodDef module_methods[] = {
    {"scan_batches", scan_batches, METH_O,
     "scan_batches(blob) -> (count, next_offset)\n\nThe complete batches of a Fetch "
     "response's records and the offset after the last (-1 without one); count -1 when a "
     "header is not a regular v2 one (see decoder.scan_batches_reference)."},
    {"_set_error_class", set_error_class, METH_O,
     "_set_error_class(cls)\n\nThe exception class raised for malformed records."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "spark_connector.records._native_records",
    "Kafka v2 records decoded into Arrow column buffers (see record_batches).",
    -1,
    module_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__native_records(void)
{
    PyObject *m, *tp;
    m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    if (corrupt_error == NULL)
        corrupt_error = Py_NewRef(PyExc_ValueError);
    chunk_type = PyType_FromSpec(&Chunk_spec);
    if (chunk_type == NULL) {
        Py_DECREF(m);
        return NULL;
    }
    tp = PyType_FromSpec(&Columns_spec);
    if (tp == NULL || PyModule_AddObjectRef(m, "Columns", tp) < 0) {
        Py_XDECREF(tp);
        Py_DECREF(m);
        return NULL;
    }
    Py_DECREF(tp);
    return m;
}

/* spark_connector.records._native_batches: Arrow binary columns encoded as Kafka v2 records, and
 * record keys hashed to partitions, for the Spark writer's batch producer.
 *
 * The C twin of spark_connector.records.encoder (read its docstring for the formats):
 *
 *   partition_keys(column, num_partitions) -> bytes
 *       one little-endian int32 per row: toPositive(murmur2(key)) % num_partitions (Kafka's
 *       default partitioner), -1 for a null key.
 *   encode_records(keys, values, rows, start, stop, max_bytes[, headers[, delta_base[,
 *                  timestamp_delta]]]) -> (bytes, taken)
 *       the records section of a v2 batch holding rows[start], rows[start + 1], ... (all
 *       with timestampDelta `timestamp_delta` (default 0), offsetDelta delta_base,
 *       delta_base + 1, ... (default 0: a batch's first records; more: records appended to
 *       a batch already holding delta_base records)), stopping before `stop` or before the
 *       record that would take the section past max_bytes (the first record is always
 *       taken); `taken` is how many rows it holds. `headers`, a column like the others, holds
 *       each row's whole headers section already encoded (header count varint, then the
 *       headers); a null or absent one is a header count of 0.
 *
 * A column is the tuple (offsets, data, validity, wide, first, length) of an Arrow
 * (large_)binary or (large_)string array: its offsets buffer (int32, or int64 when `wide`),
 * data buffer, validity bitmap or None, the array's offset into its buffers, and its length.
 * `keys` may be None (every key null). `rows` is a buffer of little-endian int64 row numbers
 * (0 <= row < length) or None for rows start .. stop - 1.
 *
 * Every offset and row number is bounds-checked against the buffers (ValueError otherwise);
 * a record past 2**31-1 bytes raises OverflowError.
 *
 * Concurrency: both functions release the GIL while they work (the buffers stay exported,
 * so they cannot be resized meanwhile); they keep no state and may run in any thread.
 *
 * Uses only the stable ABI of Python 3.11.
 */
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030B0000
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- columns ----------------------------------------------------------------------------- */

typedef struct {
    Py_buffer offsets, data, validity;
    int has_validity, wide, held;
    Py_ssize_t first, length;
} Column;

static void column_release(Column *c)
{
    if (!c->held)
        return;
    PyBuffer_Release(&c->offsets);
    PyBuffer_Release(&c->data);
    if (c->has_validity)
        PyBuffer_Release(&c->validity);
    c->held = 0;
}

/* fills `c` from the (offsets, data, validity, wide, first, length) tuple; 0 or -1 */
static int column_from(PyObject *spec, Column *c)
{
    PyObject *offsets, *data, *validity;
    int wide;
    memset(c, 0, sizeof(*c));
    if (!PyArg_ParseTuple(spec, "OOOpnn:column", &offsets, &data, &validity, &wide, &c->first,
                          &c->length))
        return -1;
    if (c->first < 0 || c->length < 0) {
        PyErr_SetString(PyExc_ValueError, "a column's first and length must be >= 0");
        return -1;
    }
    if (PyObject_GetBuffer(offsets, &c->offsets, PyBUF_SIMPLE) < 0)
        return -1;
    if (PyObject_GetBuffer(data, &c->data, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&c->offsets);
        return -1;
    }
    if (validity != Py_None) {
        if (PyObject_GetBuffer(validity, &c->validity, PyBUF_SIMPLE) < 0) {
            PyBuffer_Release(&c->offsets);
            PyBuffer_Release(&c->data);
            return -1;
        }
        c->has_validity = 1;
    }
    c->wide = wide;
    c->held = 1;
    {
        size_t width = wide ? 8 : 4;
        size_t entries = (size_t)c->first + (size_t)c->length + 1;
        if ((size_t)c->offsets.len / width < entries ||
            (c->has_validity && (size_t)c->validity.len * 8 < entries - 1)) {
            column_release(c);
            PyErr_SetString(PyExc_ValueError, "a column's buffers are shorter than its length");
            return -1;
        }
    }
    return 0;
}

enum { OK = 0, E_BOUNDS = 1, E_OVERFLOW = 2, E_MEMORY = 3 };

/* the bytes of row `row` (-1 in *len for null); OK or E_BOUNDS */
static inline int column_get(const Column *c, Py_ssize_t row, const unsigned char **at,
                             int64_t *len)
{
    size_t i;
    int64_t lo, hi;
    if (row < 0 || row >= c->length)
        return E_BOUNDS;
    i = (size_t)(c->first + row);
    if (c->has_validity) {
        const unsigned char *bits = (const unsigned char *)c->validity.buf;
        if (!(bits[i >> 3] & (1u << (i & 7)))) {
            *at = NULL;
            *len = -1;
            return OK;
        }
    }
    if (c->wide) {
        int64_t o[2];
        memcpy(o, (const char *)c->offsets.buf + 8 * i, 16);
        lo = o[0];
        hi = o[1];
    } else {
        int32_t o[2];
        memcpy(o, (const char *)c->offsets.buf + 4 * i, 8);
        lo = o[0];
        hi = o[1];
    }
    if (lo < 0 || hi < lo || hi > (int64_t)c->data.len)
        return E_BOUNDS;
    *at = (const unsigned char *)c->data.buf + lo;
    *len = hi - lo;
    return OK;
}

/* ---- partition_keys ------------------------------------------------------------------------ */

/* Kafka's Utils.murmur2: MurmurHash2, seed 0x9747b28c, little-endian words, Java int maths */
static uint32_t murmur2(const unsigned char *d, size_t n)
{
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)n;
    size_t i, n4 = n / 4;
    for (i = 0; i < n4; i++) {
        const unsigned char *p = d + 4 * i;
        uint32_t k = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
                     ((uint32_t)p[3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    d += n & ~(size_t)3;
    switch (n & 3) {
    case 3:
        h ^= (uint32_t)d[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)d[1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)d[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

static PyObject *partition_keys(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *spec, *out;
    Column c;
    int num_partitions, rc = OK;
    Py_ssize_t row;
    int32_t *dst;
    if (!PyArg_ParseTuple(args, "Oi:partition_keys", &spec, &num_partitions))
        return NULL;
    if (num_partitions <= 0) {
        PyErr_SetString(PyExc_ValueError, "num_partitions must be > 0");
        return NULL;
    }
    if (column_from(spec, &c) < 0)
        return NULL;
    out = PyBytes_FromStringAndSize(NULL, c.length * 4);
    if (out == NULL) {
        column_release(&c);
        return NULL;
    }
    dst = (int32_t *)PyBytes_AsString(out);
    Py_BEGIN_ALLOW_THREADS
    for (row = 0; row < c.length; row++) {
        const unsigned char *at;
        int64_t len;
        int32_t p;
        rc = column_get(&c, row, &at, &len);
        if (rc != OK)
            break;
        p = len < 0 ? -1 : (int32_t)((murmur2(at, (size_t)len) & 0x7fffffffu) %
                                     (uint32_t)num_partitions);
        memcpy(dst + row, &p, 4); /* little-endian hosts only: see record_encoder */
    }
    Py_END_ALLOW_THREADS
    column_release(&c);
    if (rc != OK) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_ValueError, "a key column's offsets point outside its data");
        return NULL;
    }
    return out;
}

/* ---- encode_records ------------------------------------------------------------------------ */

static inline size_t varint_size(uint64_t zz)
{
    size_t n = 1;
    while (zz >= 0x80) {
        zz >>= 7;
        n++;
    }
    return n;
}

static inline uint64_t zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline unsigned char *put_varint(unsigned char *p, uint64_t zz)
{
    while (zz >= 0x80) {
        *p++ = (unsigned char)(zz | 0x80);
        zz >>= 7;
    }
    *p++ = (unsigned char)zz;
    return p;
}

typedef struct {
    unsigned char *data;
    size_t len, cap;
} Out;

static int out_reserve(Out *o, size_t need)
{
    size_t cap;
    unsigned char *p;
    if (o->len + need <= o->cap)
        return 0;
    cap = o->cap ? o->cap : 4096;
    while (cap < o->len + need) {
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

typedef struct {
    const Column *keys; /* NULL: every key null */
    const Column *values;
    const Column *headers; /* NULL: no headers */
    const int64_t *rows; /* NULL: identity */
    Py_ssize_t rows_len, start, stop;
    int64_t max_bytes;
    int64_t delta_base, timestamp_delta;
} EncodeArgs;

static int encode(const EncodeArgs *a, Out *o, Py_ssize_t *taken)
{
    Py_ssize_t k;
    for (k = a->start; k < a->stop; k++) {
        int64_t row = a->rows ? a->rows[k] : (int64_t)k;
        const unsigned char *key = NULL, *value = NULL, *hdrs = NULL;
        int64_t klen = -1, vlen = -1, hlen = -1, body;
        int64_t delta = (int64_t)(k - a->start) + a->delta_base;
        size_t total;
        unsigned char *p;
        int rc;
        if (a->keys != NULL && (rc = column_get(a->keys, (Py_ssize_t)row, &key, &klen)) != OK)
            return rc;
        if ((rc = column_get(a->values, (Py_ssize_t)row, &value, &vlen)) != OK)
            return rc;
        if (a->headers != NULL &&
            (rc = column_get(a->headers, (Py_ssize_t)row, &hdrs, &hlen)) != OK)
            return rc;
        /* attributes, timestampDelta, offsetDelta, key, value, headers (count 0 if none) */
        body = 1 + (int64_t)varint_size(zigzag(a->timestamp_delta)) +
               (int64_t)varint_size(zigzag(delta)) +
               (int64_t)varint_size(zigzag(klen)) + (klen > 0 ? klen : 0) +
               (int64_t)varint_size(zigzag(vlen)) + (vlen > 0 ? vlen : 0) +
               (hlen > 0 ? hlen : 1);
        if (body > INT32_MAX)
            return E_OVERFLOW;
        total = varint_size(zigzag(body)) + (size_t)body;
        if (k > a->start && (int64_t)(o->len + total) > a->max_bytes)
            break;
        if (out_reserve(o, total) < 0)
            return E_MEMORY;
        p = o->data + o->len;
        p = put_varint(p, zigzag(body));
        *p++ = 0; /* attributes */
        p = put_varint(p, zigzag(a->timestamp_delta));
        p = put_varint(p, zigzag(delta));
        p = put_varint(p, zigzag(klen));
        if (klen > 0) {
            memcpy(p, key, (size_t)klen);
            p += klen;
        }
        p = put_varint(p, zigzag(vlen));
        if (vlen > 0) {
            memcpy(p, value, (size_t)vlen);
            p += vlen;
        }
        if (hlen > 0) {
            memcpy(p, hdrs, (size_t)hlen);
            p += hlen;
        } else {
            *p++ = 0; /* header count 0 */
        }
        o->len = (size_t)(p - o->data);
    }
    *taken = k - a->start;
    return OK;
}

static PyObject *encode_records(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *keys_spec, *values_spec, *rows_obj, *headers_spec = Py_None, *result = NULL;
    Column keys, values, headers;
    Py_buffer rows;
    int has_rows = 0, rc;
    EncodeArgs a;
    Out o = {NULL, 0, 0};
    Py_ssize_t taken = 0;

    memset(&a, 0, sizeof(a));
    memset(&keys, 0, sizeof(keys));
    memset(&headers, 0, sizeof(headers));
    if (!PyArg_ParseTuple(args, "OOOnnL|OLL:encode_records", &keys_spec, &values_spec, &rows_obj,
                          &a.start, &a.stop, &a.max_bytes, &headers_spec, &a.delta_base,
                          &a.timestamp_delta))
        return NULL;
    if (a.delta_base < 0 || a.delta_base > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "encode_records: delta_base outside 0..2**31-1");
        return NULL;
    }
    if (column_from(values_spec, &values) < 0)
        return NULL;
    if (keys_spec != Py_None && column_from(keys_spec, &keys) < 0) {
        column_release(&values);
        return NULL;
    }
    if (headers_spec != Py_None && column_from(headers_spec, &headers) < 0) {
        column_release(&keys);
        column_release(&values);
        return NULL;
    }
    if (rows_obj != Py_None) {
        if (PyObject_GetBuffer(rows_obj, &rows, PyBUF_SIMPLE) < 0)
            goto done;
        has_rows = 1;
        a.rows = (const int64_t *)rows.buf;
        a.rows_len = rows.len / 8;
    } else {
        a.rows_len = values.length;
    }
    if (a.start < 0 || a.stop < a.start || a.stop > a.rows_len) {
        PyErr_SetString(PyExc_ValueError, "encode_records: start/stop outside the rows");
        goto done;
    }
    a.keys = keys_spec != Py_None ? &keys : NULL;
    a.values = &values;
    a.headers = headers_spec != Py_None ? &headers : NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = encode(&a, &o, &taken);
    Py_END_ALLOW_THREADS
    if (rc == E_BOUNDS)
        PyErr_SetString(PyExc_ValueError,
                        "encode_records: a row number or offset is outside its column");
    else if (rc == E_OVERFLOW)
        PyErr_SetString(PyExc_OverflowError, "a record is larger than 2**31-1 bytes");
    else if (rc == E_MEMORY)
        PyErr_NoMemory();
    else {
        PyObject *data = PyBytes_FromStringAndSize((const char *)o.data, (Py_ssize_t)o.len);
        if (data != NULL) {
            result = Py_BuildValue("(Nn)", data, taken);
        }
    }
done:
    free(o.data);
    if (has_rows)
        PyBuffer_Release(&rows);
    column_release(&keys);
    column_release(&values);
    column_release(&headers);
    return result;
}

/* ---- the module ---------------------------------------------------------------------------- */

static PyMethodDef module_methods[] = {
    {"partition_keys", partition_keys, METH_VARARGS,
     "partition_keys(column, num_partitions)\n\nKafka's default partition of each key (int32 "
     "LE per row, -1 for null)."},
    {"encode_records", encode_records, METH_VARARGS,
     "encode_records(keys, values, rows, start, stop, max_bytes[, headers[, delta_base[, "
     "timestamp_delta]]])\n\nA v2 records "
     "section "
     "and the number of rows it holds."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "spark_connector.records._native_batches",
    "Arrow binary columns encoded as Kafka v2 records (see record_encoder).",
    -1,
    module_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__native_batches(void)
{
    return PyModule_Create(&module_def);
}

/* broker.protocol._record_check: the structure of a v2 records section, checked at C speed.
 *
 * check(records, count) walks `count` records of an uncompressed records section (the bytes
 * after a batch's 61-byte header, decompressed if the batch is compressed) the way Kafka's
 * DefaultRecord.readFrom reads them, and returns None, or raises ValueError saying what is
 * wrong. The twin of broker.log.log_validator._check_records_py (same rules, same messages):
 *
 *   record = length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
 *            keyLength varint (-1 = null), key, valueLength varint (-1 = null), value,
 *            headerCount varint, headers (keyLength varint >= 0, key, valueLength varint
 *            (-1 = null), value)*
 *
 * varints are zigzag; a varint takes at most 5 bytes and a varlong 10 (Kafka's
 * ByteUtils.readVarint/readVarlong: "Varint is too long"), and may not overflow 32 (64)
 * bits, which Kafka's Java reader ignores but other readers do not. A record's fields must use exactly
 * its length; after `count` records nothing may remain. Record i's offsetDelta must be i (what
 * every producer writes; a batch with gaps or disorder would give consumers offsets outside
 * the batch's range or out of order). Nothing is allocated: the walk only
 * reads the buffer.
 *
 * Concurrency: the GIL is released while walking (the buffer stays exported meanwhile).
 * Uses only the stable ABI of Python 3.11.
 */
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030B0000
#include <Python.h>

#include <stdint.h>

/* 0 on success, else an error message */
static const char *read_varint(const unsigned char *p, Py_ssize_t end, Py_ssize_t *pos,
                               int max_bytes, int64_t *out)
{
    uint64_t raw = 0;
    int shift = 0;
    int n = 0;
    for (;;) {
        unsigned char b;
        if (*pos >= end)
            return "truncated varint";
        if (n == max_bytes)
            return max_bytes == 5 ? "varint is too long" : "varlong is too long";
        b = p[(*pos)++];
        n++;
        /* the last byte may only hold the bits that still fit (32 or 64): Kafka's Java
         * reader would silently drop the rest, librdkafka would read a different value */
        if (n == max_bytes && b > (max_bytes == 5 ? 0x0F : 0x01))
            return max_bytes == 5 ? "varint overflows 32 bits" : "varlong overflows 64 bits";
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
    return NULL;
}

static const char *walk(const unsigned char *p, Py_ssize_t len, long long count)
{
    Py_ssize_t pos = 0;
    const char *err;
    int64_t v;
    for (long long i = 0; i < count; i++) {
        int64_t size, nheaders;
        Py_ssize_t start, end;
        if ((err = read_varint(p, len, &pos, 5, &size)) != NULL)
            return err;
        if (size < 0 || size > len - pos)
            return "record length runs past the end of the batch";
        start = pos;
        end = pos + (Py_ssize_t)size;
        if (pos >= end)
            return "record too short for its attributes";
        pos++; /* attributes */
        if ((err = read_varint(p, end, &pos, 10, &v)) != NULL) /* timestampDelta */
            return err;
        if ((err = read_varint(p, end, &pos, 5, &v)) != NULL) /* offsetDelta */
            return err;
        if (v != i) /* a produced batch numbers its records 0..count-1 */
            return "record offset deltas are not 0, 1, 2, ... in order";
        for (int kv = 0; kv < 2; kv++) { /* key, value */
            if ((err = read_varint(p, end, &pos, 5, &v)) != NULL)
                return err;
            if (v < -1 || v > end - pos)
                return "key or value length runs past the end of its record";
            if (v > 0)
                pos += (Py_ssize_t)v;
        }
        if ((err = read_varint(p, end, &pos, 5, &nheaders)) != NULL)
            return err;
        if (nheaders < 0)
            return "negative header count";
        for (int64_t h = 0; h < nheaders; h++) {
            if ((err = read_varint(p, end, &pos, 5, &v)) != NULL)
                return err;
            if (v < 0 || v > end - pos)
                return "header key length is negative or runs past its record";
            pos += (Py_ssize_t)v;
            if ((err = read_varint(p, end, &pos, 5, &v)) != NULL)
                return err;
            if (v < -1 || v > end - pos)
                return "header value length runs past the end of its record";
            if (v > 0)
                pos += (Py_ssize_t)v;
        }
        if (pos != end)
            return "record fields do not fill its length";
        (void)start;
    }
    if (pos != len)
        return "bytes remain after the last record";
    return NULL;
}

static PyObject *check(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long count;
    const char *err;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*L", &view, &count))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    err = walk((const unsigned char *)view.buf, view.len, count);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (err != NULL) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"check", check, METH_VARARGS, "check(records, count): raise ValueError if malformed"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_record_check", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__record_check(void)
{
    return PyModule_Create(&module);
}

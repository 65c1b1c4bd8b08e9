/* broker.protocol._request_check: walk a request body against its schema before kio decodes it.
 *
 * Why: kio's decoder reserves memory for an array from the element count written in the
 * request before reading the elements, so a request of a few bytes claiming 2**31-1 elements
 * made the broker abort on a failed allocation of hundreds of GB (the CVE-2022-34917 class,
 * found by the protocol fuzzer). walk(program, buffer, pos) checks, without allocating, that
 * every length and count in the body is backed by bytes that are really there (each array
 * element is walked), and raises ValueError otherwise; only then is kio called.
 *
 * The program (compiled from the kio dataclasses by broker/protocol/request_walk.py) is a byte
 * string of ops:
 *   0x01 n      n fixed bytes
 *   0x02        legacy STRING (int16 length, -1 null)
 *   0x03        legacy BYTES / RECORDS (int32 length, -1 null)
 *   0x04        compact STRING / BYTES / RECORDS (uvarint length+1, 0 null)
 *   0x05 <op>   legacy ARRAY (int32 count, -1 null) of <op>
 *   0x06 <op>   compact ARRAY (uvarint count+1, 0 null) of <op>
 *   0x07 hi lo <ops...>  a struct whose ops take the next (hi << 8 | lo) bytes of the program
 *   0x08        a tagged-field section (uvarint count, then uvarint tag, uvarint size, bytes)
 *
 * Concurrency: the GIL is released while walking. Uses only the stable ABI of Python 3.11.
 */
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030B0000
#include <Python.h>

#include <stdint.h>

typedef struct {
    const unsigned char *prog;
    Py_ssize_t plen;
    const unsigned char *buf;
    Py_ssize_t len;
    Py_ssize_t pos;
    const char *err;
    int depth;
} Walk;

static int fail(Walk *w, const char *msg)
{
    if (w->err == NULL)
        w->err = msg;
    return -1;
}

static int uvarint(Walk *w, uint64_t *out)
{
    uint64_t v = 0;
    int shift = 0;
    for (int i = 0; i < 10; i++) {
        unsigned char b;
        if (w->pos >= w->len)
            return fail(w, "truncated varint");
        b = w->buf[w->pos++];
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
        shift += 7;
    }
    return fail(w, "varint too long");
}

static int skip(Walk *w, uint64_t n)
{
    if (n > (uint64_t)(w->len - w->pos))
        return fail(w, "a length runs past the end of the request");
    w->pos += (Py_ssize_t)n;
    return 0;
}

/* the size in program bytes of the op at pc */
static Py_ssize_t op_size(Walk *w, Py_ssize_t pc)
{
    Py_ssize_t inner;
    if (pc >= w->plen)
        return -1;
    switch (w->prog[pc]) {
    case 0x01:
        return 2;
    case 0x02:
    case 0x03:
    case 0x04:
    case 0x08:
        return 1;
    case 0x05:
    case 0x06:
        inner = op_size(w, pc + 1);
        return inner < 0 ? -1 : 1 + inner;
    case 0x07:
        if (pc + 2 >= w->plen)
            return -1;
        return 3 + ((Py_ssize_t)w->prog[pc + 1] << 8 | w->prog[pc + 2]);
    default:
        return -1;
    }
}

static int run(Walk *w, Py_ssize_t pc, Py_ssize_t end);

/* execute the single op at pc */
static int one(Walk *w, Py_ssize_t pc)
{
    uint64_t u;
    int64_t count;
    Py_ssize_t size;
    if (pc >= w->plen)
        return fail(w, "bad program");
    switch (w->prog[pc]) {
    case 0x01:
        return skip(w, w->prog[pc + 1]);
    case 0x02: {
        int16_t n;
        if (w->len - w->pos < 2)
            return fail(w, "truncated string length");
        n = (int16_t)((w->buf[w->pos] << 8) | w->buf[w->pos + 1]);
        w->pos += 2;
        if (n < -1)
            return fail(w, "negative string length");
        return n > 0 ? skip(w, (uint64_t)n) : 0;
    }
    case 0x03: {
        int32_t n;
        if (w->len - w->pos < 4)
            return fail(w, "truncated bytes length");
        n = (int32_t)(((uint32_t)w->buf[w->pos] << 24) | ((uint32_t)w->buf[w->pos + 1] << 16) |
                      ((uint32_t)w->buf[w->pos + 2] << 8) | (uint32_t)w->buf[w->pos + 3]);
        w->pos += 4;
        if (n < -1)
            return fail(w, "negative bytes length");
        return n > 0 ? skip(w, (uint64_t)n) : 0;
    }
    case 0x04:
        if (uvarint(w, &u) < 0)
            return -1;
        return u > 1 ? skip(w, u - 1) : 0;
    case 0x05:
    case 0x06:
        if (w->prog[pc] == 0x05) {
            if (w->len - w->pos < 4)
                return fail(w, "truncated array length");
            count = (int32_t)(((uint32_t)w->buf[w->pos] << 24) |
                              ((uint32_t)w->buf[w->pos + 1] << 16) |
                              ((uint32_t)w->buf[w->pos + 2] << 8) | (uint32_t)w->buf[w->pos + 3]);
            w->pos += 4;
            if (count < -1)
                return fail(w, "negative array length");
        } else {
            if (uvarint(w, &u) < 0)
                return -1;
            if (u > (uint64_t)INT32_MAX + 1)
                return fail(w, "array length out of range");
            count = (int64_t)u - 1;
        }
        /* every element takes at least one byte: a count the rest of the request cannot hold
         * is refused before walking (and before anything is reserved for it) */
        if (count > (int64_t)(w->len - w->pos))
            return fail(w, "array length exceeds the request");
        for (int64_t i = 0; i < count; i++) {
            if (one(w, pc + 1) < 0)
                return -1;
        }
        return 0;
    case 0x07:
        size = op_size(w, pc);
        if (size < 0 || pc + size > w->plen)
            return fail(w, "bad program");
        if (++w->depth > 64)
            return fail(w, "schema nested too deeply");
        if (run(w, pc + 3, pc + size) < 0)
            return -1;
        w->depth--;
        return 0;
    case 0x08:
        if (uvarint(w, &u) < 0)
            return -1;
        if (u > (uint64_t)(w->len - w->pos))
            return fail(w, "tagged-field count exceeds the request");
        for (uint64_t i = 0; i < u; i++) {
            uint64_t tag, n;
            if (uvarint(w, &tag) < 0 || uvarint(w, &n) < 0 || skip(w, n) < 0)
                return -1;
        }
        return 0;
    default:
        return fail(w, "bad program");
    }
}

static int run(Walk *w, Py_ssize_t pc, Py_ssize_t end)
{
    while (pc < end) {
        Py_ssize_t size = op_size(w, pc);
        if (size < 0)
            return fail(w, "bad program");
        if (one(w, pc) < 0)
            return -1;
        pc += size;
    }
    return 0;
}

static PyObject *walk(PyObject *self, PyObject *args)
{
    Py_buffer prog, buf;
    Py_ssize_t pos;
    Walk w;
    int rc;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*n", &prog, &buf, &pos))
        return NULL;
    w.prog = (const unsigned char *)prog.buf;
    w.plen = prog.len;
    w.buf = (const unsigned char *)buf.buf;
    w.len = buf.len;
    w.pos = pos < 0 || pos > buf.len ? buf.len : pos;
    w.err = NULL;
    w.depth = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = run(&w, 0, w.plen);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&prog);
    PyBuffer_Release(&buf);
    if (rc < 0) {
        PyErr_SetString(PyExc_ValueError, w.err ? w.err : "malformed request");
        return NULL;
    }
    return PyLong_FromSsize_t(w.pos);
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS,
     "walk(program, buffer, pos) -> end: raise ValueError if a length or count lies"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_request_check", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__request_check(void)
{
    return PyModule_Create(&module);
}

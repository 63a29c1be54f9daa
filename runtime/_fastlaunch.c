/*
 * runtime._fastlaunch: the common checked launch in compiled code.
 *
 * The Python launch path (runtime/launch_python.py) builds, per function, a launch
 * closure whose checks are as short as Python allows; what is left of its cost is the
 * interpreter itself, about half a microsecond a launch and more for torch tensors. This
 * module does the same fast tests in C, packs the parameter buffer on the stack and
 * calls cuLaunchKernel (cuLaunchKernelEx for a dependent kernel) through the address
 * the binding found in libcuda. It decides nothing new:
 *
 *   - every value it does not recognise at once, every failed test, every error and
 *     every failed driver call goes to the Python launch function (``fallback``) with
 *     the call's own arguments. Nothing has been launched at that point, so the Python
 *     path takes the call over from the start: it accepts it or raises the error that
 *     names the problem. No error message is written here.
 *   - the footprint answers (what a launch touches through each pointer) come from the
 *     Python launcher, asked once per grid, block and scalars.
 *
 * Objects:
 *   Launch(...)   ``launch(grid, block, args, *, stream=None, shared_mem=0)``
 *   Prepared(...) a prepared launch (``prepared(*args)``) or its trusted ``raw(*ints)``
 *   Steps(...)    an op's launches, ``launch(wide, *pieces)``, from a recipe (runtime/op_plans.py)
 *   QuickOps(...) the ops' common call (runtime/op_quick.py), for calls it has seen
 *
 * The GIL is released around the driver call, as cuda-bindings does: cuLaunchKernel
 * blocks while the launch queue is full. The parameter buffer lives on this call's
 * stack, so threads never share one.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030A0000
#error "runtime._fastlaunch needs Python 3.10 or newer"
#endif

/* The buffer is written with memcpy of the low bytes: little-endian hosts only, which is
 * every host CUDA runs on (x86-64, AArch64). */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "runtime._fastlaunch assumes a little-endian host"
#endif

/* --- the driver's types, as cuda.h declares them ---------------------------------- */

typedef int (*launch_kernel_t)(uintptr_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shared, uintptr_t stream,
                               void **params, void **extra);

typedef struct { /* CUlaunchAttribute */
    uint32_t id;
    uint32_t pad;
    union {
        char bytes[64];
        uint64_t align; /* the union holds pointers in cuda.h: 8-byte aligned */
        int programmatic_stream_serialization_allowed;
    } value;
} launch_attribute_t;

typedef struct { /* CUlaunchConfig */
    unsigned grid[3];
    unsigned block[3];
    unsigned shared;
    uintptr_t stream;
    launch_attribute_t *attrs;
    unsigned num_attrs;
} launch_config_t;

typedef int (*launch_kernel_ex_t)(const launch_config_t *config, uintptr_t f, void **params,
                                  void **extra);

/* What this path takes: kernels with more parameters or a larger buffer keep the Python
 * path (the launcher does not build a Launch for them). Both live on the call's stack. */
#define MAX_BUFFER 4096
#define MAX_PARAMS 64

/* --- parameters ------------------------------------------------------------------- */

enum { POINTER = 0, SCALAR = 1 };

typedef struct {
    int kind;
    Py_ssize_t offset; /* in the parameter buffer */
    int size;          /* bytes: 1, 2, 4 or 8 */
    /* scalars: the range a checked launch accepts, and the C type's (what raw packs) */
    long long low, raw_low;
    unsigned long long high, raw_high;
    /* pointers */
    uint64_t mask;          /* itemsize - 1: a tensor's address must clear it */
    long long ordinal;      /* the function's device */
    PyObject *key;          /* the DeviceArray.launch_key an array of the right kind has */
    PyObject *torch_dtype;  /* torch's dtype object, once torch is bound; else NULL */
} param_t;

/* The last footprint answer: for this grid and block and these scalars (as packed), the
 * bytes each pointer's array must hold and the alignment mask its address must clear. */
typedef struct {
    int valid;
    unsigned geometry[6];
    uint64_t *scalars; /* nscalars */
    uint64_t *need;    /* 2 per pointer: bytes, mask */
} footprint_cache_t;

/* How each attribute of a torch tensor is read (see "reading a torch tensor" below). */
enum {
    T_DTYPE, T_IS_CUDA, T_NBYTES, T_GET_DEVICE, T_IS_CONTIGUOUS, T_DATA_PTR, T_SHAPE, T_REQUIRES_GRAD, T_STRIDE, T_COUNT
};

typedef struct {
    PyObject *descr[T_COUNT]; /* or NULL: read by name */
} readers_t;

/* How a stream argument becomes a handle: a runtime.Stream is asked each time (it may
 * have been closed); any other object (an int handle, a torch stream) through
 * runtime.stream.stream_handle. The last such object is remembered by identity with its
 * handle, which is used again only while the runtime still knows that handle (a closed
 * runtime.Stream forgets its handle, and an int naming it is then refused). */
typedef struct {
    PyObject *stream_class;  /* runtime.Stream */
    PyObject *stream_handle; /* runtime.stream.stream_handle */
    PyObject *known;         /* runtime.stream's set of the handles it knows */
    PyObject *last;          /* the last stream object that was no Stream ... */
    PyObject *last_handle;   /* ... its handle as an int object ... */
    uintptr_t last_value;    /* ... and as a value */
} streams_t;

/* --- the Launch object ------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *dict;
    PyObject *weakrefs;
    PyObject *fallback;      /* the Python launch function */
    PyObject *device_array;  /* runtime.DeviceArray */
    PyObject *tensor;        /* torch.Tensor once bound, else NULL */
    readers_t readers;       /* how its attributes are read */
    streams_t streams;
    PyObject *footprint;     /* need(gx, gy, gz, bx, by, bz, key) -> tuple, or NULL */
    int open, check_ints, dependent;
    uint32_t attribute_id;
    uintptr_t function;
    launch_kernel_t launch_kernel;
    launch_kernel_ex_t launch_kernel_ex;
    unsigned max_grid[3], max_block[3], max_threads, max_shared;
    int fixed_block;
    unsigned block[3];
    Py_ssize_t nparams, npointers, nscalars, size;
    param_t *params;
    footprint_cache_t cache;
} Launch;

static PyTypeObject LaunchType;
static PyTypeObject PreparedType;

static PyObject *s_launch_key, *s_address, *s_nbytes, *s_dtype, *s_is_cuda, *s_get_device,
    *s_is_contiguous, *s_data_ptr, *s_handle, *s_stream, *s_shared_mem, *s_shape, *s_name, *s_ordinal,
    *s_closed, *s_requires_grad, *s_itemsize, *s_new_empty, *s_empty, *s_stride, *s_permute,
    *s_first_output, *s_spans, *s_launches, *s_memory_shapes, *s_inverse, *s_backward, *s_forward;

/* Forget a failed read: the Python path will meet the same failure and say what it is.
 * Only an Exception is forgotten; a KeyboardInterrupt or SystemExit stays set, and every
 * way out of this module returns it (fall_back and quick_false check). */
static void drop_error(void) {
    if (PyErr_ExceptionMatches(PyExc_Exception))
        PyErr_Clear();
}

/* An exact int as 64 bits; 0 (no error set) when it is no exact int or does not fit in
 * [-2**63, 2**64). ``negative`` says how to read the bits. */
static int int_bits(PyObject *value, uint64_t *bits, int *negative) {
    if (!PyLong_CheckExact(value))
        return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow == 0) {
        if (v == -1 && PyErr_Occurred()) {
            drop_error();
            return 0;
        }
        *bits = (uint64_t)v;
        *negative = v < 0;
        return 1;
    }
    if (overflow < 0)
        return 0;
    unsigned long long u = PyLong_AsUnsignedLongLong(value);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
        drop_error();
        return 0;
    }
    *bits = u;
    *negative = 0;
    return 1;
}

/* An exact int in [0, 2**64) as 64 bits; 0 (no error set) for anything else. */
static int uint_bits(PyObject *value, uint64_t *bits) {
    int negative = 0;
    return int_bits(value, bits, &negative) && !negative;
}

static int in_range(uint64_t bits, int negative, long long low, unsigned long long high) {
    if (negative)
        return (long long)bits >= low; /* high is never negative */
    return bits <= high && (low <= 0 || bits >= (uint64_t)low);
}

/* An attribute that must be an int that fits in 64 bits, unsigned. */
static int read_u64(PyObject *obj, PyObject *name, uint64_t *out) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) {
        drop_error();
        return 0;
    }
    int ok = uint_bits(v, out);
    Py_DECREF(v);
    return ok;
}

/* --- reading a torch tensor ------------------------------------------------------- */
/*
 * Each attribute is read through the descriptor torch.Tensor's class holds: a data
 * descriptor's getter, or a method called with the tensor. That skips the generic lookup
 * (the type's cache and the tensor's instance dict), 10-30 ns a read on the benchmark's
 * host; what the read costs inside torch stays. A name the class has no descriptor for
 * (a test's stand-in sets attributes per instance) is read by name.
 */

static PyObject **const reader_names[T_COUNT] = {&s_dtype, &s_is_cuda, &s_nbytes, &s_get_device,
                                                 &s_is_contiguous, &s_data_ptr, &s_shape, &s_requires_grad,
                                                 &s_stride};
/* Which are methods (called with the tensor); the others are properties (got through). */
static const char reader_is_method[T_COUNT] = {[T_GET_DEVICE] = 1, [T_IS_CONTIGUOUS] = 1, [T_DATA_PTR] = 1,
                                               [T_STRIDE] = 1};

static void readers_clear(readers_t *R) {
    for (int i = 0; i < T_COUNT; i++)
        Py_CLEAR(R->descr[i]);
}

static int readers_traverse(readers_t *R, visitproc visit, void *arg) {
    for (int i = 0; i < T_COUNT; i++)
        Py_VISIT(R->descr[i]);
    return 0;
}

static void readers_bind(readers_t *R, PyObject *cls) {
    readers_clear(R);
    for (int i = 0; i < T_COUNT; i++) {
        PyObject *d = PyObject_GetAttr(cls, *reader_names[i]);
        if (d == NULL) {
            drop_error();
            continue;
        }
        PyTypeObject *t = Py_TYPE(d);
        int kept = reader_is_method[i] ? PyObject_TypeCheck(d, &PyMethodDescr_Type) || PyFunction_Check(d)
                                       : t->tp_descr_get != NULL && t->tp_descr_set != NULL; /* data: wins */
        if (kept)
            R->descr[i] = d;
        else /* another kind than expected: read by name, as Python would */
            Py_DECREF(d);
    }
}

/* The attribute's value (a new reference), or NULL with no error set. */
static PyObject *tensor_read(const readers_t *R, int which, PyObject *obj) {
    PyObject *d = R->descr[which], *v;
    if (d == NULL)
        v = reader_is_method[which] ? PyObject_CallMethodNoArgs(obj, *reader_names[which])
                                    : PyObject_GetAttr(obj, *reader_names[which]);
    else if (reader_is_method[which])
        v = PyObject_Vectorcall(d, &obj, 1, NULL);
    else
        v = Py_TYPE(d)->tp_descr_get(d, obj, (PyObject *)Py_TYPE(obj));
    if (v == NULL)
        drop_error();
    return v;
}

static int tensor_is(const readers_t *R, int which, PyObject *obj, PyObject *want) {
    PyObject *v = tensor_read(R, which, obj);
    int same = v != NULL && v == want;
    Py_XDECREF(v);
    return same;
}

static int tensor_u64(const readers_t *R, int which, PyObject *obj, uint64_t *out) {
    PyObject *v = tensor_read(R, which, obj);
    int ok = v != NULL && uint_bits(v, out);
    Py_XDECREF(v);
    return ok;
}

/* A torch tensor the kernel can take as it is: its dtype, on this device, contiguous and
 * not empty (the Python path's fast test, in the same order). */
static int tensor_pointer(const readers_t *R, const param_t *p, PyObject *a, uint64_t *address,
                          uint64_t *extent) {
    uint64_t ordinal, nbytes;
    if (p->torch_dtype == NULL || !tensor_is(R, T_DTYPE, a, p->torch_dtype) || !tensor_is(R, T_IS_CUDA, a, Py_True))
        return 0;
    if (!tensor_u64(R, T_GET_DEVICE, a, &ordinal) || ordinal != (uint64_t)p->ordinal)
        return 0;
    if (!tensor_is(R, T_IS_CONTIGUOUS, a, Py_True) || !tensor_u64(R, T_NBYTES, a, &nbytes) || nbytes == 0)
        return 0;
    if (!tensor_u64(R, T_DATA_PTR, a, address) || (*address & p->mask))
        return 0;
    *extent = nbytes;
    return 1;
}

/* Checks every argument and packs it into ``buf``. 1: packed; 0: the Python path takes
 * the call (nothing is set). ``address``/``extent`` per pointer, ``scalars`` as packed. */
static int check_and_pack(Launch *L, PyObject *const *args, unsigned char *buf, uint64_t *address,
                          uint64_t *extent, uint64_t *scalars) {
    Py_ssize_t ip = 0, is = 0;
    for (Py_ssize_t i = 0; i < L->nparams; i++) {
        const param_t *p = &L->params[i];
        PyObject *a = args[i];
        uint64_t bits;
        int negative = 0;
        if (p->kind == SCALAR) {
            if (!int_bits(a, &bits, &negative) || !in_range(bits, negative, p->low, p->high))
                return 0;
            memcpy(buf + p->offset, &bits, (size_t)p->size);
            scalars[is++] = bits;
            continue;
        }
        PyTypeObject *cls = Py_TYPE(a);
        if ((PyObject *)cls == L->device_array) {
            PyObject *key = PyObject_GetAttr(a, s_launch_key);
            if (key == NULL) {
                drop_error();
                return 0;
            }
            int same = key == p->key;
            Py_DECREF(key);
            if (!same || !read_u64(a, s_address, &address[ip]))
                return 0;
            extent[ip] = UINT64_MAX; /* its bytes matter only to a footprint, as in Python */
            if (L->footprint != NULL && !read_u64(a, s_nbytes, &extent[ip]))
                return 0;
        } else if (cls == &PyLong_Type) {
            if (L->check_ints || !uint_bits(a, &address[ip]))
                return 0;
            extent[ip] = UINT64_MAX; /* an int is trusted: its extent is unknown */
        } else if (L->tensor != NULL && (PyObject *)cls == L->tensor) {
            if (!tensor_pointer(&L->readers, p, a, &address[ip], &extent[ip]))
                return 0;
        } else {
            return 0;
        }
        memcpy(buf + p->offset, &address[ip], 8);
        ip++;
    }
    return 1;
}

/* What the launch touches through each pointer, against each array: 1 the arrays cover
 * it, 0 the Python path takes the call (and says which does not), -1 an error that is no
 * Exception (KeyboardInterrupt) is set. */
static int footprints_fit(Launch *L, footprint_cache_t *cache, const unsigned *geometry,
                          PyObject *const *args, const uint64_t *address, const uint64_t *extent,
                          const uint64_t *scalars) {
    int hit = cache->valid && memcmp(cache->geometry, geometry, sizeof cache->geometry) == 0 &&
              (L->nscalars == 0 || memcmp(cache->scalars, scalars, 8 * (size_t)L->nscalars) == 0);
    if (!hit) {
        /* The key the Python launcher uses: the one scalar, or a tuple of them. */
        PyObject *key;
        if (L->nscalars == 1) {
            key = NULL;
            for (Py_ssize_t i = 0; i < L->nparams; i++)
                if (L->params[i].kind == SCALAR)
                    key = args[i];
            Py_INCREF(key);
        } else {
            key = PyTuple_New(L->nscalars);
            if (key == NULL)
                return -1;
            Py_ssize_t k = 0;
            for (Py_ssize_t i = 0; i < L->nparams; i++)
                if (L->params[i].kind == SCALAR) {
                    Py_INCREF(args[i]);
                    PyTuple_SET_ITEM(key, k++, args[i]);
                }
        }
        PyObject *need = PyObject_CallFunction(L->footprint, "IIIIIIN", geometry[0], geometry[1],
                                               geometry[2], geometry[3], geometry[4], geometry[5], key);
        if (need == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_Exception))
                return -1;
            drop_error();
            return 0;
        }
        if (!PyTuple_CheckExact(need) || PyTuple_GET_SIZE(need) != 2 * L->npointers) {
            Py_DECREF(need);
            return 0;
        }
        uint64_t fresh[2 * MAX_PARAMS];
        for (Py_ssize_t i = 0; i < 2 * L->npointers; i++) {
            if (!uint_bits(PyTuple_GET_ITEM(need, i), &fresh[i])) {
                Py_DECREF(need);
                return 0;
            }
        }
        Py_DECREF(need);
        /* Written at once, after the call into Python: another thread may have used the
         * cache meanwhile, and finds it whole either way. */
        memcpy(cache->geometry, geometry, sizeof cache->geometry);
        if (L->nscalars)
            memcpy(cache->scalars, scalars, 8 * (size_t)L->nscalars);
        memcpy(cache->need, fresh, 16 * (size_t)L->npointers);
        cache->valid = 1;
    }
    for (Py_ssize_t i = 0; i < L->npointers; i++)
        if (extent[i] < cache->need[2 * i] || (address[i] & cache->need[2 * i + 1]))
            return 0;
    return 1;
}

/* The driver call, without the GIL. 0 on success, else the CUresult. */
static int call_driver(Launch *L, const unsigned *geometry, unsigned shared, uintptr_t stream,
                       unsigned char *buf) {
    void *pointers[MAX_PARAMS];
    for (Py_ssize_t i = 0; i < L->nparams; i++)
        pointers[i] = buf + L->params[i].offset;
    int err;
    if (L->dependent) {
        launch_attribute_t attribute;
        memset(&attribute, 0, sizeof attribute);
        attribute.id = L->attribute_id;
        attribute.value.programmatic_stream_serialization_allowed = 1;
        launch_config_t config = {
            {geometry[0], geometry[1], geometry[2]},
            {geometry[3], geometry[4], geometry[5]},
            shared, stream, &attribute, 1,
        };
        Py_BEGIN_ALLOW_THREADS
        err = L->launch_kernel_ex(&config, L->function, pointers, NULL);
        Py_END_ALLOW_THREADS
    } else {
        Py_BEGIN_ALLOW_THREADS
        err = L->launch_kernel(L->function, geometry[0], geometry[1], geometry[2], geometry[3],
                               geometry[4], geometry[5], shared, stream, pointers, NULL);
        Py_END_ALLOW_THREADS
    }
    return err;
}

/* Three exact ints in (0, max], as a tuple. */
static int dims(PyObject *t, const unsigned *max, unsigned *out) {
    if (!PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) != 3)
        return 0;
    for (int i = 0; i < 3; i++) {
        uint64_t bits;
        if (!uint_bits(PyTuple_GET_ITEM(t, i), &bits) || bits == 0 || bits > max[i])
            return 0;
        out[i] = (unsigned)bits;
    }
    return 1;
}

/* The stream handle; 0 where the Python path must take the call (no error set). */
static int resolve_stream(streams_t *S, PyObject *stream, uintptr_t *handle) {
    if (stream == Py_None) {
        *handle = 0;
        return 1;
    }
    uint64_t bits;
    if ((PyObject *)Py_TYPE(stream) == S->stream_class) /* asked every time: it may be closed */
        return read_u64(stream, s_handle, &bits) ? (*handle = (uintptr_t)bits, 1) : 0;
    if (PyLong_CheckExact(stream)) { /* stream_handle's own test: an int the runtime knows */
        int known = PySet_Contains(S->known, stream);
        if (known == 1 && uint_bits(stream, &bits)) {
            *handle = (uintptr_t)bits;
            return 1;
        }
        if (known < 0)
            drop_error();
    }
    if (stream == S->last && S->last_handle != NULL) {
        int known = PySet_Contains(S->known, S->last_handle);
        if (known == 1) {
            *handle = S->last_value;
            return 1;
        }
        if (known < 0)
            drop_error();
    }
    PyObject *v = PyObject_CallOneArg(S->stream_handle, stream);
    if (v == NULL) {
        drop_error();
        return 0;
    }
    if (!uint_bits(v, &bits)) {
        Py_DECREF(v);
        return 0;
    }
    /* Both new values in place before the old objects go: their finalizers may run
     * Python code that launches, and must find a whole pair. */
    PyObject *old = S->last, *old_handle = S->last_handle;
    Py_INCREF(stream);
    S->last = stream;
    S->last_handle = v; /* the reference stream_handle returned */
    S->last_value = *handle = (uintptr_t)bits;
    Py_XDECREF(old);
    Py_XDECREF(old_handle);
    return 1;
}

static void streams_init(streams_t *S, PyObject *stream_class, PyObject *stream_handle, PyObject *known) {
    Py_INCREF(stream_class);
    S->stream_class = stream_class;
    Py_INCREF(stream_handle);
    S->stream_handle = stream_handle;
    Py_INCREF(known);
    S->known = known;
}

static int streams_traverse(streams_t *S, visitproc visit, void *arg) {
    Py_VISIT(S->stream_class);
    Py_VISIT(S->stream_handle);
    Py_VISIT(S->known);
    Py_VISIT(S->last);
    Py_VISIT(S->last_handle);
    return 0;
}

static void streams_clear(streams_t *S) {
    Py_CLEAR(S->stream_class);
    Py_CLEAR(S->stream_handle);
    Py_CLEAR(S->known);
    Py_CLEAR(S->last);
    Py_CLEAR(S->last_handle);
}

static PyObject *fall_back(PyObject *fallback, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (PyErr_Occurred()) /* an interrupt during a read: it goes to the caller */
        return NULL;
    return PyObject_Vectorcall(fallback, args, nargsf, kwnames);
}

/* 1 launched, 0 the Python path takes the call, -1 an error is set. */
static int launch_checked(Launch *L, footprint_cache_t *cache, PyObject *const *args,
                          const unsigned *geometry, unsigned shared, uintptr_t stream) {
    uint64_t words[MAX_BUFFER / 8]; /* 8-byte aligned, as the widest slot needs */
    unsigned char *buf = (unsigned char *)words;
    memset(buf, 0, (size_t)L->size); /* padding as struct writes it: zeros */
    uint64_t address[MAX_PARAMS], extent[MAX_PARAMS], scalars[MAX_PARAMS];
    if (!check_and_pack(L, args, buf, address, extent, scalars))
        return 0;
    if (L->footprint != NULL && L->npointers > 0) { /* nothing to compare without pointers */
        int fits = footprints_fit(L, cache, geometry, args, address, extent, scalars);
        if (fits <= 0)
            return fits;
    }
    return call_driver(L, geometry, shared, stream, buf) == 0;
}

static PyObject *Launch_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Launch *L = (Launch *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *stream = Py_None, *shared_obj = NULL;
    if (L->fallback == NULL) { /* cleared by the garbage collector: unreachable */
        PyErr_SetString(PyExc_ValueError, "this launch was cleared");
        return NULL;
    }
    if (!L->open || nargs != 3)
        return fall_back(L->fallback, args, nargsf, kwnames);
    if (kwnames != NULL) {
        Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t k = 0; k < nk; k++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, k);
            if (name == s_stream || PyUnicode_Compare(name, s_stream) == 0)
                stream = args[nargs + k];
            else if (name == s_shared_mem || PyUnicode_Compare(name, s_shared_mem) == 0)
                shared_obj = args[nargs + k];
            else
                return fall_back(L->fallback, args, nargsf, kwnames);
        }
    }
    unsigned geometry[6];
    uint64_t shared = 0;
    if (!dims(args[0], L->max_grid, geometry) || !dims(args[1], L->max_block, geometry + 3))
        return fall_back(L->fallback, args, nargsf, kwnames);
    if (L->fixed_block) {
        if (geometry[3] != L->block[0] || geometry[4] != L->block[1] || geometry[5] != L->block[2])
            return fall_back(L->fallback, args, nargsf, kwnames);
    } else if ((uint64_t)geometry[3] * geometry[4] * geometry[5] > L->max_threads) {
        return fall_back(L->fallback, args, nargsf, kwnames);
    }
    if (shared_obj != NULL) {
        if (!uint_bits(shared_obj, &shared) || shared > L->max_shared)
            return fall_back(L->fallback, args, nargsf, kwnames);
    }
    PyObject *given = args[2];
    if (!PyTuple_CheckExact(given) || PyTuple_GET_SIZE(given) != L->nparams)
        return fall_back(L->fallback, args, nargsf, kwnames);
    uintptr_t handle;
    if (!resolve_stream(&L->streams, stream, &handle))
        return fall_back(L->fallback, args, nargsf, kwnames);
    int done = launch_checked(L, &L->cache, &PyTuple_GET_ITEM(given, 0), geometry, (unsigned)shared, handle);
    if (done < 0)
        return NULL;
    if (!done)
        return fall_back(L->fallback, args, nargsf, kwnames);
    Py_RETURN_NONE;
}

/* --- construction ----------------------------------------------------------------- */

static int as_unsigned(PyObject *o, unsigned *out, const char *what) {
    unsigned long v = PyLong_AsUnsignedLong(o);
    if (v == (unsigned long)-1 && PyErr_Occurred())
        return 0;
    if (v > UINT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s out of range", what);
        return 0;
    }
    *out = (unsigned)v;
    return 1;
}

static int three(PyObject *seq, unsigned *out, const char *what) {
    PyObject *t = PySequence_Tuple(seq);
    if (t == NULL)
        return 0;
    int ok = PyTuple_GET_SIZE(t) == 3;
    if (!ok)
        PyErr_Format(PyExc_ValueError, "%s must have three values", what);
    for (int i = 0; ok && i < 3; i++)
        ok = as_unsigned(PyTuple_GET_ITEM(t, i), &out[i], what);
    Py_DECREF(t);
    return ok;
}

static int footprint_cache_init(footprint_cache_t *cache, Py_ssize_t nscalars, Py_ssize_t npointers) {
    cache->valid = 0;
    cache->scalars = PyMem_Calloc((size_t)nscalars + 1, 8);
    cache->need = PyMem_Calloc(2 * (size_t)npointers + 1, 8);
    if (cache->scalars == NULL || cache->need == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    return 1;
}

static void footprint_cache_free(footprint_cache_t *cache) {
    PyMem_Free(cache->scalars);
    PyMem_Free(cache->need);
    cache->scalars = cache->need = NULL;
}

/* One parameter from its description: ("pointer", offset, mask, ordinal, key) or
 * ("scalar", offset, size, low, high, raw_low, raw_high). */
static int param_init(param_t *p, PyObject *spec) {
    const char *kind;
    Py_ssize_t offset;
    memset(p, 0, sizeof *p);
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) < 1) {
        PyErr_SetString(PyExc_TypeError, "a parameter is described by a tuple");
        return 0;
    }
    kind = PyUnicode_AsUTF8(PyTuple_GET_ITEM(spec, 0));
    if (kind == NULL)
        return 0;
    if (strcmp(kind, "pointer") == 0) {
        unsigned long long mask;
        long long ordinal;
        PyObject *key;
        if (!PyArg_ParseTuple(spec, "snKLO", &kind, &offset, &mask, &ordinal, &key))
            return 0;
        p->kind = POINTER;
        p->offset = offset;
        p->size = 8;
        p->mask = mask;
        p->ordinal = ordinal;
        Py_INCREF(key);
        p->key = key;
    } else if (strcmp(kind, "scalar") == 0) {
        int size;
        long long low, raw_low;
        unsigned long long high, raw_high;
        if (!PyArg_ParseTuple(spec, "sniLKLK", &kind, &offset, &size, &low, &high, &raw_low, &raw_high))
            return 0;
        if (size != 1 && size != 2 && size != 4 && size != 8) {
            PyErr_Format(PyExc_ValueError, "a scalar of %d bytes", size);
            return 0;
        }
        p->kind = SCALAR;
        p->offset = offset;
        p->size = size;
        p->low = low;
        p->high = high;
        p->raw_low = raw_low;
        p->raw_high = raw_high;
    } else {
        PyErr_Format(PyExc_ValueError, "unknown parameter kind %s", kind);
        return 0;
    }
    if (p->offset < 0 || p->offset + p->size > MAX_BUFFER) { /* the launcher keeps to both limits */
        PyErr_SetString(PyExc_ValueError, "a parameter lies outside the parameter buffer");
        return 0;
    }
    return 1;
}

static PyObject *Launch_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"fallback", "params", "function", "launch_kernel", "launch_kernel_ex",
                            "device_array", "stream_class", "stream_handle", "known_streams", "max_grid",
                            "max_block", "max_threads", "max_shared", "block", "footprint", "dependent",
                            "attribute_id", "check_ints", NULL};
    PyObject *fallback, *specs, *device_array, *stream_class, *stream_handle, *known, *max_grid, *max_block,
        *block, *footprint;
    unsigned long long function, launch_kernel, launch_kernel_ex;
    unsigned max_threads, max_shared, attribute_id;
    int dependent, check_ints;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOKKKOOOO!OOIIOOpIp", names, &fallback, &specs, &function,
                                     &launch_kernel, &launch_kernel_ex, &device_array, &stream_class,
                                     &stream_handle, &PySet_Type, &known, &max_grid, &max_block, &max_threads,
                                     &max_shared, &block, &footprint, &dependent, &attribute_id, &check_ints))
        return NULL;
    if (!PyCallable_Check(fallback) || !PyCallable_Check(stream_handle) ||
        (footprint != Py_None && !PyCallable_Check(footprint))) {
        PyErr_SetString(PyExc_TypeError, "fallback, stream_handle and footprint must be callable");
        return NULL;
    }
    if (launch_kernel == 0 || (dependent && launch_kernel_ex == 0)) {
        PyErr_SetString(PyExc_ValueError, "no driver entry point to call");
        return NULL;
    }
    PyObject *seq = PySequence_Tuple(specs);
    if (seq == NULL)
        return NULL;
    Launch *L = (Launch *)type->tp_alloc(type, 0);
    if (L == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    L->vectorcall = Launch_vectorcall;
    L->nparams = PyTuple_GET_SIZE(seq);
    if (L->nparams > MAX_PARAMS) {
        PyErr_SetString(PyExc_ValueError, "too many parameters");
        goto fail;
    }
    L->params = PyMem_Calloc((size_t)L->nparams + 1, sizeof(param_t));
    if (L->params == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < L->nparams; i++) {
        if (!param_init(&L->params[i], PyTuple_GET_ITEM(seq, i)))
            goto fail;
        if (L->params[i].kind == POINTER)
            L->npointers++;
        else
            L->nscalars++;
        if (L->params[i].offset + L->params[i].size > L->size)
            L->size = L->params[i].offset + L->params[i].size; /* the buffer ends with the last slot */
    }
    if (!three(max_grid, L->max_grid, "max_grid") || !three(max_block, L->max_block, "max_block"))
        goto fail;
    if (block != Py_None) {
        if (!three(block, L->block, "block"))
            goto fail;
        L->fixed_block = 1;
    }
    if (footprint != Py_None && !footprint_cache_init(&L->cache, L->nscalars, L->npointers))
        goto fail; /* answers to keep only where a footprint gives them */
    L->function = (uintptr_t)function;
    L->launch_kernel = (launch_kernel_t)(uintptr_t)launch_kernel;
    L->launch_kernel_ex = (launch_kernel_ex_t)(uintptr_t)launch_kernel_ex;
    L->max_threads = max_threads;
    L->max_shared = max_shared;
    L->dependent = dependent;
    L->attribute_id = attribute_id;
    L->check_ints = check_ints;
    L->open = 1;
    Py_INCREF(fallback);
    L->fallback = fallback;
    Py_INCREF(device_array);
    L->device_array = device_array;
    streams_init(&L->streams, stream_class, stream_handle, known);
    if (footprint != Py_None) {
        Py_INCREF(footprint);
        L->footprint = footprint;
    }
    Py_DECREF(seq);
    return (PyObject *)L;
fail:
    Py_DECREF(seq);
    Py_DECREF(L);
    return NULL;
}

static int Launch_traverse(Launch *L, visitproc visit, void *arg) {
    Py_VISIT(L->dict);
    Py_VISIT(L->fallback);
    Py_VISIT(L->device_array);
    Py_VISIT(L->tensor);
    streams_traverse(&L->streams, visit, arg);
    Py_VISIT(L->footprint);
    readers_traverse(&L->readers, visit, arg);
    for (Py_ssize_t i = 0; L->params != NULL && i < L->nparams; i++) {
        Py_VISIT(L->params[i].key);
        Py_VISIT(L->params[i].torch_dtype);
    }
    return 0;
}

static int Launch_clear(Launch *L) {
    L->open = 0; /* a launch after this goes to the (cleared) fallback: never reached */
    Py_CLEAR(L->dict);
    Py_CLEAR(L->fallback);
    Py_CLEAR(L->device_array);
    Py_CLEAR(L->tensor);
    streams_clear(&L->streams);
    Py_CLEAR(L->footprint);
    readers_clear(&L->readers);
    for (Py_ssize_t i = 0; L->params != NULL && i < L->nparams; i++) {
        Py_CLEAR(L->params[i].key);
        Py_CLEAR(L->params[i].torch_dtype);
    }
    return 0;
}

static void Launch_dealloc(Launch *L) {
    PyObject_GC_UnTrack(L);
    if (L->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)L);
    Launch_clear(L);
    PyMem_Free(L->params);
    footprint_cache_free(&L->cache);
    Py_TYPE(L)->tp_free((PyObject *)L);
}

static PyObject *Launch_close(Launch *L, PyObject *unused) {
    L->open = 0;
    Py_RETURN_NONE;
}

static PyObject *Launch_set_check_ints(Launch *L, PyObject *on) {
    int v = PyObject_IsTrue(on);
    if (v < 0)
        return NULL;
    L->check_ints = v;
    Py_RETURN_NONE;
}

/* bind_torch(tensor_class, dtypes): one dtype (or None) per pointer parameter. */
static PyObject *Launch_bind_torch(Launch *L, PyObject *args) {
    PyObject *tensor, *dtypes;
    if (!PyArg_ParseTuple(args, "OO!", &tensor, &PyTuple_Type, &dtypes))
        return NULL;
    if (PyTuple_GET_SIZE(dtypes) != L->npointers) {
        PyErr_SetString(PyExc_ValueError, "one dtype per pointer parameter");
        return NULL;
    }
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < L->nparams; i++) {
        if (L->params[i].kind != POINTER)
            continue;
        PyObject *d = PyTuple_GET_ITEM(dtypes, k++);
        if (d == Py_None) {
            Py_CLEAR(L->params[i].torch_dtype);
        } else {
            Py_INCREF(d);
            Py_XSETREF(L->params[i].torch_dtype, d);
        }
    }
    Py_INCREF(tensor);
    Py_XSETREF(L->tensor, tensor);
    readers_bind(&L->readers, tensor);
    Py_RETURN_NONE;
}

static PyMethodDef Launch_methods[] = {
    {"close", (PyCFunction)Launch_close, METH_NOARGS, "Every later launch goes to the Python path."},
    {"set_check_ints", (PyCFunction)Launch_set_check_ints, METH_O,
     "Whether int addresses go to the Python path (which asks the driver about them)."},
    {"bind_torch", (PyCFunction)Launch_bind_torch, METH_VARARGS,
     "bind_torch(tensor_class, dtypes): recognise torch tensors, one dtype per pointer."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Launch_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "runtime._fastlaunch.Launch",
    .tp_basicsize = sizeof(Launch),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "launch(grid, block, args, *, stream=None, shared_mem=0): the checked launch in C; "
              "whatever it does not take at once goes to the Python launch function.",
    .tp_new = Launch_new,
    .tp_dealloc = (destructor)Launch_dealloc,
    .tp_traverse = (traverseproc)Launch_traverse,
    .tp_clear = (inquiry)Launch_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Launch, vectorcall),
    .tp_dictoffset = offsetof(Launch, dict),
    .tp_weaklistoffset = offsetof(Launch, weakrefs),
    .tp_methods = Launch_methods,
    .tp_getset = Launch_getset,
};

/* --- prepared launches ------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *dict;
    Launch *launch;
    PyObject *fallback; /* the Python prepared launch (or its raw) */
    PyObject *stream;   /* the runtime.Stream launched on, asked whether it is open; or NULL */
    uintptr_t stream_handle;
    unsigned geometry[6], shared;
    int raw;
    footprint_cache_t cache;
} Prepared;

/* One trusted value into its slot: a scalar in its C type's range, an address not negative. */
static int pack_one(const param_t *p, uint64_t bits, int negative, unsigned char *buf) {
    if (p->kind == SCALAR ? !in_range(bits, negative, p->raw_low, p->raw_high) : negative)
        return 0;
    memcpy(buf + p->offset, &bits, (size_t)p->size);
    return 1;
}

/* The trusted launch of a raw ``P`` with ``bits``/``negative`` per parameter (raw(*values)
 * and a step of Steps): 1 launched; 0 a value outside its C type's range, or the driver
 * refused (the caller's Python path says which, or retries). */
static int launch_trusted(Prepared *P, const uint64_t *bits, const unsigned char *negative) {
    Launch *L = P->launch;
    uint64_t words[MAX_BUFFER / 8];
    unsigned char *buf = (unsigned char *)words;
    memset(buf, 0, (size_t)L->size);
    for (Py_ssize_t i = 0; i < L->nparams; i++)
        if (!pack_one(&L->params[i], bits[i], negative[i], buf))
            return 0;
    return call_driver(L, P->geometry, P->shared, P->stream_handle, buf) == 0;
}

static PyObject *Prepared_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Prepared *P = (Prepared *)self;
    Launch *L = P->launch;
    if (L == NULL || P->fallback == NULL) { /* cleared by the garbage collector: unreachable */
        PyErr_SetString(PyExc_ValueError, "this prepared launch was cleared");
        return NULL;
    }
    if (!L->open || kwnames != NULL || PyVectorcall_NARGS(nargsf) != L->nparams)
        return fall_back(P->fallback, args, nargsf, kwnames);
    uintptr_t handle = P->stream_handle;
    if (P->stream != NULL) { /* raises (in the Python path) once the Stream is closed */
        uint64_t bits;
        if (!read_u64(P->stream, s_handle, &bits))
            return fall_back(P->fallback, args, nargsf, kwnames);
        handle = (uintptr_t)bits;
    }
    int done;
    if (P->raw) { /* ints as they are: an address not negative, a scalar in its C type */
        uint64_t bits[MAX_PARAMS];
        unsigned char negative[MAX_PARAMS];
        done = 1;
        for (Py_ssize_t i = 0; done && i < L->nparams; i++) {
            int neg = 0;
            done = int_bits(args[i], &bits[i], &neg);
            negative[i] = (unsigned char)neg;
        }
        done = done && launch_trusted(P, bits, negative);
    } else {
        done = launch_checked(L, &P->cache, args, P->geometry, P->shared, handle);
        if (done < 0)
            return NULL;
    }
    if (!done)
        return fall_back(P->fallback, args, nargsf, kwnames);
    Py_RETURN_NONE;
}

static PyObject *Prepared_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"launch", "fallback", "grid", "block", "shared_mem", "stream_handle",
                            "stream", "raw", NULL};
    PyObject *launch, *fallback, *grid, *block, *stream;
    unsigned shared;
    unsigned long long handle;
    int raw;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!OOOIKOp", names, &LaunchType, &launch, &fallback, &grid,
                                     &block, &shared, &handle, &stream, &raw))
        return NULL;
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "fallback must be callable");
        return NULL;
    }
    Prepared *P = (Prepared *)type->tp_alloc(type, 0);
    if (P == NULL)
        return NULL;
    P->vectorcall = Prepared_vectorcall;
    /* footprint answers to keep only where the launch checks and a footprint gives them */
    const Launch *L = (const Launch *)launch;
    if (!three(grid, P->geometry, "grid") || !three(block, P->geometry + 3, "block") ||
        (!raw && L->footprint != NULL && !footprint_cache_init(&P->cache, L->nscalars, L->npointers))) {
        Py_DECREF(P);
        return NULL;
    }
    Py_INCREF(launch);
    P->launch = (Launch *)launch;
    Py_INCREF(fallback);
    P->fallback = fallback;
    if (stream != Py_None) {
        Py_INCREF(stream);
        P->stream = stream;
    }
    P->stream_handle = (uintptr_t)handle;
    P->shared = shared;
    P->raw = raw;
    return (PyObject *)P;
}

static int Prepared_traverse(Prepared *P, visitproc visit, void *arg) {
    Py_VISIT(P->dict);
    Py_VISIT(P->launch);
    Py_VISIT(P->fallback);
    Py_VISIT(P->stream);
    return 0;
}

static int Prepared_clear(Prepared *P) {
    Py_CLEAR(P->dict);
    Py_CLEAR(P->launch);
    Py_CLEAR(P->fallback);
    Py_CLEAR(P->stream);
    return 0;
}

static void Prepared_dealloc(Prepared *P) {
    PyObject_GC_UnTrack(P);
    Prepared_clear(P);
    footprint_cache_free(&P->cache);
    Py_TYPE(P)->tp_free((PyObject *)P);
}

static PyGetSetDef Prepared_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PreparedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "runtime._fastlaunch.Prepared",
    .tp_basicsize = sizeof(Prepared),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A prepared launch in C (or its trusted raw form); see runtime.launch.PreparedLaunch.",
    .tp_new = Prepared_new,
    .tp_dealloc = (destructor)Prepared_dealloc,
    .tp_traverse = (traverseproc)Prepared_traverse,
    .tp_clear = (inquiry)Prepared_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Prepared, vectorcall),
    .tp_dictoffset = offsetof(Prepared, dict),
    .tp_getset = Prepared_getset,
};

#define MAX_PIECES 15 /* the alignment key holds 4 bits per array in 64 */

/* --- the ops' steps ---------------------------------------------------------------- */
/*
 * runtime/op_plans.py runs a plan's steps as one function of the arrays' base addresses,
 * ``launch(wide, piece_0, piece_1, ...)`` (its _Steps): each step a prepared raw launch
 * of ints such as ``raw0(p1, w + 64, 48, 80)``. Steps holds the same
 * recipe as data: per argument of each step, a constant or one of the arrays' addresses
 * plus a byte offset. Called from Python it does what that function does; QuickOps calls
 * it with the addresses as C values, so no int object is made on the way to the driver.
 * A step whose launch C does not take (a closed function, a value out of range, a failed
 * driver call) is handed, as int objects, to its prepared raw launch, which launches it
 * through the Python path or raises there; anything else than plain ints as arguments goes
 * to the Python function whole.
 */

typedef struct {
    Prepared *raw;         /* the step's prepared raw launch */
    Py_ssize_t nargs;
    signed char *source;   /* per argument: -1 a constant, 0 the wide array, i + 1 piece i */
    uint64_t *value;       /* the constant's bits, or the byte offset */
    unsigned char *negative; /* a constant below zero */
} step_t;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback; /* the Python function of the same steps */
    Py_ssize_t npieces, nsteps;
    step_t *steps;
} Steps;

static PyTypeObject StepsType;

/* The step's argument ``i`` as an int object, as the Python function computes it. */
static PyObject *step_value(const step_t *st, Py_ssize_t i, const uint64_t *bases) {
    if (st->source[i] < 0)
        return st->negative[i] ? PyLong_FromLongLong((long long)st->value[i])
                               : PyLong_FromUnsignedLongLong(st->value[i]);
    PyObject *base = PyLong_FromUnsignedLongLong(bases[st->source[i]]);
    if (base == NULL || st->value[i] == 0)
        return base;
    PyObject *offset = PyLong_FromUnsignedLongLong(st->value[i]);
    PyObject *sum = offset != NULL ? PyNumber_Add(base, offset) : NULL;
    Py_DECREF(base);
    Py_XDECREF(offset);
    return sum;
}

/* The step through the Python path of its prepared raw launch (the function the C raw
 * launch falls back to), with int objects: 0 done, -1 error. C has either refused the
 * step or had the driver refuse it: the Python path packs and calls once more, retrying
 * with the context made current, or raises, as the Python function's raw call would. */
static int step_through_python(const step_t *st, const uint64_t *bases) {
    PyObject *values[MAX_PARAMS];
    Py_ssize_t made = 0;
    int result = -1;
    for (; made < st->nargs; made++) {
        values[made] = step_value(st, made, bases);
        if (values[made] == NULL)
            goto done;
    }
    /* held across the call: a cleared raw launch drops its fallback (and then raises) */
    PyObject *target = st->raw->fallback != NULL ? st->raw->fallback : (PyObject *)st->raw;
    Py_INCREF(target);
    PyObject *r = PyObject_Vectorcall(target, values, (size_t)st->nargs, NULL);
    Py_DECREF(target);
    if (r != NULL) {
        Py_DECREF(r);
        result = 0;
    }
done:
    for (Py_ssize_t i = 0; i < made; i++)
        Py_DECREF(values[i]);
    return result;
}

/* Every step, given ``bases``: [0] the wide array's address, [i + 1] piece i's. 0 all
 * launched; -1 an error set (the steps before it were launched, as in Python). */
static int steps_run(Steps *S, const uint64_t *bases) {
    for (Py_ssize_t k = 0; k < S->nsteps; k++) {
        const step_t *st = &S->steps[k];
        Prepared *P = st->raw;
        Launch *L = P->launch;
        int done = L != NULL && L->open && P->fallback != NULL;
        uint64_t bits[MAX_PARAMS];
        for (Py_ssize_t i = 0; done && i < st->nargs; i++) {
            bits[i] = st->value[i];
            if (st->source[i] >= 0) { /* an address plus an offset: past 2**64 is Python's to refuse */
                uint64_t base = bases[st->source[i]];
                done = bits[i] <= UINT64_MAX - base;
                bits[i] += base;
            }
        }
        done = done && launch_trusted(P, bits, st->negative);
        if (!done && step_through_python(st, bases) < 0)
            return -1;
    }
    return 0;
}

static PyObject *Steps_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Steps *S = (Steps *)self;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    uint64_t bases[MAX_PIECES + 1];
    int ok = S->fallback != NULL && S->steps != NULL && kwnames == NULL && n == S->npieces + 1;
    for (Py_ssize_t i = 0; ok && i < n; i++)
        ok = uint_bits(args[i], &bases[i]);
    if (!ok) {
        if (S->fallback == NULL) {
            PyErr_SetString(PyExc_ValueError, "these steps were cleared");
            return NULL;
        }
        return fall_back(S->fallback, args, nargsf, kwnames);
    }
    if (steps_run(S, bases) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static void steps_free(Steps *S) {
    if (S->steps == NULL)
        return;
    for (Py_ssize_t k = 0; k < S->nsteps; k++) {
        PyMem_Free(S->steps[k].source);
        PyMem_Free(S->steps[k].value);
        PyMem_Free(S->steps[k].negative);
    }
    PyMem_Free(S->steps);
    S->steps = NULL;
}

/* One step from ``(raw, recipe)``: recipe holds, per argument of the kernel, an int (a
 * constant) or ``(array, byte_offset)`` with array 0 the wide array and i + 1 piece i. */
static int step_init(step_t *st, PyObject *pair, Py_ssize_t npieces) {
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
        !PyObject_TypeCheck(PyTuple_GET_ITEM(pair, 0), &PreparedType) || !PyTuple_Check(PyTuple_GET_ITEM(pair, 1))) {
        PyErr_SetString(PyExc_TypeError, "each step is (prepared raw launch, tuple of arguments)");
        return 0;
    }
    Prepared *P = (Prepared *)PyTuple_GET_ITEM(pair, 0);
    PyObject *recipe = PyTuple_GET_ITEM(pair, 1);
    if (!P->raw || P->launch == NULL || PyTuple_GET_SIZE(recipe) != P->launch->nparams) {
        PyErr_SetString(PyExc_ValueError, "a step needs a prepared raw launch and one recipe per parameter");
        return 0;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(recipe);
    st->nargs = n;
    st->source = PyMem_Calloc((size_t)n + 1, 1);
    st->value = PyMem_Calloc((size_t)n + 1, sizeof(uint64_t));
    st->negative = PyMem_Calloc((size_t)n + 1, 1);
    if (st->source == NULL || st->value == NULL || st->negative == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(recipe, i);
        uint64_t bits, array;
        int negative = 0, ok;
        if (PyLong_CheckExact(item)) {
            ok = int_bits(item, &bits, &negative);
            st->source[i] = -1;
        } else {
            ok = PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 2 && uint_bits(PyTuple_GET_ITEM(item, 0), &array) &&
                 array <= (uint64_t)npieces && uint_bits(PyTuple_GET_ITEM(item, 1), &bits);
            st->source[i] = ok ? (signed char)array : -1;
        }
        if (!ok) {
            PyErr_Format(PyExc_ValueError, "argument %zd of a step is neither an int in 64 bits nor (array, offset)", i);
            return 0;
        }
        st->value[i] = bits;
        st->negative[i] = (unsigned char)negative;
    }
    Py_INCREF(P);
    st->raw = P;
    return 1;
}

static PyObject *Steps_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"pieces", "steps", "fallback", NULL};
    Py_ssize_t npieces;
    PyObject *steps, *fallback;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "nO!O", names, &npieces, &PyTuple_Type, &steps, &fallback))
        return NULL;
    if (npieces < 0 || npieces > MAX_PIECES || !PyCallable_Check(fallback)) {
        PyErr_Format(PyExc_ValueError, "Steps takes 0 to %d pieces and a callable fallback", MAX_PIECES);
        return NULL;
    }
    Steps *S = (Steps *)type->tp_alloc(type, 0);
    if (S == NULL)
        return NULL;
    S->vectorcall = Steps_vectorcall;
    S->npieces = npieces;
    Py_ssize_t n = PyTuple_GET_SIZE(steps);
    S->steps = PyMem_Calloc((size_t)n + 1, sizeof(step_t));
    if (S->steps == NULL) {
        Py_DECREF(S);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        S->nsteps = k + 1; /* what steps_free and the collector see */
        if (!step_init(&S->steps[k], PyTuple_GET_ITEM(steps, k), npieces)) {
            Py_DECREF(S);
            return NULL;
        }
    }
    Py_INCREF(fallback);
    S->fallback = fallback;
    return (PyObject *)S;
}

static int Steps_traverse(Steps *S, visitproc visit, void *arg) {
    Py_VISIT(S->fallback);
    if (S->steps != NULL)
        for (Py_ssize_t k = 0; k < S->nsteps; k++)
            Py_VISIT(S->steps[k].raw);
    return 0;
}

static int Steps_clear(Steps *S) {
    Py_CLEAR(S->fallback);
    if (S->steps != NULL)
        for (Py_ssize_t k = 0; k < S->nsteps; k++)
            Py_CLEAR(S->steps[k].raw);
    steps_free(S);
    return 0;
}

static void Steps_dealloc(Steps *S) {
    PyObject_GC_UnTrack(S);
    Steps_clear(S);
    Py_TYPE(S)->tp_free((PyObject *)S);
}

static PyObject *Steps_get_fallback(Steps *S, void *unused) {
    if (S->fallback == NULL)
        Py_RETURN_NONE;
    Py_INCREF(S->fallback);
    return S->fallback;
}

static PyObject *Steps_get_raws(Steps *S, void *unused) {
    Py_ssize_t n = S->steps != NULL ? S->nsteps : 0;
    PyObject *t = PyTuple_New(n);
    if (t == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *raw = S->steps[k].raw != NULL ? (PyObject *)S->steps[k].raw : Py_None;
        Py_INCREF(raw);
        PyTuple_SET_ITEM(t, k, raw);
    }
    return t;
}

static PyGetSetDef Steps_getset[] = {
    {"python", (getter)Steps_get_fallback, NULL, "the Python function of the same steps", NULL},
    {"raws", (getter)Steps_get_raws, NULL, "each step's prepared raw launch, in order", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject StepsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "runtime._fastlaunch.Steps",
    .tp_basicsize = sizeof(Steps),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "An op's steps in C: launch(wide, *pieces); see runtime/op_plans.py.",
    .tp_new = Steps_new,
    .tp_dealloc = (destructor)Steps_dealloc,
    .tp_traverse = (traverseproc)Steps_traverse,
    .tp_clear = (inquiry)Steps_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Steps, vectorcall),
    .tp_getset = Steps_getset,
};

/* --- the ops' common call ---------------------------------------------------------- */
/*
 * runtime/op_quick.py checks the common call of channel_cat_backward / channel_cat_forward
 * (DeviceArrays or plain CUDA torch tensors with ``out``, a shape seen before) in Python
 * (_backward_quick, _forward_quick). QuickOps does the same in C for calls whose entries
 * are already in its tables: the quick-call table (``_quick_calls``: what a shape decides)
 * and each entry's launch functions per alignment. Without ``out`` it makes the results
 * as the Python quick path does (fresh_results), after every other check. Anything else, a
 * first call included, answers False having done nothing, and the Python quick path takes
 * the call (it fills the tables). The launch functions are the ops' own: Steps, run here
 * with the addresses as C values, or (where the raw launches are not compiled) Python
 * functions, called.
 */

typedef struct {
    PyObject_HEAD
    PyObject *table;         /* op_quick._quick_calls */
    PyObject *device_array;  /* runtime.DeviceArray */
    PyObject *tensor;        /* torch.Tensor once bound, else NULL */
    readers_t readers;       /* how its attributes are read */
    PyObject *torch_dtypes;  /* torch dtype -> DType (arrays._torch_dtypes), once bound */
    PyObject *current_stream; /* torch's raw current stream of a device index, once bound, or NULL */
    PyObject *routes;         /* op_routes._routes, once bound, or NULL */
    streams_t streams;
    PyObject *dtype, *dtype_name; /* the last DType read and its name ... */
    uint64_t dtype_itemsize;      /* ... and element size: most calls see one dtype */
    int enabled;                  /* off: every call answers False (use_compiled_launch) */
    PyObject *weakrefs;
} QuickOps;



typedef struct {
    uint64_t address, nbytes;
    PyObject *shape;   /* new reference */
    PyObject *dtype;   /* the DType (a reference of its own) */
    PyObject *key;     /* new reference: a DeviceArray's launch key, else NULL */
    PyObject *strides; /* new reference: a tensor's, read where it is not contiguous; else NULL */
    long long ordinal;
    int writable;
} facts_t;

static void facts_clear(facts_t *f) {
    Py_CLEAR(f->shape);
    Py_CLEAR(f->key);
    Py_CLEAR(f->dtype);
    Py_CLEAR(f->strides);
}

static int read_bool(PyObject *obj, PyObject *name, int want_true) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) {
        drop_error();
        return 0;
    }
    int ok = v == (want_true ? Py_True : Py_False);
    Py_DECREF(v);
    return ok;
}

/* A DType's element size (0 where it has none to read) and, where ``name`` is given, its
 * name (a new reference, or NULL). The last DType's are kept, by identity and with a
 * reference, so that the common call reads neither. */
static uint64_t dtype_facts(QuickOps *Q, PyObject *dtype, PyObject **name) {
    if (dtype == Q->dtype && Q->dtype_name != NULL) {
        if (name != NULL) {
            *name = Q->dtype_name;
            Py_INCREF(*name);
        }
        return Q->dtype_itemsize;
    }
    uint64_t size = 0;
    PyObject *v = PyObject_GetAttr(dtype, s_itemsize);
    PyObject *n = v != NULL ? PyObject_GetAttr(dtype, s_name) : NULL;
    int ok = n != NULL && uint_bits(v, &size) && size != 0 && (size & (size - 1)) == 0;
    Py_XDECREF(v);
    if (!ok) {
        Py_XDECREF(n);
        drop_error();
        return 0;
    }
    if (name != NULL) { /* the caller's own, before anything below can run Python code */
        *name = n;
        Py_INCREF(n);
    }
    Py_INCREF(dtype);
    PyObject *old = Q->dtype, *old_name = Q->dtype_name; /* all three in place before either goes */
    Q->dtype = dtype;
    Q->dtype_name = n; /* the reference GetAttr returned */
    Q->dtype_itemsize = size;
    Py_XDECREF(old); /* may run a finalizer, which may call the ops with another dtype */
    Py_XDECREF(old_name);
    return size; /* this dtype's, whatever the cache holds by now */
}

/* The bytes of a contiguous array of ``shape`` (a tuple of ints) and ``itemsize``; 0 where
 * it holds none, or the shape is not such a tuple, or the count passes 64 bits. */
static uint64_t shape_nbytes(PyObject *shape, uint64_t itemsize) {
    if (!PyTuple_Check(shape))
        return 0;
    uint64_t total = itemsize;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(shape); i++) {
        uint64_t extent;
        if (!uint_bits(PyTuple_GET_ITEM(shape, i), &extent))
            return 0;
        if (extent != 0 && total > UINT64_MAX / extent)
            return 0;
        total *= extent;
    }
    return total;
}

/* op_quick._wide_facts / _torch_facts: an open, non-empty DeviceArray, or a contiguous, non-empty
 * CUDA tensor of a dtype we have; with ``any_strides``, a tensor of any strides too, its
 * strides read (op_arrays._torch_array). 1 filled in; 0 not taken. A tensor's byte count
 * comes from its shape (one read fewer than nbytes); whether it may be written
 * (requires_grad) is read only where ``written``. */
static int array_facts(QuickOps *Q, PyObject *v, facts_t *f, int written, int any_strides) {
    memset(f, 0, sizeof *f);
    PyObject *cls = (PyObject *)Py_TYPE(v);
    uint64_t bits;
    if (cls == Q->device_array) {
        f->key = PyObject_GetAttr(v, s_launch_key); /* (device, dtype) while open and not empty */
        if (f->key == NULL) {
            drop_error();
            return 0;
        }
        if (!PyTuple_CheckExact(f->key) || PyTuple_GET_SIZE(f->key) != 2)
            goto no;
        f->dtype = PyTuple_GET_ITEM(f->key, 1);
        Py_INCREF(f->dtype);
        f->ordinal = -1; /* read only where the key alone does not decide (known_ordinal) */
        if (!read_u64(v, s_address, &f->address) || !read_u64(v, s_nbytes, &f->nbytes))
            goto no;
        f->shape = PyObject_GetAttr(v, s_shape);
        if (f->shape == NULL) {
            drop_error();
            goto no;
        }
        f->writable = 1;
        return 1;
    }
    if (Q->tensor == NULL || cls != Q->tensor)
        return 0;
    const readers_t *R = &Q->readers;
    if (!tensor_is(R, T_IS_CUDA, v, Py_True))
        return 0;
    if (!tensor_is(R, T_IS_CONTIGUOUS, v, Py_True)) {
        if (!any_strides || (f->strides = tensor_read(R, T_STRIDE, v)) == NULL)
            return 0;
        if (!PyTuple_CheckExact(f->strides))
            goto no;
    }
    PyObject *torch_dtype = tensor_read(R, T_DTYPE, v);
    if (torch_dtype == NULL)
        goto no;
    PyObject *dtype = PyDict_GetItemWithError(Q->torch_dtypes, torch_dtype);
    Py_DECREF(torch_dtype);
    if (dtype == NULL || dtype == Py_None) {
        drop_error();
        goto no;
    }
    Py_INCREF(dtype);
    f->dtype = dtype;
    if (!tensor_u64(R, T_DATA_PTR, v, &f->address))
        goto no;
    f->shape = tensor_read(R, T_SHAPE, v);
    if (f->shape == NULL)
        goto no;
    f->nbytes = shape_nbytes(f->shape, dtype_facts(Q, dtype, NULL));
    if (f->nbytes == 0 || !tensor_u64(R, T_GET_DEVICE, v, &bits))
        goto no;
    f->ordinal = (long long)bits;
    if (written) {
        PyObject *grad = tensor_read(R, T_REQUIRES_GRAD, v);
        if (grad == NULL)
            goto no;
        f->writable = grad == Py_False; /* a tensor that requires grad is not written behind autograd */
        Py_DECREF(grad);
    }
    return 1;
no:
    facts_clear(f);
    return 0;
}

/* The array's device ordinal, read from a DeviceArray's launch key the first time it is
 * asked for (a piece whose key is the wide array's never needs it). 0: unreadable. */
static int known_ordinal(facts_t *f) {
    uint64_t bits;
    if (f->ordinal >= 0)
        return 1;
    if (f->key == NULL || !read_u64(PyTuple_GET_ITEM(f->key, 0), s_ordinal, &bits))
        return 0;
    f->ordinal = (long long)bits;
    return 1;
}

/* Another array of the op: the wide array's device and dtype (its launch key, where it has
 * one, says both at once). */
static int same_kind(facts_t *f, facts_t *wide) {
    if (f->key != NULL && f->key == wide->key)
        return 1;
    return f->dtype == wide->dtype && known_ordinal(f) && known_ordinal(wide) && f->ordinal == wide->ordinal;
}

/* The table's entry for ``key`` (a new reference), while its device is open; else NULL.
 * The reference is taken before anything else runs: reading ``closed`` runs Python code,
 * during which another thread may drop the entry from the table. */
static PyObject *quick_entry(QuickOps *Q, PyObject *key) {
    PyObject *call = PyDict_GetItemWithError(Q->table, key);
    if (call == NULL) {
        drop_error();
        return NULL;
    }
    Py_INCREF(call);
    if (!PyTuple_Check(call) || PyTuple_GET_SIZE(call) != 4 /* (device, shapes, record, launches) */
        || !read_bool(PyTuple_GET_ITEM(call, 0), s_closed, 0)) {
        Py_DECREF(call);
        return NULL;
    }
    return call;
}

/* Calls a launch function (Steps, run here with the addresses as C values, or a Python
 * function) with the wide array's and the pieces' addresses: 1 launched, -1 error. */
static int run_launch(PyObject *launch, uint64_t wide, const uint64_t *pieces, Py_ssize_t n) {
    if (Py_TYPE(launch) == &StepsType && ((Steps *)launch)->npieces == n && ((Steps *)launch)->steps != NULL) {
        uint64_t bases[MAX_PIECES + 1];
        bases[0] = wide;
        memcpy(bases + 1, pieces, (size_t)n * sizeof(uint64_t));
        return steps_run((Steps *)launch, bases) < 0 ? -1 : 1;
    }
    PyObject *values[MAX_PIECES + 1];
    Py_ssize_t made = 0;
    int result = -1;
    values[made] = PyLong_FromUnsignedLongLong(wide);
    if (values[made] == NULL)
        goto done;
    for (made = 1; made <= n; made++) {
        values[made] = PyLong_FromUnsignedLongLong(pieces[made - 1]);
        if (values[made] == NULL)
            goto done;
    }
    PyObject *r = PyObject_Vectorcall(launch, values, (size_t)(n + 1), NULL);
    if (r != NULL) {
        Py_DECREF(r);
        result = 1;
    }
done:
    for (Py_ssize_t i = 0; i < made; i++)
        Py_DECREF(values[i]);
    return result;
}

/* Calls the entry's launch function for ``aligns``: 1 launched, 0 none there yet, -1 error. */
static int quick_launch(PyObject *call, uint64_t aligns, uint64_t wide, const uint64_t *pieces, Py_ssize_t n) {
    PyObject *launches = PyTuple_GET_ITEM(call, 3);
    if (!PyDict_Check(launches))
        return 0;
    PyObject *key = PyLong_FromUnsignedLongLong(aligns);
    if (key == NULL)
        return -1;
    PyObject *launch = PyDict_GetItemWithError(launches, key);
    Py_DECREF(key);
    if (launch == NULL)
        return PyErr_Occurred() ? -1 : 0;
    Py_INCREF(launch);
    int ran = run_launch(launch, wide, pieces, n);
    Py_DECREF(launch);
    return ran;
}

/* Whether a piece of ``n`` bytes at ``p`` may go with the wide array: aligned to the
 * element (``mask``: its size less one) and sharing none of the wide array's bytes. */
static int piece_clear(uint64_t p, uint64_t n, const facts_t *wide, uint64_t mask) {
    return !(p & mask) && !(p < wide->address + wide->nbytes && wide->address < p + n);
}

/* Whether no two byte ranges [start[i], start[i] + size[i]) share a byte. */
static int disjoint(uint64_t *start, uint64_t *size, Py_ssize_t n) {
    for (Py_ssize_t i = 1; i < n; i++) { /* insertion sort by start: a handful of pieces */
        uint64_t s = start[i], z = size[i];
        Py_ssize_t j = i - 1;
        while (j >= 0 && start[j] > s) {
            start[j + 1] = start[j];
            size[j + 1] = size[j];
            j--;
        }
        start[j + 1] = s;
        size[j + 1] = z;
    }
    for (Py_ssize_t i = 1; i < n; i++)
        if (start[i] < start[i - 1] + size[i - 1])
            return 0;
    return 1;
}

/* The table's entry (a new reference) for the key the Python quick path builds:
 * ``(shape, dim, dtype.name, ordinal, handle, *rest)`` for a split (``shape`` given),
 * ``(dim, dtype.name, ordinal, handle, *rest)`` for a join (``shape`` NULL); NULL (no
 * error set) where there is none yet. */
static PyObject *entry_for(QuickOps *Q, PyObject *shape, PyObject *dim, facts_t *wide,
                           uintptr_t handle, PyObject *const *rest, Py_ssize_t nrest) {
    Py_ssize_t lead = shape != NULL ? 5 : 4, at = 0;
    if (!known_ordinal(wide))
        return NULL;
    PyObject *key = PyTuple_New(lead + nrest);
    if (key == NULL) {
        drop_error();
        return NULL;
    }
    PyObject *name = NULL;
    dtype_facts(Q, wide->dtype, &name);
    PyObject *made[3] = {name, PyLong_FromLongLong(wide->ordinal), PyLong_FromUnsignedLongLong(handle)};
    if (made[0] == NULL || made[1] == NULL || made[2] == NULL) {
        for (int i = 0; i < 3; i++)
            Py_XDECREF(made[i]);
        Py_DECREF(key);
        drop_error();
        return NULL;
    }
    if (shape != NULL) {
        Py_INCREF(shape);
        PyTuple_SET_ITEM(key, at++, shape);
    }
    Py_INCREF(dim);
    PyTuple_SET_ITEM(key, at++, dim);
    for (int i = 0; i < 3; i++)
        PyTuple_SET_ITEM(key, at++, made[i]); /* steals */
    for (Py_ssize_t i = 0; i < nrest; i++) {
        Py_INCREF(rest[i]);
        PyTuple_SET_ITEM(key, at++, rest[i]);
    }
    PyObject *call = quick_entry(Q, key);
    Py_DECREF(key);
    return call;
}


/* False, or NULL where an interrupt is pending (see drop_error). */
static PyObject *quick_false(void) {
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_FALSE;
}

/* The results of a call without ``out``, as runtime/outputs.py's new_outputs makes them,
 * one per shape of ``shapes``, of the kind of ``like`` (read into ``facts``):
 * - a torch tensor's, where torch's current stream on its device is the op's:
 *   ``like.new_empty(shape)`` (its dtype and device, contiguous), from torch's caching
 *   allocator, which gives the block to that stream; ``shape`` in memory order and the
 *   tensor permuted by ``inverse`` where that is given (a channels_last result, say);
 * - a DeviceArray's: ``device.empty(shape, dtype, stream=handle)``, from the device's pool on
 *   the op's stream (``device``: the entry's).
 * A new list, the addresses in ``addresses``; NULL with no error set where torch's current
 * stream is another (the Python path makes them under the op's) or an address cannot be
 * read; NULL with the allocator's error where an allocation fails (nothing is launched). */
static PyObject *fresh_results(QuickOps *Q, PyObject *like, const facts_t *facts, PyObject *device,
                               uintptr_t handle, PyObject *shapes, PyObject *inverse, uint64_t *addresses) {
    PyObject *stream = PyLong_FromUnsignedLongLong(handle), *kwnames = NULL;
    if (stream == NULL)
        return NULL;
    if (facts->key == NULL) {
        PyObject *index = PyLong_FromLongLong(facts->ordinal);
        PyObject *current = index != NULL ? PyObject_Vectorcall(Q->current_stream, &index, 1, NULL) : NULL;
        uint64_t raw;
        int ok = current != NULL && uint_bits(current, &raw);
        Py_XDECREF(index);
        Py_XDECREF(current);
        if (!ok || (raw != handle && !(raw <= 1 && handle <= 1))) { /* stream.same_stream: 0, 1 legacy */
            drop_error();
            Py_DECREF(stream);
            return NULL;
        }
    } else if ((kwnames = PyTuple_Pack(1, s_stream)) == NULL) {
        Py_DECREF(stream);
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(shapes);
    PyObject *made = PyList_New(n);
    for (Py_ssize_t i = 0; made != NULL && i < n; i++) {
        PyObject *r;
        if (facts->key == NULL) {
            PyObject *call[2] = {like, PyTuple_GET_ITEM(shapes, i)};
            r = PyObject_VectorcallMethod(s_new_empty, call, 2, NULL);
            if (r != NULL && inverse != NULL) { /* made in memory order, seen in the input's dims */
                PyObject *seen[2] = {r, inverse};
                Py_SETREF(r, PyObject_VectorcallMethod(s_permute, seen, 2, NULL));
            }
        } else {
            PyObject *call[4] = {device, PyTuple_GET_ITEM(shapes, i), facts->dtype, stream};
            r = PyObject_VectorcallMethod(s_empty, call, 3, kwnames);
        }
        if (r == NULL) { /* the allocator's own error (out of memory, say): the caller's to see */
            Py_CLEAR(made);
            break;
        }
        PyList_SET_ITEM(made, i, r);
        int read = facts->key == NULL ? tensor_u64(&Q->readers, T_DATA_PTR, r, &addresses[i])
                                      : read_u64(r, s_address, &addresses[i]);
        if (!read)
            Py_CLEAR(made);
    }
    Py_DECREF(stream);
    Py_XDECREF(kwnames);
    return made;
}

/* split(dy, sizes, dim, out, stream) -> bool: op_quick._backward_quick for a call it has seen;
 * with ``out`` None, op_quick._backward_fresh: the results (a list), or False having done
 * nothing. ``sizes`` and ``out`` are read as tuples made first: reading the arrays runs
 * Python code, during which another thread may change a list. */
static PyObject *QuickOps_split(QuickOps *Q, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "split(dy, sizes, dim, out, stream)");
        return NULL;
    }
    PyObject *dy = args[0], *dim = args[2];
    int fresh = args[3] == Py_None;
    if (!Q->enabled)
        Py_RETURN_FALSE;
    if ((!fresh && !PyList_CheckExact(args[3]) && !PyTuple_CheckExact(args[3])) || !PyLong_CheckExact(dim))
        Py_RETURN_FALSE;
    if (!PyList_CheckExact(args[1]) && !PyTuple_CheckExact(args[1]))
        Py_RETURN_FALSE;
    PyObject *sizes = PySequence_Tuple(args[1]), *out = fresh ? NULL : PySequence_Tuple(args[3]);
    PyObject *call = NULL, *result = Py_False, *made = NULL;
    facts_t wide, piece;
    int have_wide = 0;
    if (sizes == NULL || (!fresh && out == NULL)) {
        result = NULL;
        goto done;
    }
    Py_ssize_t nsizes = PyTuple_GET_SIZE(sizes), nout = fresh ? nsizes : PyTuple_GET_SIZE(out);
    for (Py_ssize_t i = 0; i < nsizes; i++) {
        PyObject *size = PyTuple_GET_ITEM(sizes, i);
        if (!PyLong_CheckExact(size)) /* a bool equals 1 as a key, but is refused */
            goto done;
        if (fresh && PyLong_AsLongLong(size) <= 0) { /* an empty piece: the general path's */
            drop_error();
            goto done;
        }
    }
    uintptr_t handle;
    if (nout > MAX_PIECES || !resolve_stream(&Q->streams, args[4], &handle) || !array_facts(Q, dy, &wide, 0, 0))
        goto done;
    have_wide = 1;
    call = entry_for(Q, wide.shape, dim, &wide, handle, &PyTuple_GET_ITEM(sizes, 0), nsizes);
    if (call == NULL)
        goto done;
    PyObject *wants = PyTuple_GET_ITEM(call, 1);
    if (!PyTuple_Check(wants) || PyTuple_GET_SIZE(wants) != nout)
        goto done;
    uint64_t itemsize = dtype_facts(Q, wide.dtype, NULL);
    if (itemsize == 0 || (wide.address & (itemsize - 1)))
        goto done;
    uint64_t mask = itemsize - 1, aligns = wide.address & 15, last = 0;
    uint64_t starts[MAX_PIECES], lengths[MAX_PIECES], pieces[MAX_PIECES];
    if (fresh) {
        if (wide.key == NULL && Q->current_stream == NULL)
            goto done;
        made = fresh_results(Q, dy, &wide, PyTuple_GET_ITEM(call, 0), handle, wants, NULL, pieces);
        if (made == NULL) {
            if (PyErr_Occurred())
                result = NULL;
            goto done;
        }
        for (Py_ssize_t i = 0; i < nout; i++)
            aligns = aligns << 4 | (pieces[i] & 15);
    } else {
        int ordered = 1;
        for (Py_ssize_t i = 0; i < nout; i++) {
            if (!array_facts(Q, PyTuple_GET_ITEM(out, i), &piece, 1, 0))
                goto done;
            int eq = PyObject_RichCompareBool(piece.shape, PyTuple_GET_ITEM(wants, i), Py_EQ);
            int fits = eq == 1 && same_kind(&piece, &wide) && piece.writable;
            uint64_t p = piece.address, n = piece.nbytes;
            facts_clear(&piece);
            if (eq < 0)
                drop_error();
            if (!fits || !piece_clear(p, n, &wide, mask))
                goto done;
            if (p < last)
                ordered = 0;
            last = p + n;
            starts[i] = pieces[i] = p;
            lengths[i] = n;
            aligns = aligns << 4 | (p & 15);
        }
        if (!ordered && !disjoint(starts, lengths, nout))
            goto done;
    }
    int launched = quick_launch(call, aligns, wide.address, pieces, nout);
    if (launched < 0)
        result = NULL;
    else if (launched)
        result = fresh ? made : Py_True;
done:
    Py_XDECREF(call);
    if (have_wide)
        facts_clear(&wide);
    Py_XDECREF(sizes);
    Py_XDECREF(out);
    Py_XINCREF(result);
    Py_XDECREF(made); /* the results, where not returned, go back to torch's cache */
    if (result == Py_False) {
        Py_DECREF(result);
        return quick_false();
    }
    return result;
}

/* join(xs, dim, out, stream) -> bool: op_quick._forward_quick for a call it has seen; with
 * ``out`` None, op_quick._forward_fresh: the result, or False having done nothing (``xs``
 * read as a tuple made first, as in split). */
static PyObject *QuickOps_join(QuickOps *Q, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "join(xs, dim, out, stream)");
        return NULL;
    }
    PyObject *dim = args[1], *out = args[2];
    int fresh = out == Py_None;
    if (!Q->enabled)
        Py_RETURN_FALSE;
    if ((!PyList_CheckExact(args[0]) && !PyTuple_CheckExact(args[0])) || !PyLong_CheckExact(dim))
        Py_RETURN_FALSE;
    PyObject *xs = PySequence_Tuple(args[0]);
    PyObject *call = NULL, *result = Py_False, *made = NULL, *shapes[MAX_PIECES] = {NULL};
    Py_ssize_t nshapes = 0, nxs = xs != NULL ? PyTuple_GET_SIZE(xs) : 0;
    facts_t wide, piece;
    int have_wide = 0;
    uint64_t pieces[MAX_PIECES];
    if (xs == NULL) {
        result = NULL;
        goto done;
    }
    uintptr_t handle;
    if (nxs == 0 || nxs > MAX_PIECES || !resolve_stream(&Q->streams, args[3], &handle))
        goto done;
    if (fresh) { /* xs[0] stands for the result: its kind, dtype and device, made once all is checked */
        if (!array_facts(Q, PyTuple_GET_ITEM(xs, 0), &wide, 0, 0))
            goto done;
        have_wide = 1;
        wide.address = wide.nbytes = 0;
        if (wide.key == NULL && Q->current_stream == NULL)
            goto done;
    } else {
        if (!array_facts(Q, out, &wide, 1, 0))
            goto done;
        have_wide = 1;
        if (!wide.writable)
            goto done;
    }
    uint64_t itemsize = dtype_facts(Q, wide.dtype, NULL);
    if (itemsize == 0 || (wide.address & (itemsize - 1)))
        goto done;
    uint64_t mask = itemsize - 1, aligns = wide.address & 15;
    for (Py_ssize_t i = 0; i < nxs; i++) { /* inputs may share memory with each other, not with y */
        if (!array_facts(Q, PyTuple_GET_ITEM(xs, i), &piece, 0, 0))
            goto done;
        /* without out, every input of xs[0]'s kind (a DeviceArray of its device), as the result is */
        int fits = same_kind(&piece, &wide) &&
                   (!fresh || (piece.key == NULL ? wide.key == NULL
                                                 : wide.key != NULL && PyTuple_GET_ITEM(piece.key, 0) ==
                                                                           PyTuple_GET_ITEM(wide.key, 0)));
        uint64_t p = piece.address, n = piece.nbytes;
        shapes[nshapes++] = piece.shape; /* kept for the key */
        piece.shape = NULL;
        facts_clear(&piece);
        if (!fits || !piece_clear(p, n, &wide, mask))
            goto done;
        pieces[i] = p;
        aligns = aligns << 4 | (p & 15);
    }
    call = entry_for(Q, NULL, dim, &wide, handle, shapes, nshapes);
    if (call == NULL)
        goto done;
    PyObject *wants = PyTuple_GET_ITEM(call, 1);
    if (!PyTuple_Check(wants) || PyTuple_GET_SIZE(wants) != 1)
        goto done;
    if (fresh) {
        made = fresh_results(Q, PyTuple_GET_ITEM(xs, 0), &wide, PyTuple_GET_ITEM(call, 0), handle, wants,
                             NULL, &wide.address);
        if (made == NULL) {
            if (PyErr_Occurred())
                result = NULL;
            goto done;
        }
        aligns |= (wide.address & 15) << (4 * nxs);
    } else {
        int eq = PyObject_RichCompareBool(wide.shape, PyTuple_GET_ITEM(wants, 0), Py_EQ);
        if (eq != 1) {
            if (eq < 0)
                drop_error();
            goto done;
        }
    }
    int launched = quick_launch(call, aligns, wide.address, pieces, nxs);
    if (launched < 0)
        result = NULL;
    else if (launched)
        result = fresh ? PyList_GET_ITEM(made, 0) : Py_True;
done:
    for (Py_ssize_t i = 0; i < nshapes; i++)
        Py_DECREF(shapes[i]);
    Py_XDECREF(call);
    if (have_wide)
        facts_clear(&wide);
    Py_XDECREF(xs);
    Py_XINCREF(result);
    Py_XDECREF(made);
    if (result == Py_False) {
        Py_DECREF(result);
        return quick_false();
    }
    return result;
}

/* --- the ops' remembered routes ------------------------------------------------------ */
/*
 * A call the quick table does not hold (arrays of any strides: channels_last, a pitched or
 * stepped view) whose kind of call runtime/op_routes.py has seen: its route is looked up by
 * the key op_routes.route_key builds, from the same facts of each array (class, shape,
 * strides, dtype, writability), and the per-call checks of ops._launch_route run here:
 * alignment, overlap of the route's spans moved to this call's addresses, one device. The
 * results without ``out`` are made in the route's memory order (fresh_results), and the
 * launch is the one ops._launch_route registered in ``route.launches`` for this device,
 * stream and pattern of addresses modulo 16. Anything else answers False having done
 * nothing: the Python path takes it (and registers the launch for the next).
 */

/* One kind of call: ``arrays`` read (inputs, then the outputs where ``fresh`` is 0), the
 * route found and run. ``wide_output``: the wide array is the output (a join). */
static PyObject *route_call(QuickOps *Q, PyObject *op, PyObject *ints, int fresh, PyObject *const *arrays,
                            Py_ssize_t narrays, PyObject *stream, int wide_output) {
    facts_t f[MAX_PIECES + 1];
    Py_ssize_t nread = 0;
    PyObject *key = NULL, *route = NULL, *spans = NULL, *launches = NULL, *entry = NULL, *made = NULL;
    PyObject *result = Py_False, *memory = NULL, *inverse = NULL;
    uintptr_t handle;
    if (Q->routes == NULL || narrays > MAX_PIECES + 1 || !resolve_stream(&Q->streams, stream, &handle))
        goto done;
    key = PyTuple_New(3 + narrays);
    if (key == NULL)
        goto error;
    Py_INCREF(op);
    PyTuple_SET_ITEM(key, 0, op);
    Py_INCREF(ints);
    PyTuple_SET_ITEM(key, 1, ints);
    PyObject *flags = PyTuple_Pack(1, fresh ? Py_True : Py_False);
    if (flags == NULL)
        goto error;
    PyTuple_SET_ITEM(key, 2, flags);
    while (nread < narrays) { /* each array's facts as op_routes.route_key holds them */
        facts_t *a = &f[nread];
        if (!array_facts(Q, arrays[nread], a, 1, 1))
            goto done;
        nread++;
        if (!known_ordinal(a) || a->ordinal != f[0].ordinal) /* one device; Python names both otherwise */
            goto done;
        PyObject *fact = PyTuple_Pack(5, (PyObject *)Py_TYPE(arrays[nread - 1]), a->shape,
                                      a->strides != NULL ? a->strides : Py_None, a->dtype,
                                      a->writable ? Py_False : Py_True);
        if (fact == NULL)
            goto error;
        PyTuple_SET_ITEM(key, 2 + nread, fact);
    }
    route = PyDict_GetItemWithError(Q->routes, key);
    if (route == NULL)
        goto absent;
    Py_INCREF(route);
    uint64_t first, itemsize = dtype_facts(Q, f[0].dtype, NULL), mask = itemsize - 1;
    if (itemsize == 0 || !read_u64(route, s_first_output, &first) || first > (uint64_t)narrays)
        goto done;
    for (Py_ssize_t i = 0; i < narrays; i++)
        if (f[i].address & mask)
            goto done;
    if (!fresh) { /* no output shares a byte with an input or another output (strided_ops.check_disjoint) */
        spans = PyObject_GetAttr(route, s_spans);
        if (spans == NULL || !PyTuple_CheckExact(spans) || PyTuple_GET_SIZE(spans) != narrays)
            goto absent;
        uint64_t lo[MAX_PIECES + 1], hi[MAX_PIECES + 1];
        for (Py_ssize_t i = 0; i < narrays; i++) {
            PyObject *s = PyTuple_GET_ITEM(spans, i);
            long long a, b;
            if (!PyTuple_CheckExact(s) || PyTuple_GET_SIZE(s) != 2)
                goto done;
            a = PyLong_AsLongLong(PyTuple_GET_ITEM(s, 0));
            b = PyLong_AsLongLong(PyTuple_GET_ITEM(s, 1));
            if (PyErr_Occurred())
                goto absent;
            lo[i] = f[i].address + (uint64_t)a;
            hi[i] = f[i].address + (uint64_t)b;
        }
        for (Py_ssize_t j = (Py_ssize_t)first; j < narrays; j++)
            for (Py_ssize_t i = 0; i < j; i++)
                if (lo[i] < hi[i] && lo[j] < hi[j] && lo[i] < hi[j] && lo[j] < hi[i])
                    goto done;
    }
    uint64_t addresses[MAX_PIECES + 1];
    for (Py_ssize_t i = 0; i < narrays; i++)
        addresses[i] = f[i].address;
    if (fresh) {
        memory = PyObject_GetAttr(route, s_memory_shapes);
        inverse = memory != NULL ? PyObject_GetAttr(route, s_inverse) : NULL;
        if (inverse == NULL || !PyTuple_CheckExact(memory) || narrays + PyTuple_GET_SIZE(memory) > MAX_PIECES + 1)
            goto absent;
        if ((f[0].key == NULL && Q->current_stream == NULL) || (f[0].key != NULL && inverse != Py_None))
            goto done; /* a DeviceArray's results are row-major, made so by the strided copy's route */
        PyObject *device = f[0].key != NULL ? PyTuple_GET_ITEM(f[0].key, 0) : NULL;
        made = fresh_results(Q, arrays[0], &f[0], device, handle, memory, inverse != Py_None ? inverse : NULL,
                             addresses + narrays);
        if (made == NULL)
            goto absent;
    }
    Py_ssize_t total = narrays + (made != NULL ? PyList_GET_SIZE(made) : 0);
    uint64_t wide = wide_output ? addresses[total - 1] : addresses[0], pieces[MAX_PIECES], aligns = wide & 15;
    Py_ssize_t npieces = 0;
    for (Py_ssize_t i = wide_output ? 0 : 1; i < (wide_output ? total - 1 : total); i++) {
        pieces[npieces++] = addresses[i];
        aligns = aligns << 4 | (addresses[i] & 15);
    }
    launches = PyObject_GetAttr(route, s_launches);
    if (launches == NULL || !PyDict_CheckExact(launches))
        goto absent;
    PyObject *lkey = Py_BuildValue("(LKK)", f[0].ordinal, (unsigned long long)handle, (unsigned long long)aligns);
    if (lkey == NULL)
        goto error;
    entry = PyDict_GetItemWithError(launches, lkey);
    Py_DECREF(lkey);
    if (entry == NULL)
        goto absent;
    Py_INCREF(entry); /* (device, launch), the device open */
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2 || !read_bool(PyTuple_GET_ITEM(entry, 0), s_closed, 0))
        goto done;
    if (run_launch(PyTuple_GET_ITEM(entry, 1), wide, pieces, npieces) < 0)
        goto error;
    result = made == NULL ? Py_True : wide_output ? PyList_GET_ITEM(made, 0) : made;
    goto done;
absent: /* an attribute or entry not there: not taken (an interrupt stays set) */
    drop_error();
    goto done;
error:
    result = NULL;
done:
    for (Py_ssize_t i = 0; i < nread; i++)
        facts_clear(&f[i]);
    Py_XINCREF(result);
    Py_XDECREF(key);
    Py_XDECREF(route);
    Py_XDECREF(spans);
    Py_XDECREF(launches);
    Py_XDECREF(entry);
    Py_XDECREF(memory);
    Py_XDECREF(inverse);
    Py_XDECREF(made);
    if (result == Py_False) {
        Py_DECREF(result);
        return quick_false();
    }
    return result;
}

/* route_split(dy, sizes, dim, out, stream): channel_cat_backward by its remembered route. */
static PyObject *QuickOps_route_split(QuickOps *Q, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "route_split(dy, sizes, dim, out, stream)");
        return NULL;
    }
    PyObject *sizes = args[1], *dim = args[2], *out = args[3];
    int fresh = out == Py_None;
    if (!Q->enabled || !PyLong_CheckExact(dim) || (!PyList_CheckExact(sizes) && !PyTuple_CheckExact(sizes)) ||
        (!fresh && !PyList_CheckExact(out) && !PyTuple_CheckExact(out)))
        Py_RETURN_FALSE;
    PyObject *ints = NULL, *outs = fresh ? NULL : PySequence_Tuple(out), *result = NULL;
    PyObject *sized = PySequence_Tuple(sizes);
    if (sized == NULL || (!fresh && outs == NULL))
        goto done;
    Py_ssize_t n = PyTuple_GET_SIZE(sized), nout = fresh ? 0 : PyTuple_GET_SIZE(outs);
    if (n > MAX_PIECES || (!fresh && nout != n)) {
        result = Py_False;
        Py_INCREF(result);
        goto done;
    }
    ints = PyTuple_New(n + 1);
    if (ints == NULL)
        goto done;
    Py_INCREF(dim);
    PyTuple_SET_ITEM(ints, 0, dim);
    PyObject *arrays[MAX_PIECES + 1] = {args[0]};
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyTuple_GET_ITEM(sized, i);
        if (!PyLong_CheckExact(s)) { /* a bool equals 1 as a key, but is refused */
            result = Py_False;
            Py_INCREF(result);
            goto done;
        }
        Py_INCREF(s);
        PyTuple_SET_ITEM(ints, i + 1, s);
        if (!fresh)
            arrays[i + 1] = PyTuple_GET_ITEM(outs, i);
    }
    result = route_call(Q, s_backward, ints, fresh, arrays, 1 + nout, args[4], 0);
done:
    Py_XDECREF(ints);
    Py_XDECREF(outs);
    Py_XDECREF(sized);
    return result;
}

/* route_join(xs, dim, out, stream): channel_cat_forward by its remembered route. */
static PyObject *QuickOps_route_join(QuickOps *Q, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "route_join(xs, dim, out, stream)");
        return NULL;
    }
    PyObject *dim = args[1], *out = args[2];
    if (!Q->enabled || !PyLong_CheckExact(dim) || (!PyList_CheckExact(args[0]) && !PyTuple_CheckExact(args[0])))
        Py_RETURN_FALSE;
    PyObject *xs = PySequence_Tuple(args[0]), *ints = NULL, *result = NULL;
    if (xs == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(xs);
    if (n == 0 || n > MAX_PIECES) {
        Py_DECREF(xs);
        Py_RETURN_FALSE;
    }
    PyObject *arrays[MAX_PIECES + 1];
    for (Py_ssize_t i = 0; i < n; i++)
        arrays[i] = PyTuple_GET_ITEM(xs, i);
    if (out != Py_None)
        arrays[n] = out;
    ints = PyTuple_Pack(1, dim);
    if (ints != NULL)
        result = route_call(Q, s_forward, ints, out == Py_None, arrays, n + (out != Py_None), args[3], 1);
    Py_XDECREF(ints);
    Py_DECREF(xs);
    return result;
}

/* bind_routes(routes): the table of op_routes' remembered routes, read by route_split/route_join. */
static PyObject *QuickOps_bind_routes(QuickOps *Q, PyObject *routes) {
    if (!PyDict_CheckExact(routes)) {
        PyErr_SetString(PyExc_TypeError, "bind_routes takes op_routes' dict of routes");
        return NULL;
    }
    Py_INCREF(routes);
    Py_XSETREF(Q->routes, routes);
    Py_RETURN_NONE;
}

/* bind_torch(tensor_class, dtypes, current_stream=None): recognise torch tensors, their dtypes
 * through the table; with ``current_stream`` (torch's raw current stream of a device index),
 * make the results of calls without ``out`` too. */
static PyObject *QuickOps_bind_torch(QuickOps *Q, PyObject *args) {
    PyObject *tensor, *dtypes, *current = Py_None;
    if (!PyArg_ParseTuple(args, "OO!|O", &tensor, &PyDict_Type, &dtypes, &current))
        return NULL;
    Py_INCREF(tensor);
    Py_XSETREF(Q->tensor, tensor);
    readers_bind(&Q->readers, tensor);
    Py_INCREF(dtypes);
    Py_XSETREF(Q->torch_dtypes, dtypes);
    PyObject *kept = current == Py_None ? NULL : current;
    Py_XINCREF(kept);
    Py_XSETREF(Q->current_stream, kept);
    Py_RETURN_NONE;
}

static PyObject *QuickOps_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"table", "device_array", "stream_class", "stream_handle", "known_streams",
                            "enabled", NULL};
    PyObject *table, *device_array, *stream_class, *stream_handle, *known;
    int enabled = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!OOOO!|p", names, &PyDict_Type, &table, &device_array,
                                     &stream_class, &stream_handle, &PySet_Type, &known, &enabled))
        return NULL;
    QuickOps *Q = (QuickOps *)type->tp_alloc(type, 0);
    if (Q == NULL)
        return NULL;
    Py_INCREF(table);
    Q->table = table;
    Py_INCREF(device_array);
    Q->device_array = device_array;
    streams_init(&Q->streams, stream_class, stream_handle, known);
    Q->enabled = enabled;
    return (PyObject *)Q;
}

static int QuickOps_traverse(QuickOps *Q, visitproc visit, void *arg) {
    Py_VISIT(Q->table);
    Py_VISIT(Q->device_array);
    Py_VISIT(Q->tensor);
    Py_VISIT(Q->torch_dtypes);
    Py_VISIT(Q->current_stream);
    Py_VISIT(Q->routes);
    Py_VISIT(Q->dtype);
    Py_VISIT(Q->dtype_name);
    streams_traverse(&Q->streams, visit, arg);
    return readers_traverse(&Q->readers, visit, arg);
}

static int QuickOps_clear(QuickOps *Q) {
    Py_CLEAR(Q->table);
    Py_CLEAR(Q->device_array);
    Py_CLEAR(Q->tensor);
    Py_CLEAR(Q->torch_dtypes);
    Py_CLEAR(Q->current_stream);
    Py_CLEAR(Q->routes);
    Py_CLEAR(Q->dtype);
    Py_CLEAR(Q->dtype_name);
    streams_clear(&Q->streams);
    readers_clear(&Q->readers);
    return 0;
}

static void QuickOps_dealloc(QuickOps *Q) {
    PyObject_GC_UnTrack(Q);
    if (Q->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)Q);
    QuickOps_clear(Q);
    Py_TYPE(Q)->tp_free((PyObject *)Q);
}

static PyObject *QuickOps_split_checked(QuickOps *Q, PyObject *const *args, Py_ssize_t nargs) {
    if (Q->table == NULL) {
        PyErr_SetString(PyExc_ValueError, "cleared");
        return NULL;
    }
    return QuickOps_split(Q, args, nargs);
}

static PyObject *QuickOps_join_checked(QuickOps *Q, PyObject *const *args, Py_ssize_t nargs) {
    if (Q->table == NULL) {
        PyErr_SetString(PyExc_ValueError, "cleared");
        return NULL;
    }
    return QuickOps_join(Q, args, nargs);
}

static PyObject *QuickOps_route_split_checked(QuickOps *Q, PyObject *const *args, Py_ssize_t nargs) {
    if (Q->table == NULL) {
        PyErr_SetString(PyExc_ValueError, "cleared");
        return NULL;
    }
    return QuickOps_route_split(Q, args, nargs);
}

static PyObject *QuickOps_route_join_checked(QuickOps *Q, PyObject *const *args, Py_ssize_t nargs) {
    if (Q->table == NULL) {
        PyErr_SetString(PyExc_ValueError, "cleared");
        return NULL;
    }
    return QuickOps_route_join(Q, args, nargs);
}

static PyMethodDef QuickOps_methods[] = {
    {"split", (PyCFunction)(void (*)(void))QuickOps_split_checked, METH_FASTCALL,
     "split(dy, sizes, dim, out, stream): True launched (out None: the results), or False having done nothing."},
    {"join", (PyCFunction)(void (*)(void))QuickOps_join_checked, METH_FASTCALL,
     "join(xs, dim, out, stream): True launched (out None: the result), or False having done nothing."},
    {"route_split", (PyCFunction)(void (*)(void))QuickOps_route_split_checked, METH_FASTCALL,
     "route_split(dy, sizes, dim, out, stream): a split by its remembered route, as split answers."},
    {"route_join", (PyCFunction)(void (*)(void))QuickOps_route_join_checked, METH_FASTCALL,
     "route_join(xs, dim, out, stream): a concat by its remembered route, as join answers."},
    {"bind_routes", (PyCFunction)QuickOps_bind_routes, METH_O,
     "bind_routes(routes): op_routes' table of remembered routes."},
    {"bind_torch", (PyCFunction)QuickOps_bind_torch, METH_VARARGS,
     "bind_torch(tensor_class, dtypes, current_stream=None): recognise torch tensors (dtypes: torch "
     "dtype -> DType); with torch's raw current stream of a device index, make results without out."},
    {NULL, NULL, 0, NULL},
};

static PyObject *QuickOps_get_enabled(QuickOps *Q, void *unused) { return PyBool_FromLong(Q->enabled); }

static int QuickOps_set_enabled(QuickOps *Q, PyObject *value, void *unused) {
    if (value == NULL || !PyBool_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "enabled takes True or False");
        return -1;
    }
    Q->enabled = value == Py_True;
    return 0;
}

static PyGetSetDef QuickOps_getset[] = {
    {"enabled", (getter)QuickOps_get_enabled, (setter)QuickOps_set_enabled,
     "False: every call answers False, and the Python path takes it", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject QuickOpsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "runtime._fastlaunch.QuickOps",
    .tp_basicsize = sizeof(QuickOps),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The ops' common call in C, for calls whose table entries exist; see runtime/op_quick.py.",
    .tp_new = QuickOps_new,
    .tp_dealloc = (destructor)QuickOps_dealloc,
    .tp_traverse = (traverseproc)QuickOps_traverse,
    .tp_clear = (inquiry)QuickOps_clear,
    .tp_methods = QuickOps_methods,
    .tp_getset = QuickOps_getset,
    .tp_weaklistoffset = offsetof(QuickOps, weakrefs),
};

/* --- the module ------------------------------------------------------------------- */

static int intern_all(void) {
    struct { PyObject **slot; const char *text; } names[] = {
        {&s_launch_key, "launch_key"}, {&s_address, "address"}, {&s_nbytes, "nbytes"},
        {&s_dtype, "dtype"}, {&s_is_cuda, "is_cuda"}, {&s_get_device, "get_device"},
        {&s_is_contiguous, "is_contiguous"}, {&s_data_ptr, "data_ptr"}, {&s_handle, "handle"},
        {&s_stream, "stream"}, {&s_shared_mem, "shared_mem"}, {&s_shape, "shape"},
        {&s_name, "name"}, {&s_ordinal, "ordinal"}, {&s_closed, "closed"},
        {&s_requires_grad, "requires_grad"}, {&s_itemsize, "itemsize"}, {&s_new_empty, "new_empty"},
        {&s_empty, "empty"}, {&s_stride, "stride"}, {&s_permute, "permute"},
        {&s_first_output, "first_output"}, {&s_spans, "spans"}, {&s_launches, "launches"},
        {&s_memory_shapes, "memory_shapes"}, {&s_inverse, "inverse"}, {&s_backward, "backward"},
        {&s_forward, "forward"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        *names[i].slot = PyUnicode_InternFromString(names[i].text);
        if (*names[i].slot == NULL)
            return 0;
    }
    return 1;
}

/* setup.py defines it as the sha256 of this file's bytes, so the runtime (and the GPU
 * record) can tell a build of this source from a stale one; a build by hand that does
 * not define it says so. */
#ifndef PTXGEN_FASTLAUNCH_SOURCE_SHA256
#define PTXGEN_FASTLAUNCH_SOURCE_SHA256 "unknown"
#endif

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "runtime._fastlaunch",
    .m_doc = "The checked launch in compiled code; see runtime/_fastlaunch.c.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__fastlaunch(void) {
    if (!intern_all() || PyType_Ready(&LaunchType) < 0 || PyType_Ready(&PreparedType) < 0 ||
        PyType_Ready(&StepsType) < 0 || PyType_Ready(&QuickOpsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&LaunchType);
    Py_INCREF(&PreparedType);
    Py_INCREF(&QuickOpsType);
    Py_INCREF(&StepsType);
    if (PyModule_AddObject(m, "Launch", (PyObject *)&LaunchType) < 0 ||
        PyModule_AddObject(m, "QuickOps", (PyObject *)&QuickOpsType) < 0 ||
        PyModule_AddObject(m, "Prepared", (PyObject *)&PreparedType) < 0 ||
        PyModule_AddObject(m, "Steps", (PyObject *)&StepsType) < 0 ||
        PyModule_AddIntConstant(m, "MAX_BUFFER", MAX_BUFFER) < 0 ||
        PyModule_AddIntConstant(m, "MAX_PARAMS", MAX_PARAMS) < 0 ||
        PyModule_AddIntConstant(m, "MAX_PIECES", MAX_PIECES) < 0 ||
        PyModule_AddStringConstant(m, "SOURCE_SHA256", PTXGEN_FASTLAUNCH_SOURCE_SHA256) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

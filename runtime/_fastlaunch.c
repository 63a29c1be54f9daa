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
 *   OpLane(...)   the ops' calls, for the kinds of call the Python path remembered there (runtime/ops.py)
 *
 * The GIL is released around the driver call, as cuda-bindings does: cuLaunchKernel
 * blocks while the launch queue is full. The parameter buffer lives on this call's
 * stack, so threads never share one.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
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

/* A type's owned references are named fields in a union with ``refs[]``, which its
 * traverse and clear go over (in order); REFS_END checks refs[] covers every named one. */
#define VISIT_REFS(refs) for (size_t r_ = 0; r_ < sizeof(refs) / sizeof(PyObject *); r_++) Py_VISIT((refs)[r_])
#define CLEAR_REFS(refs) for (size_t r_ = 0; r_ < sizeof(refs) / sizeof(PyObject *); r_++) Py_CLEAR((refs)[r_])
#define REFS_END(T, next) \
    enum { T##_refs_end = Py_BUILD_ASSERT_EXPR(offsetof(T, next) == offsetof(T, refs) + sizeof((T *)0)->refs) }

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

/* What Launch and OpLane read arrays and streams with. A stream argument becomes a handle
 * so: a runtime.Stream is asked each time (it may have been closed); any other object (an
 * int handle, a torch stream) through runtime.stream.stream_handle. The last such object
 * is remembered by identity with its handle, which is used again only while the runtime
 * still knows that handle (a closed runtime.Stream forgets its handle, and an int naming
 * it is then refused). */
typedef struct {
    union { /* the references it owns, also as refs[] (VISIT_REFS, CLEAR_REFS) */
        struct {
            PyObject *device_array;   /* runtime.DeviceArray */
            PyObject *tensor;         /* torch.Tensor once bound, else NULL */
            PyObject *descr[T_COUNT]; /* how each attribute of a tensor is read, or NULL: by name */
            PyObject *stream_class;   /* runtime.Stream */
            PyObject *stream_handle;  /* runtime.stream.stream_handle */
            PyObject *known;          /* runtime.stream's set of the handles it knows */
            PyObject *last;           /* the last stream object that was no Stream ... */
            PyObject *last_handle;    /* ... its handle as an int object ... */
        };
        PyObject *refs[2 + T_COUNT + 5];
    };
    uintptr_t last_value; /* ... and as a value */
} arrays_t;
REFS_END(arrays_t, last_value);

/* --- the Launch object ------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *weakrefs;
    union { /* the references it owns (and arrays', params'), also as refs[] */
        struct {
            PyObject *dict;
            PyObject *fallback;  /* the Python launch function */
            PyObject *footprint; /* need(gx, gy, gz, bx, by, bz, key) -> tuple, or NULL */
        };
        PyObject *refs[3];
    };
    arrays_t arrays;
    char open, check_ints; /* closed: every later launch goes to Python (for good); int addresses too */
    int dependent;
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
REFS_END(Launch, arrays);

static PyTypeObject LaunchType;
static PyTypeObject PreparedType;

/* The names read here, each ``s_<name>``: interned once (intern_all), listed once. */
#define NAMES(X) X(launch_key) X(address) X(nbytes) X(dtype) X(is_cuda) X(get_device) X(is_contiguous) \
    X(data_ptr) X(handle) X(stream) X(shared_mem) X(shape) X(ordinal) X(closed) X(requires_grad) X(itemsize) \
    X(stride) X(new_empty_strided) X(backward) X(forward) X(strides) X(data) X(ptr) X(device_id)
#define DECLARE_NAME(name) static PyObject *s_##name;
NAMES(DECLARE_NAME)

/* Forget a failed read: the Python path will meet the same failure and say what it is.
 * Only an Exception is forgotten; a KeyboardInterrupt or SystemExit stays set, and every
 * way out of this module returns it (fall_back and lane_false check). */
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

/* An attribute (a new reference), or NULL with no error set: the Python path reads it too. */
static PyObject *attr(PyObject *obj, PyObject *name) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        drop_error();
    return v;
}

/* Whether ``v`` (a new reference, let go here; NULL: a failed read) is ``want``. */
static int drop_is(PyObject *v, PyObject *want) {
    int same = v != NULL && v == want;
    Py_XDECREF(v);
    return same;
}

/* Whether ``v`` (likewise) is an int that fits in 64 bits, unsigned: into ``out``. */
static int drop_u64(PyObject *v, uint64_t *out) {
    int ok = v != NULL && uint_bits(v, out);
    Py_XDECREF(v);
    return ok;
}

static int read_u64(PyObject *obj, PyObject *name, uint64_t *out) {
    return drop_u64(attr(obj, name), out);
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

/* Recognises tensors of class ``cls``, their attributes read through its descriptors. */
static void arrays_bind_torch(arrays_t *A, PyObject *cls) {
    Py_XSETREF(A->tensor, Py_NewRef(cls));
    CLEAR_REFS(A->descr);
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
            A->descr[i] = d;
        else /* another kind than expected: read by name, as Python would */
            Py_DECREF(d);
    }
}

/* The attribute's value (a new reference), or NULL with no error set. */
static PyObject *tensor_read(const arrays_t *A, int which, PyObject *obj) {
    PyObject *d = A->descr[which], *v;
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

static int tensor_is(const arrays_t *A, int which, PyObject *obj, PyObject *want) {
    return drop_is(tensor_read(A, which, obj), want);
}

static int tensor_u64(const arrays_t *A, int which, PyObject *obj, uint64_t *out) {
    return drop_u64(tensor_read(A, which, obj), out);
}

/* A value (``bits`` read as ``negative`` says) into its parameter's slot, where it is in
 * [low, high] (high is never negative): 1 packed; 0 not. */
static int pack_value(const param_t *p, uint64_t bits, int negative, long long low, unsigned long long high,
                      unsigned char *buf) {
    if (negative ? (long long)bits < low : bits > high || (low > 0 && bits < (uint64_t)low))
        return 0;
    memcpy(buf + p->offset, &bits, (size_t)p->size);
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
            if (!int_bits(a, &bits, &negative) || !pack_value(p, bits, negative, p->low, p->high, buf))
                return 0;
            scalars[is++] = bits;
            continue;
        }
        PyTypeObject *cls = Py_TYPE(a);
        if ((PyObject *)cls == L->arrays.device_array) {
            if (!drop_is(attr(a, s_launch_key), p->key) || !read_u64(a, s_address, &address[ip]))
                return 0;
            extent[ip] = UINT64_MAX; /* its bytes matter only to a footprint, as in Python */
            if (L->footprint != NULL && !read_u64(a, s_nbytes, &extent[ip]))
                return 0;
        } else if (cls == &PyLong_Type) {
            if (L->check_ints || !uint_bits(a, &address[ip]))
                return 0;
            extent[ip] = UINT64_MAX; /* an int is trusted: its extent is unknown */
        } else if (L->arrays.tensor != NULL && (PyObject *)cls == L->arrays.tensor) {
            /* one the kernel takes as it is: its dtype, on this device, contiguous and not
             * empty (the Python path's fast test, in the same order) */
            const arrays_t *A = &L->arrays;
            if (p->torch_dtype == NULL || !tensor_is(A, T_DTYPE, a, p->torch_dtype) ||
                !tensor_is(A, T_IS_CUDA, a, Py_True) || !tensor_u64(A, T_GET_DEVICE, a, &bits) ||
                bits != (uint64_t)p->ordinal || !tensor_is(A, T_IS_CONTIGUOUS, a, Py_True) ||
                !tensor_u64(A, T_NBYTES, a, &extent[ip]) || extent[ip] == 0 ||
                !tensor_u64(A, T_DATA_PTR, a, &address[ip]) || (address[ip] & p->mask))
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
        /* The scalars in order: the Python launcher makes its key of them (FootprintCheck.need). */
        PyObject *values = PyTuple_New(L->nscalars);
        if (values == NULL)
            return -1;
        for (Py_ssize_t i = 0, k = 0; i < L->nparams; i++)
            if (L->params[i].kind == SCALAR)
                PyTuple_SET_ITEM(values, k++, Py_NewRef(args[i]));
        PyObject *need = PyObject_CallFunction(L->footprint, "IIIIIIN", geometry[0], geometry[1],
                                               geometry[2], geometry[3], geometry[4], geometry[5], values);
        if (need == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_Exception))
                return -1;
            drop_error();
            return 0;
        }
        uint64_t fresh[2 * MAX_PARAMS];
        int read = PyTuple_CheckExact(need) && PyTuple_GET_SIZE(need) == 2 * L->npointers;
        for (Py_ssize_t i = 0; read && i < 2 * L->npointers; i++)
            read = uint_bits(PyTuple_GET_ITEM(need, i), &fresh[i]);
        Py_DECREF(need);
        if (!read)
            return 0;
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

/* A runtime.Stream's handle, asked every time: it may have been closed. */
static int stream_of(PyObject *stream, uintptr_t *handle) {
    uint64_t bits;
    if (!read_u64(stream, s_handle, &bits))
        return 0;
    *handle = (uintptr_t)bits;
    return 1;
}

/* The stream handle; 0 where the Python path must take the call (no error set). */
static int resolve_stream(arrays_t *A, PyObject *stream, uintptr_t *handle) {
    if (stream == Py_None) {
        *handle = 0;
        return 1;
    }
    if ((PyObject *)Py_TYPE(stream) == A->stream_class)
        return stream_of(stream, handle);
    uint64_t bits;
    if (PyLong_CheckExact(stream)) { /* stream_handle's own test: an int the runtime knows */
        int known = PySet_Contains(A->known, stream);
        if (known == 1 && uint_bits(stream, &bits)) {
            *handle = (uintptr_t)bits;
            return 1;
        }
        if (known < 0)
            drop_error();
    }
    if (stream == A->last && A->last_handle != NULL) {
        int known = PySet_Contains(A->known, A->last_handle);
        if (known == 1) {
            *handle = A->last_value;
            return 1;
        }
        if (known < 0)
            drop_error();
    }
    PyObject *v = PyObject_CallOneArg(A->stream_handle, stream);
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
    PyObject *old = A->last, *old_handle = A->last_handle;
    A->last = Py_NewRef(stream);
    A->last_handle = v; /* the reference stream_handle returned */
    A->last_value = *handle = (uintptr_t)bits;
    Py_XDECREF(old);
    Py_XDECREF(old_handle);
    return 1;
}

static void arrays_init(arrays_t *A, PyObject *device_array, PyObject *stream_class, PyObject *stream_handle,
                        PyObject *known) {
    A->device_array = Py_NewRef(device_array);
    A->stream_class = Py_NewRef(stream_class);
    A->stream_handle = Py_NewRef(stream_handle);
    A->known = Py_NewRef(known);
}

static PyObject *fall_back(PyObject *fallback, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    /* an interrupt during a read goes to the caller */
    return PyErr_Occurred() ? NULL : PyObject_Vectorcall(fallback, args, nargsf, kwnames);
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
        goto python;
    if (kwnames != NULL) {
        Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t k = 0; k < nk; k++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, k);
            if (name == s_stream || PyUnicode_Compare(name, s_stream) == 0)
                stream = args[nargs + k];
            else if (name == s_shared_mem || PyUnicode_Compare(name, s_shared_mem) == 0)
                shared_obj = args[nargs + k];
            else
                goto python;
        }
    }
    unsigned geometry[6];
    uint64_t shared = 0;
    if (!dims(args[0], L->max_grid, geometry) || !dims(args[1], L->max_block, geometry + 3))
        goto python;
    if (L->fixed_block ? geometry[3] != L->block[0] || geometry[4] != L->block[1] || geometry[5] != L->block[2]
                       : (uint64_t)geometry[3] * geometry[4] * geometry[5] > L->max_threads)
        goto python;
    if (shared_obj != NULL && (!uint_bits(shared_obj, &shared) || shared > L->max_shared))
        goto python;
    PyObject *given = args[2];
    if (!PyTuple_CheckExact(given) || PyTuple_GET_SIZE(given) != L->nparams)
        goto python;
    uintptr_t handle;
    if (!resolve_stream(&L->arrays, stream, &handle))
        goto python;
    int done = launch_checked(L, &L->cache, &PyTuple_GET_ITEM(given, 0), geometry, (unsigned)shared, handle);
    if (done < 0)
        return NULL;
    if (done)
        Py_RETURN_NONE;
python:
    return fall_back(L->fallback, args, nargsf, kwnames);
}

/* --- construction ----------------------------------------------------------------- */

/* Three unsigned ints from a sequence: the device's limits, a grid or block the Python
 * launcher checked. */
static int three(PyObject *seq, unsigned *out) {
    PyObject *t = PySequence_Tuple(seq);
    int ok = t != NULL && PyArg_ParseTuple(t, "III", &out[0], &out[1], &out[2]);
    Py_XDECREF(t);
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

/* One parameter from its description, as runtime/launch.py's _compiled makes it:
 * ("pointer", offset, mask, ordinal, key) or ("scalar", offset, size, low, high, raw_low,
 * raw_high). Anything else (never made there) is refused with one error. */
static int param_init(param_t *p, PyObject *spec) {
    const char *kind;
    unsigned long long mask = 0;
    memset(p, 0, sizeof *p);
    p->size = 8;
    p->raw_high = UINT64_MAX; /* a pointer's raw range: any address not negative */
    if (!PyTuple_Check(spec)) { /* a tuple holds what PyArg_Parse lends out (another sequence may not) */
        PyErr_SetString(PyExc_TypeError, "a parameter is described by a tuple");
        return 0;
    }
    int pointer = PyTuple_GET_SIZE(spec) == 5;
    if (pointer ? !PyArg_Parse(spec, "(snKLO)", &kind, &p->offset, &mask, &p->ordinal, &p->key)
                : !PyArg_Parse(spec, "(sniLKLK)", &kind, &p->offset, &p->size, &p->low, &p->high, &p->raw_low,
                               &p->raw_high))
        return 0;
    Py_XINCREF(p->key);
    p->kind = pointer ? POINTER : SCALAR;
    p->mask = mask;
    if (strcmp(kind, pointer ? "pointer" : "scalar") != 0 || p->size < 1 || p->size > 8 || (p->size & (p->size - 1)) ||
        p->offset < 0 || p->offset > MAX_BUFFER - p->size) { /* the launcher keeps to the buffer's limits */
        PyErr_SetString(PyExc_ValueError, "a parameter this launch does not take");
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
    if (!three(max_grid, L->max_grid) || !three(max_block, L->max_block))
        goto fail;
    if (block != Py_None) {
        if (!three(block, L->block))
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
    L->fallback = Py_NewRef(fallback);
    arrays_init(&L->arrays, device_array, stream_class, stream_handle, known);
    L->footprint = footprint != Py_None ? Py_NewRef(footprint) : NULL;
    Py_DECREF(seq);
    return (PyObject *)L;
fail:
    Py_DECREF(seq);
    Py_DECREF(L);
    return NULL;
}

static int Launch_traverse(Launch *L, visitproc visit, void *arg) {
    VISIT_REFS(L->refs);
    VISIT_REFS(L->arrays.refs);
    for (Py_ssize_t i = 0; L->params != NULL && i < L->nparams; i++) {
        Py_VISIT(L->params[i].key);
        Py_VISIT(L->params[i].torch_dtype);
    }
    return 0;
}

static int Launch_clear(Launch *L) {
    L->open = 0; /* a launch after this goes to the (cleared) fallback: never reached */
    CLEAR_REFS(L->refs);
    CLEAR_REFS(L->arrays.refs);
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
        Py_XSETREF(L->params[i].torch_dtype, d != Py_None ? Py_NewRef(d) : NULL);
    }
    arrays_bind_torch(&L->arrays, tensor);
    Py_RETURN_NONE;
}

/* close() and not a writable member: a launch closed with its module (unloaded, or a forked
 * child's) must never call the driver from here again. */
static PyObject *Launch_close(Launch *L, PyObject *unused) {
    L->open = 0;
    Py_RETURN_NONE;
}

static PyMemberDef Launch_members[] = {
    {"open", T_BOOL, offsetof(Launch, open), READONLY, "False once closed: every launch goes to the Python path."},
    {"check_ints", T_BOOL, offsetof(Launch, check_ints), 0,
     "Whether int addresses go to the Python path (which asks the driver about them)."},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef Launch_methods[] = {
    {"close", (PyCFunction)Launch_close, METH_NOARGS, "Every later launch goes to the Python path, for good."},
    {"bind_torch", (PyCFunction)Launch_bind_torch, METH_VARARGS,
     "bind_torch(tensor_class, dtypes): recognise torch tensors, one dtype (or None) per pointer."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef dict_getset[] = { /* Launch's and Prepared's */
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
    .tp_members = Launch_members,
    .tp_getset = dict_getset,
};

/* --- prepared launches ------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Launch *launch; /* owned as well (of its own type, so not in refs[]) */
    union {         /* the other references it owns, also as refs[] */
        struct {
            PyObject *dict;
            PyObject *fallback; /* the Python prepared launch (or its raw) */
            PyObject *stream;   /* the runtime.Stream launched on, asked whether it is open; or NULL */
        };
        PyObject *refs[3];
    };
    uintptr_t stream_handle;
    unsigned geometry[6], shared;
    int raw;
    footprint_cache_t cache;
} Prepared;
REFS_END(Prepared, stream_handle);

/* The trusted launch of a raw ``P`` with ``bits``/``negative`` per parameter (raw(*values)
 * and a step of Steps): 1 launched; 0 a value outside its C type's range, or the driver
 * refused (the caller's Python path says which, or retries). */
static int launch_trusted(Prepared *P, const uint64_t *bits, const unsigned char *negative) {
    Launch *L = P->launch;
    uint64_t words[MAX_BUFFER / 8];
    unsigned char *buf = (unsigned char *)words;
    memset(buf, 0, (size_t)L->size);
    for (Py_ssize_t i = 0; i < L->nparams; i++) /* a scalar in its C type's range, an address not negative */
        if (!pack_value(&L->params[i], bits[i], negative[i], L->params[i].raw_low, L->params[i].raw_high, buf))
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
    uintptr_t handle = P->stream_handle;
    if (!L->open || kwnames != NULL || PyVectorcall_NARGS(nargsf) != L->nparams ||
        (P->stream != NULL && !stream_of(P->stream, &handle))) /* a closed one raises (in the Python path) */
        return fall_back(P->fallback, args, nargsf, kwnames);
    int done = 1;
    if (P->raw) { /* ints as they are: an address not negative, a scalar in its C type */
        uint64_t bits[MAX_PARAMS];
        unsigned char negative[MAX_PARAMS];
        for (Py_ssize_t i = 0; done && i < L->nparams; i++) {
            int neg = 0;
            done = int_bits(args[i], &bits[i], &neg);
            negative[i] = (unsigned char)neg;
        }
        done = done && launch_trusted(P, bits, negative);
    } else if ((done = launch_checked(L, &P->cache, args, P->geometry, P->shared, handle)) < 0) {
        return NULL;
    }
    return done ? Py_NewRef(Py_None) : fall_back(P->fallback, args, nargsf, kwnames);
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
    if (!three(grid, P->geometry) || !three(block, P->geometry + 3) ||
        (!raw && L->footprint != NULL && !footprint_cache_init(&P->cache, L->nscalars, L->npointers))) {
        Py_DECREF(P);
        return NULL;
    }
    P->launch = (Launch *)Py_NewRef(launch);
    P->fallback = Py_NewRef(fallback);
    P->stream = stream != Py_None ? Py_NewRef(stream) : NULL;
    P->stream_handle = (uintptr_t)handle;
    P->shared = shared;
    P->raw = raw;
    return (PyObject *)P;
}

static int Prepared_traverse(Prepared *P, visitproc visit, void *arg) {
    Py_VISIT(P->launch);
    VISIT_REFS(P->refs);
    return 0;
}

static int Prepared_clear(Prepared *P) {
    Py_CLEAR(P->launch);
    CLEAR_REFS(P->refs);
    return 0;
}

static void Prepared_dealloc(Prepared *P) {
    PyObject_GC_UnTrack(P);
    Prepared_clear(P);
    footprint_cache_free(&P->cache);
    Py_TYPE(P)->tp_free((PyObject *)P);
}

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
    .tp_getset = dict_getset,
};

#define MAX_PIECES 15 /* the alignment key holds 4 bits per array in 64 */

/* fn(*ints): an int object per value, ``values[i]`` read as unsigned or, where ``sign``
 * says 1, as signed, or 2, plus 2**64 (NULL: all unsigned). 0 called, -1 an error set. */
static int call_ints(PyObject *fn, const uint64_t *values, const unsigned char *sign, Py_ssize_t n) {
    PyObject *ints[MAX_PARAMS] = {NULL}, *r = NULL;
    Py_ssize_t made = 0;
    for (; made < n; made++) {
        int how = sign != NULL ? sign[made] : 0;
        ints[made] = how == 1 ? PyLong_FromLongLong((long long)values[made])
                              : PyLong_FromUnsignedLongLong(values[made]);
        if (ints[made] != NULL && how == 2) {
            PyObject *past = PyLong_FromString("18446744073709551616", NULL, 10); /* 2**64 */
            Py_SETREF(ints[made], past != NULL ? PyNumber_Add(ints[made], past) : NULL);
            Py_XDECREF(past);
        }
        if (ints[made] == NULL)
            break;
    }
    if (made == n)
        r = PyObject_Vectorcall(fn, ints, (size_t)n, NULL);
    while (made > 0)
        Py_DECREF(ints[--made]);
    Py_XDECREF(r);
    return r != NULL ? 0 : -1;
}

/* --- the ops' steps ---------------------------------------------------------------- */
/*
 * runtime/op_plans.py runs a plan's steps as one function of the arrays' base addresses,
 * ``launch(wide, piece_0, piece_1, ...)`` (its _Steps): each step a prepared raw launch of
 * ints such as ``raw0(p1, w + 64, 48, 80)``. Steps holds the same recipe as data: per
 * argument of each step, a constant or one of the arrays' addresses plus a byte offset.
 * Called from Python it does what that function does; OpLane calls it with the addresses
 * as C values, so no int object is made on the way to the driver. A step whose launch C
 * does not take (a closed function, a value out of range, a failed driver call) is handed,
 * as int objects, to its prepared raw launch, which launches it through the Python path or
 * raises there; any argument not a plain int sends the call to the Python function whole.
 */

typedef struct {
    Prepared *raw;         /* the step's prepared raw launch */
    Py_ssize_t nargs;
    uint64_t *value;       /* the constant's bits, or the byte offset (one allocation with the two below) */
    signed char *source;   /* per argument: -1 a constant, 0 the wide array, i + 1 piece i */
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

/* Every step, given ``bases``: [0] the wide array's address, [i + 1] piece i's. 0 all
 * launched; -1 an error set (the steps before it were launched, as in Python). */
static int steps_run(Steps *S, const uint64_t *bases) {
    for (Py_ssize_t k = 0; k < S->nsteps; k++) {
        const step_t *st = &S->steps[k];
        Prepared *P = st->raw;
        Launch *L = P->launch;
        int done = L != NULL && L->open && P->fallback != NULL;
        uint64_t bits[MAX_PARAMS];
        for (Py_ssize_t i = 0; i < st->nargs; i++) {
            bits[i] = st->value[i];
            if (st->source[i] >= 0) { /* an address plus an offset: past 2**64 is Python's to refuse */
                uint64_t base = bases[st->source[i]];
                done = done && bits[i] <= UINT64_MAX - base;
                bits[i] += base;
            }
        }
        if (done && launch_trusted(P, bits, st->negative))
            continue;
        /* Refused by C or by the driver: to its raw launch's Python path (see above), which packs
         * and calls once more, retrying with the context made current, or raises. A sum below its
         * offset went past 2**64: it is made as Python adds them (sign 2), for that to refuse. */
        unsigned char sign[MAX_PARAMS];
        for (Py_ssize_t i = 0; i < st->nargs; i++)
            sign[i] = st->source[i] < 0 ? st->negative[i] : bits[i] < st->value[i] ? 2 : 0;
        /* held across the call: a cleared raw launch drops its fallback (and then raises) */
        PyObject *target = P->fallback != NULL ? P->fallback : (PyObject *)P;
        Py_INCREF(target);
        int called = call_ints(target, bits, sign, st->nargs);
        Py_DECREF(target);
        if (called < 0)
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

/* One step from ``(raw, recipe)``: recipe holds, per argument of the kernel, an int (a
 * constant) or ``(array, byte_offset)`` with array 0 the wide array and i + 1 piece i. */
static int step_init(step_t *st, PyObject *pair, Py_ssize_t npieces) {
    PyObject *raw, *recipe; /* each step is (prepared raw launch, tuple of arguments), a tuple: */
    if (!PyTuple_Check(pair)) { /* it holds what PyArg_Parse lends out (another sequence may not) */
        PyErr_SetString(PyExc_TypeError, "each step is (prepared raw launch, tuple of arguments)");
        return 0;
    }
    if (!PyArg_Parse(pair, "(O!O!)", &PreparedType, &raw, &PyTuple_Type, &recipe))
        return 0;
    Prepared *P = (Prepared *)raw;
    if (!P->raw || P->launch == NULL || PyTuple_GET_SIZE(recipe) != P->launch->nparams) {
        PyErr_SetString(PyExc_ValueError, "a step needs a prepared raw launch and one recipe per parameter");
        return 0;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(recipe);
    st->nargs = n;
    if ((st->value = PyMem_Calloc((size_t)n + 1, sizeof(uint64_t) + 2)) == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    st->source = (signed char *)(st->value + n + 1);
    st->negative = (unsigned char *)st->source + n + 1;
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
    st->raw = (Prepared *)Py_NewRef(P);
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
        S->nsteps = k + 1; /* what Steps_clear and the collector see */
        if (!step_init(&S->steps[k], PyTuple_GET_ITEM(steps, k), npieces)) {
            Py_DECREF(S);
            return NULL;
        }
    }
    S->fallback = Py_NewRef(fallback);
    return (PyObject *)S;
}

static int Steps_traverse(Steps *S, visitproc visit, void *arg) {
    Py_VISIT(S->fallback);
    for (Py_ssize_t k = 0; S->steps != NULL && k < S->nsteps; k++)
        Py_VISIT(S->steps[k].raw);
    return 0;
}

static int Steps_clear(Steps *S) {
    Py_CLEAR(S->fallback);
    for (Py_ssize_t k = 0; S->steps != NULL && k < S->nsteps; k++)
        Py_CLEAR(S->steps[k].raw);
    for (Py_ssize_t k = 0; S->steps != NULL && k < S->nsteps; k++) /* freed once every launch is let go */
        PyMem_Free(S->steps[k].value);
    PyMem_Free(S->steps);
    S->steps = NULL;
    return 0;
}

static void Steps_dealloc(Steps *S) {
    PyObject_GC_UnTrack(S);
    Steps_clear(S);
    Py_TYPE(S)->tp_free((PyObject *)S);
}

static PyMemberDef Steps_members[] = { /* T_OBJECT: None once cleared */
    {"python", T_OBJECT, offsetof(Steps, fallback), READONLY, "the Python function of the same steps"},
    {NULL, 0, 0, 0, NULL},
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
    .tp_members = Steps_members,
};

/* --- the ops' lane ------------------------------------------------------------------- */
/*
 * channel_cat_backward / channel_cat_forward in C, for the kinds of call the Python path
 * (runtime/ops.py) has run. After a call it checked and launched, the Python path hands
 * this lane the call's own arguments and what it decided, through ``remember_split`` /
 * ``remember_join``: what the call's route says of such calls (Route.entry: its element
 * size, each array's bytes around its address, the results' shapes and strides), its
 * device and its launch function. The lane reads the arrays itself, as it reads those of
 * every later call, and files an entry under the key it builds from them (read_call): the
 * op, whether ``out`` was given, its ints (dim, sizes) and per array its class, shape,
 * strides (None where contiguous), dtype and, for an output, whether it may be written. A
 * later call of that key is checked here for what depends on its addresses (alignment,
 * overlap through the entry's spans, one device), its results made where not given
 * (fresh_results), and run by the launch function remembered for its device, stream and
 * addresses modulo 16. Anything else (a kind of call not remembered, another alignment, an
 * array this lane does not read: one not contiguous of CuPy's, or read through
 * ``__cuda_array_interface__``; CuPy arrays while CuPy's current stream is not the op's)
 * answers False having done nothing, and the Python path takes the call.
 */

#define SLOTS_KEPT 16     /* launch functions an entry keeps; past this it starts over */
#define ENTRIES_KEPT 1024 /* kinds of call the lane keeps; past this it starts over */

typedef struct {
    long long ordinal;
    uint64_t handle, pattern; /* the stream, and 4 bits per array: its address modulo 16 */
    PyObject *device, *launch;
} slot_t;

typedef struct {
    PyObject_HEAD
    uint64_t mask;                      /* the element size less one: every address must clear it */
    long long spans[MAX_PIECES + 1][2]; /* each array's bytes from its address: lowest, past highest */
    PyObject *results;                  /* without out: per result (shape, strides) */
    int row_major;                      /* the route's order None: a DeviceArray may be made */
    int nslots;
    slot_t slots[SLOTS_KEPT];
} OpEntry;

/* Empties the entry's slots: taken out first, released after, since releasing runs
 * Python code (a finalizer) that may call the lane and must find no half-cleared slot. */
static void entry_slots_clear(OpEntry *e) {
    slot_t gone[SLOTS_KEPT];
    int n = e->nslots;
    memcpy(gone, e->slots, (size_t)n * sizeof(slot_t));
    e->nslots = 0;
    for (int i = 0; i < n; i++) {
        Py_DECREF(gone[i].device);
        Py_DECREF(gone[i].launch);
    }
}

static int OpEntry_traverse(OpEntry *e, visitproc visit, void *arg) {
    Py_VISIT(e->results);
    for (int i = 0; i < e->nslots; i++) {
        Py_VISIT(e->slots[i].device);
        Py_VISIT(e->slots[i].launch);
    }
    return 0;
}

static int OpEntry_clear(OpEntry *e) {
    Py_CLEAR(e->results);
    entry_slots_clear(e);
    return 0;
}

static void OpEntry_dealloc(OpEntry *e) {
    PyObject_GC_UnTrack(e);
    OpEntry_clear(e);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static PyTypeObject OpEntryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "runtime._fastlaunch.OpEntry",
    .tp_basicsize = sizeof(OpEntry),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "One kind of op call the lane remembers (made by OpLane.remember_split / remember_join).",
    .tp_dealloc = (destructor)OpEntry_dealloc,
    .tp_traverse = (traverseproc)OpEntry_traverse,
    .tp_clear = (inquiry)OpEntry_clear,
};

typedef struct {
    PyObject_HEAD
    union { /* the references it owns (and arrays'), also as refs[] */
        struct {
            PyObject *entries;        /* key -> OpEntry */
            PyObject *outputs;        /* runtime.outputs.outputs_of */
            PyObject *torch_dtypes;   /* torch dtype -> DType (arrays._torch_dtypes), once bound */
            PyObject *current_stream; /* torch's raw current stream of a device index, once bound, or NULL */
            PyObject *cupy_array;     /* cupy.ndarray once bound, else NULL */
            PyObject *cupy_dtypes;    /* numpy dtype -> DType (arrays._cupy_dtypes), once bound */
            PyObject *cupy_stream;    /* () -> CuPy's current stream as the ops name it, once bound */
        };
        PyObject *refs[7];
    };
    arrays_t arrays;
    char enabled;             /* off: every call answers False (use_compiled_launch) */
    PyObject *weakrefs;
} OpLane;
REFS_END(OpLane, arrays);

enum { KIND_DEVICE_ARRAY, KIND_TENSOR, KIND_CUPY };

typedef struct {
    int kind;
    uint64_t address;
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

/* Whether an array of ``shape`` (a tuple of ints) holds an element: no extent is 0, and
 * the count stays within 64 bits. With ``strides`` (in bytes), also whether they are those
 * of a packed row-major array of ``step`` bytes an element: stricter than CuPy's
 * ``flags.c_contiguous``, which lets an extent of 1 have any stride, so what passes is
 * contiguous to the Python path too; and no ``Flags`` object is made (half a microsecond
 * a read). */
static int shape_fits(PyObject *shape, PyObject *strides, uint64_t step) {
    if (!PyTuple_Check(shape) ||
        (strides != NULL && (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != PyTuple_GET_SIZE(shape))))
        return 0;
    uint64_t total = 1;
    for (Py_ssize_t i = PyTuple_GET_SIZE(shape) - 1; i >= 0; i--) {
        uint64_t extent, stride;
        if (!uint_bits(PyTuple_GET_ITEM(shape, i), &extent) || extent == 0 || total > UINT64_MAX / extent)
            return 0;
        total *= extent;
        if (strides == NULL)
            continue;
        if (!uint_bits(PyTuple_GET_ITEM(strides, i), &stride) || stride != step || step > UINT64_MAX / extent)
            return 0;
        step *= extent;
    }
    return 1;
}

/* The DType ``table`` maps ``dtype`` to (``dtype`` a new reference, let go here; NULL: a
 * failed read): a new reference, or NULL with no error set where it has none (a miss: the
 * Python path looks it up). */
static PyObject *dtype_in(PyObject *table, PyObject *dtype) {
    PyObject *found = dtype != NULL ? PyDict_GetItemWithError(table, dtype) : NULL;
    Py_XINCREF(found);
    Py_XDECREF(dtype);
    if (found == Py_None)
        Py_CLEAR(found);
    if (found == NULL)
        drop_error();
    return found;
}

/* op_arrays' reading of an array, for the arrays this lane takes: an open, non-empty
 * DeviceArray (its launch key names its device and dtype), a non-empty CUDA tensor of a
 * dtype we have (its strides read where it is not contiguous), or a non-empty, contiguous
 * CuPy array of a dtype we have (its device that of its memory). 1 filled in; 0 not taken.
 * Whether a tensor may be written (requires_grad) is read only where ``written``. */
static int array_facts(OpLane *Q, PyObject *v, facts_t *f, int written) {
    memset(f, 0, sizeof *f);
    PyObject *cls = (PyObject *)Py_TYPE(v);
    uint64_t bits;
    if (cls == Q->arrays.device_array) {
        f->key = attr(v, s_launch_key); /* (device, dtype) while open and not empty */
        if (f->key == NULL || !PyTuple_CheckExact(f->key) || PyTuple_GET_SIZE(f->key) != 2 ||
            !read_u64(PyTuple_GET_ITEM(f->key, 0), s_ordinal, &bits) || !read_u64(v, s_address, &f->address))
            goto no;
        f->ordinal = (long long)bits;
        f->dtype = Py_NewRef(PyTuple_GET_ITEM(f->key, 1));
        if ((f->shape = attr(v, s_shape)) == NULL)
            goto no;
        f->writable = 1;
        return 1;
    }
    if (Q->cupy_array != NULL && cls == Q->cupy_array) {
        f->kind = KIND_CUPY;
        PyObject *strides, *memory;
        if ((f->dtype = dtype_in(Q->cupy_dtypes, attr(v, s_dtype))) == NULL)
            return 0;
        if ((f->shape = attr(v, s_shape)) == NULL || !read_u64(f->dtype, s_itemsize, &bits) ||
            (strides = attr(v, s_strides)) == NULL)
            goto no;
        int packed = shape_fits(f->shape, strides, bits);
        Py_DECREF(strides);
        if (!packed || (memory = attr(v, s_data)) == NULL)
            goto no;
        int read = read_u64(memory, s_ptr, &f->address) && read_u64(memory, s_device_id, &bits);
        Py_DECREF(memory);
        if (!read)
            goto no;
        f->ordinal = (long long)bits;
        f->writable = 1;
        return 1;
    }
    if (Q->arrays.tensor == NULL || cls != Q->arrays.tensor)
        return 0;
    f->kind = KIND_TENSOR;
    const arrays_t *A = &Q->arrays;
    if (!tensor_is(A, T_IS_CUDA, v, Py_True))
        return 0;
    if (!tensor_is(A, T_IS_CONTIGUOUS, v, Py_True)) {
        /* not contiguous, or the read failed: an interrupt then stays set, and no more is read */
        if (PyErr_Occurred() || (f->strides = tensor_read(A, T_STRIDE, v)) == NULL)
            return 0;
        if (!PyTuple_CheckExact(f->strides))
            goto no;
    }
    if ((f->dtype = dtype_in(Q->torch_dtypes, tensor_read(A, T_DTYPE, v))) == NULL)
        goto no;
    if (!tensor_u64(A, T_DATA_PTR, v, &f->address) || (f->shape = tensor_read(A, T_SHAPE, v)) == NULL ||
        !shape_fits(f->shape, NULL, 0) || !tensor_u64(A, T_GET_DEVICE, v, &bits))
        goto no;
    f->ordinal = (long long)bits;
    if (written) {
        PyObject *grad = tensor_read(A, T_REQUIRES_GRAD, v);
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

/* Calls a launch function (Steps, run here with the addresses as C values, or a Python
 * function) with the wide array's and the pieces' addresses: 1 launched, -1 error. */
static int run_launch(PyObject *launch, uint64_t wide, const uint64_t *pieces, Py_ssize_t n) {
    uint64_t bases[MAX_PIECES + 1];
    bases[0] = wide;
    memcpy(bases + 1, pieces, (size_t)n * sizeof(uint64_t));
    if (Py_TYPE(launch) == &StepsType && ((Steps *)launch)->npieces == n && ((Steps *)launch)->steps != NULL)
        return steps_run((Steps *)launch, bases) < 0 ? -1 : 1;
    return call_ints(launch, bases, NULL, n + 1) < 0 ? -1 : 1;
}

/* False, or NULL where an interrupt is pending (see drop_error). */
static PyObject *lane_false(void) {
    return PyErr_Occurred() ? NULL : Py_NewRef(Py_False);
}

/* The results of a call without ``out``, one per ``(shape, strides)`` of ``results`` (the
 * route's, checked by entry_of), of the kind of ``like`` (read into ``facts``), as
 * runtime/outputs.py's outputs_of makes them:
 * - a torch tensor's, where torch's current stream on its device is the op's, here:
 *   ``like.new_empty_strided(shape, strides)`` (its dtype and device, dense in the input's
 *   memory order), from torch's caching allocator, which gives the block to that stream;
 * - any other's by ``outputs_of(like, device, handle, results, dtype, None)`` itself
 *   (row-major results only): CuPy's from CuPy's pool, DeviceArrays in one allocation
 *   from the device's pool, on the op's stream.
 * A new list, the addresses in ``addresses``; NULL with no error set where torch's current
 * stream is another (the Python path makes them under the op's) or an address cannot be
 * read; NULL with the allocator's error where an allocation fails (nothing is launched). */
static PyObject *fresh_results(OpLane *Q, PyObject *like, const facts_t *facts, PyObject *device,
                               uintptr_t handle, PyObject *results, uint64_t *addresses) {
    Py_ssize_t n = PyTuple_GET_SIZE(results);
    if (facts->kind != KIND_TENSOR) {
        PyObject *made = NULL, *pair = NULL, *handle_obj = PyLong_FromUnsignedLongLong(handle);
        if (handle_obj != NULL) {
            PyObject *call[6] = {like, device, handle_obj, results, facts->dtype, Py_None};
            pair = PyObject_Vectorcall(Q->outputs, call, 6, NULL);
            Py_DECREF(handle_obj);
        }
        if (pair != NULL && PyTuple_CheckExact(pair) && PyTuple_GET_SIZE(pair) == 2 &&
            PyList_CheckExact(PyTuple_GET_ITEM(pair, 0)) && PyList_GET_SIZE(PyTuple_GET_ITEM(pair, 0)) == n &&
            PyList_CheckExact(PyTuple_GET_ITEM(pair, 1)) && PyList_GET_SIZE(PyTuple_GET_ITEM(pair, 1)) == n) {
            made = Py_NewRef(PyTuple_GET_ITEM(pair, 0));
            for (Py_ssize_t i = 0; made != NULL && i < n; i++)
                if (!uint_bits(PyList_GET_ITEM(PyTuple_GET_ITEM(pair, 1), i), &addresses[i]))
                    Py_CLEAR(made);
        }
        Py_XDECREF(pair);
        return made;
    }
    PyObject *index = PyLong_FromLongLong(facts->ordinal);
    PyObject *current = index != NULL ? PyObject_Vectorcall(Q->current_stream, &index, 1, NULL) : NULL;
    uint64_t raw;
    int ok = drop_u64(current, &raw);
    Py_XDECREF(index);
    if (!ok || (raw != handle && !(raw <= 1 && handle <= 1))) { /* stream.same_stream: 0, 1 legacy */
        drop_error();
        return NULL;
    }
    PyObject *made = PyList_New(n);
    for (Py_ssize_t i = 0; made != NULL && i < n; i++) {
        PyObject *call[3] = {like, PyTuple_GET_ITEM(PyTuple_GET_ITEM(results, i), 0),
                             PyTuple_GET_ITEM(PyTuple_GET_ITEM(results, i), 1)};
        PyObject *r = PyObject_VectorcallMethod(s_new_empty_strided, call, 3, NULL);
        if (r == NULL) { /* the allocator's own error (out of memory, say): the caller's to see */
            Py_CLEAR(made);
            break;
        }
        PyList_SET_ITEM(made, i, r);
        if (!tensor_u64(&Q->arrays, T_DATA_PTR, r, &addresses[i]))
            Py_CLEAR(made);
    }
    return made;
}

/* One call as the lane reads it: its key, and its arrays' facts (inputs first, then the
 * outputs where given). */
typedef struct {
    PyObject *key;                    /* new reference */
    PyObject *held[2];                /* tuples the arrays are borrowed from (new references) */
    PyObject *arrays[MAX_PIECES + 1]; /* borrowed */
    facts_t f[MAX_PIECES + 1];
    Py_ssize_t narrays, nread, first_written;
    uintptr_t handle;
    int fresh, wide_output; /* no out given; the wide array is the output (a join) */
    int cupy;               /* a CuPy array among them */
} call_t;

static void call_clear(call_t *c) {
    for (Py_ssize_t i = 0; i < c->nread; i++)
        facts_clear(&c->f[i]);
    Py_CLEAR(c->key);
    Py_CLEAR(c->held[0]);
    Py_CLEAR(c->held[1]);
}

/* Reads a call, split(dy, sizes, dim, out, stream) or join(xs, dim, out, stream), into
 * ``c``: 1 read, its key made; 0 not one this lane takes (no error set, but an
 * interrupt); -1 an error. Sequences are read as tuples made first: reading the arrays
 * runs Python code, during which another thread may change a list. */
static int read_call(OpLane *Q, int join, PyObject *const *args, call_t *c) {
    memset(c, 0, sizeof *c);
    PyObject *dim = args[join ? 1 : 2], *out = args[join ? 2 : 3], *stream = args[join ? 3 : 4];
    PyObject *seq = args[join ? 0 : 1]; /* xs, or sizes */
    c->fresh = out == Py_None;
    c->wide_output = join;
    if (!Q->enabled || !PyLong_CheckExact(dim) || (!PyList_CheckExact(seq) && !PyTuple_CheckExact(seq)) ||
        (!join && !c->fresh && !PyList_CheckExact(out) && !PyTuple_CheckExact(out)))
        return 0;
    if ((c->held[0] = PySequence_Tuple(seq)) == NULL)
        return -1;
    if (!join && !c->fresh && (c->held[1] = PySequence_Tuple(out)) == NULL)
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(c->held[0]), nints = join ? 1 : 1 + n;
    if (n == 0 || n > MAX_PIECES || (!join && !c->fresh && PyTuple_GET_SIZE(c->held[1]) != n))
        return 0;
    if (join) {
        for (Py_ssize_t i = 0; i < n; i++)
            c->arrays[c->narrays++] = PyTuple_GET_ITEM(c->held[0], i);
        c->first_written = n;
        if (!c->fresh)
            c->arrays[c->narrays++] = out;
    } else {
        c->arrays[c->narrays++] = args[0];
        c->first_written = 1;
        for (Py_ssize_t i = 0; !c->fresh && i < n; i++)
            c->arrays[c->narrays++] = PyTuple_GET_ITEM(c->held[1], i);
        for (Py_ssize_t i = 0; i < n; i++) /* a bool equals 1 as a key, but is refused */
            if (!PyLong_CheckExact(PyTuple_GET_ITEM(c->held[0], i)))
                return 0;
    }
    if (!resolve_stream(&Q->arrays, stream, &c->handle))
        return 0;
    /* (op, fresh, dim, *sizes, then per array: class, shape, strides, dtype, writable) */
    if ((c->key = PyTuple_New(2 + nints + 5 * c->narrays)) == NULL)
        return -1;
    PyObject *head[3] = {join ? s_forward : s_backward, c->fresh ? Py_True : Py_False, dim};
    Py_ssize_t at = 0;
    for (; at < 3; at++)
        PyTuple_SET_ITEM(c->key, at, Py_NewRef(head[at]));
    for (Py_ssize_t i = 0; !join && i < n; i++, at++)
        PyTuple_SET_ITEM(c->key, at, Py_NewRef(PyTuple_GET_ITEM(c->held[0], i)));
    while (c->nread < c->narrays) {
        facts_t *a = &c->f[c->nread];
        PyObject *array = c->arrays[c->nread];
        int written = c->nread >= c->first_written;
        if (!array_facts(Q, array, a, written))
            return 0;
        c->nread++;
        if (a->ordinal != c->f[0].ordinal) /* one device; Python names both */
            return 0;
        PyObject *fact[5] = {(PyObject *)Py_TYPE(array), a->shape,
                             a->strides != NULL ? a->strides : Py_None, a->dtype,
                             !written ? Py_None : a->writable ? Py_True : Py_False};
        for (int k = 0; k < 5; k++, at++)
            PyTuple_SET_ITEM(c->key, at, Py_NewRef(fact[k]));
        c->cupy |= a->kind == KIND_CUPY;
    }
    if (c->cupy) { /* the stream a CuPy array's interface names must be the op's: else Python orders them */
        uint64_t producer;
        int same = drop_u64(PyObject_CallNoArgs(Q->cupy_stream), &producer) &&
                   (producer == c->handle || (producer <= 1 && c->handle <= 1)); /* stream.same_stream */
        if (!same) {
            drop_error();
            return 0;
        }
    }
    return 1;
}

/* The wide array's address, the pieces' (into ``pieces``, their count returned) and the
 * pattern of all of them modulo 16, the wide array's highest, from the arrays read and
 * the results made (``made``, ``nmade`` addresses). */
static Py_ssize_t call_addresses(const call_t *c, const uint64_t *made, Py_ssize_t nmade, uint64_t *wide,
                                 uint64_t *pieces, uint64_t *pattern) {
    uint64_t all[2 * (MAX_PIECES + 1)];
    Py_ssize_t total = 0, npieces = 0;
    for (Py_ssize_t i = 0; i < c->narrays; i++)
        all[total++] = c->f[i].address;
    for (Py_ssize_t i = 0; i < nmade && total < 2 * (MAX_PIECES + 1); i++)
        all[total++] = made[i];
    *wide = c->wide_output ? all[total - 1] : all[0];
    *pattern = *wide & 15;
    for (Py_ssize_t i = c->wide_output ? 0 : 1; i < (c->wide_output ? total - 1 : total); i++) {
        pieces[npieces++] = all[i];
        *pattern = *pattern << 4 | (all[i] & 15);
    }
    return npieces;
}

/* The slot of ``e`` for this device ordinal, stream and pattern (``any_pattern``: any of
 * them), its device open: 1 found, its device and launch function in ``*device`` and
 * ``*launch`` (new references); 0 none. The slot is copied before its device is asked
 * whether it is closed: that runs Python code, during which the slot may be rewritten. */
static int find_slot(OpEntry *e, long long ordinal, uint64_t handle, uint64_t pattern, int any_pattern,
                     PyObject **device, PyObject **launch) {
    for (int i = 0; i < e->nslots; i++) {
        slot_t s = e->slots[i];
        if (s.ordinal != ordinal || s.handle != handle || (!any_pattern && s.pattern != pattern))
            continue;
        *device = Py_NewRef(s.device);
        *launch = Py_NewRef(s.launch);
        if (drop_is(attr(s.device, s_closed), Py_False))
            return 1;
        Py_CLEAR(*device);
        Py_CLEAR(*launch);
        return 0; /* its device closed: the Python path runs the call (and remembers it anew) */
    }
    return 0;
}

/* Runs a call read into ``c`` by its entry: True launched (without out: the results), or
 * False having done nothing. */
static PyObject *lane_run(OpLane *Q, call_t *c) {
    PyObject *result = Py_False, *made = NULL, *device = NULL, *launch = NULL;
    OpEntry *e = (OpEntry *)PyDict_GetItemWithError(Q->entries, c->key);
    if (e == NULL) {
        drop_error();
        return lane_false();
    }
    Py_INCREF(e); /* another thread may drop it from the table while Python code runs below */
    for (Py_ssize_t i = 0; i < c->narrays; i++)
        if (c->f[i].address & e->mask)
            goto done;
    if (!c->fresh) { /* no output shares a byte with an input or another output (strided_ops.check_disjoint) */
        uint64_t lo[MAX_PIECES + 1], hi[MAX_PIECES + 1];
        for (Py_ssize_t i = 0; i < c->narrays; i++) {
            lo[i] = c->f[i].address + (uint64_t)e->spans[i][0];
            hi[i] = c->f[i].address + (uint64_t)e->spans[i][1];
        }
        for (Py_ssize_t j = c->first_written; j < c->narrays; j++)
            for (Py_ssize_t i = 0; i < j; i++)
                if (lo[i] < hi[i] && lo[j] < hi[j] && lo[i] < hi[j] && lo[j] < hi[i])
                    goto done;
    }
    uint64_t addresses[MAX_PIECES + 1], wide, pieces[MAX_PIECES + 1], pattern;
    Py_ssize_t nmade = 0;
    long long ordinal = c->f[0].ordinal;
    if (c->fresh) {
        const facts_t *first = &c->f[0];
        if (first->kind == KIND_TENSOR ? Q->current_stream == NULL : !e->row_major)
            goto done; /* a DeviceArray's results are row-major: Python says so (a CuPy array here is) */
        /* nothing is allocated unless a launch of this device and stream is there to run */
        if (!find_slot(e, ordinal, c->handle, 0, 1, &device, &launch))
            goto done;
        nmade = PyTuple_GET_SIZE(e->results);
        made = fresh_results(Q, c->arrays[0], first, device, c->handle, e->results, addresses);
        Py_CLEAR(device);
        Py_CLEAR(launch);
        if (made == NULL) { /* the allocator's own error (out of memory, say) is the caller's */
            if (PyErr_Occurred())
                result = NULL;
            goto done;
        }
    }
    Py_ssize_t npieces = call_addresses(c, addresses, nmade, &wide, pieces, &pattern);
    if (!find_slot(e, ordinal, c->handle, pattern, 0, &device, &launch))
        goto done;
    if (run_launch(launch, wide, pieces, npieces) < 0)
        result = NULL;
    else if (made != NULL)
        result = c->wide_output ? PyList_GET_ITEM(made, 0) : made;
    else
        result = Py_True;
done:
    Py_XINCREF(result);
    Py_XDECREF(made); /* results not returned go back to their allocator */
    Py_XDECREF(device);
    Py_XDECREF(launch);
    Py_DECREF(e);
    if (result == Py_False) {
        Py_DECREF(result);
        return lane_false();
    }
    return result;
}

/* A lane the garbage collector cleared answers an error (it is unreachable by then). */
static int lane_cleared(OpLane *Q) {
    if (Q->entries == NULL)
        PyErr_SetString(PyExc_ValueError, "cleared");
    return Q->entries == NULL;
}

static PyObject *lane_call(OpLane *Q, int join, PyObject *const *args, Py_ssize_t nargs) {
    if (lane_cleared(Q))
        return NULL;
    if (nargs != (join ? 4 : 5)) {
        PyErr_SetString(PyExc_TypeError, join ? "join(xs, dim, out, stream)" : "split(dy, sizes, dim, out, stream)");
        return NULL;
    }
    call_t c;
    int read = read_call(Q, join, args, &c);
    PyObject *result = read < 0 ? NULL : read == 0 ? lane_false() : lane_run(Q, &c);
    call_clear(&c);
    return result;
}

/* Whether ``results`` is as fresh_results takes it: a pair per result made. */
static int results_fit(PyObject *results, Py_ssize_t nmade) {
    if (!PyTuple_CheckExact(results) || PyTuple_GET_SIZE(results) != nmade)
        return 0;
    for (Py_ssize_t i = 0; i < nmade; i++)
        if (!PyTuple_CheckExact(PyTuple_GET_ITEM(results, i)) || PyTuple_GET_SIZE(PyTuple_GET_ITEM(results, i)) != 2)
            return 0;
    return 1;
}

/* The entry of a call read into ``c``, made where the table has none from ``entry``, what
 * the Python path's route says of such calls (Route.entry): the element size, each
 * array's span as native int64 pairs, per result (shape, strides), whether row-major. A
 * new reference; NULL, an error set or not, where it does not fit the call. */
static OpEntry *entry_of(OpLane *Q, call_t *c, PyObject *entry, Py_ssize_t nmade) {
    OpEntry *e = (OpEntry *)PyDict_GetItemWithError(Q->entries, c->key);
    if (e != NULL)
        return (OpEntry *)Py_NewRef(e);
    unsigned long long itemsize;
    const char *spans;
    Py_ssize_t nbytes;
    PyObject *results;
    int row_major;
    if (PyErr_Occurred() || !PyTuple_CheckExact(entry) ||
        !PyArg_ParseTuple(entry, "Ky#Op", &itemsize, &spans, &nbytes, &results, &row_major) || !itemsize ||
        (itemsize & (itemsize - 1)) || nbytes != c->narrays * (Py_ssize_t)sizeof e->spans[0] ||
        (c->fresh && !results_fit(results, nmade)) || (e = PyObject_GC_New(OpEntry, &OpEntryType)) == NULL)
        return NULL;
    e->mask = itemsize - 1;
    memcpy(e->spans, spans, (size_t)nbytes);
    e->results = c->fresh ? Py_NewRef(results) : NULL;
    e->row_major = row_major;
    e->nslots = 0;
    PyObject_GC_Track(e);
    if (PyDict_GET_SIZE(Q->entries) >= ENTRIES_KEPT)
        PyDict_Clear(Q->entries);
    if (PyDict_SetItem(Q->entries, c->key, (PyObject *)e) < 0)
        Py_CLEAR(e);
    return e;
}

/* Whether the arrays read into ``c`` are those the Python path checked: ``seen`` holds
 * its (address, shape) of each, in the same order. Another thread may have changed a
 * list or an array in between; a call so changed is not remembered. */
static int read_as_seen(const call_t *c, PyObject *seen) {
    if (!PyList_CheckExact(seen) || PyList_GET_SIZE(seen) != c->narrays)
        return 0;
    for (Py_ssize_t i = 0; i < c->narrays; i++) {
        PyObject *pair = PyList_GET_ITEM(seen, i);
        uint64_t address;
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !uint_bits(PyTuple_GET_ITEM(pair, 0), &address) || address != c->f[i].address)
            return 0;
        if (PyObject_RichCompareBool(PyTuple_GET_ITEM(pair, 1), c->f[i].shape, Py_EQ) != 1)
            return 0;
    }
    return 1;
}

/* remember_split(dy, sizes, dim, out, stream, entry, device, seen, made, launch) and
 * remember_join(xs, dim, out, stream, entry, device, seen, made, launch): a call the
 * Python path checked and ran with ``launch`` on ``device``, remembered for the next of
 * its kind. ``seen``: the (address, shape) it read of each array, inputs then outputs
 * given; ``made``: the addresses of the results it made (an empty list where ``out`` was
 * given). True remembered; False where this lane does not take such calls, or the
 * arrays are not as the Python path saw them. It raises nothing but an interrupt: the
 * op has run by then. */
static PyObject *lane_remember(OpLane *Q, int join, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t nops = join ? 4 : 5;
    if (lane_cleared(Q))
        return NULL;
    if (nargs != nops + 5) {
        PyErr_SetString(PyExc_TypeError, join ? "remember_join(xs, dim, out, stream, entry, device, seen, made, launch)"
                                              : "remember_split(dy, sizes, dim, out, stream, entry, device, seen, made, launch)");
        return NULL;
    }
    PyObject *entry = args[nops], *device = args[nops + 1], *seen = args[nops + 2], *outputs = args[nops + 3];
    PyObject *launch = args[nops + 4];
    call_t c;
    OpEntry *e = NULL;
    int taken = 0;
    if (read_call(Q, join, args, &c) <= 0 || !read_as_seen(&c, seen))
        goto done;
    uint64_t made[MAX_PIECES + 1], wide, pieces[MAX_PIECES + 1], pattern;
    Py_ssize_t nmade = 0;
    if (c.fresh) { /* the results' addresses, which the pattern of this call holds */
        if (!PyList_CheckExact(outputs) || PyList_GET_SIZE(outputs) > MAX_PIECES + 1 - c.narrays)
            goto done;
        for (; nmade < PyList_GET_SIZE(outputs); nmade++)
            if (!uint_bits(PyList_GET_ITEM(outputs, nmade), &made[nmade]))
                goto done;
    }
    call_addresses(&c, made, nmade, &wide, pieces, &pattern);
    if ((e = entry_of(Q, &c, entry, nmade)) == NULL)
        goto done;
    int at = 0;
    while (at < e->nslots && !(e->slots[at].ordinal == c.f[0].ordinal && e->slots[at].handle == c.handle &&
                               e->slots[at].pattern == pattern))
        at++;
    if (at == SLOTS_KEPT) { /* past what an entry keeps: it starts over */
        entry_slots_clear(e);
        at = 0;
    }
    if (at > e->nslots) /* a finalizer run by the clearing remembered a call of this kind */
        at = e->nslots;
    slot_t *s = &e->slots[at];
    PyObject *old_device = at < e->nslots ? s->device : NULL, *old_launch = at < e->nslots ? s->launch : NULL;
    *s = (slot_t){c.f[0].ordinal, c.handle, pattern, Py_NewRef(device), Py_NewRef(launch)};
    if (at == e->nslots)
        e->nslots++;
    Py_XDECREF(old_device); /* after the slot is whole: a finalizer may run Python code */
    Py_XDECREF(old_launch);
    taken = 1;
done:
    Py_XDECREF(e);
    call_clear(&c);
    drop_error(); /* the op has run: what could not be remembered runs through Python next time */
    return PyErr_Occurred() ? NULL : PyBool_FromLong(taken);
}

static PyObject *OpLane_forget(OpLane *Q, PyObject *unused) {
    if (Q->entries != NULL)
        PyDict_Clear(Q->entries);
    Py_RETURN_NONE;
}

static PyObject *OpLane_bind_torch(OpLane *Q, PyObject *args) {
    PyObject *tensor, *dtypes, *current = Py_None;
    if (!PyArg_ParseTuple(args, "OO!|O", &tensor, &PyDict_Type, &dtypes, &current))
        return NULL;
    arrays_bind_torch(&Q->arrays, tensor);
    Py_XSETREF(Q->torch_dtypes, Py_NewRef(dtypes));
    Py_XSETREF(Q->current_stream, current != Py_None ? Py_NewRef(current) : NULL);
    Py_RETURN_NONE;
}

static PyObject *OpLane_bind_cupy(OpLane *Q, PyObject *args) {
    PyObject *ndarray, *dtypes, *current;
    if (!PyArg_ParseTuple(args, "OO!O", &ndarray, &PyDict_Type, &dtypes, &current))
        return NULL;
    Py_XSETREF(Q->cupy_dtypes, Py_NewRef(dtypes));
    Py_XSETREF(Q->cupy_stream, Py_NewRef(current));
    Py_XSETREF(Q->cupy_array, Py_NewRef(ndarray)); /* last: the others are there once it is */
    Py_RETURN_NONE;
}

static PyObject *OpLane_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"device_array", "stream_class", "stream_handle", "known_streams", "outputs", "enabled",
                            NULL};
    PyObject *device_array, *stream_class, *stream_handle, *known, *outputs;
    int enabled = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO!O|p", names, &device_array, &stream_class,
                                     &stream_handle, &PySet_Type, &known, &outputs, &enabled))
        return NULL;
    if (!PyCallable_Check(outputs)) {
        PyErr_SetString(PyExc_TypeError, "outputs must be callable (runtime.outputs.outputs_of)");
        return NULL;
    }
    OpLane *Q = (OpLane *)type->tp_alloc(type, 0);
    if (Q == NULL)
        return NULL;
    if ((Q->entries = PyDict_New()) == NULL) {
        Py_DECREF(Q);
        return NULL;
    }
    arrays_init(&Q->arrays, device_array, stream_class, stream_handle, known);
    Q->outputs = Py_NewRef(outputs);
    Q->enabled = enabled;
    return (PyObject *)Q;
}

static int OpLane_traverse(OpLane *Q, visitproc visit, void *arg) {
    VISIT_REFS(Q->refs);
    VISIT_REFS(Q->arrays.refs);
    return 0;
}

static int OpLane_clear(OpLane *Q) {
    CLEAR_REFS(Q->refs);
    CLEAR_REFS(Q->arrays.refs);
    return 0;
}

static void OpLane_dealloc(OpLane *Q) {
    PyObject_GC_UnTrack(Q);
    if (Q->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)Q);
    OpLane_clear(Q);
    Py_TYPE(Q)->tp_free((PyObject *)Q);
}

/* The four calling methods: a split or a join, run (lane_call) or remembered (lane_remember). */
#define LANE_METHOD(name, body, join) \
    static PyObject *name(OpLane *Q, PyObject *const *args, Py_ssize_t nargs) { return body(Q, join, args, nargs); }
LANE_METHOD(OpLane_split, lane_call, 0)
LANE_METHOD(OpLane_join, lane_call, 1)
LANE_METHOD(OpLane_remember_split, lane_remember, 0)
LANE_METHOD(OpLane_remember_join, lane_remember, 1)

static PyMethodDef OpLane_methods[] = {
    {"split", (PyCFunction)(void (*)(void))OpLane_split, METH_FASTCALL,
     "split(dy, sizes, dim, out, stream): True launched (out None: the results), or False having done nothing."},
    {"join", (PyCFunction)(void (*)(void))OpLane_join, METH_FASTCALL,
     "join(xs, dim, out, stream): True launched (out None: the result), or False having done nothing."},
    {"remember_split", (PyCFunction)(void (*)(void))OpLane_remember_split, METH_FASTCALL,
     "remember_split(dy, sizes, dim, out, stream, entry, device, seen, made, launch): a checked call, for the next."},
    {"remember_join", (PyCFunction)(void (*)(void))OpLane_remember_join, METH_FASTCALL,
     "remember_join(xs, dim, out, stream, entry, device, seen, made, launch): a checked call, for the next."},
    {"forget", (PyCFunction)OpLane_forget, METH_NOARGS, "forget(): every call remembered."},
    {"bind_torch", (PyCFunction)OpLane_bind_torch, METH_VARARGS,
     "bind_torch(tensor_class, dtypes, current_stream=None): recognise torch tensors (dtypes: torch "
     "dtype -> DType); with torch's raw current stream of a device index, make results without out."},
    {"bind_cupy", (PyCFunction)OpLane_bind_cupy, METH_VARARGS,
     "bind_cupy(ndarray, dtypes, current_stream): recognise contiguous CuPy arrays (dtypes: numpy "
     "dtype -> DType) while current_stream() is the op's."},
    {NULL, NULL, 0, NULL},
};

static PyObject *OpLane_get_size(OpLane *Q, void *unused) {
    return PyLong_FromSsize_t(Q->entries != NULL ? PyDict_GET_SIZE(Q->entries) : 0);
}

static PyMemberDef OpLane_members[] = {
    {"enabled", T_BOOL, offsetof(OpLane, enabled), 0, "False: every call answers False, and the Python path takes it"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef OpLane_getset[] = {
    {"remembered", (getter)OpLane_get_size, NULL, "how many kinds of call the lane holds", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject OpLaneType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "runtime._fastlaunch.OpLane",
    .tp_basicsize = sizeof(OpLane),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The ops' calls in C, for the kinds of call the Python path remembered here; see runtime/ops.py.",
    .tp_new = OpLane_new,
    .tp_dealloc = (destructor)OpLane_dealloc,
    .tp_traverse = (traverseproc)OpLane_traverse,
    .tp_clear = (inquiry)OpLane_clear,
    .tp_methods = OpLane_methods,
    .tp_members = OpLane_members,
    .tp_getset = OpLane_getset,
    .tp_weaklistoffset = offsetof(OpLane, weakrefs),
};

/* --- the module ------------------------------------------------------------------- */

static int intern_all(void) {
#define INTERN_NAME(name) \
    if ((s_##name = PyUnicode_InternFromString(#name)) == NULL) \
        return 0;
    NAMES(INTERN_NAME)
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
    if (!intern_all() || PyType_Ready(&OpEntryType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    /* each type readied and added under the last part of its name */
    if (PyModule_AddType(m, &LaunchType) < 0 || PyModule_AddType(m, &OpLaneType) < 0 ||
        PyModule_AddType(m, &PreparedType) < 0 || PyModule_AddType(m, &StepsType) < 0 ||
        PyModule_AddIntConstant(m, "MAX_BUFFER", MAX_BUFFER) < 0 ||
        PyModule_AddIntConstant(m, "MAX_PARAMS", MAX_PARAMS) < 0 ||
        PyModule_AddIntConstant(m, "MAX_PIECES", MAX_PIECES) < 0 ||
        PyModule_AddStringConstant(m, "SOURCE_SHA256", PTXGEN_FASTLAUNCH_SOURCE_SHA256) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

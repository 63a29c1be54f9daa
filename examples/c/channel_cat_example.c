/* Load channel_cat_backward from a ptxgen bundle and launch it through the CUDA
 * driver API, from C: no CUDA headers, no CUDA library at link time (libcuda.so.1
 * is opened with dlopen), nothing from Python.
 *
 *   usage: channel_cat_example [--plan] [--target sm_XX] BUNDLE_DIR [KERNEL_ID]
 *
 * KERNEL_ID defaults to channel_cat_backward__f32__128. Everything about the kernel
 * comes from the bundle's manifest.json: the .ptx file and its size, the entry point,
 * the block, the grid (C expressions, evaluated here), and where each argument sits
 * in the parameter buffer, which is passed with CU_LAUNCH_PARAM_BUFFER_POINTER. What
 * the program knows itself is what the kernel computes:
 *
 *   dx[n * chunk_c + ci] = dy[n * c_total + chunk_offset + ci]
 *
 * It launches it for every chunk of a few shapes (the seed's test, 64 rows of 32
 * channels in two chunks of 16, and odd ones), into outputs poisoned twice with
 * different bytes and fenced by guard elements, and compares every element and
 * guard with what it should be. It works on bit patterns, so any dtype is checked.
 *
 * --plan prints the launches it would make (grid, block, parameter bytes with null
 * pointers) without loading the driver. --target picks the entry for that target;
 * otherwise the newest target the GPU can run (with --plan: the first listed).
 *
 * Exit status: 0 all checked and equal; 1 a CUDA call failed or a result is wrong;
 * 2 bad usage or a bundle this program cannot use. Every CUDA call is checked and a
 * failure is printed with cuGetErrorName and cuGetErrorString. */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grid_expr.h"
#include "json.h"

#define PROG "channel_cat_example"

/* --- the few driver API declarations this program needs, instead of cuda.h ------- */

typedef int CUresult; /* an enum in cuda.h; CUDA_SUCCESS is 0 */
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr; /* a 64-bit device address */
typedef struct CUevent_st *CUevent;

/* cuLaunchKernelEx's configuration (cuda.h 12.x): the geometry, the stream and launch
 * attributes; this program sets one, programmatic stream serialization. */
enum { LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6, STREAM_NON_BLOCKING = 1 };
typedef struct {
    int id; /* CUlaunchAttributeID */
    char pad[8 - sizeof(int)];
    union {
        char bytes[64]; /* CUlaunchAttributeValue is a 64-byte union */
        int programmatic_stream_serialization_allowed;
    } value;
} CUlaunchAttribute;
typedef struct {
    unsigned int grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_mem_bytes;
    CUstream stream;
    CUlaunchAttribute *attrs;
    unsigned int num_attrs;
} CUlaunchConfig;

/* CUdevice_attribute values (cuda.h) */
enum {
    ATTRIBUTE_MAX_BLOCK_DIM_X = 2,
    ATTRIBUTE_MAX_BLOCK_DIM_Y = 3,
    ATTRIBUTE_MAX_BLOCK_DIM_Z = 4,
    ATTRIBUTE_MAX_GRID_DIM_X = 5,
    ATTRIBUTE_MAX_GRID_DIM_Y = 6,
    ATTRIBUTE_MAX_GRID_DIM_Z = 7,
    ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
};

/* The markers of cuLaunchKernel's `extra` array (cuda.h) */
#define LAUNCH_PARAM_END ((void *)0x00)
#define LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)

static struct {
    CUresult (*cuInit)(unsigned int);
    CUresult (*cuDriverGetVersion)(int *);
    CUresult (*cuDeviceGet)(CUdevice *, int);
    CUresult (*cuDeviceGetName)(char *, int, CUdevice);
    CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuModuleLoadData)(CUmodule *, const void *);
    CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*cuModuleUnload)(CUmodule);
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
    CUresult (*cuMemFree)(CUdeviceptr);
    CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*cuLaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                               unsigned int, unsigned int, unsigned int, CUstream, void **, void **);
    CUresult (*cuGetErrorName)(CUresult, const char **);
    CUresult (*cuGetErrorString)(CUresult, const char **);
    CUresult (*cuStreamCreate)(CUstream *, unsigned int);
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuStreamDestroy)(CUstream);
    CUresult (*cuEventCreate)(CUevent *, unsigned int);
    CUresult (*cuEventRecord)(CUevent, CUstream);
    CUresult (*cuEventSynchronize)(CUevent);
    CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*cuEventDestroy)(CUevent);
    CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
    /* CUDA 12.0+; NULL on an older driver, which then launches every kernel with cuLaunchKernel */
    CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **, void **);
} cu;

/* Exported names: cuda.h maps several API names to versioned symbols (cuMemAlloc is
 * cuMemAlloc_v2, and so on); dlsym needs the symbol itself. */
static const struct {
    const char *symbol;
    void *slot;
} SYMBOLS[] = {
    {"cuInit", &cu.cuInit},
    {"cuDriverGetVersion", &cu.cuDriverGetVersion},
    {"cuDeviceGet", &cu.cuDeviceGet},
    {"cuDeviceGetName", &cu.cuDeviceGetName},
    {"cuDeviceGetAttribute", &cu.cuDeviceGetAttribute},
    {"cuDevicePrimaryCtxRetain", &cu.cuDevicePrimaryCtxRetain},
    {"cuDevicePrimaryCtxRelease_v2", &cu.cuDevicePrimaryCtxRelease},
    {"cuCtxSetCurrent", &cu.cuCtxSetCurrent},
    {"cuCtxSynchronize", &cu.cuCtxSynchronize},
    {"cuModuleLoadData", &cu.cuModuleLoadData},
    {"cuModuleGetFunction", &cu.cuModuleGetFunction},
    {"cuModuleUnload", &cu.cuModuleUnload},
    {"cuMemAlloc_v2", &cu.cuMemAlloc},
    {"cuMemFree_v2", &cu.cuMemFree},
    {"cuMemcpyHtoD_v2", &cu.cuMemcpyHtoD},
    {"cuMemcpyDtoH_v2", &cu.cuMemcpyDtoH},
    {"cuLaunchKernel", &cu.cuLaunchKernel},
    {"cuGetErrorName", &cu.cuGetErrorName},
    {"cuGetErrorString", &cu.cuGetErrorString},
    {"cuStreamCreate", &cu.cuStreamCreate},
    {"cuStreamSynchronize", &cu.cuStreamSynchronize},
    {"cuStreamDestroy_v2", &cu.cuStreamDestroy},
    {"cuEventCreate", &cu.cuEventCreate},
    {"cuEventRecord", &cu.cuEventRecord},
    {"cuEventSynchronize", &cu.cuEventSynchronize},
    {"cuEventElapsedTime", &cu.cuEventElapsedTime},
    {"cuEventDestroy_v2", &cu.cuEventDestroy},
    {"cuMemsetD8Async", &cu.cuMemsetD8Async},
};

static int load_driver(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, PROG ": cannot load the CUDA driver: %s\n", dlerror());
        return 0;
    }
    for (size_t i = 0; i < sizeof SYMBOLS / sizeof SYMBOLS[0]; i++) {
        void *address = dlsym(lib, SYMBOLS[i].symbol);
        if (!address) {
            fprintf(stderr, PROG ": libcuda.so.1 has no %s (driver too old?)\n", SYMBOLS[i].symbol);
            return 0;
        }
        /* POSIX guarantees a data pointer can hold a function's address; memcpy keeps ISO C happy. */
        memcpy(SYMBOLS[i].slot, &address, sizeof address);
    }
    void *ex = dlsym(lib, "cuLaunchKernelEx");
    if (ex) memcpy(&cu.cuLaunchKernelEx, &ex, sizeof ex);
    return 1; /* the library stays loaded until exit */
}

/* Every driver call goes through here: on failure, say which call, and what the driver named it. */
static int cu_ok(CUresult result, const char *call) {
    if (result == 0) return 1;
    const char *name = NULL, *text = NULL;
    if (cu.cuGetErrorName(result, &name) != 0 || !name) name = "an unknown CUresult";
    if (cu.cuGetErrorString(result, &text) != 0 || !text) text = "no description";
    fprintf(stderr, PROG ": %s failed: %s (%d): %s\n", call, name, result, text);
    return 0;
}
#define CU(call) cu_ok(cu.call, #call)

/* --- the manifest entry ---------------------------------------------------------- */

enum { MAX_PARAMS = 128, MAX_BUFFER = 4096 };

typedef struct {
    const char *name;
    int is_pointer;
    uint64_t size, align, offset, element_size;
    int writes;
    int64_t min;
    uint64_t max;
} param_spec;

typedef struct {
    const char *id, *name, *file, *entry_point, *target, *ptx_version, *content_hash;
    uint64_t file_size, buffer_size;
    unsigned int block[3];
    const char *grid[3];
    const json_value *grid_inputs;
    param_spec params[MAX_PARAMS];
    size_t n_params;
    int dependent_launch; /* launch with programmatic stream serialization (cuLaunchKernelEx) */
} kernel_spec;

static int bad_bundle(const char *id, const char *what) {
    fprintf(stderr, PROG ": manifest entry %s: %s\n", id ? id : "(no id)", what);
    return 0;
}

static int read_param(const char *id, const json_value *p, param_spec *out) {
    const char *kind = json_string(json_get(p, "kind"));
    out->name = json_string(json_get(p, "name"));
    if (!out->name || !kind) return bad_bundle(id, "a parameter without name or kind");
    if (!json_u64(json_get(p, "size"), &out->size) || !json_u64(json_get(p, "align"), &out->align) ||
        !json_u64(json_get(p, "offset"), &out->offset))
        return bad_bundle(id, "a parameter without size, align or offset");
    if ((out->size != 4 && out->size != 8) || out->align == 0 || out->offset % out->align != 0)
        return bad_bundle(id, "a parameter with a size, alignment or offset this program cannot use");
    out->is_pointer = strcmp(kind, "pointer") == 0;
    if (out->is_pointer) {
        const json_value *writes = json_get(p, "writes");
        if (out->size != 8 || !json_u64(json_get(p, "element_size"), &out->element_size) || !writes ||
            writes->type != JSON_BOOL)
            return bad_bundle(id, "a pointer parameter without size 8, element_size or writes");
        out->writes = writes->boolean;
    } else if (strcmp(kind, "scalar") == 0) {
        if (!json_i64(json_get(p, "min"), &out->min) || !json_u64(json_get(p, "max"), &out->max))
            return bad_bundle(id, "a scalar parameter without min or max");
    } else {
        return bad_bundle(id, "a parameter of unknown kind");
    }
    return 1;
}

static int read_entry(const json_value *e, kernel_spec *k, int need_grid) {
    memset(k, 0, sizeof *k);
    k->id = json_string(json_get(e, "id"));
    k->name = json_string(json_get(e, "name"));
    k->file = json_string(json_get(e, "file"));
    k->entry_point = json_string(json_get(e, "entry_point"));
    k->target = json_string(json_get(e, "target"));
    k->ptx_version = json_string(json_get(e, "ptx_version"));
    k->content_hash = json_string(json_get(e, "content_hash"));
    if (!k->id || !k->name || !k->file || !k->entry_point || !k->target || !k->ptx_version || !k->content_hash)
        return bad_bundle(k->id, "a required string field is missing");
    if (strchr(k->file, '/') || k->file[0] == '.') return bad_bundle(k->id, "file is not a plain file name");
    if (!json_u64(json_get(e, "file_size"), &k->file_size) ||
        !json_u64(json_get(e, "param_buffer_size"), &k->buffer_size) || k->buffer_size > MAX_BUFFER)
        return bad_bundle(k->id, "file_size or param_buffer_size missing or too large");

    const json_value *block = json_get(e, "block");
    if (!block || block->type != JSON_ARRAY || block->count != 3) return bad_bundle(k->id, "block is not 3 ints");
    for (int i = 0; i < 3; i++) {
        uint64_t b = 0;
        if (!json_u64(&block->items[i], &b) || b == 0 || b > 1024) return bad_bundle(k->id, "bad block");
        k->block[i] = (unsigned int)b;
    }

    const json_value *grid = json_get(e, "grid");
    if (need_grid || (grid && grid->type != JSON_NULL)) { /* an op's steps carry their own grids */
        if (!grid || grid->type != JSON_OBJECT)
            return bad_bundle(k->id, "the manifest does not say how to compute the grid");
        const char *axes[3] = {"x", "y", "z"};
        for (int i = 0; i < 3; i++)
            if (!(k->grid[i] = json_string(json_get(grid, axes[i])))) return bad_bundle(k->id, "grid lacks an axis");
        k->grid_inputs = json_get(grid, "inputs");
        if (!k->grid_inputs || k->grid_inputs->type != JSON_ARRAY) return bad_bundle(k->id, "grid lacks inputs");
    }
    const json_value *dependent = json_get(e, "dependent_launch");
    if (dependent && dependent->type != JSON_BOOL) return bad_bundle(k->id, "dependent_launch is not true or false");
    k->dependent_launch = dependent && dependent->boolean;

    const json_value *params = json_get(e, "params");
    if (!params || params->type != JSON_ARRAY || params->count > MAX_PARAMS)
        return bad_bundle(k->id, "params missing or too many");
    k->n_params = params->count;
    for (size_t i = 0; i < params->count; i++) {
        if (!read_param(k->id, &params->items[i], &k->params[i])) return 0;
        if (k->params[i].offset + k->params[i].size > k->buffer_size)
            return bad_bundle(k->id, "a parameter lies past param_buffer_size");
    }
    return 1;
}

static const param_spec *param(const kernel_spec *k, const char *name) {
    for (size_t i = 0; i < k->n_params; i++)
        if (strcmp(k->params[i].name, name) == 0) return &k->params[i];
    return NULL;
}

/* This program knows what channel_cat_backward computes; check the entry is that kernel. */
static int is_channel_cat_backward(const kernel_spec *k) {
    if (strcmp(k->name, "channel_cat_backward") != 0)
        return bad_bundle(k->id, "this program launches channel_cat_backward only");
    const param_spec *dy = param(k, "dy"), *dx = param(k, "dx");
    if (!dy || !dx || !dy->is_pointer || !dx->is_pointer || !dx->writes ||
        dy->element_size != dx->element_size || k->n_params != 5)
        return bad_bundle(k->id, "parameters are not (dy, dx, chunk_c, c_total, chunk_offset)");
    const char *scalars[3] = {"chunk_c", "c_total", "chunk_offset"};
    for (int i = 0; i < 3; i++) {
        const param_spec *s = param(k, scalars[i]);
        if (!s || s->is_pointer) return bad_bundle(k->id, "a scalar parameter is missing");
    }
    uint64_t e = dy->element_size;
    if (e != 1 && e != 2 && e != 4 && e != 8) return bad_bundle(k->id, "element_size is not 1, 2, 4 or 8");
    for (size_t i = 0; i < k->grid_inputs->count; i++) {
        const char *input = json_string(&k->grid_inputs->items[i]);
        if (!input || strcmp(input, "n_spatial") != 0)
            return bad_bundle(k->id, "the grid needs an input this program cannot give (it gives n_spatial)");
    }
    return 1;
}

/* "sm_90" -> 90, "sm_100a" -> 100 with *suffix 'a'; -1 if it is not sm_<digits>. */
static int target_number(const char *target, char *suffix) {
    *suffix = '\0';
    if (strncmp(target, "sm_", 3) != 0) return -1;
    char *end;
    long n = strtol(target + 3, &end, 10);
    if (end == target + 3 || n <= 0 || n > 10000) return -1;
    *suffix = *end;
    if (*end && (end[1] || (*end != 'a' && *end != 'f'))) return -1;
    return (int)n;
}

/* The entry for `id`: for `target` if given, else the newest the device runs (capability
 * `cc`, e.g. 90), else (cc < 0) the first listed. NULL if none fits. */
static const json_value *choose(const json_value *kernels, const char *id, const char *target, int cc) {
    const json_value *best = NULL;
    int best_number = -1;
    for (size_t i = 0; i < kernels->count; i++) {
        const json_value *e = &kernels->items[i];
        const char *eid = json_string(json_get(e, "id")), *etarget = json_string(json_get(e, "target"));
        if (!eid || !etarget || strcmp(eid, id) != 0) continue;
        if (target) {
            if (strcmp(etarget, target) == 0) return e;
            continue;
        }
        if (cc < 0) return e;
        char suffix = '\0';
        int number = target_number(etarget, &suffix);
        /* sm_XXa/f code runs only on that architecture (family); plain PTX JITs forward. */
        int runs = suffix ? number == cc : (number > 0 && number <= cc);
        if (runs && number > best_number) best = e, best_number = number;
    }
    return best;
}

/* --- files ----------------------------------------------------------------------- */

static char *read_file(const char *path, size_t *length) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, PROG ": cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    char *data = NULL;
    size_t n = 0, capacity = 0;
    for (;;) {
        if (n + 1 >= capacity) {
            capacity = capacity ? capacity * 2 : 65536;
            char *grown = realloc(data, capacity);
            if (!grown) { fprintf(stderr, PROG ": out of memory reading %s\n", path); goto error; }
            data = grown;
        }
        size_t got = fread(data + n, 1, capacity - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) { fprintf(stderr, PROG ": cannot read %s\n", path); goto error; }
    fclose(f);
    data[n] = '\0'; /* cuModuleLoadData takes PTX as a NUL-terminated string */
    *length = n;
    return data;
error:
    free(data);
    fclose(f);
    return NULL;
}

/* --- one launch ------------------------------------------------------------------ */

typedef struct {
    uint64_t n_spatial, chunk_c, c_total, chunk_offset;
    CUdeviceptr dy, dx;
} launch_values;

/* Pack the parameter buffer by the manifest's offsets and compute the grid. */
static int prepare(const kernel_spec *k, const launch_values *v, unsigned char *buffer, unsigned int grid[3]) {
    memset(buffer, 0, k->buffer_size);
    for (size_t i = 0; i < k->n_params; i++) {
        const param_spec *p = &k->params[i];
        uint64_t value;
        if (strcmp(p->name, "dy") == 0) value = v->dy;
        else if (strcmp(p->name, "dx") == 0) value = v->dx;
        else if (strcmp(p->name, "chunk_c") == 0) value = v->chunk_c;
        else if (strcmp(p->name, "c_total") == 0) value = v->c_total;
        else value = v->chunk_offset;
        if (!p->is_pointer && ((p->min > 0 && value < (uint64_t)p->min) || value > p->max)) {
            fprintf(stderr, PROG ": %s = %" PRIu64 " is outside [%" PRId64 ", %" PRIu64 "]\n", p->name, value,
                    p->min, p->max);
            return 0;
        }
        if (p->size == 8) {
            memcpy(buffer + p->offset, &value, 8);
        } else {
            uint32_t narrow = (uint32_t)value;
            memcpy(buffer + p->offset, &narrow, 4); /* host and GPU are both little-endian */
        }
    }
    grid_variable variables[4] = {
        {"n_spatial", v->n_spatial}, {"chunk_c", v->chunk_c}, {"c_total", v->c_total},
        {"chunk_offset", v->chunk_offset},
    };
    for (int i = 0; i < 3; i++) {
        char error[256];
        uint64_t g = 0;
        if (!grid_eval(k->grid[i], variables, 4, &g, error, sizeof error)) {
            fprintf(stderr, PROG ": grid expression %s\n", error);
            return 0;
        }
        if (g == 0 || g > 0xFFFFFFFFu) {
            fprintf(stderr, PROG ": grid dimension %d is %" PRIu64 "; this launch cannot be made\n", i, g);
            return 0;
        }
        grid[i] = (unsigned int)g;
    }
    return 1;
}

/* --- the shapes ------------------------------------------------------------------ */

enum { GUARD = 97, MAX_CHUNKS = 6 };

static const struct {
    uint64_t n_spatial;
    uint64_t chunks[MAX_CHUNKS];
    size_t n_chunks;
} SHAPES[] = {
    {64, {16, 16}, 2},                  /* the seed's own test */
    {1001, {3, 17, 12, 97, 1, 130}, 6}, /* odd widths: partial tiles, one channel, > one tile */
    {3, {1, 1024, 129}, 3},             /* few rows, wide chunks */
};
#define N_SHAPES (sizeof SHAPES / sizeof SHAPES[0])

static uint64_t total(size_t shape) {
    uint64_t t = 0;
    for (size_t c = 0; c < SHAPES[shape].n_chunks; c++) t += SHAPES[shape].chunks[c];
    return t;
}

static int plan(const kernel_spec *k) {
    unsigned char buffer[MAX_BUFFER];
    for (size_t s = 0; s < N_SHAPES; s++) {
        launch_values v = {SHAPES[s].n_spatial, 0, total(s), 0, 0, 0};
        for (size_t c = 0; c < SHAPES[s].n_chunks; c++) {
            unsigned int grid[3];
            v.chunk_c = SHAPES[s].chunks[c];
            if (!prepare(k, &v, buffer, grid)) return 2;
            printf("plan %s %s n_spatial=%" PRIu64 " chunk_c=%" PRIu64 " c_total=%" PRIu64
                   " chunk_offset=%" PRIu64 " grid=%u,%u,%u block=%u,%u,%u params=",
                   k->id, k->target, v.n_spatial, v.chunk_c, v.c_total, v.chunk_offset, grid[0], grid[1], grid[2],
                   k->block[0], k->block[1], k->block[2]);
            for (uint64_t i = 0; i < k->buffer_size; i++) printf("%02x", buffer[i]);
            printf("\n");
            v.chunk_offset += v.chunk_c;
        }
    }
    return 0;
}

/* xorshift64*: reproducible random bits for dy. */
static uint64_t next_random(uint64_t *state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return *state * 0x2545F4914F6CDD1DULL;
}

/* Launch every chunk of one shape and check every element and guard. Returns 0 ok, 1 wrong or failed. */
static int run_shape(const kernel_spec *k, CUfunction fn, size_t s, const int max_grid[3], uint64_t *checked) {
    uint64_t esize = param(k, "dy")->element_size, n = SHAPES[s].n_spatial, c_total = total(s);
    size_t dy_bytes = (size_t)(n * c_total * esize);
    unsigned char *dy_host = malloc(dy_bytes), *dx_host = NULL;
    CUdeviceptr dy = 0, dx = 0;
    int status = 1;
    uint64_t seed = 0x9E3779B97F4A7C15ULL + s;
    if (!dy_host) { fprintf(stderr, PROG ": out of memory\n"); return 1; }
    for (size_t i = 0; i < dy_bytes; i++) dy_host[i] = (unsigned char)(next_random(&seed) >> 56);
    if (!CU(cuMemAlloc(&dy, dy_bytes)) || !CU(cuMemcpyHtoD(dy, dy_host, dy_bytes))) goto done;

    uint64_t offset = 0;
    for (size_t c = 0; c < SHAPES[s].n_chunks; c++) {
        uint64_t chunk_c = SHAPES[s].chunks[c];
        size_t body = (size_t)(n * chunk_c * esize), guard = (size_t)(GUARD * esize);
        size_t dx_bytes = guard + body + guard;
        free(dx_host);
        dx_host = malloc(dx_bytes);
        if (!dx_host) { fprintf(stderr, PROG ": out of memory\n"); goto done; }
        if (!CU(cuMemAlloc(&dx, dx_bytes))) goto done;

        launch_values v = {n, chunk_c, c_total, offset, dy, dx + guard};
        unsigned char buffer[MAX_BUFFER];
        unsigned int grid[3];
        if (!prepare(k, &v, buffer, grid)) goto done;
        for (int i = 0; i < 3; i++) {
            if (grid[i] > (unsigned int)max_grid[i]) {
                fprintf(stderr, PROG ": grid dimension %d is %u, the device allows %d\n", i, grid[i], max_grid[i]);
                goto done;
            }
        }
        size_t buffer_size = (size_t)k->buffer_size;
        void *extra[] = {LAUNCH_PARAM_BUFFER_POINTER, buffer, LAUNCH_PARAM_BUFFER_SIZE, &buffer_size,
                         LAUNCH_PARAM_END};

        /* Twice, with different poison: a result that matches both times was written, not left over. */
        const unsigned char poisons[2] = {0xA5, 0x5A};
        for (int round = 0; round < 2; round++) {
            memset(dx_host, poisons[round], dx_bytes);
            if (!CU(cuMemcpyHtoD(dx, dx_host, dx_bytes))) goto done;
            if (!CU(cuLaunchKernel(fn, grid[0], grid[1], grid[2], k->block[0], k->block[1], k->block[2], 0, NULL,
                                   NULL, extra)))
                goto done;
            if (!CU(cuCtxSynchronize())) goto done;
            if (!CU(cuMemcpyDtoH(dx_host, dx, dx_bytes))) goto done;
            for (size_t i = 0; i < guard; i++) {
                if (dx_host[i] != poisons[round] || dx_host[guard + body + i] != poisons[round]) {
                    fprintf(stderr, PROG ": n_spatial %" PRIu64 ", chunk_c %" PRIu64 " at offset %" PRIu64
                            ": a guard byte changed: the kernel wrote outside dx\n", n, chunk_c, offset);
                    goto done;
                }
            }
            for (uint64_t row = 0; row < n; row++) {
                const unsigned char *want = dy_host + (row * c_total + offset) * esize;
                const unsigned char *got = dx_host + guard + row * chunk_c * esize;
                if (memcmp(got, want, (size_t)(chunk_c * esize)) != 0) {
                    uint64_t ci = 0;
                    while (memcmp(got + ci * esize, want + ci * esize, (size_t)esize) == 0) ci++;
                    fprintf(stderr, PROG ": n_spatial %" PRIu64 ", chunk_c %" PRIu64 " at offset %" PRIu64
                            ": dx[%" PRIu64 "][%" PRIu64 "] differs from dy[%" PRIu64 "][%" PRIu64 "]\n",
                            n, chunk_c, offset, row, ci, row, offset + ci);
                    goto done;
                }
            }
            *checked += n * chunk_c;
        }
        if (!CU(cuMemFree(dx))) { dx = 0; goto done; }
        dx = 0;
        offset += chunk_c;
    }
    status = 0;
done:
    if (dx && !CU(cuMemFree(dx))) status = 1;
    if (dy && !CU(cuMemFree(dy))) status = 1;
    free(dy_host);
    free(dx_host);
    return status;
}

static int run(const kernel_spec *k, const char *ptx, CUdevice device, const char *device_name) {
    CUcontext context = NULL;
    CUmodule module = NULL;
    CUfunction fn = NULL;
    int status = 1, max_grid[3] = {0, 0, 0}, max_block[3] = {0, 0, 0};
    const int grid_attributes[3] = {ATTRIBUTE_MAX_GRID_DIM_X, ATTRIBUTE_MAX_GRID_DIM_Y, ATTRIBUTE_MAX_GRID_DIM_Z};
    const int block_attributes[3] = {ATTRIBUTE_MAX_BLOCK_DIM_X, ATTRIBUTE_MAX_BLOCK_DIM_Y,
                                     ATTRIBUTE_MAX_BLOCK_DIM_Z};
    for (int i = 0; i < 3; i++) {
        if (!CU(cuDeviceGetAttribute(&max_grid[i], grid_attributes[i], device)) ||
            !CU(cuDeviceGetAttribute(&max_block[i], block_attributes[i], device)))
            return 1;
        if (k->block[i] > (unsigned int)max_block[i]) {
            fprintf(stderr, PROG ": block dimension %d is %u, the device allows %d\n", i, k->block[i], max_block[i]);
            return 1;
        }
    }
    if (!CU(cuDevicePrimaryCtxRetain(&context, device))) return 1;
    if (!CU(cuCtxSetCurrent(context))) goto release;
    /* The driver JIT-compiles the PTX for this GPU. */
    if (!CU(cuModuleLoadData(&module, ptx))) {
        fprintf(stderr, PROG ": %s is PTX ISA %s for %s\n", k->file, k->ptx_version, k->target);
        goto release;
    }
    if (!CU(cuModuleGetFunction(&fn, module, k->entry_point))) goto unload;

    uint64_t checked_elements = 0;
    status = 0;
    for (size_t s = 0; s < N_SHAPES && status == 0; s++) status = run_shape(k, fn, s, max_grid, &checked_elements);
    if (status == 0) {
        size_t launches = 0;
        for (size_t s = 0; s < N_SHAPES; s++) launches += 2 * SHAPES[s].n_chunks;
        printf(PROG ": ok: %s (%s, PTX ISA %s) on %s: %zu launches, %" PRIu64
               " elements and every guard checked, all equal\n",
               k->id, k->file, k->ptx_version, device_name, launches, checked_elements);
    }
unload:
    if (!CU(cuModuleUnload(module))) status = 1;
release:
    if (!CU(cuDevicePrimaryCtxRelease(device))) status = 1;
    return status;
}

/* --- op bundles (format_version 2): whole ops from their plans -------------------- */

/* An op's arrays: 0 is the wide one, 1 + i piece i. */
/* MAX_OP_KERNELS: a bundle of 120 random op shapes holds about 260 kernels (the tile
 * kernel is built for each group's chunk count, granule and which chunks are wide). */
enum { MAX_ARRAYS = 65, MAX_STEPS = 64, MAX_OP_KERNELS = 1024 };

typedef struct {
    const char *param;
    int array;           /* -1: a scalar; else the array whose address plus byte_offset it is */
    const char *expr;    /* the scalar's value, or the pointer's byte offset: an expression of rows */
} op_arg;

typedef struct {
    const kernel_spec *kernel;
    const char *grid[3];
    unsigned int block[3];
    const char *shared_mem;
    op_arg args[MAX_PARAMS];
} op_step;

typedef struct {
    uint64_t rows_min, rows_max;
    uint64_t multiple_of[MAX_ARRAYS];
    op_step *steps;
    size_t n_steps;
} op_case;

typedef struct {
    const char *id, *op, *target;
    uint64_t element_size, rows_max;
    size_t n_arrays;
    const char *array_name[MAX_ARRAYS];
    const char *array_bytes[MAX_ARRAYS]; /* an expression of rows */
    uint64_t row_bytes[MAX_ARRAYS];
    int written[MAX_ARRAYS];
    op_case *cases;
    size_t n_cases;
} op_spec;

/* The kernels of a bundle, read once; steps point into this table. */
typedef struct {
    kernel_spec *specs;
    size_t count;
} kernel_table;

static int bad_op(const char *id, const char *what) {
    fprintf(stderr, PROG ": op %s: %s\n", id ? id : "(no id)", what);
    return 0;
}

static void free_op(op_spec *op) {
    if (op->cases)
        for (size_t c = 0; c < op->n_cases; c++) free(op->cases[c].steps);
    free(op->cases);
    op->cases = NULL;
}

static const kernel_spec *find_kernel(const kernel_table *t, const char *id, const char *target) {
    for (size_t i = 0; i < t->count; i++)
        if (strcmp(t->specs[i].id, id) == 0 && strcmp(t->specs[i].target, target) == 0) return &t->specs[i];
    return NULL;
}

static int array_index(const op_spec *op, const char *name) {
    for (size_t i = 0; i < op->n_arrays; i++)
        if (strcmp(op->array_name[i], name) == 0) return (int)i;
    return -1;
}

/* An expression must evaluate for some row count to be worth keeping; the grammar is checked here once. */
static int check_expr(const char *id, const char *text, const char *what) {
    char error[256], message[400];
    uint64_t v;
    grid_variable rows = {"rows", 1};
    if (!text) {
        snprintf(message, sizeof message, "%s is missing or not a string", what);
        return bad_op(id, message);
    }
    if (!grid_eval(text, &rows, 1, &v, error, sizeof error) && strstr(error, "overflow") == NULL &&
        strstr(error, "negative") == NULL && strstr(error, "division by zero") == NULL) {
        snprintf(message, sizeof message, "%s: %s", what, error);
        return bad_op(id, message);
    }
    return 1;
}

static int read_step(const op_spec *op, const kernel_table *t, const json_value *s, op_step *out) {
    const char *kernel = json_string(json_get(s, "kernel"));
    if (!kernel) return bad_op(op->id, "a step without a kernel");
    out->kernel = find_kernel(t, kernel, op->target);
    if (!out->kernel) {
        fprintf(stderr, PROG ": op %s: step kernel %s for %s is not in the bundle's kernels\n", op->id, kernel,
                op->target);
        return 0;
    }
    const json_value *grid = json_get(s, "grid"), *block = json_get(s, "block"), *args = json_get(s, "args");
    if (!grid || grid->type != JSON_ARRAY || grid->count != 3) return bad_op(op->id, "a step's grid is not 3 expressions");
    if (!block || block->type != JSON_ARRAY || block->count != 3) return bad_op(op->id, "a step's block is not 3 ints");
    for (int i = 0; i < 3; i++) {
        uint64_t b = 0;
        out->grid[i] = json_string(&grid->items[i]);
        if (!check_expr(op->id, out->grid[i], "a grid expression")) return 0;
        if (!json_u64(&block->items[i], &b) || b == 0 || b > 1024) return bad_op(op->id, "a step's block is not 1..1024");
        out->block[i] = (unsigned int)b;
        if (out->block[i] != out->kernel->block[i]) return bad_op(op->id, "a step's block is not its kernel's");
    }
    out->shared_mem = json_string(json_get(s, "shared_mem"));
    if (!check_expr(op->id, out->shared_mem, "shared_mem")) return 0;
    if (!args || args->type != JSON_ARRAY || args->count != out->kernel->n_params)
        return bad_op(op->id, "a step's args are not one per parameter of its kernel");
    for (size_t i = 0; i < args->count; i++) {
        const json_value *a = &args->items[i];
        const param_spec *p = &out->kernel->params[i];
        op_arg *arg = &out->args[i];
        arg->param = json_string(json_get(a, "param"));
        if (!arg->param || strcmp(arg->param, p->name) != 0)
            return bad_op(op->id, "a step's args are not in its kernel's parameter order");
        const char *array = json_string(json_get(a, "array"));
        if (p->is_pointer) {
            if (!array || (arg->array = array_index(op, array)) < 0)
                return bad_op(op->id, "a pointer argument names no array of the op");
            arg->expr = json_string(json_get(a, "byte_offset"));
            if (!check_expr(op->id, arg->expr, "a pointer's byte_offset")) return 0;
            if (json_get(a, "value")) return bad_op(op->id, "a pointer argument with a value");
        } else {
            if (array) return bad_op(op->id, "a scalar argument names an array");
            arg->array = -1;
            arg->expr = json_string(json_get(a, "value"));
            if (!check_expr(op->id, arg->expr, "a scalar's value")) return 0;
        }
    }
    return 1;
}

static int read_op(const json_value *o, const kernel_table *t, op_spec *op) {
    memset(op, 0, sizeof *op);
    op->id = json_string(json_get(o, "id"));
    op->op = json_string(json_get(o, "op"));
    op->target = json_string(json_get(o, "target"));
    if (!op->id || !op->op || !op->target) return bad_op(op->id, "id, op or target is missing");
    if (strcmp(op->op, "split") != 0 && strcmp(op->op, "concat") != 0)
        return bad_op(op->id, "op is neither split nor concat");
    if (!json_u64(json_get(o, "element_size"), &op->element_size) ||
        (op->element_size != 1 && op->element_size != 2 && op->element_size != 4 && op->element_size != 8 &&
         op->element_size != 16))
        return bad_op(op->id, "element_size is not 1, 2, 4, 8 or 16");
    if (!json_u64(json_get(o, "rows_max"), &op->rows_max)) return bad_op(op->id, "rows_max is not an int >= 0");
    const json_value *arrays = json_get(o, "arrays"), *sizes = json_get(o, "sizes");
    if (!arrays || arrays->type != JSON_ARRAY || arrays->count < 2 || arrays->count > MAX_ARRAYS)
        return bad_op(op->id, "arrays is not a list of 2 to 65 arrays (wide, then each piece)");
    if (!sizes || sizes->type != JSON_ARRAY || sizes->count + 1 != arrays->count)
        return bad_op(op->id, "sizes does not list one width per piece array");
    op->n_arrays = arrays->count;
    for (size_t i = 0; i < arrays->count; i++) {
        const json_value *a = &arrays->items[i];
        const char *access = json_string(json_get(a, "access"));
        char want[32];
        uint64_t width = 0;
        op->array_name[i] = json_string(json_get(a, "name"));
        op->array_bytes[i] = json_string(json_get(a, "bytes"));
        if (i == 0) snprintf(want, sizeof want, "wide");
        else snprintf(want, sizeof want, "piece%zu", i - 1);
        if (!op->array_name[i] || strcmp(op->array_name[i], want) != 0)
            return bad_op(op->id, "arrays are not wide, piece0, piece1, ... in order");
        if (!check_expr(op->id, op->array_bytes[i], "an array's bytes")) return 0;
        if (!json_u64(json_get(a, "row_bytes"), &op->row_bytes[i])) return bad_op(op->id, "an array without row_bytes");
        if (i > 0 && (!json_u64(&sizes->items[i - 1], &width) || width > UINT64_MAX / op->element_size ||
                      width * op->element_size != op->row_bytes[i]))
            return bad_op(op->id, "a piece's row_bytes is not its size times element_size");
        if (!access || (strcmp(access, "read") != 0 && strcmp(access, "written") != 0))
            return bad_op(op->id, "an array's access is neither read nor written");
        op->written[i] = strcmp(access, "written") == 0;
    }
    uint64_t pitch = 0;
    for (size_t i = 1; i < op->n_arrays; i++) {
        if (pitch > UINT64_MAX - op->row_bytes[i]) return bad_op(op->id, "the pieces' row_bytes overflow");
        pitch += op->row_bytes[i];
    }
    if (pitch != op->row_bytes[0]) return bad_op(op->id, "the wide array's row_bytes is not the pieces' sum");
    int split = strcmp(op->op, "split") == 0;
    for (size_t i = 0; i < op->n_arrays; i++)
        if (op->written[i] != (split ? i > 0 : i == 0))
            return bad_op(op->id, "the arrays' access does not match the op (a split writes the pieces)");

    const json_value *cases = json_get(o, "cases");
    if (!cases || cases->type != JSON_ARRAY || cases->count == 0) return bad_op(op->id, "no cases");
    op->cases = calloc(cases->count, sizeof *op->cases);
    if (!op->cases) return bad_op(op->id, "out of memory");
    op->n_cases = cases->count;
    for (size_t c = 0; c < cases->count; c++) {
        const json_value *k = &cases->items[c];
        op_case *oc = &op->cases[c];
        const json_value *multiple = json_get(k, "address_multiple_of"), *steps = json_get(k, "steps");
        if (!json_u64(json_get(k, "rows_min"), &oc->rows_min) || !json_u64(json_get(k, "rows_max"), &oc->rows_max) ||
            oc->rows_min > oc->rows_max)
            return bad_op(op->id, "a case's rows_min..rows_max is not a range of ints");
        if (!multiple || multiple->type != JSON_OBJECT || multiple->count != op->n_arrays)
            return bad_op(op->id, "a case's address_multiple_of does not name every array once");
        for (size_t i = 0; i < op->n_arrays; i++) {
            uint64_t m = 0;
            if (!json_u64(json_get(multiple, op->array_name[i]), &m) || m == 0 || m > 4096 || (m & (m - 1)))
                return bad_op(op->id, "a case's address_multiple_of is not a power of two up to 4096 per array");
            oc->multiple_of[i] = m;
        }
        if (!steps || steps->type != JSON_ARRAY || steps->count > MAX_STEPS)
            return bad_op(op->id, "a case's steps are missing or more than 64");
        oc->n_steps = steps->count;
        oc->steps = calloc(steps->count ? steps->count : 1, sizeof *oc->steps);
        if (!oc->steps) return bad_op(op->id, "out of memory");
        for (size_t i = 0; i < steps->count; i++)
            if (!read_step(op, t, &steps->items[i], &oc->steps[i])) return 0;
    }
    return 1;
}

/* One launch, ready: what cuLaunchKernel(Ex) takes. */
typedef struct {
    const kernel_spec *kernel;
    unsigned int grid[3];
    unsigned int shared_mem;
    unsigned char buffer[MAX_BUFFER];
} op_launch;

typedef struct {
    size_t case_index, n_launches;
    op_launch launches[MAX_STEPS];
} op_plan;

static int refuse(const op_spec *op, uint64_t rows, const char *format, ...) __attribute__((format(printf, 3, 4)));
static int refuse(const op_spec *op, uint64_t rows, const char *format, ...) {
    va_list args;
    fprintf(stderr, PROG ": op %s at %" PRIu64 " rows: ", op->id, rows);
    va_start(args, format);
    vfprintf(stderr, format, args);
    va_end(args);
    fputc('\n', stderr);
    return 0;
}

static int eval_rows(const op_spec *op, uint64_t rows, const char *text, const char *what, uint64_t *out) {
    char error[256];
    grid_variable v = {"rows", rows};
    if (!grid_eval(text, &v, 1, out, error, sizeof error)) return refuse(op, rows, "%s: %s", what, error);
    return 1;
}

/* The launches of `op` for `rows` rows of arrays at `address[i]` holding `capacity[i]` bytes:
 * the first case whose rows and alignments hold, every expression evaluated, every argument
 * checked against its parameter and its array. 0 (with one line naming what) where it does not fit. */
static int plan_op(const op_spec *op, uint64_t rows, const uint64_t *address, const uint64_t *capacity,
                   op_plan *out) {
    if (rows > op->rows_max) return refuse(op, rows, "rows is above the bundle's rows_max %" PRIu64, op->rows_max);
    uint64_t bytes[MAX_ARRAYS];
    for (size_t i = 0; i < op->n_arrays; i++) {
        if (address[i] % op->element_size)
            return refuse(op, rows, "%s at 0x%" PRIx64 " is not a multiple of the element size %" PRIu64,
                          op->array_name[i], address[i], op->element_size);
        if (!eval_rows(op, rows, op->array_bytes[i], op->array_name[i], &bytes[i])) return 0;
        if (bytes[i] > capacity[i])
            return refuse(op, rows, "%s holds %" PRIu64 " bytes; the op needs %" PRIu64, op->array_name[i],
                          capacity[i], bytes[i]);
        if (bytes[i] && address[i] > UINT64_MAX - bytes[i])
            return refuse(op, rows, "%s at 0x%" PRIx64 " runs past the address space", op->array_name[i], address[i]);
    }
    const op_case *chosen = NULL;
    for (size_t c = 0; c < op->n_cases && !chosen; c++) {
        const op_case *k = &op->cases[c];
        int fits = rows >= k->rows_min && rows <= k->rows_max;
        for (size_t i = 0; i < op->n_arrays && fits; i++) fits = address[i] % k->multiple_of[i] == 0;
        if (fits) chosen = k, out->case_index = c;
    }
    if (!chosen) return refuse(op, rows, "no case of the bundle takes these rows and addresses");
    out->n_launches = chosen->n_steps;
    for (size_t s = 0; s < chosen->n_steps; s++) {
        const op_step *step = &chosen->steps[s];
        const kernel_spec *k = step->kernel;
        op_launch *l = &out->launches[s];
        uint64_t value;
        l->kernel = k;
        for (int i = 0; i < 3; i++) {
            if (!eval_rows(op, rows, step->grid[i], "a grid expression", &value)) return 0;
            if (value == 0 || value > 0xFFFFFFFFu)
                return refuse(op, rows, "step %zu's grid dimension %d is %" PRIu64, s, i, value);
            l->grid[i] = (unsigned int)value;
        }
        if (!eval_rows(op, rows, step->shared_mem, "shared_mem", &value)) return 0;
        if (value > 48 * 1024)
            return refuse(op, rows, "step %zu needs %" PRIu64 " bytes of dynamic shared memory; this program "
                          "launches at most 49152 (no cuFuncSetAttribute)", s, value);
        l->shared_mem = (unsigned int)value;
        memset(l->buffer, 0, k->buffer_size);
        for (size_t i = 0; i < k->n_params; i++) {
            const param_spec *p = &k->params[i];
            const op_arg *a = &step->args[i];
            if (!eval_rows(op, rows, a->expr, p->name, &value)) return 0;
            if (p->is_pointer) {
                /* the pointer must lie in its array (at its end only where the array is empty of what follows) */
                if (value > bytes[a->array])
                    return refuse(op, rows, "step %zu's %s is %" PRIu64 " bytes into %s, which has %" PRIu64, s,
                                  p->name, value, op->array_name[a->array], bytes[a->array]);
                if (p->writes != op->written[a->array])
                    return refuse(op, rows, "step %zu's %s %s %s, which the op %s", s, p->name,
                                  p->writes ? "writes" : "reads", op->array_name[a->array],
                                  op->written[a->array] ? "writes" : "reads");
                value += address[a->array];
            } else if ((p->min > 0 && value < (uint64_t)p->min) || value > p->max) {
                return refuse(op, rows, "step %zu's %s = %" PRIu64 " is outside [%" PRId64 ", %" PRIu64 "]", s,
                              p->name, value, p->min, p->max);
            }
            if (p->size == 8) {
                memcpy(l->buffer + p->offset, &value, 8);
            } else {
                uint32_t narrow = (uint32_t)value;
                memcpy(l->buffer + p->offset, &narrow, 4);
            }
        }
    }
    return 1;
}

static void print_plan(const op_spec *op, uint64_t rows, const op_plan *plan) {
    printf("op %s rows=%" PRIu64 " case=%zu steps=%zu\n", op->id, rows, plan->case_index, plan->n_launches);
    for (size_t s = 0; s < plan->n_launches; s++) {
        const op_launch *l = &plan->launches[s];
        printf("step %zu %s %s grid=%u,%u,%u block=%u,%u,%u shared=%u params=", s, l->kernel->id, l->kernel->target,
               l->grid[0], l->grid[1], l->grid[2], l->kernel->block[0], l->kernel->block[1], l->kernel->block[2],
               l->shared_mem);
        for (uint64_t i = 0; i < l->kernel->buffer_size; i++) printf("%02x", l->buffer[i]);
        printf("\n");
    }
}

/* --- op bundles on the GPU: load, launch, check, time ------------------------------ */

typedef struct {
    CUmodule module;
    CUfunction function;
} loaded_kernel;

static loaded_kernel loaded[MAX_OP_KERNELS];

static int load_kernels(const kernel_table *t, const char *dir) {
    char path[4096];
    for (size_t i = 0; i < t->count; i++) {
        const kernel_spec *k = &t->specs[i];
        size_t length = 0;
        if (snprintf(path, sizeof path, "%s/%s", dir, k->file) >= (int)sizeof path) return 0;
        char *ptx = read_file(path, &length);
        if (!ptx) return 0;
        int ok = length == k->file_size;
        if (!ok) fprintf(stderr, PROG ": %s has %zu bytes, the manifest says %" PRIu64 "\n", path, length, k->file_size);
        ok = ok && CU(cuModuleLoadData(&loaded[i].module, ptx));
        if (!ok) fprintf(stderr, PROG ": %s is PTX ISA %s for %s\n", k->file, k->ptx_version, k->target);
        ok = ok && CU(cuModuleGetFunction(&loaded[i].function, loaded[i].module, k->entry_point));
        free(ptx);
        if (!ok) return 0;
    }
    return 1;
}

static CUfunction function_of(const kernel_table *t, const kernel_spec *k) { return loaded[k - t->specs].function; }

/* Every launch of a plan on `stream`: cuLaunchKernelEx with programmatic stream serialization
 * for a kernel built for dependent launch (it waits for its predecessor in the kernel, so
 * launches overlap their latency), cuLaunchKernel otherwise. */
static int launch_plan(const kernel_table *t, const op_plan *plan, CUstream stream) {
    for (size_t s = 0; s < plan->n_launches; s++) {
        const op_launch *l = &plan->launches[s];
        size_t buffer_size = (size_t)l->kernel->buffer_size;
        void *extra[] = {LAUNCH_PARAM_BUFFER_POINTER, (void *)l->buffer, LAUNCH_PARAM_BUFFER_SIZE, &buffer_size,
                         LAUNCH_PARAM_END};
        CUfunction fn = function_of(t, l->kernel);
        if (l->kernel->dependent_launch && cu.cuLaunchKernelEx) {
            CUlaunchAttribute attribute;
            memset(&attribute, 0, sizeof attribute);
            attribute.id = LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attribute.value.programmatic_stream_serialization_allowed = 1;
            CUlaunchConfig config = {l->grid[0], l->grid[1], l->grid[2], l->kernel->block[0], l->kernel->block[1],
                                     l->kernel->block[2], l->shared_mem, stream, &attribute, 1};
            if (!CU(cuLaunchKernelEx(&config, fn, NULL, extra))) return 0;
        } else if (!CU(cuLaunchKernel(fn, l->grid[0], l->grid[1], l->grid[2], l->kernel->block[0], l->kernel->block[1],
                                      l->kernel->block[2], l->shared_mem, stream, NULL, extra))) {
            return 0;
        }
    }
    return 1;
}

/* The op's arrays on the GPU, each fenced by GUARD_BYTES of poison on both sides and
 * starting `shift` bytes past a 256-byte boundary (0, or an element: the other alignment class). */
enum { GUARD_BYTES = 256 };

typedef struct {
    CUdeviceptr base[MAX_ARRAYS];
    uint64_t address[MAX_ARRAYS], bytes[MAX_ARRAYS], capacity[MAX_ARRAYS];
    unsigned char *host[MAX_ARRAYS];
    size_t total[MAX_ARRAYS];
} op_buffers;

static void free_buffers(const op_spec *op, op_buffers *b) {
    for (size_t i = 0; i < op->n_arrays; i++) {
        if (b->base[i]) CU(cuMemFree(b->base[i]));
        free(b->host[i]);
        b->base[i] = 0, b->host[i] = NULL;
    }
}

static int alloc_buffers(const op_spec *op, uint64_t rows, uint64_t shift, op_buffers *b) {
    memset(b, 0, sizeof *b);
    for (size_t i = 0; i < op->n_arrays; i++) {
        if (op->row_bytes[i] && rows > (UINT64_MAX / 2) / op->row_bytes[i]) {
            refuse(op, rows, "%s would be too large to allocate", op->array_name[i]);
            return 0;
        }
        b->bytes[i] = rows * op->row_bytes[i];
        b->total[i] = (size_t)(GUARD_BYTES + shift + b->bytes[i] + GUARD_BYTES);
        b->host[i] = malloc(b->total[i]);
        if (!b->host[i]) { fprintf(stderr, PROG ": out of memory\n"); return 0; }
        if (!CU(cuMemAlloc(&b->base[i], b->total[i]))) return 0;
        b->address[i] = b->base[i] + GUARD_BYTES + shift;
        b->capacity[i] = b->bytes[i];
    }
    return 1;
}

/* Run the op once on fresh inputs and poisoned outputs, and compare every byte of every
 * output with what the op must write, and every guard byte with the poison. */
static int check_op(const op_spec *op, const kernel_table *t, uint64_t rows, uint64_t shift, CUstream stream,
                    uint64_t *checked) {
    op_buffers b;
    op_plan *plan = malloc(sizeof *plan);
    int status = 1;
    uint64_t seed = 0x9E3779B97F4A7C15ULL ^ rows ^ (shift << 40);
    if (!plan) { fprintf(stderr, PROG ": out of memory\n"); return 1; }
    if (!alloc_buffers(op, rows, shift, &b)) goto done;
    if (!plan_op(op, rows, b.address, b.capacity, plan)) { status = 2; goto done; }
    const unsigned char poisons[2] = {0xA5, 0x5A};
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < op->n_arrays; i++) {
            for (size_t j = 0; j < b.total[i]; j++)
                b.host[i][j] = op->written[i] ? poisons[round] : (unsigned char)(next_random(&seed) >> 56);
            if (!CU(cuMemcpyHtoD(b.base[i], b.host[i], b.total[i]))) goto done;
        }
        /* A copy from pageable memory returns once its bytes are staged, before the DMA has
         * landed, and it runs on the legacy stream, which the op's non-blocking stream does not
         * wait for: without this the tail of a large poison copy could land after the op wrote. */
        if (!CU(cuCtxSynchronize())) goto done;
        if (!launch_plan(t, plan, stream) || !CU(cuStreamSynchronize(stream))) goto done;
        unsigned char *got = NULL;
        for (size_t i = 0; i < op->n_arrays; i++) {
            if (!op->written[i]) continue;
            free(got);
            got = malloc(b.total[i]);
            if (!got) { fprintf(stderr, PROG ": out of memory\n"); goto done; }
            if (!CU(cuMemcpyDtoH(got, b.base[i], b.total[i]))) { free(got); goto done; }
            size_t lead = (size_t)(GUARD_BYTES + shift);
            for (size_t j = 0; j < b.total[i]; j++) {
                if (j >= lead && j < lead + b.bytes[i]) continue;
                if (got[j] != poisons[round]) {
                    refuse(op, rows, "a guard byte of %s changed (byte %td from its start): a write outside it",
                           op->array_name[i], (ptrdiff_t)j - (ptrdiff_t)lead);
                    free(got);
                    goto done;
                }
            }
            /* every row: the wide row's bytes at each piece's offset are that piece's row */
            for (uint64_t r = 0; r < rows; r++) {
                uint64_t offset = 0;
                for (size_t p = 1; p < op->n_arrays; p++) {
                    const unsigned char *wide = (i == 0 ? got : b.host[0]) + GUARD_BYTES + shift + r * op->row_bytes[0] + offset;
                    const unsigned char *piece = (i == p ? got : b.host[p]) + GUARD_BYTES + shift + r * op->row_bytes[p];
                    if ((i == 0 || i == p) && memcmp(wide, piece, (size_t)op->row_bytes[p]) != 0) {
                        refuse(op, rows, "row %" PRIu64 " of %s differs from wide's bytes %" PRIu64 "..%" PRIu64, r,
                               op->array_name[p], offset, offset + op->row_bytes[p]);
                        free(got);
                        goto done;
                    }
                    offset += op->row_bytes[p];
                }
            }
            *checked += b.bytes[i] / op->element_size;
        }
        free(got);
    }
    status = 0;
done:
    free_buffers(op, &b);
    free(plan);
    return status;
}

/* The timing of bench_embed.py, as scripts/bench_ops.py times the Python op: GPU time is
 * CUDA events around one op, the L2 flushed before it (a write of a 256 MB buffer); host
 * time is one call from entry to return with the device idle before; the medians of
 * `iterations` repetitions after 10 warm-up ones. The launches are planned once for the
 * shape, as the Python op plans once per shape and replays. */
enum { FLUSH_BYTES = 256 << 20, WARMUP = 10 };

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *values, int n) {
    qsort(values, (size_t)n, sizeof *values, compare_doubles);
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

static int time_op(const op_spec *op, const kernel_table *t, uint64_t rows, int iterations, CUstream stream) {
    op_buffers b;
    op_plan *plan = malloc(sizeof *plan);
    double *gpu = calloc((size_t)iterations, sizeof *gpu), *host = calloc((size_t)iterations, sizeof *host);
    CUevent start = NULL, stop = NULL;
    CUdeviceptr flush = 0;
    int status = 1;
    memset(&b, 0, sizeof b);
    if (!plan || !gpu || !host) { fprintf(stderr, PROG ": out of memory\n"); goto done; }
    if (!alloc_buffers(op, rows, 0, &b)) goto done;
    if (!plan_op(op, rows, b.address, b.capacity, plan)) { status = 2; goto done; }
    if (!CU(cuEventCreate(&start, 0)) || !CU(cuEventCreate(&stop, 0)) || !CU(cuMemAlloc(&flush, FLUSH_BYTES)))
        goto done;
    for (int rep = 0; rep < WARMUP + iterations; rep++) {
        float ms = 0;
        if (!CU(cuMemsetD8Async(flush, (unsigned char)rep, FLUSH_BYTES, stream)) || !CU(cuEventRecord(start, stream)) ||
            !launch_plan(t, plan, stream) || !CU(cuEventRecord(stop, stream)) || !CU(cuEventSynchronize(stop)) ||
            !CU(cuEventElapsedTime(&ms, start, stop)))
            goto done;
        if (rep >= WARMUP) gpu[rep - WARMUP] = (double)ms * 1000.0;
    }
    for (int rep = 0; rep < WARMUP + iterations; rep++) {
        if (!CU(cuStreamSynchronize(stream))) goto done;
        double t0 = now_us();
        if (!launch_plan(t, plan, stream)) goto done;
        double t1 = now_us();
        if (rep >= WARMUP) host[rep - WARMUP] = t1 - t0;
    }
    if (!CU(cuStreamSynchronize(stream))) goto done;
    printf("{\"op\": \"%s\", \"rows\": %" PRIu64 ", \"case\": %zu, \"launches\": %zu, \"iterations\": %d, "
           "\"c_us\": %.3f, \"c_host_us\": %.3f}\n",
           op->id, rows, plan->case_index, plan->n_launches, iterations, median(gpu, iterations),
           median(host, iterations));
    status = 0;
done:
    if (start) CU(cuEventDestroy(start));
    if (stop) CU(cuEventDestroy(stop));
    if (flush) CU(cuMemFree(flush));
    free_buffers(op, &b);
    free(plan);
    free(gpu);
    free(host);
    return status;
}

/* --- main ------------------------------------------------------------------------ */

static int usage(void) {
    fprintf(stderr, "usage: " PROG " [--plan] [--target sm_XX] BUNDLE_DIR [KERNEL_ID]; or " PROG
                    " --op OP_ID|all [--rows N,N...] [--plan [--addresses A,A...]] [--time ITERATIONS] BUNDLE_DIR\n");
    return 2;
}

enum { MAX_ROWS = 64 };

/* "1,7,1000" -> values; 0 on anything else (decimal or 0x hex, each fits in 64 bits). */
static int parse_list(const char *text, uint64_t *values, size_t capacity, size_t *count) {
    *count = 0;
    const char *at = text;
    for (;;) {
        if (*count == capacity || *at == '\0' || *at == ',' || *at == '-' || *at == '+' || *at == ' ') return 0;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(at, &end, 0);
        if (errno || end == at || (*end != ',' && *end != '\0')) return 0;
        values[(*count)++] = (uint64_t)v;
        if (*end == '\0') return 1;
        at = end + 1;
    }
}

typedef struct {
    const char *op_id, *dir;
    int plan_only, iterations;
    uint64_t rows[MAX_ROWS], addresses[MAX_ARRAYS];
    size_t n_rows, n_addresses;
} op_options;

static int run_ops(const op_options *o, const json_value *manifest, const char *path) {
    const json_value *kernels = json_get(manifest, "kernels"), *ops = json_get(manifest, "ops");
    if (!ops || ops->type != JSON_ARRAY || kernels->count > MAX_OP_KERNELS) {
        fprintf(stderr, PROG ": %s has no ops list (or more than %d kernels)\n", path, MAX_OP_KERNELS);
        return 2;
    }
    kernel_table table = {calloc(kernels->count ? kernels->count : 1, sizeof(kernel_spec)), kernels->count};
    op_spec op;
    int status = 2, ran = 0, context_ready = 0;
    CUdevice device = 0;
    CUcontext context = NULL;
    CUstream stream = NULL;
    memset(&op, 0, sizeof op);
    if (!table.specs) { fprintf(stderr, PROG ": out of memory\n"); return 2; }
    for (size_t i = 0; i < kernels->count; i++)
        if (!read_entry(&kernels->items[i], &table.specs[i], 0)) goto done;
    for (size_t i = 0; i < ops->count; i++) {
        const char *id = json_string(json_get(&ops->items[i], "id"));
        if (!id) { bad_op(NULL, "an op without an id"); goto done; }
        if (strcmp(o->op_id, "all") != 0 && strcmp(o->op_id, id) != 0) continue;
        free_op(&op);
        if (!read_op(&ops->items[i], &table, &op)) goto done;
        ran++;
        if (o->plan_only) {
            uint64_t address[MAX_ARRAYS], capacity[MAX_ARRAYS];
            if (o->n_addresses && o->n_addresses != op.n_arrays) {
                fprintf(stderr, PROG ": op %s has %zu arrays (wide, then each piece); --addresses gives %zu\n", op.id,
                        op.n_arrays, o->n_addresses);
                goto done;
            }
            for (size_t r = 0; r < o->n_rows; r++) {
                op_plan *plan = malloc(sizeof *plan);
                if (!plan) { fprintf(stderr, PROG ": out of memory\n"); goto done; }
                for (size_t a = 0; a < op.n_arrays; a++) {
                    address[a] = o->n_addresses ? o->addresses[a] : ((uint64_t)(a + 1) << 36);
                    capacity[a] = UINT64_MAX; /* nothing is allocated: what the op needs, it has */
                }
                int ok = plan_op(&op, o->rows[r], address, capacity, plan);
                if (ok) print_plan(&op, o->rows[r], plan);
                free(plan);
                if (!ok) goto done;
            }
            continue;
        }
        if (!context_ready) {
            int driver_version = 0, major = 0, minor = 0;
            char name[256];
            status = 1;
            if (!load_driver() || !CU(cuInit(0))) goto done;
            if (!CU(cuDriverGetVersion(&driver_version)) || !CU(cuDeviceGet(&device, 0)) ||
                !CU(cuDeviceGetName(name, (int)sizeof name, device)) ||
                !CU(cuDeviceGetAttribute(&major, ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)) ||
                !CU(cuDeviceGetAttribute(&minor, ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)))
                goto done;
            fprintf(stderr, PROG ": %s (sm_%d%d), driver CUDA %d.%d\n", name, major, minor, driver_version / 1000,
                    driver_version % 1000 / 10);
            if (!CU(cuDevicePrimaryCtxRetain(&context, device))) goto done;
            context_ready = 1;
            if (!CU(cuCtxSetCurrent(context)) || !CU(cuStreamCreate(&stream, STREAM_NON_BLOCKING))) goto done;
            if (!load_kernels(&table, o->dir)) goto done;
            status = 2;
        }
        for (size_t r = 0; r < o->n_rows; r++) {
            int one;
            if (o->iterations > 0) {
                one = time_op(&op, &table, o->rows[r], o->iterations, stream);
            } else {
                uint64_t checked = 0;
                /* at 256-byte aligned addresses, then one element past them: both alignment classes */
                one = check_op(&op, &table, o->rows[r], 0, stream, &checked);
                if (one == 0 && op.element_size < 16)
                    one = check_op(&op, &table, o->rows[r], op.element_size, stream, &checked);
                if (one == 0)
                    printf(PROG ": ok: op %s at %" PRIu64 " rows, aligned and shifted by an element: %" PRIu64
                           " elements and every guard checked, all equal\n", op.id, o->rows[r], checked);
            }
            if (one) { status = one; goto done; }
        }
    }
    if (!ran) {
        fprintf(stderr, PROG ": %s has no op %s\n", path, o->op_id);
        goto done;
    }
    status = 0;
done:
    free_op(&op);
    if (context_ready) {
        for (size_t i = 0; i < table.count; i++)
            if (loaded[i].module) CU(cuModuleUnload(loaded[i].module));
        if (stream) CU(cuStreamDestroy(stream));
        CU(cuDevicePrimaryCtxRelease(device));
    }
    free(table.specs);
    return status;
}

int main(int argc, char **argv) {
    int plan_only = 0;
    const char *target = NULL, *dir = NULL, *id = "channel_cat_backward__f32__128";
    const char *rows_text = NULL, *addresses_text = NULL, *iterations_text = NULL;
    op_options o;
    memset(&o, 0, sizeof o);
    int positional = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--plan") == 0) plan_only = 1;
        else if (strcmp(argv[i], "--target") == 0 && i + 1 < argc) target = argv[++i];
        else if (strcmp(argv[i], "--op") == 0 && i + 1 < argc) o.op_id = argv[++i];
        else if (strcmp(argv[i], "--rows") == 0 && i + 1 < argc) rows_text = argv[++i];
        else if (strcmp(argv[i], "--addresses") == 0 && i + 1 < argc) addresses_text = argv[++i];
        else if (strcmp(argv[i], "--time") == 0 && i + 1 < argc) iterations_text = argv[++i];
        else if (argv[i][0] == '-') return usage();
        else if (positional == 0) dir = argv[i], positional++;
        else if (positional == 1) id = argv[i], positional++;
        else return usage();
    }
    if (!dir) return usage();
    if (o.op_id) {
        uint64_t iterations = 0;
        size_t n = 0;
        if (positional != 1 || target) return usage();
        if (!rows_text) rows_text = "0,1,7,1000,65537";
        if (!parse_list(rows_text, o.rows, MAX_ROWS, &o.n_rows)) {
            fprintf(stderr, PROG ": --rows takes up to %d row counts, comma-separated, not '%s'\n", MAX_ROWS, rows_text);
            return 2;
        }
        if (addresses_text && (!plan_only || !parse_list(addresses_text, o.addresses, MAX_ARRAYS, &o.n_addresses))) {
            fprintf(stderr, PROG ": --addresses (with --plan) takes the arrays' addresses, wide first, not '%s'\n",
                    addresses_text);
            return 2;
        }
        if (iterations_text && (plan_only || !parse_list(iterations_text, &iterations, 1, &n) || iterations < 1 ||
                                iterations > 1000000)) {
            fprintf(stderr, PROG ": --time (without --plan) takes iterations 1..1000000, not '%s'\n", iterations_text);
            return 2;
        }
        o.iterations = (int)iterations;
        o.plan_only = plan_only;
        o.dir = dir;
    } else if (rows_text || addresses_text || iterations_text) {
        fprintf(stderr, PROG ": --rows, --addresses and --time are for ops (--op)\n");
        return 2;
    }

    char path[4096];
    size_t length = 0;
    if (snprintf(path, sizeof path, "%s/manifest.json", dir) >= (int)sizeof path) return usage();
    char *text = read_file(path, &length);
    if (!text) return 2;
    char error[256];
    json_value *manifest = json_parse(text, length, error, sizeof error);
    free(text);
    if (!manifest) {
        fprintf(stderr, PROG ": %s is not valid JSON: %s\n", path, error);
        return 2;
    }
    int status = 2;
    char *ptx = NULL;
    uint64_t version = 0;
    const json_value *kernels = json_get(manifest, "kernels");
    const char *format = json_string(json_get(manifest, "format"));
    if (!format || strcmp(format, "ptxgen-bundle") != 0 || !json_u64(json_get(manifest, "format_version"), &version) ||
        (version != 1 && version != 2) || !kernels || kernels->type != JSON_ARRAY) {
        fprintf(stderr, PROG ": %s is not a ptxgen bundle manifest of format_version 1 or 2\n", path);
        goto done;
    }
    if (o.op_id) {
        if (version != 2) {
            fprintf(stderr, PROG ": %s is format_version 1, kernels only; --op needs an op bundle (version 2)\n", path);
            goto done;
        }
        status = run_ops(&o, manifest, path);
        goto done;
    }

    CUdevice device = 0;
    char device_name[256] = "no device";
    int cc = -1;
    if (!plan_only) {
        status = 1;
        if (!load_driver() || !CU(cuInit(0))) goto done;
        int driver_version = 0, major = 0, minor = 0;
        if (!CU(cuDriverGetVersion(&driver_version)) || !CU(cuDeviceGet(&device, 0)) ||
            !CU(cuDeviceGetName(device_name, (int)sizeof device_name, device)) ||
            !CU(cuDeviceGetAttribute(&major, ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)) ||
            !CU(cuDeviceGetAttribute(&minor, ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)))
            goto done;
        cc = major * 10 + minor;
        printf(PROG ": %s (sm_%d), driver CUDA %d.%d\n", device_name, cc, driver_version / 1000,
               driver_version % 1000 / 10);
        status = 2;
    }

    const json_value *entry = choose(kernels, id, target, cc);
    if (!entry) {
        fprintf(stderr, PROG ": %s has no entry %s%s%s%s\n", path, id, target ? " for " : "", target ? target : "",
                !target && cc >= 0 ? " that this GPU can run" : "");
        goto done;
    }
    kernel_spec k;
    if (!read_entry(entry, &k, 1) || !is_channel_cat_backward(&k)) goto done;
    if (plan_only) {
        status = plan(&k);
        goto done;
    }

    if (snprintf(path, sizeof path, "%s/%s", dir, k.file) >= (int)sizeof path) goto done;
    ptx = read_file(path, &length);
    if (!ptx) goto done;
    if (length != k.file_size) {
        fprintf(stderr, PROG ": %s has %zu bytes, the manifest says %" PRIu64 "\n", path, length, k.file_size);
        goto done;
    }
    status = run(&k, ptx, device, device_name);
done:
    free(ptx);
    json_free(manifest);
    return status;
}

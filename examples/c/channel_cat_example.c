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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

enum { MAX_PARAMS = 16, MAX_BUFFER = 4096 };

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

static int read_entry(const json_value *e, kernel_spec *k) {
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
    if (!grid || grid->type != JSON_OBJECT)
        return bad_bundle(k->id, "the manifest does not say how to compute the grid");
    const char *axes[3] = {"x", "y", "z"};
    for (int i = 0; i < 3; i++)
        if (!(k->grid[i] = json_string(json_get(grid, axes[i])))) return bad_bundle(k->id, "grid lacks an axis");
    k->grid_inputs = json_get(grid, "inputs");
    if (!k->grid_inputs || k->grid_inputs->type != JSON_ARRAY) return bad_bundle(k->id, "grid lacks inputs");

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

/* --- main ------------------------------------------------------------------------ */

static int usage(void) {
    fprintf(stderr, "usage: " PROG " [--plan] [--target sm_XX] BUNDLE_DIR [KERNEL_ID]\n");
    return 2;
}

int main(int argc, char **argv) {
    int plan_only = 0;
    const char *target = NULL, *dir = NULL, *id = "channel_cat_backward__f32__128";
    int positional = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--plan") == 0) plan_only = 1;
        else if (strcmp(argv[i], "--target") == 0 && i + 1 < argc) target = argv[++i];
        else if (argv[i][0] == '-') return usage();
        else if (positional == 0) dir = argv[i], positional++;
        else if (positional == 1) id = argv[i], positional++;
        else return usage();
    }
    if (!dir) return usage();

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
        version != 1 || !kernels || kernels->type != JSON_ARRAY) {
        fprintf(stderr, PROG ": %s is not a ptxgen bundle manifest of format_version 1\n", path);
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
    if (!read_entry(entry, &k) || !is_channel_cat_backward(&k)) goto done;
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

/* A recursive-descent JSON reader (RFC 8259); see json.h. */
#include "json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_DEPTH = 64 }; /* the manifest nests 6 deep; this bounds the recursion */

typedef struct {
    const char *text;
    size_t length, pos;
    char *error;
    size_t error_size;
    int failed;
} parser;

static void fail(parser *p, const char *format, ...) {
    if (p->failed) return;
    p->failed = 1;
    int n = snprintf(p->error, p->error_size, "at byte %zu: ", p->pos);
    if (n < 0 || (size_t)n >= p->error_size) return;
    va_list args;
    va_start(args, format);
    vsnprintf(p->error + n, p->error_size - (size_t)n, format, args);
    va_end(args);
}

static void skip_space(parser *p) {
    while (p->pos < p->length) {
        char c = p->text[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int peek(parser *p) { return p->pos < p->length ? (unsigned char)p->text[p->pos] : -1; }

static int literal(parser *p, const char *word) {
    size_t n = strlen(word);
    if (p->length - p->pos < n || memcmp(p->text + p->pos, word, n) != 0) return 0;
    p->pos += n;
    return 1;
}

/* Append one code point as UTF-8. */
static size_t put_utf8(char *out, uint32_t cp) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int hex4(parser *p, uint32_t *out) {
    if (p->length - p->pos < 4) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->text[p->pos + (size_t)i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return 0;
    }
    p->pos += 4;
    *out = v;
    return 1;
}

/* A string; p->pos is at the opening quote. The result is malloc'd. */
static char *parse_string(parser *p) {
    p->pos++; /* the quote */
    /* Find the closing quote first: the UTF-8 output is never longer than the escaped
     * input (\uXXXX, 6 bytes, gives at most 3; a surrogate pair, 12 bytes, gives 4). */
    size_t end = p->pos;
    while (end < p->length && p->text[end] != '"') end += p->text[end] == '\\' ? 2 : 1;
    if (end >= p->length) { fail(p, "unterminated string"); return NULL; }
    char *out = malloc(end - p->pos + 1);
    if (!out) { fail(p, "out of memory"); return NULL; }
    size_t n = 0;
    while (p->pos < p->length) {
        unsigned char c = (unsigned char)p->text[p->pos++];
        if (c == '"') { out[n] = '\0'; return out; }
        if (c < 0x20) { fail(p, "control character in a string"); break; }
        if (c != '\\') { out[n++] = (char)c; continue; }
        if (p->pos >= p->length) break;
        char e = p->text[p->pos++];
        switch (e) {
            case '"': out[n++] = '"'; break;
            case '\\': out[n++] = '\\'; break;
            case '/': out[n++] = '/'; break;
            case 'b': out[n++] = '\b'; break;
            case 'f': out[n++] = '\f'; break;
            case 'n': out[n++] = '\n'; break;
            case 'r': out[n++] = '\r'; break;
            case 't': out[n++] = '\t'; break;
            case 'u': {
                uint32_t cp = 0;
                if (!hex4(p, &cp)) { fail(p, "bad \\u escape"); goto error; }
                if (cp >= 0xD800 && cp <= 0xDBFF) { /* a high surrogate: its pair must follow */
                    uint32_t low = 0;
                    if (!literal(p, "\\u") || !hex4(p, &low) || low < 0xDC00 || low > 0xDFFF) {
                        fail(p, "unpaired surrogate in a \\u escape");
                        goto error;
                    }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    fail(p, "unpaired surrogate in a \\u escape");
                    goto error;
                }
                if (cp == 0) { fail(p, "\\u0000 in a string"); goto error; } /* would cut a C string */
                n += put_utf8(out + n, cp);
                break;
            }
            default: fail(p, "bad escape \\%c", e); goto error;
        }
    }
    fail(p, "unterminated string");
error:
    free(out);
    return NULL;
}

static void parse_number(parser *p, json_value *v) {
    size_t start = p->pos;
    v->type = JSON_NUMBER;
    if (peek(p) == '-') { v->negative = 1; p->pos++; }
    if (peek(p) == '0') {
        p->pos++;
    } else if (peek(p) >= '1' && peek(p) <= '9') {
        while (peek(p) >= '0' && peek(p) <= '9') p->pos++;
    } else {
        fail(p, "bad number");
        return;
    }
    size_t digits_end = p->pos;
    int fraction = 0;
    if (peek(p) == '.') {
        fraction = 1;
        p->pos++;
        if (!(peek(p) >= '0' && peek(p) <= '9')) { fail(p, "bad number"); return; }
        while (peek(p) >= '0' && peek(p) <= '9') p->pos++;
    }
    if (peek(p) == 'e' || peek(p) == 'E') {
        fraction = 1;
        p->pos++;
        if (peek(p) == '+' || peek(p) == '-') p->pos++;
        if (!(peek(p) >= '0' && peek(p) <= '9')) { fail(p, "bad number"); return; }
        while (peek(p) >= '0' && peek(p) <= '9') p->pos++;
    }
    char buffer[512];
    size_t n = p->pos - start;
    if (n >= sizeof buffer) { fail(p, "number too long"); return; }
    memcpy(buffer, p->text + start, n);
    buffer[n] = '\0';
    v->number = strtod(buffer, NULL);
    if (fraction) return;
    /* An integer: accumulate exactly, noting overflow past 2**64 - 1. */
    uint64_t m = 0;
    v->is_integer = 1;
    for (size_t i = start + (size_t)v->negative; i < digits_end; i++) {
        unsigned d = (unsigned)(p->text[i] - '0');
        if (m > (UINT64_MAX - d) / 10) { v->is_integer = 0; return; }
        m = m * 10 + d;
    }
    v->magnitude = m;
}

static int parse_value(parser *p, json_value *v, int depth);

static int grow(parser *p, json_value *v, size_t *capacity, int with_keys) {
    if (v->count < *capacity) return 1;
    size_t cap = *capacity ? *capacity * 2 : 8;
    json_value *items = realloc(v->items, cap * sizeof *items);
    if (!items) { fail(p, "out of memory"); return 0; }
    v->items = items;
    if (with_keys) {
        char **keys = realloc(v->keys, cap * sizeof *keys);
        if (!keys) { fail(p, "out of memory"); return 0; }
        v->keys = keys;
    }
    *capacity = cap;
    return 1;
}

static int parse_array(parser *p, json_value *v, int depth) {
    size_t capacity = 0;
    v->type = JSON_ARRAY;
    p->pos++; /* [ */
    skip_space(p);
    if (peek(p) == ']') { p->pos++; return 1; }
    for (;;) {
        if (!grow(p, v, &capacity, 0)) return 0;
        memset(&v->items[v->count], 0, sizeof v->items[0]);
        v->count++;
        if (!parse_value(p, &v->items[v->count - 1], depth + 1)) return 0;
        skip_space(p);
        if (peek(p) == ',') { p->pos++; continue; }
        if (peek(p) == ']') { p->pos++; return 1; }
        fail(p, "expected , or ] in an array");
        return 0;
    }
}

static int parse_object(parser *p, json_value *v, int depth) {
    size_t capacity = 0;
    v->type = JSON_OBJECT;
    p->pos++; /* { */
    skip_space(p);
    if (peek(p) == '}') { p->pos++; return 1; }
    for (;;) {
        skip_space(p);
        if (peek(p) != '"') { fail(p, "expected a string key in an object"); return 0; }
        if (!grow(p, v, &capacity, 1)) return 0;
        memset(&v->items[v->count], 0, sizeof v->items[0]);
        v->keys[v->count] = NULL;
        v->count++;
        v->keys[v->count - 1] = parse_string(p);
        if (!v->keys[v->count - 1]) return 0;
        skip_space(p);
        if (peek(p) != ':') { fail(p, "expected : after a key"); return 0; }
        p->pos++;
        if (!parse_value(p, &v->items[v->count - 1], depth + 1)) return 0;
        skip_space(p);
        if (peek(p) == ',') { p->pos++; continue; }
        if (peek(p) == '}') { p->pos++; return 1; }
        fail(p, "expected , or } in an object");
        return 0;
    }
}

static int parse_value(parser *p, json_value *v, int depth) {
    if (depth > MAX_DEPTH) { fail(p, "nested more than %d deep", MAX_DEPTH); return 0; }
    skip_space(p);
    int c = peek(p);
    if (c == '{') return parse_object(p, v, depth);
    if (c == '[') return parse_array(p, v, depth);
    if (c == '"') {
        v->type = JSON_STRING;
        v->string = parse_string(p);
        return v->string != NULL;
    }
    if (c == '-' || (c >= '0' && c <= '9')) { parse_number(p, v); return !p->failed; }
    if (literal(p, "true")) { v->type = JSON_BOOL; v->boolean = 1; return 1; }
    if (literal(p, "false")) { v->type = JSON_BOOL; return 1; }
    if (literal(p, "null")) { v->type = JSON_NULL; return 1; }
    if (c < 0) fail(p, "unexpected end of input");
    else if (c < 0x20 || c >= 0x7F) fail(p, "unexpected byte 0x%02x", (unsigned)c);
    else fail(p, "unexpected character '%c'", c);
    return 0;
}

static void free_members(json_value *v) {
    for (size_t i = 0; i < v->count; i++) {
        free_members(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->string);
}

json_value *json_parse(const char *text, size_t length, char *error, size_t error_size) {
    parser p = {text, length, 0, error, error_size, 0};
    json_value *root = calloc(1, sizeof *root);
    if (!root) { snprintf(error, error_size, "out of memory"); return NULL; }
    if (parse_value(&p, root, 0)) {
        skip_space(&p);
        if (p.pos != p.length) fail(&p, "text after the value");
    }
    if (p.failed) { json_free(root); return NULL; }
    return root;
}

void json_free(json_value *value) {
    if (!value) return;
    free_members(value);
    free(value);
}

const json_value *json_get(const json_value *object, const char *key) {
    if (!object || object->type != JSON_OBJECT) return NULL;
    for (size_t i = 0; i < object->count; i++)
        if (strcmp(object->keys[i], key) == 0) return &object->items[i];
    return NULL;
}

const char *json_string(const json_value *value) {
    return value && value->type == JSON_STRING ? value->string : NULL;
}

int json_u64(const json_value *value, uint64_t *out) {
    if (!value || value->type != JSON_NUMBER || !value->is_integer) return 0;
    if (value->negative && value->magnitude != 0) return 0;
    *out = value->magnitude;
    return 1;
}

int json_i64(const json_value *value, int64_t *out) {
    if (!value || value->type != JSON_NUMBER || !value->is_integer) return 0;
    if (value->negative) {
        if (value->magnitude > (uint64_t)INT64_MAX + 1) return 0;
        *out = value->magnitude == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)value->magnitude;
    } else {
        if (value->magnitude > (uint64_t)INT64_MAX) return 0;
        *out = (int64_t)value->magnitude;
    }
    return 1;
}

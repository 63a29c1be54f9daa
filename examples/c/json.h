/* A small JSON reader: enough for a ptxgen bundle manifest, and any other JSON.
 *
 * json_parse() builds a tree of json_value; json_free() releases it. Integers are
 * kept exactly (a u64 parameter's max is 2**64 - 1, beyond a double's precision);
 * other numbers as double. Errors name the byte offset where parsing stopped. */
#ifndef PTXGEN_EXAMPLE_JSON_H
#define PTXGEN_EXAMPLE_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type;

typedef struct json_value {
    json_type type;
    int boolean;
    /* Numbers: is_integer says whether negative/magnitude hold it exactly. */
    int is_integer;
    int negative;
    uint64_t magnitude;
    double number;
    char *string;              /* JSON_STRING: NUL-terminated, UTF-8 */
    struct json_value *items;  /* JSON_ARRAY and JSON_OBJECT: count values */
    char **keys;               /* JSON_OBJECT: count keys, parallel to items */
    size_t count;
} json_value;

/* Parse text[0..length). Returns NULL on error, with a message in error[0..error_size). */
json_value *json_parse(const char *text, size_t length, char *error, size_t error_size);
void json_free(json_value *value);

/* The member `key` of an object, or NULL (also when value is not an object). */
const json_value *json_get(const json_value *object, const char *key);
/* The string of a JSON string, or NULL. */
const char *json_string(const json_value *value);
/* 1 and *out set when value is an integer that fits; 0 otherwise. */
int json_u64(const json_value *value, uint64_t *out);
int json_i64(const json_value *value, int64_t *out);

#endif

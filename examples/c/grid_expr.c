/* Precedence climbing over the grid expression grammar; see grid_expr.h.
 *
 *   expression := term (('+' | '-') term)*
 *   term       := factor (('*' | '/') factor)*
 *   factor     := integer | name | '(' expression ')'
 */
#include "grid_expr.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum { MAX_DEPTH = 32 };

typedef struct {
    const char *text;
    size_t pos;
    const grid_variable *variables;
    size_t count;
    char *error;
    size_t error_size;
    int failed;
    int depth;
} evaluator;

static void fail(evaluator *e, const char *format, ...) {
    if (e->failed) return;
    e->failed = 1;
    int n = snprintf(e->error, e->error_size, "in \"%s\" at %zu: ", e->text, e->pos);
    if (n < 0 || (size_t)n >= e->error_size) return;
    va_list args;
    va_start(args, format);
    vsnprintf(e->error + n, e->error_size - (size_t)n, format, args);
    va_end(args);
}

static char peek(evaluator *e) {
    while (e->text[e->pos] == ' ') e->pos++;
    return e->text[e->pos];
}

static int is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

static uint64_t expression(evaluator *e);

static uint64_t factor(evaluator *e) {
    char c = peek(e);
    if (is_digit(c)) {
        uint64_t v = 0;
        while (is_digit(e->text[e->pos])) {
            unsigned d = (unsigned)(e->text[e->pos] - '0');
            if (v > (UINT64_MAX - d) / 10) { fail(e, "integer too large"); return 0; }
            v = v * 10 + d;
            e->pos++;
        }
        return v;
    }
    if (is_name_start(c)) {
        size_t start = e->pos;
        while (is_name_start(e->text[e->pos]) || is_digit(e->text[e->pos])) e->pos++;
        size_t n = e->pos - start;
        for (size_t i = 0; i < e->count; i++)
            if (strlen(e->variables[i].name) == n && memcmp(e->variables[i].name, e->text + start, n) == 0)
                return e->variables[i].value;
        fail(e, "unknown name '%.*s'", (int)n, e->text + start);
        return 0;
    }
    if (c == '(') {
        if (++e->depth > MAX_DEPTH) { fail(e, "parentheses nested too deep"); return 0; }
        e->pos++;
        uint64_t v = expression(e);
        if (peek(e) != ')') { fail(e, "expected )"); return 0; }
        e->pos++;
        e->depth--;
        return v;
    }
    fail(e, c ? "unexpected '%c'" : "unexpected end", c);
    return 0;
}

static uint64_t term(evaluator *e) {
    uint64_t v = factor(e);
    while (!e->failed && (peek(e) == '*' || peek(e) == '/')) {
        char op = e->text[e->pos++];
        uint64_t r = factor(e);
        if (e->failed) return 0;
        if (op == '*') {
            if (r != 0 && v > UINT64_MAX / r) { fail(e, "overflow"); return 0; }
            v *= r;
        } else {
            if (r == 0) { fail(e, "division by zero"); return 0; }
            v /= r;
        }
    }
    return v;
}

static uint64_t expression(evaluator *e) {
    uint64_t v = term(e);
    while (!e->failed && (peek(e) == '+' || peek(e) == '-')) {
        char op = e->text[e->pos++];
        uint64_t r = term(e);
        if (e->failed) return 0;
        if (op == '+') {
            if (v > UINT64_MAX - r) { fail(e, "overflow"); return 0; }
            v += r;
        } else {
            if (r > v) { fail(e, "negative result"); return 0; }
            v -= r;
        }
    }
    return v;
}

int grid_eval(const char *text, const grid_variable *variables, size_t count, uint64_t *out, char *error,
              size_t error_size) {
    evaluator e = {text, 0, variables, count, error, error_size, 0, 0};
    uint64_t v = expression(&e);
    if (!e.failed && peek(&e) != '\0') fail(&e, "unexpected '%c'", peek(&e));
    if (e.failed) return 0;
    *out = v;
    return 1;
}

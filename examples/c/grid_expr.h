/* Evaluating a bundle's grid expressions: decimal integers, names, + - * / and
 * parentheses, in unsigned 64-bit arithmetic with / truncating, as the manifest's
 * schema specifies. Overflow, a negative intermediate and division by zero are errors,
 * never a wrapped grid. */
#ifndef PTXGEN_EXAMPLE_GRID_EXPR_H
#define PTXGEN_EXAMPLE_GRID_EXPR_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name;
    uint64_t value;
} grid_variable;

/* 1 and *out set on success; 0 with a message in error[0..error_size) otherwise. */
int grid_eval(const char *expression, const grid_variable *variables, size_t count, uint64_t *out,
              char *error, size_t error_size);

#endif

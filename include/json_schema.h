/* JSON Schema -> GBNF grammar (grammar.h) whose sentences are JSON texts valid against the
 * schema. Coverage: type (and lists of types), properties (in the schema's order), required,
 * additionalProperties (false, true or a schema), items, prefixItems, minItems/maxItems, enum,
 * const, anyOf, oneOf (decoded as anyOf), allOf of objects, $ref to $defs/definitions (or any
 * JSON pointer into the schema; recursion too), nullable, string minLength/maxLength, pattern
 * (the regex subset of json_schema_regex.c), format (date, time, date-time, uuid, email),
 * integer and number minimum/maximum/exclusiveMinimum/exclusiveMaximum. Whitespace between
 * tokens is bounded (at most a newline and 4 spaces or tabs); numbers have at most 16
 * integer digits, 15 fraction digits and a 2-digit exponent. Annotation keywords (title,
 * description, default, examples, $schema, $id, $comment, ...) are ignored; any other keyword
 * is refused by name. */
#ifndef JSON_SCHEMA_H
#define JSON_SCHEMA_H

#include <stddef.h>

#include <jansson.h>

/* The grammar for schema, malloc'd and NUL-terminated (*len bytes), or NULL with a one-line
 * message in err naming the unsupported keyword or the problem (out of memory included). */
char *json_schema_to_grammar(json_t *schema, size_t *len, char *err, size_t errlen);

/* JSON mode: a grammar for any JSON object (malloc'd), NULL when out of memory. */
char *json_schema_object_grammar(size_t *len);

/* Regex (JSON Schema `pattern`, ECMAScript syntax) -> a GBNF expression for the JSON string
 * (quotes included) whose value is a sentence of the regex. Supported: literals, escapes
 * (\d \w \s \D \W \S, \. and other escaped punctuation, \n \t \r \f \v, \uHHHH, \xHH),
 * classes [...] and [^...] with ranges, `.`, groups (...) (?:...) (?<name>...), alternation,
 * quantifiers * + ? {m} {m,} {m,n} (lazy forms too), ^ at the start and $ at the end. The
 * generated strings match the whole pattern (so an unanchored pattern is matched too).
 * Appends to *out (malloc'd, grown; *n its length). Returns 0, -EINVAL with err naming the
 * unsupported construct, or -ENOMEM. */
int json_schema_regex(const char *re, size_t re_len, char **out, size_t *n, size_t *cap,
                      char *err, size_t errlen);

#endif

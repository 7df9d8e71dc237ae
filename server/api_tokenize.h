/* POST /tokenize and POST /detokenize, as llama.cpp's server has them: text <-> the model's
 * token ids, through the front's tokenizer; no worker is involved. */
#ifndef API_TOKENIZE_H
#define API_TOKENIZE_H

#include <jansson.h>

struct front;
struct front_model;
struct http_req;

/* The model a body's "model" names: absent or null, the current one; during a reload's roll
 * also the other model while it is served (roll.h). Otherwise NULL, with the error sent
 * (400 when it is not a string, 404 model_not_found when no such model is served). */
struct front_model *api_body_model(struct front *f, struct http_req *http, json_t *body);

/* {"content": string, "add_special": bool = true, "parse_special": bool = false,
 *  "with_pieces": bool = false} -> {"tokens": [id, ...]}, or with with_pieces
 * {"tokens": [{"id": id, "piece": string, or the piece's bytes as an array of numbers when
 * they are not valid UTF-8}, ...]}. The defaults give exactly the ids /v1/completions feeds
 * the model for that prompt: BOS as the model's add_bos says, and special-token texts in the
 * content as ordinary characters (parse_special: true turns them into their ids, as
 * llama.cpp's default does). Pieces render control tokens as their text ("<s>") and keep
 * SentencePiece's leading space. A wrong field is a 400 naming it. */
void api_tokenize(struct front *f, struct http_req *http);
/* Both take an optional "model" (api_body_model): its tokenizer is used. */

/* {"tokens": [id, ...]} -> {"content": string}: the text a client would have been streamed
 * for those ids (control tokens empty, SentencePiece's first space dropped, invalid UTF-8 as
 * U+FFFD). An id outside the vocabulary, or a non-integer, is a 400 naming "tokens". */
void api_detokenize(struct front *f, struct http_req *http);

#endif

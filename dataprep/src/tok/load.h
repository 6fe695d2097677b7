/* load.h - internal to the tokenizer loader: the model reader (model.c) that load.c calls. */
#ifndef QTD_LOAD_H
#define QTD_LOAD_H

#include "../base/json.h"
#include "tokenizer.h"

/* Sizes t's id arrays for n ids (all undefined). Returns 0 or -1. */
int qtd_tok_alloc_ids(qtd_tok *t, uint32_t n);
/* Reads model.vocab and model.merges of object node `model` into t. */
int qtd_tok_read_model(qtd_tok *t, const qtd_json *j, uint32_t model, const char *path);

#endif

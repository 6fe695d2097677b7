/* hf_config.h - the Hugging Face files of a save= directory beside its tensors (hf_config.c):
 * config.json, written from the plan, and the tokenizer files named by tokenizer=.
 * Both are added only where the directory has none: a config.json or tokenizer file already
 * in a checkpoint directory belongs to the user and is never replaced, except a config.json
 * that disagrees with the plan, with overwrite=1 (qt_hf_config_check).
 */
#ifndef QT_HF_CONFIG_H
#define QT_HF_CONFIG_H

#include <stddef.h>
#include "qt_plan.h"

/* config.json of plan p into buf (at most n bytes, NUL-terminated): Qwen3NextConfig
 * (qwen3_next) or Qwen3_5MoeConfig (qwen3_5_moe, the text model under text_config).
 * Returns its length, or -1 when it does not fit (nothing usable in buf). */
long qt_hf_config_json(const qt_plan *p, char *buf, size_t n);

/* The document separator of a packed plan resolved at start-up (qt_data_doc_sep): written
 * as eos_token_id in place of the plan's eos_id; -1 writes none. */
void qt_hf_eos_set(int32_t eos);

/* The tokenizer= argument (start-up, the rank that writes the checkpoint's indexes): a
 * tokenizer.json file, or a directory holding one; a tokenizer_config.json beside it is
 * taken too. Checks that each is a readable, non-empty regular file and remembers the
 * paths. NULL forgets them. QT_OK or QT_E_ARG after a message naming the file. */
int qt_hf_tokenizer_set(const char *path);

/* Start-up, on the rank that writes the checkpoint indexes (hf_check.c): when `arg`, the
 * value of key ("load" or "save"), is a directory (or, for load, an *.index.json in one)
 * holding a config.json, reads it and compares the keys that set the model's math and
 * tensor shapes with p's config.json. A disagreement is refused, naming the file, the key,
 * both values and what to do (QT_E_ARG); for save with overwrite it is a note instead, and
 * the next save replaces config.json with p's (qt_hf_config_replacing). Reads only. */
int qt_hf_config_check(const qt_plan *p, const char *key, const char *arg, int overwrite);
/* Whether the next save leaves the directory's config.json out (ckpt_dir.c) and writes
 * p's in its place; set by qt_hf_config_check, cleared once a save wrote it. */
void qt_hf_config_replace_set(int on);
int qt_hf_config_replacing(void);

/* Into the checkpoint directory `dir` being built: config.json of p unless dir has one,
 * and (after qt_hf_tokenizer_set) tokenizer.json and tokenizer_config.json unless dir has
 * them. Each file is written as <name>.qtrain-tmp, fsynced and renamed. QT_OK or QT_E_IO. */
int qt_hf_files_write(const qt_plan *p, const char *dir);

#endif

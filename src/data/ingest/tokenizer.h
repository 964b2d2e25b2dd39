/*
 * src/data/ingest/tokenizer.h: a subword tokenizer for the user's captions,
 * SentencePiece (Kudo & Richardson 2018; libsentencepiece, BPE or unigram),
 * behind a C interface (not public API; the C++ lives in tokenizer_sp.cc).
 *
 * ampc's token ids: 0 is <pad> (AMPC_TOKEN_PAD), 1 is <unk> (AMPC_TOKEN_UNK);
 * a model trained here has exactly these (pad_id=0, unk_id=1, no BOS/EOS);
 * a user's own .model must have them too, or it is refused. Normalisation
 * (NFKC, white space) is SentencePiece's own; captions are lower-cased first
 * (the bundled emoji captions are lower case too).
 */
#ifndef AMPC_DATA_INGEST_TOKENIZER_H
#define AMPC_DATA_INGEST_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "ampc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ampc_tokenizer ampc_tokenizer;

/* Train a SentencePiece model on the text file `captions_path` (one caption
 * per line, UTF-8, already lower-cased) with a vocabulary of `vocab` pieces
 * (a soft limit: a small corpus may give fewer, never more) and model_type
 * "bpe" or "unigram"; write it to `model_path` (through "<model_path>.tmp"
 * and a rename). Deterministic for the same input (the whole input is used,
 * no sampling), quiet (SentencePiece's log is kept off stdout), threads <= 2.
 * Errors: AMPC_ERR_INVALID_ARG (vocab < 8 or > 1,000,000, unknown type),
 * AMPC_ERR_IO, AMPC_ERR_FORMAT (SentencePiece refused the input: its message
 * is kept). */
ampc_status ampc_tokenizer_train(const char *captions_path, int32_t vocab, const char *type,
                                 const char *model_path);

/* Load a .model file. Errors: AMPC_ERR_IO (cannot read), AMPC_ERR_FORMAT (not a
 * SentencePiece model, or its pad/unk ids are not 0/1: the message says
 * which), AMPC_ERR_NOMEM. */
ampc_status ampc_tokenizer_load(ampc_tokenizer **out, const char *model_path);
void ampc_tokenizer_free(ampc_tokenizer *t);
/* Pieces in the model (token ids are in [0, vocab)). */
int32_t ampc_tokenizer_vocab(const ampc_tokenizer *t);
/* The piece of id (e.g. "\xe2\x96\x81cat"), or NULL out of range. */
const char *ampc_tokenizer_piece(const ampc_tokenizer *t, int32_t id);

/* Encode text (lower-cased here, then SentencePiece) into out [seq_len] int32:
 * the first min(n, seq_len) ids, the rest AMPC_TOKEN_PAD. *n_full (may be
 * NULL) = n, the ids before truncation (> seq_len: the caption was cut).
 * Thread-safe for concurrent calls on one tokenizer. Errors:
 * AMPC_ERR_INVALID_ARG (seq_len < 1), AMPC_ERR_FORMAT (SentencePiece failed). */
ampc_status ampc_tokenizer_encode(const ampc_tokenizer *t, const char *text, int32_t *out,
                                  int32_t seq_len, int32_t *n_full);

#ifdef __cplusplus
}
#endif
#endif

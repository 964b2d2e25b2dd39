/*
 * src/data/ingest/tokenizer.h: a subword tokenizer for the user's captions,
 * SentencePiece (Kudo & Richardson 2018; libsentencepiece, BPE or unigram),
 * behind a C interface (not public API; the C++ lives in tokenizer_sp.cc).
 *
 * ampc's token ids: 0 is <pad> (AMPC_TOKEN_PAD), 1 is <unk> (AMPC_TOKEN_UNK);
 * a model trained here has exactly these (pad_id=0, unk_id=1, no BOS/EOS);
 * a user's own .model must have them too, or it is refused.
 *
 * Case and normalisation, precisely: ampc lower-cases ASCII only (A-Z ->
 * a-z; every byte >= 0x80 is left alone) in the training lines and in the
 * text given to encode. The rest is the model's own SentencePiece
 * normalisation: a model trained here uses "nmt_nfkc_cf" (NFKC, Unicode case
 * folding, white space runs collapsed, leading/trailing white space dropped),
 * so it also folds non-ASCII capitals ("\xc3\x89" -> "\xc3\xa9") and NFKC's
 * capitals (full-width "\xef\xbc\xa1" -> "a"); a user's model keeps its own
 * rule (usually "nmt_nfkc": no folding beyond ampc's ASCII lower-casing).
 * The bundled emoji captions are lower case too.
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
 * per line, UTF-8, LF or CRLF; empty lines skipped; ASCII-lower-cased here)
 * with a vocabulary of `vocab` pieces (a soft limit, hard_vocab_limit=false:
 * a small corpus may give fewer, never more) and model_type "bpe" or
 * "unigram" (character_coverage 1.0: every character seen gets a piece);
 * write it to `model_path` (through "<model_path>.tmp", fsync and a rename;
 * no .vocab file). Deterministic for the same input: the whole input in file
 * order (input_sentence_size=0, no shuffling), so two trainings give the same
 * bytes. Quiet: SentencePiece's INFO and WARNING log lines are turned off
 * (minloglevel=2, a process-wide SentencePiece setting that stays off).
 * Threads <= 2. Errors: AMPC_ERR_INVALID_ARG (vocab < 8 or > 1,000,000,
 * unknown type), AMPC_ERR_IO (cannot read the captions or write the model:
 * the errno text), AMPC_ERR_FORMAT (no non-empty line, or SentencePiece
 * refused the input: its message is kept), AMPC_ERR_NOMEM. */
ampc_status ampc_tokenizer_train(const char *captions_path, int32_t vocab, const char *type,
                                 const char *model_path);
/* ampc_tokenizer_train with other ids for <pad> (-1: none) and <unk>: for
 * tests and for writing a model another tool expects; ampc_tokenizer_load
 * refuses any model whose ids are not pad 0 / unk 1. Errors as above, plus
 * AMPC_ERR_INVALID_ARG (unk_id not in [0, vocab), pad_id not in [-1, vocab)
 * or equal to unk_id). */
ampc_status ampc_tokenizer_train_ids(const char *captions_path, int32_t vocab, const char *type,
                                     const char *model_path, int32_t pad_id, int32_t unk_id);

/* Load a .model file (a serialized SentencePiece ModelProto) into *out (free
 * with ampc_tokenizer_free; *out is NULL on error). Errors: AMPC_ERR_IO
 * (cannot open or read: the errno text), AMPC_ERR_FORMAT (empty, not a
 * SentencePiece model, a normalisation table (precompiled_charsmap) whose
 * trie or string offsets point outside it, which SentencePiece 0.1.97 would
 * read unchecked, or pad/unk ids that are not 0/1: the message names the
 * file and the id, e.g. "m.model: pad id is -1, ampc needs <pad>=0 and
 * <unk>=1 (train with --pad_id=0 --unk_id=1)"), AMPC_ERR_NOMEM. */
ampc_status ampc_tokenizer_load(ampc_tokenizer **out, const char *model_path);
void ampc_tokenizer_free(ampc_tokenizer *t);
/* Pieces in the model (token ids are in [0, vocab)). */
int32_t ampc_tokenizer_vocab(const ampc_tokenizer *t);
/* The piece of id (e.g. "\xe2\x96\x81cat"), or NULL out of range. */
const char *ampc_tokenizer_piece(const ampc_tokenizer *t, int32_t id);

/* Encode text (ASCII-lower-cased here, then the model's SentencePiece
 * normalisation and segmentation; no BOS/EOS added) into out [seq_len] int32:
 * the first min(n, seq_len) ids, the rest AMPC_TOKEN_PAD. *n_full (may be
 * NULL) = n, the ids before truncation (> seq_len: the caption was cut).
 * Thread-safe for concurrent calls on one tokenizer. Errors:
 * AMPC_ERR_INVALID_ARG (seq_len < 1), AMPC_ERR_FORMAT (SentencePiece failed). */
ampc_status ampc_tokenizer_encode(const ampc_tokenizer *t, const char *text, int32_t *out,
                                  int32_t seq_len, int32_t *n_full);

/* Decode ids [n] int32 (AMPC_TOKEN_PAD entries skipped) back to text, written
 * NUL-terminated to out [out_size] bytes: SentencePiece's detokenisation
 * (pieces joined, U+2581 -> space, leading space dropped), so the text comes
 * back normalised (lower case, single spaces); <unk> decodes as " \xe2\x81\x87 ".
 * Errors: AMPC_ERR_INVALID_ARG (an id outside [0, vocab), n < 0, out_size
 * too small: the message gives the size needed), AMPC_ERR_FORMAT
 * (SentencePiece failed), AMPC_ERR_NOMEM. */
ampc_status ampc_tokenizer_decode(const ampc_tokenizer *t, const int32_t *ids, int32_t n, char *out,
                                  size_t out_size);

#ifdef __cplusplus
}
#endif
#endif

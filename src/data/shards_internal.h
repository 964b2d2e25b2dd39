/*
 * src/data/shards_internal.h: what the pack (src/data/ingest/pack.c) and the
 * shard reader (src/data/shards.c) share (not public API).
 */
#ifndef AMPC_DATA_SHARDS_INTERNAL_H
#define AMPC_DATA_SHARDS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ampc/shards.h"

/* The 64-byte shard header (include/ampc/shards.h) for these sizes. */
void ampc__shard_header_put(uint8_t h[AMPC_SHARD_HEADER_BYTES], int32_t image_size,
                            int32_t channels, int32_t seq_len, uint64_t n_train, uint64_t n_val);
/* SHA-256 (FIPS 180-4, through OpenSSL's EVP) of data [n bytes] as 64 lower-case
 * hex digits. Errors: AMPC_ERR_NOMEM when OpenSSL fails. */
ampc_status ampc__sha256(const void *data, size_t n, char hex[65]);
void ampc__sha256_hex(const unsigned char d[32], char hex[65]);
/* "DIR/NAME", malloc'ed; NULL when out of memory. */
char *ampc__path_join(const char *dir, const char *name);

#endif

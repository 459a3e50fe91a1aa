/* Token shards inside lib/data: the byte layout of our shard header
 * (doc/formats/token-shard.md), the dataset the writer's files are read
 * into, and what the loader needs of it. Not installed. */
#ifndef LLMT_DATA_SHARD_INTERNAL_H
#define LLMT_DATA_SHARD_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/internal.h"

/* Paths are bounded by PATH_MAX and messages may be cut: truncation by
 * snprintf is intended here. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
/* The files are little-endian and read in place through mmap; a big-endian
 * port needs byte swaps in the conversion loops (dataset.c, shard.c). */
#error "llmtrain token shards assume a little-endian host"
#endif

/* Our shard, version 1: a 128-byte header, the tokens, zero padding to a
 * multiple of 8, the document index (uint64 start of each document). */
#define SH_MAGIC "LLMTTOK"          /* 8 bytes with its NUL */
#define SH_VERSION 1u
#define SH_HEADER_BYTES 128u
/* Field offsets, named in error messages. */
#define SH_OFF_MAGIC 0
#define SH_OFF_VERSION 8
#define SH_OFF_HEADER_SIZE 12
#define SH_OFF_DTYPE 16
#define SH_OFF_VOCAB 20
#define SH_OFF_NTOKENS 24
#define SH_OFF_NDOCS 32
#define SH_OFF_TOK_OFFSET 40
#define SH_OFF_TOK_BYTES 48
#define SH_OFF_IDX_OFFSET 56
#define SH_OFF_IDX_BYTES 64
#define SH_OFF_TOK_XXH 72
#define SH_OFF_IDX_XXH 80
#define SH_OFF_RESERVED 88          /* 32 zero bytes */
#define SH_OFF_HEADER_XXH 120       /* xxhash64 of bytes [0, 120) */
/* dtype codes: the byte width of a token. */
#define SH_DTYPE_U16 2u
#define SH_DTYPE_U32 4u

/* llm.c's token file: int32[256] header, then uint16 tokens. */
#define LLMC_MAGIC 20240520
#define LLMC_VERSION 1
#define LLMC_HEADER_BYTES 1024u

/* The decoded header of one of our shards. */
typedef struct sh_header {
    uint32_t version, header_size, dtype;
    int32_t vocab_size;
    uint64_t n_tokens, n_docs;
    uint64_t tok_offset, tok_bytes, idx_offset, idx_bytes;
    uint64_t tok_xxh, idx_xxh;
} sh_header;

static inline uint64_t sh_align8(uint64_t x) { return (x + 7u) & ~(uint64_t)7u; }

static inline uint16_t sh_rd16(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint32_t sh_rd32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint64_t sh_rd64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Fill the 128 header bytes (header checksum included) from h. */
void llmt__data_shard_header_encode(const sh_header *h, unsigned char *out);
/* Fields of `in` (header_size bytes known to be present) into h; no checks. */
void llmt__data_shard_header_decode(const unsigned char *in, sh_header *h);
/* xxhash64 of the header bytes before the header checksum. */
uint64_t llmt__data_shard_header_xxh(const unsigned char *in);

/* One shard of an open dataset. */
typedef struct ds_shard {
    char *path;
    int llmc;                    /* 1: llm.c's format */
    const unsigned char *map;    /* whole file, read-only */
    size_t map_len;
    uint32_t width;              /* bytes per token: 2 or 4 */
    int32_t vocab_size;          /* 0 for llm.c files */
    int64_t n_tokens, n_docs;
    const unsigned char *tokens; /* n_tokens * width bytes */
    const unsigned char *index;  /* n_docs uint64, unaligned-safe reads */
    uint64_t tok_xxh, idx_xxh;   /* stored checksums (ours) */
} ds_shard;

struct llmt_dataset {
    llmt_err err;
    llmt_context *ctx;
    ds_shard *shards;
    int32_t n;
    int32_t vocab_size;
    int64_t tokens, documents;
    uint64_t fingerprint;
};

/* Tokens [off, off + n) of shard s widened to int32; the range is the
 * caller's to check. Returns -1 when every id is below the shard's
 * vocab_size, else the shard offset of the first that is not (a corrupt
 * token the header checksum cannot see without verify: it must never
 * reach a model as an id). Safe from any thread. */
int64_t llmt__data_dataset_copy(const llmt_dataset *ds, int32_t s, int64_t off, size_t n,
                                int32_t *dst);
/* The message for the id at token `tok` of shard s that copy reported:
 * the file, its byte offset, the id and the vocabulary. */
llmt_status llmt__data_bad_token(llmt_err *e, const llmt_dataset *ds, int32_t s, int64_t tok);

#endif

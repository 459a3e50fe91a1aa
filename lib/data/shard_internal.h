/* Token shards inside lib/data: the byte layout of our shard header
 * (doc/formats/token-shard.md), the dataset the writer's files are read
 * into, and what the loader needs of it. Not installed. */
#ifndef LLMT_DATA_SHARD_INTERNAL_H
#define LLMT_DATA_SHARD_INTERNAL_H

#include <pthread.h>
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
/* The files are little-endian and their tokens are widened as read; a
 * big-endian port needs byte swaps in the conversion loops (dataset.c,
 * shard.c). */
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

/* One shard of an open dataset. Its bytes are read with pread, never
 * through a mapping: a file truncated while open (a rerun of the writer, a
 * full disk, a copy in place) then gives a short read that is reported,
 * where a mapping would raise SIGBUS in the host. */
typedef struct ds_shard {
    char *path;
    int llmc;                    /* 1: llm.c's format */
    int fd;                      /* -1: closed (the dataset keeps a few open) */
    uint32_t users;              /* reads in flight on fd (under ds->mu) */
    uint64_t used;               /* LRU clock of the open files */
    /* The file as it was opened and checked: reads and reopens compare. */
    uint64_t size, dev, ino;
    int64_t mtime_s, mtime_ns;
    uint32_t width;              /* bytes per token: 2 or 4 */
    int32_t vocab_size;          /* 0 for llm.c files */
    int64_t n_tokens, n_docs;
    uint64_t tok_off;            /* byte offset of token 0 */
    uint64_t tok_xxh, idx_xxh;   /* stored checksums (ours) */
    uint64_t edge_xxh[2];        /* llm.c files: hashes of both ends */
} ds_shard;

struct llmt_dataset {
    llmt_err err;
    llmt_context *ctx;
    ds_shard *shards;
    int32_t n;
    int32_t vocab_size;
    int32_t id_limit; /* 0, or a bound on every id served */
    int64_t tokens, documents;
    uint64_t fingerprint;
    pthread_mutex_t mu; /* the open files below */
    int32_t open_files, max_open;
    uint64_t clock;
};

/* Tokens [off, off + n) of shard s as stored (width bytes each) into raw;
 * the range is the caller's to check. Fails naming the file, its size at
 * open and now, and the tokens when it cannot read them all (the file was
 * truncated while open), and names the token, its id and the vocabulary
 * when an id is at or above the shard's vocab_size or the dataset's
 * id_limit (a corrupt token, or an llm.c file written with another
 * tokenizer: it must never reach a model as an id). Safe from any thread;
 * the message goes to e. */
llmt_status llmt__data_dataset_fetch(llmt_dataset *ds, int32_t s, int64_t off, size_t n,
                                     void *raw, llmt_err *e);
/* n tokens fetched from shard s at raw, widened to int32 into dst. */
void llmt__data_dataset_widen(const llmt_dataset *ds, int32_t s, const void *raw, size_t n,
                              int32_t *dst);
/* Has shard s changed since the dataset opened it (size, modification
 * time)? A rewrite in place that keeps the size is only seen this way.
 * One fstat; safe from any thread; the message goes to e. */
llmt_status llmt__data_shard_check(llmt_dataset *ds, int32_t s, llmt_err *e);

#endif

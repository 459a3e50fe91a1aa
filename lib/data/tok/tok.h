/* Tokenizers (lib/data/tok): internal header. See doc/tokenizers.md. */
#ifndef LLMT_DATA_TOK_H
#define LLMT_DATA_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"

/* Code point classes of the GPT-2 pre-tokenizer regex (unicode_tab.c,
 * generated from the JavaScript engine that runs the reference encoder). */
enum { TOK_CLS_OTHER = 0, TOK_CLS_L = 1, TOK_CLS_N = 2, TOK_CLS_S = 3 };
extern const uint32_t llmt__uni_ranges[][3];
extern const size_t llmt__uni_nranges;

/* Class of the code point starting at s[0] (n > 0 bytes available); *len
 * gets its length in bytes. Invalid UTF-8 (bad lead, truncated, overlong,
 * surrogate, > U+10FFFF) counts as one byte of class OTHER. */
int llmt__tok_class(const unsigned char *s, size_t n, size_t *len);
/* End (exclusive) of the pre-tokenizer chunk starting at s[i], i < n: the
 * next match of 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+
 * |\s+(?!\S)|\s+ as JavaScript's /gu regex finds it. */
size_t llmt__tok_next_chunk(const unsigned char *s, size_t n, size_t i);

typedef enum tok_kind { TOK_KIND_BYTES = 0, TOK_KIND_GPT2 = 1, TOK_KIND_BPE = 2 } tok_kind;

/* A rank-table entry: merging the adjacent pair (left, right) gives
 * `result`; lower rank merges first. GPT-2 loaded from vocab.bpe also has
 * "aliases": pairs that the reference encoder ranks by the string
 * "left,right", which a few pairs share around commas. */
typedef struct tok_merge {
    int32_t left, right, result, rank;
} tok_merge;

typedef struct tok_hent {
    uint64_t key;       /* (left << 32 | right) + 1; 0 = empty */
    int32_t rank, result;
} tok_hent;

typedef struct tok_cache_entry {
    uint64_t hash;      /* 0: empty */
    uint32_t key_off, key_len;
    uint32_t ids_off, n_ids;
} tok_cache_entry;

typedef struct tok_heap_entry {
    int32_t rank, pos, left, right;
} tok_heap_entry;

struct llmt_tokenizer {
    llmt_err err;
    llmt_context *ctx;
    tok_kind kind;
    int32_t vocab_size;
    int32_t eot;
    int32_t byte_id[256];
    /* token bytes: tok_blob[tok_off[i] .. tok_off[i+1]) */
    uint32_t *tok_off;
    unsigned char *tok_blob;
    /* rank table, sorted by rank; and its hash (left,right) -> index */
    tok_merge *merges;
    int32_t n_merges;
    tok_hent *htab;     /* open addressing, linear probing */
    size_t hcap;        /* power of two */
    /* encode cache: word bytes -> ids */
    tok_cache_entry *cache;
    size_t cache_cap, cache_count;
    unsigned char *ckeys;
    size_t ckeys_len, ckeys_cap;
    int32_t *cids;
    size_t cids_len, cids_cap;
    /* scratch of one word's merge */
    int32_t *w_tok, *w_prev, *w_next;
    tok_heap_entry *w_heap, *w_round;
    int32_t *w_out;
    size_t w_cap, heap_cap, round_cap, out_cap;
};

/* Allocate a handle with vocab_size tokens whose bytes are given by the
 * caller afterwards (tok_off/tok_blob), or build everything from parts. */
llmt_status llmt__tok_new(llmt_err *ce, llmt_context *ctx, llmt_tokenizer **out);
/* Set the vocabulary: token i has bytes blob[off[i]..off[i+1]); takes
 * ownership of off and blob (malloc'd). Fills byte_id from the single-byte
 * tokens (each byte must have exactly one). */
llmt_status llmt__tok_set_vocab(llmt_tokenizer *t, int32_t vocab_size,
                                uint32_t *off, unsigned char *blob, int32_t eot);
/* Set the rank table (takes ownership of m, sorted by rank) and build the
 * hash; checks ids and that result bytes = left bytes + right bytes. */
llmt_status llmt__tok_set_merges(llmt_tokenizer *t, tok_merge *m, int32_t n);
/* Byte-level BPE of one pre-tokenized chunk: appends its ids to out
 * (capacity at least len). Returns the count, or -1 on out of memory. */
long llmt__tok_bpe_word(llmt_tokenizer *t, const unsigned char *w, size_t len,
                        int32_t *out);
/* Lookup of the rank table; NULL when the pair does not merge. */
const tok_hent *llmt__tok_find_merge(const llmt_tokenizer *t, int32_t left, int32_t right);

/* Shared helpers. */
#define TOK_EOT_TEXT "<|endoftext|>"
uint64_t llmt__tok_mix64(uint64_t x);
uint64_t llmt__tok_hash_bytes(const unsigned char *p, size_t n); /* never 0 */
/* Grow *p (elements of `elem` bytes) to hold at least `need`; 0 or -1. */
int llmt__tok_grow(void **p, size_t *cap, size_t need, size_t elem);
/* Read a whole regular file of at most TOK_FILE_MAX bytes (NUL-terminated
 * copy); errors name the path. The bound keeps /dev/zero or a wrong path
 * from allocating without end: GPT-2's files are 1.5 MB together, ours
 * for a 2^24-token vocabulary well under it. */
#define TOK_FILE_MAX (UINT64_C(1) << 30)
llmt_status llmt__tok_read_file(llmt_err *e, const char *path, char **buf, size_t *len);
/* A byte-level BPE handle (ids 0..255 = bytes, merge k gives 256+k, then
 * <|endoftext|>) from merges (takes ownership of m). */
llmt_status llmt__tok_from_merges(llmt_err *ce, llmt_context *ctx, tok_merge *m,
                                  int32_t nm, llmt_tokenizer **out);

#endif

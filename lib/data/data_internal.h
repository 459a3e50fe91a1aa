/* Internal helpers shared by the data stages (normalize, ingest, filter,
 * dedup). Not installed. */
#ifndef LLMT_DATA_INTERNAL_H
#define LLMT_DATA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"

/* Decode the UTF-8 sequence at s[0] (n > 0 bytes available). Returns 1 and
 * sets *cp when it is well-formed (Unicode Table 3-7: no overlongs, no
 * surrogates, nothing above U+10FFFF). Returns 0 when it is not; *len then
 * is the length of its maximal subpart (>= 1), the bytes one U+FFFD
 * replaces. *len is the sequence length in both cases. */
int llmt__data_utf8_next(const unsigned char *s, size_t n, uint32_t *cp,
                         size_t *len);

/* The whitespace that separates words everywhere in the data stages: ASCII
 * space, \t, \n, \v, \f, \r. Words are runs of other bytes, so filters and
 * dedup agree on what a word is whatever the text's script. */
static inline int llmt__data_is_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Normalise into out (cap >= 3 * len always suffices), counting invalid
 * sequences and NULs; the same rules as llmt_data_normalize. Returns the
 * output length, or SIZE_MAX when cap was too small (then *needed, if not
 * NULL, gets the full length). */
size_t llmt__data_normalize(const unsigned char *in, size_t len,
                            unsigned char *out, size_t cap, int64_t *invalid,
                            size_t *needed);

/* Bound every id the dataset serves by `vocab` (a tokenizer's size), for
 * files that name no vocabulary (llm.c's): reads and the loader then refuse
 * an id at or above it wherever it lies in the file, naming the file, the
 * token, the id and the bound. 0 removes the bound. Not while reads run.
 * Here rather than in shard_internal.h so that a host inside the library
 * (lib/job) can call it without the shard layout. */
llmt_status llmt__data_dataset_limit_ids(llmt_dataset *ds, int32_t vocab);
/* The first shard file (*.tok or *.bin, not hidden: what a dataset of the
 * directory reads) of directory dir into found (may be NULL); 0 when it
 * holds none or cannot be read. */
int llmt__data_dir_first_shard(const char *dir, char *found, size_t cap);

/* The loader's error slot, for its checkpoint half (loader.c). */
llmt_err *llmt__data_loader_err(const llmt_loader *l);

#endif

/* Internal model of a checkpoint: the manifest in memory, the save
 * description and the handle. See doc/checkpoint-format.md. */
#ifndef LLMT_CKPT_INTERNAL_H
#define LLMT_CKPT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/internal.h"

/* Paths are bounded (the root is at most 4032 bytes, checked at create) and
 * messages may be cut: truncation by snprintf is intended here. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

#define CK_FORMAT_VERSION 1
#define CK_ALIGN 4096u                 /* data alignment in files (O_DIRECT) */
#define CK_HEADER_BYTES 4096u          /* data file header block */
#define CK_BLOCK_BYTES (1u << 20)      /* hashed block size */
#define CK_MAGIC "LLMTCKPT"            /* 8 bytes at offset 0 of data files */
#define CK_NAME_MAX 255
#define CK_MAX_RANKS 1048576
#define CK_MAX_BYTES (UINT64_C(1) << 52) /* sizes beyond this are hostile */

typedef struct ck_chunk {
    int32_t rank;              /* file is rank-<rank>.bin */
    uint64_t offset, length;   /* byte range in the file */
    int64_t goff[LLMT_MAX_DIMS];
    int64_t lshape[LLMT_MAX_DIMS];
    uint64_t xxh;              /* of the whole chunk */
    uint64_t block;            /* hashed block size */
    uint64_t nblocks;
    uint64_t *bxxh;            /* one per block */
} ck_chunk;

typedef struct ck_tensor {
    char *name;
    llmt_dtype dtype;
    int32_t ndim;
    int64_t gshape[LLMT_MAX_DIMS];
    ck_chunk *chunks;
    size_t nchunks, cap;
} ck_tensor;

typedef struct ck_kv {
    char *key, *val;
    int32_t rank;
} ck_kv;

typedef struct ck_file {
    int32_t rank;
    uint64_t bytes;
} ck_file;

typedef struct ck_manifest {
    int is_part;
    int64_t step;
    int32_t world_size;
    int32_t rank;               /* for a part */
    /* the save attempt the part belongs to (llmt__ckpt_set_attempt), the
     * same on every rank of one attempt; 0: none given (and every part
     * written before the field existed). A merge keeps it when every part
     * has the same one. */
    uint64_t attempt;
    char *plan;                 /* JSON text or NULL */
    ck_kv *kv;
    size_t nkv, kvcap;
    ck_file *files;
    size_t nfiles, filecap;
    ck_tensor *tensors;
    size_t ntensors, tcap;
    /* name -> tensor, a cache llmt__ckpt_find_tensor keeps up to date as
     * tensors are added (never removed or renamed): open addressing over
     * tensor index + 1 (0: free), hcap a power of two, the first hn
     * tensors indexed. A lookup is O(1), not a scan: a merge looks every
     * part's tensors up, thousands of parts at scale. */
    size_t *hidx, hcap, hn;
} ck_manifest;

void llmt__ckpt_manifest_free(ck_manifest *m);
/* Serialise; returns malloc'ed text or NULL. */
char *llmt__ckpt_manifest_to_json(const ck_manifest *m);
/* The same without empty blocks, and without the tensors left with none
 * (unless they have no elements): what a rank holds, for exchanges where
 * the tensors' order does not matter (memtier.c). */
char *llmt__ckpt_manifest_to_json_held(const ck_manifest *m);
/* Parse and validate everything that can be checked without the data files.
 * On failure writes a reason into err. */
llmt_status llmt__ckpt_manifest_parse(const char *text, size_t len,
                                      int want_part, ck_manifest *m,
                                      char *err, size_t errlen);
/* Merge parts (each a parsed part manifest) into one manifest. */
llmt_status llmt__ckpt_manifest_merge(ck_manifest *const *parts, size_t n,
                                      ck_manifest *out, char *err,
                                      size_t errlen);
ck_tensor *llmt__ckpt_find_tensor(const ck_manifest *m, const char *name);
/* LLMT_ERR_STATE on the handle unless a checkpoint is open (load.c). */
llmt_status llmt__ckpt_need_open(llmt_ckpt *ck);
/* The open checkpoint's tensor `name` in *t, or LLMT_ERR_STATE / _NOT_FOUND
 * on the handle naming it (load.c). */
llmt_status llmt__ckpt_open_tensor(llmt_ckpt *ck, const char *name, const ck_tensor **t);
int llmt__ckpt_name_ok(const char *s);

/* -- I/O helpers (io.c) -- */
/* Write `len` bytes (a multiple of CK_ALIGN, buf aligned) to a new file
 * `path`, then fsync. direct: try O_DIRECT (+libaio); falls back to buffered
 * when refused. *used_direct reports what happened. stop (may be NULL):
 * once it reads non-zero the write ends between pieces (the requests in
 * flight drained, no fsync) with LLMT_ERR_ABORTED; the file is left as it
 * is for the caller to remove. */
llmt_status llmt__ckpt_write_file(const char *path, const void *buf, uint64_t len, int direct,
                                  int *used_direct, const atomic_int *stop, char *err,
                                  size_t errlen);
/* Write small text atomically: tmp name, fsync, rename, fsync dir. */
llmt_status llmt__ckpt_write_atomic(const char *dir, const char *name,
                                    const char *text, size_t len, char *err,
                                    size_t errlen);
/* The first half of write_atomic: `text` written and fsynced under the
 * temporary name of dir/name (returned in tmp), for the caller to rename
 * into place after a last check (save.c: a part, a step's manifest). */
llmt_status llmt__ckpt_write_tmp(const char *dir, const char *name, const char *text,
                                 size_t len, char *tmp, size_t tmplen, char *err,
                                 size_t errlen);
/* dir/.name.tmp.PID.TID: unique per writer thread, hidden from readers */
void llmt__ckpt_tmp_name(char *buf, size_t n, const char *dir, const char *name);
int llmt__ckpt_fsync_dir(const char *dir);
/* Read a whole small file (<= max bytes); malloc'ed, NUL-terminated. */
llmt_status llmt__ckpt_read_small(const char *path, size_t max, char **out,
                                  size_t *len, char *err, size_t errlen);
int llmt__ckpt_mkdirs(const char *path);
/* Remove a checkpoint directory (its regular files, then itself). */
int llmt__ckpt_rmdir(const char *path);
/* Copy a file with fsync. */
llmt_status llmt__ckpt_copy_file(const char *src, const char *dst, char *err,
                                 size_t errlen);

/* A byte span of saving rank `rank`'s data file (memtier.c). */
typedef struct ck_span {
    int32_t rank;
    uint64_t off, len;
    const uint8_t *data;
} ck_span;

/* -- the handle -- */
/* What became of the handle's last job (llmt_ckpt_cancel's states). */
enum {
    CK_JOB_NONE = 0,     /* no save queued on this handle */
    CK_JOB_QUEUED = 1,   /* queued, running or ended: pending, job_status */
    CK_JOB_STOPPED = 2,  /* the writer abandoned it at a cancel's request */
    CK_JOB_CANCELLED = 3 /* a cancel withdrew it */
};

typedef struct ck_item {       /* one added tensor of the save description */
    char *name;
    llmt_tensor view;
    int64_t gshape[LLMT_MAX_DIMS];
    int64_t goff[LLMT_MAX_DIMS];
    uint64_t snap_off;         /* where the snapshot puts it in the data file */
} ck_item;

struct llmt_ckpt {
    llmt_err err;
    llmt_context *ctx;
    char *root;
    char *durable;
    /* node-local root (llmt__ckpt_set_node_local): parts are committed in
     * the durable tier, the root keeps only this node's parts */
    int node_local;
    /* the attempt identity this rank's parts carry (llmt__ckpt_set_attempt);
     * a step commits only with every part of the same one */
    uint64_t attempt;
    llmt_ckpt_opts opts;

    /* save description */
    int begun;
    int64_t step;
    ck_item *items;
    size_t nitems, icap;
    ck_kv *kv;
    size_t nkv, kvcap;
    char *plan;

    /* snapshot + writer */
    uint8_t *buf;
    uint64_t bufcap;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending;              /* a job is queued or running */
    int quit;
    /* llmt_ckpt_cancel (save.c): stop asks the writer to abandon the job
     * (checked between its phases and the data file's pieces); job_state
     * is CK_JOB_*; prev_last_step is last_step before the job was queued
     * (a cancelled save is not the last save). */
    atomic_int stop;
    int job_state;
    int64_t prev_last_step;
    ck_manifest job;          /* the part manifest of the job */
    uint64_t job_bytes;
    llmt_status job_status;
    char job_err[LLMT_ERR_MSG_MAX];
    int64_t last_step;

    int have_snapshot;        /* buf + job hold a complete snapshot */

    /* an open checks only the data files (and, verifying fully, the
     * chunks) of ranks r with r % file_parts == file_part (open_shared.c:
     * the ranks share the checks; 0 or 1 part: every file);
     * files_checked counts the files an open checked */
    int32_t file_part, file_parts;
    uint64_t files_checked;

    /* the open checkpoint */
    ck_manifest open;
    int is_open;
    int open_mem;             /* opened from the snapshot buffer (host tier) */
    /* opened from the ranks' parts held in memory (memtier.c): mem_n > 0
     * (the saving world), and the byte spans of their data files this
     * rank's restore plan reads, fetched from their owners: span i is
     * [mem_spans[i].off, + len) of rank mem_spans[i].rank's data file, its
     * bytes at .data. While mem_plan is set, reads record the spans they
     * need there instead of copying anything. */
    int32_t mem_n;
    int mem_plan;
    ck_span *mem_spans;
    size_t mem_nspans, mem_spancap;
    uint8_t *mem_data;
    uint64_t mem_fetched; /* bytes of the parts received (own spans too) */
    uint64_t mem_parts;   /* bytes of every rank's part together */
    char *open_dir;
    uint8_t *rbuf;
    uint64_t rbufcap;
    /* the open checkpoint's data files, kept open while it is (load.c): a
     * restore reads every tensor from the ranks that saved its shares, so
     * opening a file per chunk read made tensors x ranks opens of the
     * shared file system per rank. Slot rank % fd_cap holds fd_rank's
     * descriptor (-1: none); files_opened counts the opens. */
    int *fds;
    int32_t *fd_rank;
    int32_t fd_cap;
    uint64_t files_opened;

    /* peer tier (peer.c): where this rank keeps its replicas (NULL:
     * ROOT/peer) and its node's key, which places each rank's replica on
     * another node when there are several */
    char *peer_root;
    uint64_t peer_node;
    int peer_node_set;
    /* the replica ring as last made (peer.c): every rank's node key and
     * successor, peer_w of each; made again only when the keys gathered
     * at a save differ (another communicator, a rank moved to another
     * node) */
    uint64_t *peer_keys;
    int32_t *peer_succ;
    int32_t peer_w;
};

/* A rank's part of a step directory as one blob (peer.c): u64 json
 * length, u64 data length, u64 xxh64 of json + data, json, data, zero
 * padding to a multiple of 8 bytes. */
llmt_status llmt__ckpt_load_part(llmt_ckpt *ck, const char *dir, int32_t rank, uint8_t **blob,
                                 uint64_t *len);

/* The peer tier's replica directory (NULL: ROOT/peer) and this rank's
 * node key (node_set 0: the host name's hash), peer.c. Ranks with
 * different keys are on different nodes: the replica partner is then on
 * another node where there is one. Failures go to ck->err. */
llmt_status llmt__ckpt_peer_config(llmt_ckpt *ck, const char *dir, uint64_t node, int node_set);

/* The root is a node's own directory (the same path on every node's
 * disk, or one per agent), not shared by every rank: each part written
 * there is then copied into the durable tier, where the rank that finds
 * every part commits the step (manifest.json, latest, the durable
 * retention); the root gets no manifest and keeps its newest keep_last
 * step directories (save.c). Needs a durable tier (else
 * LLMT_ERR_INVALID_ARGUMENT on ck->err). */
llmt_status llmt__ckpt_set_node_local(llmt_ckpt *ck, int on);
/* The identity of the attempt the next saves belong to, which every rank
 * of those saves must be given alike (lib/job: a token rank 0 draws at the
 * start of a run and that changes at every restore). A step commits only
 * when every rank's part there carries the committing rank's: a part an
 * earlier attempt at the same step left (a crash, a rollback, a restart of
 * the gang) waits for its rank to replace it. 0 (the default): none; parts
 * then commit whatever attempt wrote them, as before the field. */
void llmt__ckpt_set_attempt(llmt_ckpt *ck, uint64_t attempt);

/* The reads a restore will make, run once against the open checkpoint
 * while the handle records their byte spans instead of copying (no
 * destination is written). */
typedef llmt_status (*llmt__ckpt_plan_fn)(void *arg, llmt_ckpt *ck);

/* Open `step` from the ranks' parts held in memory (memtier.c):
 * collective over `comm` (rank i = checkpoint rank i); each rank gives its
 * snapshot when it holds that step (*from_memory = 1), else its part file
 * from ROOT/step-N. Every rank gets every part's manifest; then `plan`
 * runs (its reads recorded) and each rank receives from the others only
 * the spans its plan reads. The handle then reads those with no disk
 * access; a read outside the plan fails naming the span. A failing plan
 * still takes part in the exchange (asking nothing) and its status is
 * returned. */
llmt_status llmt__ckpt_open_gathered(llmt_ckpt *ck, llmt_comm *comm, int64_t step,
                                     int *from_memory, llmt__ckpt_plan_fn plan, void *arg);
/* Where a gathered open holds [off, off + len) of rank's data file, NULL
 * when it was not fetched; while planning, records the span (returns
 * NULL; *err set on failure). */
const uint8_t *llmt__ckpt_gathered_span(llmt_ckpt *ck, int32_t rank, uint64_t off, uint64_t len,
                                        llmt_status *err);
/* dir/manifest.json's text (malloc'ed; load.c): LLMT_ERR_NOT_FOUND on
 * ck->err when the step was not committed. */
llmt_status llmt__ckpt_read_manifest(llmt_ckpt *ck, const char *dir, char **text, size_t *len);
/* Open `step` of the root from its manifest's text read elsewhere (load.c;
 * the data files are checked here, as llmt_ckpt_open_step does). */
llmt_status llmt__ckpt_open_step_text(llmt_ckpt *ck, int64_t step, const char *text,
                                      size_t len);
/* The steps a search for the newest usable one skipped, with why: kept
 * across several searches (a restore that found a step corrupt while
 * reading it searches again below it), so that the final error lists
 * every step tried, not only the last search's. */
typedef struct {
    char why[LLMT_ERR_MSG_MAX]; /* "\n  step N: reason" lines */
    size_t len;                 /* bytes of why used */
    size_t n;                   /* steps skipped */
} ck_tried;
/* A step an open skips: logged (WARN), and "\n  step N: reason" added
 * to t (for the error if none is usable; load.c). */
void llmt__ckpt_skip_note(llmt_ckpt *ck, ck_tried *t, int64_t step, const char *reason);
/* The error of a search that found nothing usable: "no checkpoint in
 * ROOT" when t holds no step, else every step of t with its reason
 * (LLMT_ERR_NOT_FOUND; `where` ends the count's sentence). */
llmt_status llmt__ckpt_none_usable(llmt_ckpt *ck, const ck_tried *t, const char *where);
/* llmt_ckpt_open_latest among the steps below `below` only (INT64_MAX:
 * all), adding each step it skips to *t (NULL: its own list). */
llmt_status llmt__ckpt_open_latest_below(llmt_ckpt *ck, int64_t below, ck_tried *t,
                                         int64_t *step);
/* The newest step below `below` (INT64_MAX: any) of the root that every
 * rank of `comm` can open (open_shared.c): collective; each rank checks
 * only its share of the data files (file i when i % size == its rank:
 * every file once over the ranks, not once per rank), the ranks agree
 * step by step, newest first, and all open the same one (*step) or all
 * fail (LLMT_ERR_NOT_FOUND, each step's reason in the message); the steps
 * skipped are added to *t (NULL: its own list). */
llmt_status llmt__ckpt_open_latest_shared(llmt_ckpt *ck, llmt_comm *comm, int64_t below,
                                          ck_tried *t, int64_t *step);
/* Bytes of the parts the last gathered open received (this rank's own
 * spans included), and of every part together (0 when none was made). */
void llmt__ckpt_gathered_bytes(const llmt_ckpt *ck, uint64_t *fetched, uint64_t *parts);

/* len bytes of fd at off into buf (load.c): LLMT_ERR_IO on a read error,
 * LLMT_ERR_FORMAT when the file ends first. */
llmt_status llmt__ckpt_pread_all(int fd, void *buf, uint64_t len, uint64_t off);
/* Close the data files the open checkpoint keeps open (load.c; reads
 * open them again): after a restore, so that a long run does not hold
 * files that retention deletes, and at a save. */
void llmt__ckpt_close_files(llmt_ckpt *ck);
/* Close the checkpoint open for reading, if any (load.c). */
void llmt__ckpt_close_open(llmt_ckpt *ck);
/* Hash every chunk and block of the job's snapshot (save.c). */
void *llmt__ckpt_hash_job(void *ck);
/* Steps of root/step-* directories; committed_only: only those with a
 * manifest.json. malloc'ed, ascending (save.c). */
int64_t *llmt__ckpt_scan(const char *root, int committed_only, size_t *n);
/* Retention of one tier: keep the newest keep_last committed steps, the
 * multiples of keep_every and step `protect` (-1: none); returns how many
 * directories went (save.c). */
size_t llmt__ckpt_retain(llmt_context *ctx, const char *root, int keep_last,
                         int keep_every, int64_t protect);
/* 1 when the distinct chunk boxes of t cover every element (each exactly
 * once), 0 when not, -1 out of memory; the counts either way (manifest.c). */
int llmt__ckpt_tensor_coverage(const ck_tensor *t, uint64_t *covered, uint64_t *total);
/* Is dir a valid committed checkpoint? Manifest, data files and, when full,
 * every hash; the reason goes to ck->err. ck's open checkpoint is kept
 * (load.c). */
llmt_status llmt__ckpt_check_dir(llmt_ckpt *ck, const char *dir, int full);
/* Move root/step-<step> to root/quarantine/step-<step>.<UTC time> with a
 * REASON file; never deletes (quarantine.c). dst (may be NULL) gets the new
 * path. Failures go to ck->err. */
llmt_status llmt__ckpt_quarantine(llmt_ckpt *ck, int64_t step, const char *reason,
                                  char *dst, size_t dstlen);
/* Before saving `step`: refuse a valid commit there, quarantine a broken
 * or interrupted one (see quarantine.c for the multi-rank rule). */
llmt_status llmt__ckpt_prepare_step(llmt_ckpt *ck, int64_t step);

#endif

/* Internals of lib/comm: the handle, the backend table, the flight recorder. */
#ifndef LLMT_COMM_INTERNAL_H
#define LLMT_COMM_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "core/internal.h"

typedef enum llmt__coll_kind {
    LLMT__OP_ALL_REDUCE = 0,
    LLMT__OP_ALL_GATHER,
    LLMT__OP_REDUCE_SCATTER,
    LLMT__OP_ALL_TO_ALL,
    LLMT__OP_ALL_TO_ALLV,
    LLMT__OP_BROADCAST,
    LLMT__OP_SEND,
    LLMT__OP_RECV,
    LLMT__OP_BARRIER,
    LLMT__OP_SPLIT,
    LLMT__OP_COUNT
} llmt__coll_kind;

const char *llmt__comm_op_name(int kind);

/* One operation as the backends see it. */
typedef struct llmt__coll {
    int kind;
    const void *send;
    void *recv;
    size_t count;            /* elements (per rank block where it applies) */
    const size_t *scounts, *sdispls, *rcounts, *rdispls; /* all_to_allv */
    llmt_dtype dtype;
    llmt_reduce_op op;
    int32_t root;            /* broadcast */
    int32_t peer;            /* send/recv */
    void *stream;
    uint64_t seq;            /* group sequence number (0 for p2p) */
} llmt__coll;

/* Flight recorder: a POD block so that a backend can place it in memory
 * other ranks can read (MPI window). */
enum {
    LLMT__FR_EMPTY = 0,
    LLMT__FR_STARTED = 1,
    LLMT__FR_COMPLETED = 2,
    LLMT__FR_TIMEOUT = 3,
    LLMT__FR_ERROR = 4,
    LLMT__FR_SKIPPED = 5,
    LLMT__FR_ABORTED = 6
};

typedef struct llmt__fr_entry {
    uint64_t seq;
    int32_t op, dtype;
    int64_t count;
    int32_t peer, size;
    int32_t state, rank;
    double t_start, t_end;   /* unix seconds */
} llmt__fr_entry;

typedef struct llmt__fr {
    uint64_t entered;        /* last collective seq this rank entered */
    uint64_t completed;      /* last collective seq this rank completed */
    uint64_t written;        /* entries ever written */
    uint64_t aborted;        /* 1 once this rank aborted the communicator */
    uint64_t cap;
    llmt__fr_entry e[];
} llmt__fr;

static inline size_t llmt__fr_bytes(uint64_t cap)
{
    return sizeof(llmt__fr) + cap * sizeof(llmt__fr_entry);
}
/* Append the text of a recorder ("rank R: ..." lines) to a growing string
 * (llmt__sbuf: core/internal.h). */
void llmt__fr_format(llmt__sbuf *s, const llmt__fr *fr, int32_t rank);

typedef struct llmt__comm_backend_ops llmt__comm_backend_ops;

typedef struct llmt__work_q llmt__work_q;

struct llmt_comm {
    llmt_err err;
    llmt_context *ctx;
    const llmt__comm_backend_ops *ops;
    void *be;                 /* backend state */
    int backend;              /* llmt_comm_backend */
    int32_t rank, size;
    uint64_t next_seq;        /* next collective seq (1-based) */
    int64_t timeout_ms;
    char *dump_path;
    int32_t cuda_device;
    char *rendezvous_path;
    int32_t recorder_size;
    llmt__fr *fr;             /* the recorder (owned by the backend if fr_ext) */
    int fr_ext;
    pthread_mutex_t fr_mu;
    volatile int aborted;
    int user_abort;           /* llmt_comm_abort (not a timeout) */
    /* fault injection: LLMT_FAULT_SKIP_COLLECTIVE=rank:seq[,rank:seq] */
    int32_t fault_rank[8];
    uint64_t fault_seq[8];
    int nfault;
    /* async */
    llmt__work_q *q;
    /* MPI bootstrap ownership: the library initialised MPI for this comm */
    int mpi_owned;
    /* traffic (llmt_comm_get_stats), under fr_mu; index: LLMT__OP_* */
    uint64_t st_calls[LLMT__OP_COUNT], st_payload[LLMT__OP_COUNT];
    double st_bus[LLMT__OP_COUNT], st_sec[LLMT__OP_COUNT];
    /* seconds the callers' threads spent blocked in it (blocking calls
     * and work_wait; not the progress thread's): its exposed time */
    double st_exposed;
};

/* Backend table. `run` performs one operation and must return by the
 * absolute deadline (CLOCK_MONOTONIC ns) with LLMT_ERR_TIMEOUT. */
struct llmt__comm_backend_ops {
    const char *name;
    llmt_status (*run)(llmt_comm *c, const llmt__coll *a, int64_t deadline);
    /* Collective split; *out NULL for color < 0. */
    llmt_status (*split)(llmt_comm *c, int32_t color, int32_t key,
                         int64_t deadline, llmt_comm **out);
    /* After a timeout at seq: fill missing[] (ranks that did not enter seq,
     * -1 for ranks that could not be asked) and append every reachable
     * rank's recorder to `dump`. Returns how many entries of missing. */
    int (*diagnose)(llmt_comm *c, uint64_t seq, int32_t *missing,
                    int32_t *unreachable, int *nunreach, llmt__sbuf *dump);
    void (*abort)(llmt_comm *c);
    void (*destroy)(llmt_comm *c);
    /* Sends left in flight (p2p.h). isend posts a send (a: kind SEND) and
     * sets *h; isend_test (may be NULL: the backend cannot ask without
     * waiting) and isend_wait free *h once they report it done. NULL
     * isend: a send finishes inside `run`, at once when copy_sends
     * (in-process mailboxes), else when received (NCCL). */
    llmt_status (*isend)(llmt_comm *c, const llmt__coll *a, void **h);
    llmt_status (*isend_test)(llmt_comm *c, void *h, int *done);
    llmt_status (*isend_wait)(llmt_comm *c, void *h, int64_t deadline);
    int copy_sends;
};

/* Helpers for backends. */
int64_t llmt__now_ns(void);          /* CLOCK_MONOTONIC */
double llmt__unix_s(void);
llmt_comm *llmt__comm_new(llmt_context *ctx, const llmt_comm *parent_or_null,
                          const llmt_comm_opts *opts);
void llmt__comm_free_shell(llmt_comm *c);
llmt_status llmt__comm_fr_alloc(llmt_comm *c);

/* NCCL bootstrap over a shared file (rank 0 writes, the others poll). */
llmt_status llmt__comm_rendezvous(llmt_err *e, const char *path, int32_t rank,
                                  void *id, size_t len, int64_t timeout_ms);

/* Reductions (reduce.c). dst = dst op src over n elements; AVG counts as
 * SUM here (the caller divides once). Reduced-precision dtypes go through
 * fp32 per element. */
int llmt__dtype_reducible(llmt_dtype dt);
void llmt__reduce(llmt_dtype dt, llmt_reduce_op op, void *dst, const void *src,
                  size_t n);
/* Sum of `nsrc` buffers into dst, accumulated in fp32 (float types) or the
 * native type, in buffer order, rounded once; AVG divides by nsrc. */
void llmt__reduce_many(llmt_dtype dt, llmt_reduce_op op, void *dst,
                       const void *const *src, size_t nsrc, size_t off,
                       size_t n);
void llmt__scale_div(llmt_dtype dt, void *buf, size_t n, int32_t div);
float llmt__bf16_to_f32(uint16_t h);
uint16_t llmt__f32_to_bf16(float f);
float llmt__fp16_to_f32(uint16_t h);
uint16_t llmt__f32_to_fp16(float f);

/* Backends. */
llmt_status llmt__inproc_create(llmt_context *ctx, int32_t n,
                                const llmt_comm_opts *opts, llmt_comm **comms);
#ifdef LLMT_HAVE_MPI
llmt_status llmt__mpi_create(llmt_context *ctx, void *mpi_comm,
                             const llmt_comm_opts *opts, int init_owned,
                             llmt_comm **out);
llmt_status llmt__mpi_init(llmt_err *e, int *owned);
void llmt__mpi_release(void);
#endif
#ifdef LLMT_HAVE_NCCL
llmt_status llmt__nccl_unique_id(llmt_err *e, void *id, size_t len);
llmt_status llmt__nccl_create(llmt_context *ctx, const void *id, int32_t rank,
                              int32_t world, const llmt_comm_opts *opts,
                              llmt_comm **out);
#ifdef LLMT_HAVE_MPI
llmt_status llmt__nccl_create_mpi(llmt_context *ctx, void *mpi_comm,
                                  const llmt_comm_opts *opts, llmt_comm **out);
#endif
#endif

#ifdef LLMT_HAVE_GLOO
/* gloo.cc: rank of world meeting under `prefix` in the file store. */
llmt_status llmt__gloo_create(llmt_context *ctx, const char *store_dir, const char *prefix,
                              int32_t rank, int32_t world, const llmt_comm_opts *opts,
                              llmt_comm **out);
#endif

/* Count one completed operation in the communicator's traffic (stats.c). */
void llmt__comm_account(llmt_comm *c, const llmt__coll *a, double seconds);
/* Exposed time (lib/obs): add the time since t0 (llmt__now_ns), read it. */
void llmt__comm_exposed_add(llmt_comm *c, int64_t t0);
double llmt__comm_exposed_s(const llmt_comm *c);
/* Flight-recorder entries from *cursor (entries ever written) that have
 * finished, oldest first, at most max; *cursor advances past them, *lost
 * counts those the ring overwrote before they were read. */
size_t llmt__comm_fr_read(llmt_comm *c, uint64_t *cursor, llmt__fr_entry *out, size_t max,
                          uint64_t *lost);

#endif

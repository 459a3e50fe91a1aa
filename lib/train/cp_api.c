/* Context parallelism's public entry points (llmt_trainer_set_cp_comm,
 * llmt_trainer_cp_stats): the option struct checked and mapped by name to
 * the engine's variants, then the trainer's internal attach (trainer.c),
 * which makes the engine for seq_len / cp rows. */
#include <string.h>

#include "train/cp.h"
#include "train/trainer_state.h"

LLMT_API llmt_status llmt_cp_opts_init(llmt_cp_opts *o, size_t size)
{
    llmt_cp_opts d = {0};
    d.variant = LLMT_CP_RING;
    return llmt__opts_init(o, size, 0, &d, sizeof d, "llmt_cp_opts");
}

/* The ABI's values are the engine's (cp.h), mapped by name all the same:
 * one table, so that neither side's order is assumed. */
static int engine_variant(int32_t v)
{
    switch (v) {
    case LLMT_CP_RING: return LLMT__CP_RING;
    case LLMT_CP_ALL_GATHER: return LLMT__CP_ALL_GATHER;
    default: return -1;
    }
}

static int32_t abi_variant(int v)
{
    return v == LLMT__CP_ALL_GATHER ? LLMT_CP_ALL_GATHER : LLMT_CP_RING;
}

LLMT_API llmt_status llmt_trainer_set_cp_comm(llmt_trainer *tr, llmt_comm *comm,
                                              const llmt_cp_opts *opts)
{
    if (!tr)
        return LLMT_ERR_NULL_POINTER;
    llmt_err *e = llmt__trainer_err(tr);
    llmt_cp_opts o;
    llmt_cp_opts_init(&o, sizeof o);
    if (opts) {
        llmt_status s = llmt__opts_copy(e, "llmt_cp_opts", &o, sizeof o, opts);
        if (s != LLMT_OK)
            return s;
    }
    int v = engine_variant(o.variant);
    if (v < 0)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: set_cp_comm: llmt_cp_opts.variant %d is not "
                             "LLMT_CP_RING (0) or LLMT_CP_ALL_GATHER (1) "
                             "(parallelism.cp_variant: ring or allgather)",
                             (int)o.variant);
    return llmt__trainer_set_cp(tr, comm, v);
}

int llmt__trainer_cp_rank(llmt_trainer *tr)
{
    return llmt__cp_rank(llmt__trainer_cp(tr));
}

double llmt__trainer_cp_compute_s(llmt_trainer *tr)
{
    return llmt__cp_compute_s(llmt__trainer_cp(tr));
}

LLMT_API llmt_status llmt_trainer_cp_stats(const llmt_trainer *tr, llmt_cp_stats *out)
{
    if (!tr)
        return LLMT_ERR_NULL_POINTER;
    llmt_err *e = llmt__trainer_err((llmt_trainer *)tr);
    LLMT__NONNULL(e, "trainer: cp_stats", out);
    if (out->struct_size < sizeof(size_t))
        return llmt__err_set(e, LLMT_ERR_STRUCT_SIZE,
                             "trainer: cp_stats: out: struct_size is %zu; set it to sizeof "
                             "the struct",
                             out->struct_size);
    const llmt__cp *cp = llmt__trainer_cp(tr);
    llmt_cp_stats r;
    memset(&r, 0, sizeof r);
    r.struct_size = out->struct_size;
    r.size = 1;
    r.seq_len = llmt__trainer_opts(tr)->seq_len;
    r.local_seq_len = r.seq_len;
    r.chunk_len = r.seq_len;
    r.chunks[1] = -1;
    if (cp) {
        int n = llmt__cp_size(cp);
        r.rank = llmt__cp_rank(cp);
        r.size = n;
        r.variant = abi_variant(llmt__cp_variant(cp));
        r.local_seq_len = r.seq_len / n;
        r.chunk_len = r.seq_len / (2 * n);
        r.chunks[0] = r.rank;
        r.chunks[1] = 2 * n - 1 - r.rank;
    }
    size_t k = out->struct_size < sizeof r ? out->struct_size : sizeof r;
    memcpy(out, &r, k);
    return LLMT_OK;
}

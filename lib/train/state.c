/* The trainer's state in a checkpoint (lib/ckpt's format, nothing else):
 * every parameter, both AdamW moments and the step count, so that a
 * resumed run continues bit for bit.
 *
 * Names: "param/<name>", "adam_m/<name>", "adam_v/<name>", each with the
 * parameter's global shape; key/values "trainer.step", the learning-rate
 * schedule "trainer.schedule" (a resume under another one is logged) and
 * the model's config ("model.arch", "model.heads", ..., for tools).
 *
 * One rank (no communicator): every tensor whole, one block each.
 * Data parallel: each rank adds only its share of each tensor (the flat
 * range dp.c gives it, the same for parameters, m and v), so the ranks
 * write disjoint parts in parallel and the checkpoint holds every element
 * once; a share, a flat range of a row-major array, goes in as at most
 * 2*ndim-1 rectangular blocks with their global offsets. Reading takes the
 * parameters whole (every rank needs them) and, when the optimizer state
 * is sharded (ZeRO >= 1), only this rank's blocks of m and v: lib/ckpt
 * reads only the byte ranges that overlap, whatever layout saved them, so
 * any dp size and stage loads any other.
 * Tensor parallel (with or without data parallelism): the share is a flat
 * range of the rank's local shard, mapped to global blocks along the
 * shard's segments (tp_blocks).
 * Pipeline parallel (with tensor and data parallelism or not): a stage's
 * engine holds only its layers (and the embedding, the head), so its
 * shards of every other tensor are empty and the same tp_blocks saves
 * just its own part under the GLOBAL names and offsets (layer l is
 * "h.<l>..." whatever stage held it): the checkpoint looks like a single
 * rank's, and any other layout reads it. A tied head's copy on the last
 * stage is not its owner (the first stage saves wte once); reading, every
 * stage reads only the blocks of what it holds, the copy included. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "train/trainer_state.h"

/* The learning-rate schedule as one key/value ("trainer.schedule"): a run
 * resumed under another schedule (say, a larger train.steps) is legitimate
 * but no longer continues the saved run exactly, so reading says so. */
static void schedule_text(const llmt_trainer_opts *o, char *b, size_t cap)
{
    snprintf(b, cap, "kind=%d lr=%.9g min_lr=%.9g warmup=%lld total=%lld "
             "decay_fraction=%.9g", (int)o->schedule, (double)o->lr,
             (double)o->min_lr, (long long)o->warmup_steps,
             (long long)o->total_steps, (double)o->decay_fraction);
}

/* A device trainer's fp8 delayed-scaling state (amax histories and scales),
 * so that a resumed fp8 run continues with the scales it had. */
#define FP8_KEY "fp8/delayed_scaling"

static llmt_status fp8_add(llmt_trainer *tr, llmt_ckpt *ck)
{
    int64_t shape[2], zero[2] = {0, 0};
    float *st = llmt__trainer_fp8_state(tr, shape);
    if (!st) return LLMT_OK;
    llmt_tensor v;
    llmt_status s = llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 2, shape, st,
                                     LLMT_DEVICE_CPU, 0);
    if (s == LLMT_OK) s = llmt_ckpt_add_tensor(ck, FP8_KEY, &v, shape, zero);
    if (s != LLMT_OK)
        return llmt__err_set(llmt__trainer_err(tr), s, "trainer: ckpt: %s: %s", FP8_KEY,
                             llmt_ckpt_last_error(ck));
    return LLMT_OK;
}

/* Restores it when the checkpoint has it in this trainer's shape; a
 * checkpoint without it (saved without fp8) or with another history
 * length leaves the scales to warm up again, and says so. One with fewer
 * rows of the same history (an engine with fp8 forward GEMMs only: its
 * rows are the forward tensors, which come first here) restores those
 * and leaves the gradients' scales to warm up. */
static llmt_status fp8_read(llmt_trainer *tr, llmt_ckpt *ck, int apply)
{
    int64_t shape[2], saved[LLMT_MAX_DIMS] = {0}, zero[2] = {0, 0};
    float *st = llmt__trainer_fp8_state(tr, shape);
    if (!st) return LLMT_OK;
    llmt_dtype dt;
    int32_t nd = 0;
    if (llmt_ckpt_tensor_info(ck, FP8_KEY, &dt, &nd, saved, NULL) != LLMT_OK ||
        dt != LLMT_DTYPE_FP32 || nd != 2 || saved[0] < 1 || saved[0] > shape[0] ||
        saved[1] != shape[1]) {
        if (!apply)
            return LLMT_OK;
        llmt__log(llmt__trainer_ctx(tr), LLMT_LOG_WARN, "train",
                  "the checkpoint has no fp8 scaling state of this trainer's shape "
                  "[%lld, %lld]: the fp8 scales start again from 1",
                  (long long)shape[0], (long long)shape[1]);
        return LLMT_OK;
    }
    if (apply && saved[0] < shape[0])
        llmt__log(llmt__trainer_ctx(tr), LLMT_LOG_WARN, "train",
                  "the checkpoint's fp8 scaling state has %lld of this trainer's %lld "
                  "tensors (saved with fp8 forward GEMMs only): the gradients' fp8 "
                  "scales start again from 1",
                  (long long)saved[0], (long long)shape[0]);
    llmt_tensor v;
    llmt_status s =
        llmt_tensor_init(&v, sizeof v, LLMT_DTYPE_FP32, 2, saved, st, LLMT_DEVICE_CPU, 0);
    if (s == LLMT_OK) s = llmt_ckpt_read(ck, FP8_KEY, &v, zero);
    if (s != LLMT_OK)
        return llmt__err_set(llmt__trainer_err(tr), s, "trainer: ckpt: read %s: %s", FP8_KEY,
                             llmt_ckpt_last_error(ck));
    return apply ? llmt__trainer_fp8_restore(tr, st) : LLMT_OK;
}

/* Is field `key` of a schedule text one that schedule `kind` reads (lr_at)?
 * decay_fraction is WSD's alone; a constant schedule has no floor and no
 * length either. */
static int schedule_reads(int kind, const char *key, size_t n)
{
    if (n == 14 && !strncmp(key, "decay_fraction", n))
        return kind == LLMT_LR_WSD;
    if ((n == 6 && !strncmp(key, "min_lr", n)) || (n == 5 && !strncmp(key, "total", n)))
        return kind != LLMT_LR_CONSTANT;
    return 1;
}

/* Two schedule texts describe the same learning rates: the same kind and
 * the same value of every field that kind reads. A job once wrote fields
 * a schedule does not read (decay_fraction 0 for every schedule; min_lr
 * and total beside a constant one) before it stopped setting them: their
 * checkpoints still resume without a warning. */
static int schedule_same(const char *a, const char *b)
{
    int kind = -1, kind_b = -2;
    if (sscanf(a, "kind=%d", &kind) != 1 || sscanf(b, "kind=%d", &kind_b) != 1 ||
        kind != kind_b)
        return !strcmp(a, b);
    const char *pa = a, *pb = b;
    for (;;) { /* "key=value" fields separated by one space, in the same order */
        size_t la = strcspn(pa, " "), lb = strcspn(pb, " ");
        size_t na = strcspn(pa, "= "), nb = strcspn(pb, "= ");
        if (na != nb || strncmp(pa, pb, na))
            return !strcmp(a, b); /* another layout: compare whole */
        if (schedule_reads(kind, pa, na) && (la != lb || strncmp(pa, pb, la)))
            return 0;
        pa += la;
        pb += lb;
        if (!*pa || !*pb)
            return !*pa && !*pb;
        pa++;
        pb++;
    }
}

static const char *const prefix[3] = {"param/", "adam_m/", "adam_v/"};

/* A rectangular block of a tensor, contiguous in row-major order: leading
 * dims of extent 1, one partial dim, full trailing dims. */
typedef struct box {
    int64_t off[LLMT_MAX_DIMS], shape[LLMT_MAX_DIMS];
    int64_t flat; /* row-major index of its first element */
} box;

#define MAX_BOXES (2 * LLMT_MAX_DIMS)

static void emit(int nd, const int64_t *shape, int d, const int64_t *fix,
                 int64_t r0, int64_t r1, int64_t flat, box *out, int *n)
{
    box *b = &out[(*n)++];
    for (int k = 0; k < nd; k++) {
        b->off[k] = k < d ? fix[k] : k == d ? r0 : 0;
        b->shape[k] = k < d ? 1 : k == d ? r1 - r0 : shape[k];
    }
    b->flat = flat;
}

/* Blocks covering the flat range [a, b) of dims d.. (their leading indices
 * fixed in fix[0..d), first element at flat index `base`): a partial head
 * row, the whole rows, a partial tail row. At most 2*(nd-d)-1 blocks. */
static void boxes_rec(int nd, const int64_t *shape, int d, int64_t *fix,
                      int64_t base, int64_t a, int64_t b, box *out, int *n)
{
    if (a >= b) return;
    int64_t inner = 1;
    for (int k = d + 1; k < nd; k++) inner *= shape[k];
    int64_t ra = a / inner, rb = b / inner;
    if (ra == rb) { /* inside one row of dim d */
        fix[d] = ra;
        boxes_rec(nd, shape, d + 1, fix, base + ra * inner, a - ra * inner,
                  b - ra * inner, out, n);
        return;
    }
    if (a % inner) {
        fix[d] = ra;
        boxes_rec(nd, shape, d + 1, fix, base + ra * inner, a % inner, inner,
                  out, n);
        ra++;
    }
    if (rb > ra) emit(nd, shape, d, fix, ra, rb, base + ra * inner, out, n);
    if (b % inner) {
        fix[d] = rb;
        boxes_rec(nd, shape, d + 1, fix, base + rb * inner, 0, b % inner, out,
                  n);
    }
}

static int flat_boxes(int nd, const int64_t *shape, int64_t a, int64_t b,
                      box *out)
{
    int n = 0;
    int64_t fix[LLMT_MAX_DIMS] = {0};
    if (nd >= 1) boxes_rec(nd, shape, 0, fix, 0, a, b, out, &n);
    return n;
}

/* The share of parameter i of kind w (0 param, 1 m, 2 v) as blocks; views
 * over the trainer's memory. Returns the number of blocks. */
static int share_blocks(llmt_trainer *tr, int32_t i, int w,
                        const llmt_tensor *pv, box *bx, llmt_tensor *views)
{
    int64_t rel = 0, n = 0;
    float *ptr[3];
    llmt__trainer_share(tr, i, &rel, &n, ptr);
    int nb = flat_boxes(pv->ndim, pv->shape, rel, rel + n, bx);
    for (int k = 0; k < nb; k++)
        llmt_tensor_init(&views[k], sizeof views[k], LLMT_DTYPE_FP32,
                         pv->ndim, bx[k].shape, ptr[w] + (bx[k].flat - rel),
                         LLMT_DEVICE_CPU, 0);
    return nb;
}

enum { BLK_SAVE, BLK_READ_SHARE, BLK_READ_ALL };

/* Tensor or pipeline parallelism: this rank's blocks of parameter i's
 * kind w with their global offsets. The rank's part is its data parallel
 * share (a flat range of its local shard; the whole shard without data
 * parallelism) cut along the shard's segments: row segments are rows of
 * the global tensor at row lo[j], a column shard is the columns from
 * lo[0] of every row. The data come from the local share (ZeRO >= 1
 * moments: contiguous in the local layout, one block per box) or from the
 * host's whole tensor (parameters, ZeRO 0 moments: a column box is a
 * strided view there, its rows K apart; one chunk, not one per row,
 * which made a checkpoint's manifest grow with every row of every
 * column-split tensor and padded each row to the file alignment). save:
 * only the segments this rank owns (a replica is written once: by TP rank
 * 0 for whole tensors, by the first holder of a shared kv head; a tied
 * wte by the first pipeline stage); read: every segment it holds. mode
 * BLK_SAVE adds the share, BLK_READ_SHARE reads it (ZeRO >= 1 moments),
 * BLK_READ_ALL reads the whole local shard (what a pipeline stage holds
 * of the parameters and of unsharded moments; another stage's tensor has
 * no segment here, so nothing of it is read). */
static llmt_status tp_blocks(llmt_trainer *tr, llmt_ckpt *ck, int32_t i, int w, const char *key,
                             const llmt_tensor *pv, int mode)
{
    llmt_err *e = llmt__trainer_err(tr);
    int cols = 0, own[3], save = mode == BLK_SAVE;
    int64_t R, K, lo[3], n[3], rel, cnt;
    float *mv[2], *ptr[3];
    int ns = llmt__trainer_tp_shard(tr, i, &cols, &R, &K, lo, n, own, &rel, &cnt, mv);
    float *local = w && mode != BLK_READ_ALL ? mv[w - 1] : NULL, *glob = NULL;
    if (mode == BLK_READ_ALL) { /* the local shard whole: the host's layout */
        rel = cnt = 0;
        for (int j = 0; j < ns; j++)
            cnt += cols ? R * n[j] : n[j] * K;
    }
    if (save) { /* every rank names every tensor first, in the model's order
                 * (an empty block): the merged manifest, and so an export,
                 * lists them in the order a single rank's has */
        int64_t sh[LLMT_MAX_DIMS], zero[LLMT_MAX_DIMS] = {0};
        memcpy(sh, pv->shape, sizeof sh);
        sh[0] = 0;
        llmt_tensor view;
        llmt_tensor_init(&view, sizeof view, LLMT_DTYPE_FP32, pv->ndim, sh, pv->data,
                         LLMT_DEVICE_CPU, 0);
        llmt_status s = llmt_ckpt_add_tensor(ck, key, &view, pv->shape, zero);
        if (s != LLMT_OK)
            return llmt__err_set(e, s, "trainer: ckpt: add %s: %s", key,
                                 llmt_ckpt_last_error(ck));
    }
    if (!local) {
        int64_t r2, n2;
        /* the host's whole m and v: ptr[w] is the parameter's element r2 */
        llmt__trainer_share(tr, i, &r2, &n2, ptr);
        glob = w == 0 ? (float *)pv->data : ptr[w] - r2;
    }
    int64_t s0 = 0;
    for (int j = 0; j < ns; j++) {
        int64_t segn = cols ? R * n[j] : n[j] * K;
        int64_t a = rel > s0 ? rel : s0, b = rel + cnt < s0 + segn ? rel + cnt : s0 + segn;
        if (a < b && (!save || own[j])) {
            int64_t shape[LLMT_MAX_DIMS];
            for (int d = 0; d < pv->ndim; d++)
                shape[d] = pv->shape[d];
            shape[cols ? 1 : 0] = n[j];
            box bx[MAX_BOXES];
            int nb = flat_boxes(pv->ndim, shape, a - s0, b - s0, bx);
            for (int k = 0; k < nb; k++) {
                bx[k].off[cols ? 1 : 0] += lo[j];
                float *data;
                if (local)
                    data = local + (s0 + bx[k].flat - rel);
                else if (cols) /* its rows are K apart in the host's tensor */
                    data = glob + bx[k].off[0] * K + bx[k].off[1];
                else
                    data = glob + lo[j] * K + bx[k].flat;
                llmt_tensor view;
                llmt_tensor_init(&view, sizeof view, LLMT_DTYPE_FP32, pv->ndim, bx[k].shape,
                                 data, LLMT_DEVICE_CPU, 0);
                if (!local && cols)
                    view.strides[0] = K;
                llmt_status s = save
                                    ? llmt_ckpt_add_tensor(ck, key, &view, pv->shape, bx[k].off)
                                    : llmt_ckpt_read(ck, key, &view, bx[k].off);
                if (s != LLMT_OK)
                    return llmt__err_set(e, s, "trainer: ckpt: %s %s: %s",
                                         save ? "add" : "read", key, llmt_ckpt_last_error(ck));
            }
        }
        s0 += segn;
    }
    return LLMT_OK;
}

static llmt_status add_one(llmt_trainer *tr, llmt_ckpt *ck, int32_t i, int w,
                           const char *pn, const llmt_tensor *pv)
{
    llmt_err *e = llmt__trainer_err(tr);
    char key[256];
    snprintf(key, sizeof key, "%s%s", prefix[w], pn);
    box bx[MAX_BOXES];
    llmt_tensor views[MAX_BOXES];
    int nb;
    if (llmt__trainer_has_tp(tr) || llmt__trainer_has_pp(tr))
        return tp_blocks(tr, ck, i, w, key, pv, BLK_SAVE);
    if (!llmt__trainer_has_comm(tr)) { /* whole, as a single rank always did */
        float *ptr[3];
        int64_t rel, n;
        llmt__trainer_share(tr, i, &rel, &n, ptr);
        views[0] = *pv;
        views[0].data = ptr[w];
        memset(bx[0].off, 0, sizeof bx[0].off);
        nb = 1;
    } else {
        nb = share_blocks(tr, i, w, pv, bx, views);
    }
    for (int k = 0; k < nb; k++) {
        llmt_status s = llmt_ckpt_add_tensor(ck, key, &views[k], pv->shape,
                                             bx[k].off);
        if (s != LLMT_OK)
            return llmt__err_set(e, s, "trainer: ckpt: add %s: %s", key,
                                 llmt_ckpt_last_error(ck));
    }
    return LLMT_OK;
}

/* The model's config as key/values "model.*": loading does not need them
 * (every shape is checked against the tensors), but tools do — `llmtrain
 * ckpt export --format llmc` reads model.heads and model.vocab_size, and
 * `ckpt inspect` shows what the checkpoint is. */
static llmt_status add_model_kv(const llmt_model *model, llmt_ckpt *ck)
{
    llmt_model_config c;
    memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    llmt_status s = llmt_model_get_config(model, &c);
    if (s != LLMT_OK) return s;
    const struct { const char *k; int64_t v; } kv[] = {
        {"model.arch", c.arch},          {"model.vocab_size", c.vocab_size},
        {"model.padded_vocab_size", c.padded_vocab_size},
        {"model.max_seq_len", c.max_seq_len}, {"model.layers", c.layers},
        {"model.width", c.width},        {"model.heads", c.heads},
        {"model.kv_heads", c.kv_heads},  {"model.ffn_hidden", c.ffn_hidden},
        {"model.tie_embeddings", c.tie_embeddings},
    };
    char buf[32];
    for (size_t i = 0; s == LLMT_OK && i < sizeof kv / sizeof kv[0]; i++) {
        snprintf(buf, sizeof buf, "%lld", (long long)kv[i].v);
        s = llmt_ckpt_set_kv(ck, kv[i].k, buf);
    }
    return s;
}

LLMT_API llmt_status llmt_trainer_ckpt_add(llmt_trainer *tr, llmt_ckpt *ck)
{
    if (!tr) return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(llmt__trainer_err(tr), "trainer: ckpt_add", ck);
    llmt_model *model = llmt__trainer_model(tr);
    llmt_err *e = llmt__trainer_err(tr);
    /* a device trainer: the host copies are what gets saved; tensor
     * parallelism: the whole parameters on the host (collective over the
     * tensor and data parallel groups: ZeRO-3 gathers first); expert
     * parallelism: this rank's expert rows only, all it saves (gathering
     * the others' set the run's peak memory at its final save) */
    llmt_status hs = llmt__trainer_has_tp(tr) ? llmt_trainer_sync_params(tr)
                                              : llmt__trainer_host_sync_own(tr);
    if (hs != LLMT_OK) return hs;
    /* context parallelism: the group's ranks hold the same state, as
     * replicas do; its first rank saves it, once */
    int32_t n = 0;
    if (llmt__trainer_cp_rank(tr) == 0)
        llmt_model_param_count(model, &n, NULL);
    for (int32_t i = 0; i < n; i++) {
        const char *pn = NULL;
        llmt_tensor pv;
        memset(&pv, 0, sizeof pv);
        llmt_status s = llmt_model_param(model, i, &pn, &pv);
        if (s != LLMT_OK)
            return llmt__err_set(e, s, "trainer: ckpt: parameter %d: %s",
                                 (int)i, llmt_model_last_error(model));
        for (int w = 0; w < 3; w++)
            if ((s = add_one(tr, ck, i, w, pn, &pv)) != LLMT_OK) return s;
    }
    int64_t step = 0;
    llmt_trainer_get_step(tr, &step);
    char buf[64];
    snprintf(buf, sizeof buf, "%lld", (long long)step);
    llmt_status s = fp8_add(tr, ck);
    if (s != LLMT_OK) return s;
    s = llmt_ckpt_set_kv(ck, "trainer.step", buf);
    if (s == LLMT_OK) s = add_model_kv(model, ck);
    if (s == LLMT_OK) {
        char sched[256];
        schedule_text(llmt__trainer_opts(tr), sched, sizeof sched);
        s = llmt_ckpt_set_kv(ck, "trainer.schedule", sched);
    }
    if (s != LLMT_OK)
        return llmt__err_set(e, s, "trainer: ckpt: %s", llmt_ckpt_last_error(ck));
    return LLMT_OK;
}

/* The saved tensor must be fp32 with the parameter's shape. */
static llmt_status check_shape(llmt_trainer *tr, llmt_ckpt *ck,
                               const char *key, const llmt_tensor *v)
{
    llmt_err *e = llmt__trainer_err(tr);
    llmt_dtype dt;
    int32_t nd = 0;
    int64_t shape[LLMT_MAX_DIMS] = {0};
    llmt_status s = llmt_ckpt_tensor_info(ck, key, &dt, &nd, shape, NULL);
    if (s != LLMT_OK)
        return llmt__err_set(e, s, "trainer: ckpt: tensor %s missing: %s", key,
                             llmt_ckpt_last_error(ck));
    int same = dt == LLMT_DTYPE_FP32 && nd == v->ndim;
    for (int d = 0; same && d < nd; d++) same = shape[d] == v->shape[d];
    if (!same)
        return llmt__err_set(e, LLMT_ERR_INVALID_ARGUMENT,
                             "trainer: ckpt: %s is %s with %d dims [%lld, "
                             "%lld], the model has fp32 [%lld, %lld]",
                             key, llmt_dtype_name(dt), (int)nd,
                             (long long)shape[0],
                             (long long)(nd > 1 ? shape[1] : 0),
                             (long long)v->shape[0],
                             (long long)(v->ndim > 1 ? v->shape[1] : 0));
    return LLMT_OK;
}

/* Parameters whole (param_shares, ZeRO-3: this rank's share, the rest
 * gathered from the owners after the restore); m and v whole unless
 * sharded, then this rank's blocks only. A pipeline stage: only what it
 * holds (tp_blocks). */
static llmt_status read_one(llmt_trainer *tr, llmt_ckpt *ck, int32_t i, int w, const char *key,
                            const llmt_tensor *pv, int param_shares)
{
    llmt_err *e = llmt__trainer_err(tr);
    float *ptr[3];
    int64_t rel, n;
    int sharded = llmt__trainer_share(tr, i, &rel, &n, ptr);
    box bx[MAX_BOXES];
    llmt_tensor views[MAX_BOXES];
    int nb;
    if (llmt__trainer_has_pp(tr)) {
        return tp_blocks(tr, ck, i, w, key, pv,
                         w > 0 && sharded ? BLK_READ_SHARE : BLK_READ_ALL);
    } else if (w == 0 && param_shares) { /* ZeRO-3: the share */
        nb = share_blocks(tr, i, 0, pv, bx, views);
    } else if (w > 0 && sharded && llmt__trainer_has_tp(tr)) {
        return tp_blocks(tr, ck, i, w, key, pv, BLK_READ_SHARE);
    } else if (w > 0 && sharded) {
        nb = share_blocks(tr, i, w, pv, bx, views);
    } else {
        views[0] = *pv; /* the whole tensor: the share starts at rel */
        views[0].data = w == 0 ? pv->data : (float *)ptr[w] - rel;
        memset(bx[0].off, 0, sizeof bx[0].off);
        nb = 1;
    }
    for (int k = 0; k < nb; k++) {
        llmt_status s = llmt_ckpt_read(ck, key, &views[k], bx[k].off);
        if (s != LLMT_OK)
            return llmt__err_set(e, s, "trainer: ckpt: read %s: %s", key,
                                 llmt_ckpt_last_error(ck));
    }
    return LLMT_OK;
}

/* Every shape checked, then every parameter and moment read (this
 * rank's blocks; shares: llmt__trainer_params_shared). */
static llmt_status read_params(llmt_trainer *tr, llmt_ckpt *ck, int shares)
{
    llmt_model *model = llmt__trainer_model(tr);
    llmt_err *e = llmt__trainer_err(tr);
    int32_t n = 0;
    llmt_model_param_count(model, &n, NULL);
    /* check every shape before touching anything */
    for (int pass = 0; pass < 2; pass++)
        for (int32_t i = 0; i < n; i++) {
            const char *pn = NULL;
            llmt_tensor pv;
            memset(&pv, 0, sizeof pv);
            llmt_status s = llmt_model_param(model, i, &pn, &pv);
            if (s != LLMT_OK)
                return llmt__err_set(e, s, "trainer: ckpt: parameter %d",
                                     (int)i);
            for (int w = 0; w < 3; w++) {
                char key[256];
                snprintf(key, sizeof key, "%s%s", prefix[w], pn);
                s = pass == 0 ? check_shape(tr, ck, key, &pv)
                              : read_one(tr, ck, i, w, key, &pv, shares);
                if (s != LLMT_OK) return s;
            }
        }
    return LLMT_OK;
}

llmt_status llmt__trainer_ckpt_plan(llmt_trainer *tr, llmt_ckpt *ck)
{
    llmt_status s = read_params(tr, ck, llmt__trainer_params_shared(tr));
    return s == LLMT_OK ? fp8_read(tr, ck, 0) : s;
}

LLMT_API llmt_status llmt_trainer_ckpt_read(llmt_trainer *tr, llmt_ckpt *ck)
{
    if (!tr)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(llmt__trainer_err(tr), "trainer: ckpt_read", ck);
    llmt_err *e = llmt__trainer_err(tr);
    char buf[64];
    llmt_status s = llmt_ckpt_get_kv(ck, "trainer.step", buf, sizeof buf, NULL);
    if (s != LLMT_OK)
        return llmt__err_set(e, s, "trainer: ckpt: no trainer.step: %s",
                             llmt_ckpt_last_error(ck));
    char *end = NULL;
    long long step = strtoll(buf, &end, 10);
    if (!end || *end || step < 0)
        return llmt__err_set(e, LLMT_ERR_FORMAT,
                             "trainer: ckpt: trainer.step '%s' is not a step", buf);
    /* a device trainer: host copies current before they are overwritten,
     * then uploaded whole */
    if ((s = llmt__trainer_host_sync(tr)) != LLMT_OK)
        return s;
    /* ZeRO-3: only the shares are read; the rest is gathered from their
     * owners before its next use. A device trainer uploads them. */
    const int shares = llmt__trainer_params_shared(tr);
    if ((s = read_params(tr, ck, shares)) != LLMT_OK)
        return s;
    if ((s = llmt__trainer_params_written(tr, shares)) != LLMT_OK)
        return s;
    if ((s = fp8_read(tr, ck, 1)) != LLMT_OK)
        return s;
    char saved[256], now[256];
    schedule_text(llmt__trainer_opts(tr), now, sizeof now);
    if (llmt_ckpt_get_kv(ck, "trainer.schedule", saved, sizeof saved, NULL) == LLMT_OK &&
        !schedule_same(saved, now))
        llmt__log(llmt__trainer_ctx(tr), LLMT_LOG_WARN, "train",
                  "the checkpoint was trained with the learning-rate schedule "
                  "'%s', this trainer has '%s': the run continues, but not as "
                  "the saved one would have", saved, now);
    return llmt_trainer_set_step(tr, (int64_t)step);
}

/* The checkpoint handle and saving: describe, snapshot into the reused host
 * buffer, persist on the writer thread, commit. doc/checkpoint-format.md
 * explains the commit protocol this file implements. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <xxhash.h>

#include "ckpt_internal.h"

#define MAX_PATH 4096

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

LLMT_API llmt_status llmt_ckpt_opts_init(llmt_ckpt_opts *opts, size_t size)
{
    llmt_ckpt_opts d = {0};
    d.rank = 0;
    d.world_size = 1;
    d.direct_io = 1;
    d.verify = LLMT_CKPT_VERIFY_READ;
    d.keep_last = 3;
    return llmt__opts_init(opts, size, offsetof(llmt_ckpt_opts, rank), &d, sizeof d,
                           "ckpt opts");
}

LLMT_API const char *llmt_ckpt_last_error(const llmt_ckpt *ck)
{
    return ck ? ck->err.msg : "ckpt: NULL handle";
}

static void *writer_main(void *arg);

LLMT_API llmt_status llmt_ckpt_create(llmt_context *ctx, const char *root,
                                      const llmt_ckpt_opts *opts,
                                      llmt_ckpt **out)
{
    llmt_err *ce = ctx ? &ctx->err : NULL;
    LLMT__NONNULL(ce, "ckpt: create", out);
    *out = NULL;
    if (!root)
        return llmt__err_set(ce, LLMT_ERR_NULL_POINTER, "ckpt: create: root is NULL");
    llmt_ckpt_opts o;
    llmt_ckpt_opts_init(&o, sizeof o);
    if (opts) {
        llmt_status s = llmt__opts_copy(ce, "ckpt opts", &o, sizeof o, opts);
        if (s != LLMT_OK)
            return s;
    }
    if (o.world_size < 1 || o.world_size > CK_MAX_RANKS || o.rank < 0 ||
        o.rank >= o.world_size)
        return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: rank %d / world_size %d out of range",
                             (int)o.rank, (int)o.world_size);
    if (o.verify < LLMT_CKPT_VERIFY_NONE || o.verify > LLMT_CKPT_VERIFY_FULL ||
        o.keep_last < 0 || o.keep_every < 0 || o.durable_keep_last < 0 ||
        o.durable_keep_every < 0)
        return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: verify or retention option out of range");
    /* the durable tier's retention with no durable tier would be ignored */
    if (!o.durable_dir && (o.durable_keep_last || o.durable_keep_every))
        return llmt__err_set(
            ce, LLMT_ERR_INVALID_ARGUMENT,
            "ckpt: %s %d is set but durable_dir is NULL: the durable "
            "retention takes effect only with a durable tier (set "
            "durable_dir, or leave it 0)",
            o.durable_keep_last ? "durable_keep_last" : "durable_keep_every",
            (int)(o.durable_keep_last ? o.durable_keep_last : o.durable_keep_every));
    if (o.direct_io != 0 && o.direct_io != 1)
        return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: direct_io %d is not 0 (buffered) or 1 (O_DIRECT)",
                             (int)o.direct_io);
    if (strlen(root) == 0 || strlen(root) > MAX_PATH - 64 ||
        (o.durable_dir && strlen(o.durable_dir) > MAX_PATH - 64))
        return llmt__err_set(ce, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: directory path empty or too long");
    if (llmt__ckpt_mkdirs(root))
        return llmt__err_set(ce, LLMT_ERR_IO, "ckpt: cannot create %s: %s", root,
                             strerror(errno));
    llmt_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck)
        return llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
    ck->ctx = ctx;
    ck->opts = o;
    ck->root = strdup(root);
    ck->durable = o.durable_dir ? strdup(o.durable_dir) : NULL;
    ck->opts.durable_dir = NULL;
    ck->last_step = -1;
    ck->step = -1;
    if (!ck->root || (o.durable_dir && !ck->durable)) {
        llmt_ckpt_destroy(ck);
        return llmt__err_set(ce, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
    }
    if (ck->durable && llmt__ckpt_mkdirs(ck->durable)) {
        llmt_status s = llmt__err_set(ce, LLMT_ERR_IO, "ckpt: cannot create %s: %s",
                                      ck->durable, strerror(errno));
        llmt_ckpt_destroy(ck);
        return s;
    }
    pthread_mutex_init(&ck->mu, NULL);
    pthread_cond_init(&ck->cv, NULL);
    if (pthread_create(&ck->thread, NULL, writer_main, ck)) {
        pthread_mutex_destroy(&ck->mu);
        pthread_cond_destroy(&ck->cv);
        llmt_ckpt_destroy(ck);
        return llmt__err_set(ce, LLMT_ERR_INTERNAL, "ckpt: cannot start writer thread");
    }
    ck->thread_started = 1;
    *out = ck;
    return LLMT_OK;
}

static void clear_desc(llmt_ckpt *ck)
{
    for (size_t i = 0; i < ck->nitems; i++)
        free(ck->items[i].name);
    ck->nitems = 0;
    for (size_t i = 0; i < ck->nkv; i++) {
        free(ck->kv[i].key);
        free(ck->kv[i].val);
    }
    ck->nkv = 0;
    free(ck->plan);
    ck->plan = NULL;
    ck->begun = 0;
}

llmt_status llmt__ckpt_set_node_local(llmt_ckpt *ck, int on)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    if (on && !ck->durable)
        return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: a node-local root commits its steps in the durable tier, "
                             "and this handle has none (llmt_ckpt_opts.durable_dir)");
    ck->node_local = on != 0;
    return LLMT_OK;
}

void llmt__ckpt_set_attempt(llmt_ckpt *ck, uint64_t attempt)
{
    if (ck)
        ck->attempt = attempt;
}

LLMT_API void llmt_ckpt_destroy(llmt_ckpt *ck)
{
    if (!ck)
        return;
    if (ck->thread_started) {
        pthread_mutex_lock(&ck->mu);
        while (ck->pending)
            pthread_cond_wait(&ck->cv, &ck->mu);
        ck->quit = 1;
        pthread_cond_broadcast(&ck->cv);
        pthread_mutex_unlock(&ck->mu);
        pthread_join(ck->thread, NULL);
        pthread_mutex_destroy(&ck->mu);
        pthread_cond_destroy(&ck->cv);
    }
    clear_desc(ck);
    free(ck->items);
    free(ck->kv);
    llmt__ckpt_manifest_free(&ck->job);
    llmt__ckpt_close_open(ck);
    llmt__free(ck->ctx, ck->buf, ck->bufcap);
    free(ck->root);
    free(ck->durable);
    free(ck->peer_root);
    free(ck->peer_keys);
    free(ck->peer_succ);
    free(ck);
}

LLMT_API llmt_status llmt_ckpt_begin(llmt_ckpt *ck, int64_t step)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    if (step < 0 || step >= (INT64_C(1) << 40))
        return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: step %" PRId64 " out of range [0, 2^40)", step);
    clear_desc(ck);
    ck->begun = 1;
    ck->step = step;
    return LLMT_OK;
}

/* A rank may add several blocks of one tensor (a ZeRO share that crosses
 * rows is several boxes): same dtype, rank and global shape, and no two
 * of them may overlap (a rank never holds a replica of itself). */
static llmt_status check_block(llmt_ckpt *ck, const char *name, const ck_item *it)
{
    int nd = it->view.ndim;
    for (size_t i = 0; i < ck->nitems; i++) {
        const ck_item *o = &ck->items[i];
        if (strcmp(o->name, name))
            continue;
        if (o->view.dtype != it->view.dtype || o->view.ndim != nd ||
            memcmp(o->gshape, it->gshape, (size_t)nd * sizeof *o->gshape))
            return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "ckpt: tensor '%s' added again with another dtype, "
                                 "rank or global shape", name);
        int overlap = 1, empty = 0;
        for (int d = 0; d < nd; d++) {
            int64_t a0 = o->goff[d], a1 = a0 + o->view.shape[d];
            int64_t b0 = it->goff[d], b1 = b0 + it->view.shape[d];
            if (a1 <= b0 || b1 <= a0)
                overlap = 0;
            if (a1 == a0 || b1 == b0)
                empty = 1;
        }
        if (overlap && !empty)
            return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "ckpt: tensor '%s' added twice: this block overlaps "
                                 "one this rank added before", name);
    }
    return LLMT_OK;
}

LLMT_API llmt_status llmt_ckpt_add_tensor(llmt_ckpt *ck, const char *name,
                                          const llmt_tensor *view,
                                          const int64_t *global_shape,
                                          const int64_t *global_offsets)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&ck->err, "ckpt: add_tensor", name);
    LLMT__NONNULL(&ck->err, "ckpt: add_tensor", view);
    if (!ck->begun)
        return llmt__err_set(&ck->err, LLMT_ERR_STATE,
                             "ckpt: add_tensor before llmt_ckpt_begin");
    if (!llmt__ckpt_name_ok(name))
        return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: tensor name '%.64s' must be 1..255 printable "
                             "characters without '\"' or '\\'", name);
    llmt_status s = llmt_tensor_validate(view);
    if (s != LLMT_OK)
        return llmt__err_set(&ck->err, s, "ckpt: tensor '%s': invalid view", name);
    if (view->device == LLMT_DEVICE_CUDA)
        return llmt__err_set(&ck->err, LLMT_ERR_UNSUPPORTED,
                             "ckpt: tensor '%s': device memory must be copied to host "
                             "by the caller in this build", name);
    ck_item it;
    memset(&it, 0, sizeof it);
    it.view = *view;
    it.view.struct_size = sizeof it.view;
    for (int d = 0; d < view->ndim; d++) {
        it.gshape[d] = global_shape ? global_shape[d] : view->shape[d];
        it.goff[d] = global_offsets ? global_offsets[d] : 0;
        if (it.gshape[d] < 0 || it.goff[d] < 0 || it.gshape[d] > (int64_t)CK_MAX_BYTES ||
            it.goff[d] > it.gshape[d] || view->shape[d] > it.gshape[d] - it.goff[d])
            return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "ckpt: tensor '%s' dim %d: block [%" PRId64 ", +%" PRId64
                                 ") does not fit global size %" PRId64,
                                 name, d, it.goff[d], view->shape[d], it.gshape[d]);
    }
    if ((s = check_block(ck, name, &it)) != LLMT_OK)
        return s;
    if (ck->nitems == ck->icap) {
        size_t nc = ck->icap ? ck->icap * 2 : 16;
        ck_item *n = realloc(ck->items, nc * sizeof *n);
        if (!n)
            return llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
        ck->items = n;
        ck->icap = nc;
    }
    it.name = strdup(name);
    if (!it.name)
        return llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
    ck->items[ck->nitems++] = it;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_ckpt_set_kv(llmt_ckpt *ck, const char *key,
                                      const char *value)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&ck->err, "ckpt: set_kv", key);
    LLMT__NONNULL(&ck->err, "ckpt: set_kv", value);
    if (!ck->begun)
        return llmt__err_set(&ck->err, LLMT_ERR_STATE, "ckpt: set_kv before llmt_ckpt_begin");
    if (!llmt__ckpt_name_ok(key))
        return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: key '%.64s' must be 1..255 printable characters", key);
    if (strlen(value) > (16u << 20))
        return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: value of '%s' exceeds 16 MiB; save it as a tensor", key);
    char *v = strdup(value);
    if (!v)
        return llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
    for (size_t i = 0; i < ck->nkv; i++)
        if (!strcmp(ck->kv[i].key, key)) {
            free(ck->kv[i].val);
            ck->kv[i].val = v;
            return LLMT_OK;
        }
    if (ck->nkv == ck->kvcap) {
        size_t nc = ck->kvcap ? ck->kvcap * 2 : 8;
        ck_kv *n = realloc(ck->kv, nc * sizeof *n);
        if (!n) {
            free(v);
            return llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
        }
        ck->kv = n;
        ck->kvcap = nc;
    }
    ck->kv[ck->nkv].key = strdup(key);
    ck->kv[ck->nkv].val = v;
    ck->kv[ck->nkv].rank = ck->opts.rank;
    if (!ck->kv[ck->nkv].key) {
        free(v);
        return llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
    }
    ck->nkv++;
    return LLMT_OK;
}

LLMT_API llmt_status llmt_ckpt_set_plan_json(llmt_ckpt *ck, const char *json)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&ck->err, "ckpt: set_plan_json", json);
    if (!ck->begun)
        return llmt__err_set(&ck->err, LLMT_ERR_STATE, "ckpt: set_plan_json before llmt_ckpt_begin");
    /* Parsed here, not only when the manifest is written: text that is not
     * JSON was kept and then saved as "plan": null, the plan lost without
     * a word. Nothing may follow the object (cJSON_Parse alone ignores it). */
    const char *end = NULL;
    cJSON *obj = cJSON_ParseWithOpts(json, &end, 1);
    int is_obj = cJSON_IsObject(obj);
    cJSON_Delete(obj);
    if (obj && !is_obj)
        return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: set_plan_json: the plan must be a JSON object");
    if (!obj) /* `end` is where the parse failed */
        return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: set_plan_json: the plan is not JSON (error at byte %zu)",
                             end && end >= json ? (size_t)(end - json) : (size_t)0);
    char *c = strdup(json);
    if (!c)
        return llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
    free(ck->plan);
    ck->plan = c;
    return LLMT_OK;
}

/* Gather a strided view into contiguous bytes. */
static void gather(uint8_t *dst, const llmt_tensor *v)
{
    size_t es = llmt_dtype_size(v->dtype);
    int nd = v->ndim;
    int64_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= v->shape[d];
    if (n == 0)
        return;
    int contig = 1;
    for (int d = nd - 1, expect = 1; d >= 0; d--) {
        if (v->shape[d] != 1 && v->strides[d] != expect)
            contig = 0;
        expect *= (int)v->shape[d];
    }
    if (nd == 0 || contig) {
        memcpy(dst, v->data, (size_t)n * es);
        return;
    }
    int64_t idx[LLMT_MAX_DIMS] = {0};
    int64_t inner = v->shape[nd - 1];
    int inner_contig = v->strides[nd - 1] == 1;
    const uint8_t *src = v->data;
    for (;;) {
        int64_t off = 0;
        for (int d = 0; d < nd - 1; d++)
            off += idx[d] * v->strides[d];
        if (inner_contig) {
            memcpy(dst, src + off * (int64_t)es, (size_t)(inner * (int64_t)es));
            dst += inner * (int64_t)es;
        } else {
            for (int64_t i = 0; i < inner; i++, dst += es)
                memcpy(dst, src + (off + i * v->strides[nd - 1]) * (int64_t)es, es);
        }
        int d = nd - 2;
        for (; d >= 0; d--) {
            if (++idx[d] < v->shape[d])
                break;
            idx[d] = 0;
        }
        if (d < 0)
            break;
    }
}

static void step_dir(char *buf, size_t n, const char *root, int64_t step)
{
    snprintf(buf, n, "%s/step-%012" PRId64, root, step);
}

/* Build the part manifest (without hashes) and copy the views into the
 * host buffer. Runs on the caller's thread: this is the training stall. */
static llmt_status snapshot(llmt_ckpt *ck)
{
    ck_manifest *m = &ck->job;
    ck->have_snapshot = 0;
    llmt__ckpt_manifest_free(m);
    m->is_part = 1;
    m->step = ck->step;
    m->world_size = ck->opts.world_size;
    m->rank = ck->opts.rank;
    m->attempt = ck->attempt;
    uint64_t off = CK_HEADER_BYTES;
    m->tensors = calloc(ck->nitems ? ck->nitems : 1, sizeof *m->tensors);
    m->files = calloc(1, sizeof *m->files);
    if (!m->tensors || !m->files)
        goto oom;
    m->tcap = ck->nitems;
    m->filecap = 1;
    for (size_t i = 0; i < ck->nitems; i++) {
        ck_item *it = &ck->items[i];
        ck_tensor *t = llmt__ckpt_find_tensor(m, it->name);
        if (!t) {
            t = &m->tensors[m->ntensors++];
            t->name = strdup(it->name);
            if (!t->name)
                goto oom;
            t->dtype = it->view.dtype;
            t->ndim = it->view.ndim;
            memcpy(t->gshape, it->gshape, sizeof t->gshape);
        }
        if (t->nchunks == t->cap) { /* usually one block per tensor */
            size_t nc = t->cap ? t->cap * 2 : 1;
            ck_chunk *nk = realloc(t->chunks, nc * sizeof *nk);
            if (!nk)
                goto oom;
            t->chunks = nk;
            t->cap = nc;
        }
        ck_chunk *k = &t->chunks[t->nchunks++];
        memset(k, 0, sizeof *k);
        it->snap_off = off;
        k->rank = ck->opts.rank;
        k->offset = off;
        int64_t nb;
        llmt_tensor_nbytes(&it->view, &nb);
        k->length = (uint64_t)nb;
        memcpy(k->goff, it->goff, sizeof k->goff);
        for (int d = 0; d < t->ndim; d++)
            k->lshape[d] = it->view.shape[d];
        k->block = CK_BLOCK_BYTES;
        k->nblocks = (k->length + k->block - 1) / k->block;
        if (k->nblocks && !(k->bxxh = calloc(k->nblocks, sizeof *k->bxxh)))
            goto oom;
        off = align_up(off + k->length, CK_ALIGN);
        if (off > CK_MAX_BYTES)
            return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                                 "ckpt: this rank's state exceeds 2^52 bytes");
    }
    for (size_t i = 0; i < ck->nkv; i++) {
        if (!(m->kv = realloc(m->kv, (i + 1) * sizeof *m->kv)))
            goto oom;
        m->kvcap = m->nkv = i + 1;
        m->kv[i].key = strdup(ck->kv[i].key);
        m->kv[i].val = strdup(ck->kv[i].val);
        m->kv[i].rank = ck->opts.rank;
        if (!m->kv[i].key || !m->kv[i].val)
            goto oom;
    }
    if (ck->plan && !(m->plan = strdup(ck->plan)))
        goto oom;
    m->files[0].rank = ck->opts.rank;
    m->files[0].bytes = off;
    m->nfiles = 1;

    if (ck->opts.host_buffer_bytes && off > ck->opts.host_buffer_bytes)
        return llmt__err_set(&ck->err, LLMT_ERR_BUFFER_TOO_SMALL,
                             "ckpt: this rank's state needs %" PRIu64
                             " bytes of snapshot buffer, host_buffer_bytes is %" PRIu64,
                             off, ck->opts.host_buffer_bytes);
    if (off > ck->bufcap) {
        /* Grow once to the size of a save; reused by every later save. */
        llmt__free(ck->ctx, ck->buf, ck->bufcap);
        ck->bufcap = 0;
        /* Large buffers: 2 MiB aligned and marked for transparent huge
         * pages (fewer TLB misses in the snapshot copy, which is the
         * training stall); a refusal of the hint changes nothing. */
        size_t align = off >= (UINT64_C(8) << 20) ? (size_t)2 << 20 : CK_ALIGN;
        ck->buf = llmt__alloc(ck->ctx, off, align);
        if (!ck->buf)
            return llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY,
                                 "ckpt: cannot allocate %" PRIu64 " bytes of snapshot buffer",
                                 off);
#ifdef MADV_HUGEPAGE
        if (align > CK_ALIGN)
            madvise(ck->buf, (size_t)off, MADV_HUGEPAGE);
#endif
        ck->bufcap = off;
    }
    memset(ck->buf, 0, CK_HEADER_BYTES);
    for (size_t i = 0; i < ck->nitems; i++) {
        const ck_item *it = &ck->items[i];
        int64_t nb = 0;
        llmt_tensor_nbytes(&it->view, &nb);
        gather(ck->buf + it->snap_off, &it->view);
        uint64_t end = it->snap_off + (uint64_t)nb, pad = align_up(end, CK_ALIGN);
        memset(ck->buf + end, 0, pad - end);
    }
    ck->job_bytes = off;
    ck->have_snapshot = 1;
    return LLMT_OK;
oom:
    return llmt__err_set(&ck->err, LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
}

static void put_u32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put_u64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }

/* -- the writer thread's part -- */

#define JOB_FAIL(st, ...) (snprintf(ck->job_err, sizeof ck->job_err, __VA_ARGS__), (st))

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Steps of root/step-* directories; committed_only: only those with a
 * manifest.json. malloc'ed, ascending. */
int64_t *llmt__ckpt_scan(const char *root, int committed_only, size_t *n)
{
    *n = 0;
    DIR *d = opendir(root);
    if (!d)
        return NULL;
    size_t cap = 16;
    int64_t *v = malloc(cap * sizeof *v);
    struct dirent *e;
    while (v && (e = readdir(d))) {
        long long s;
        int used = 0;
        if (strlen(e->d_name) != 17 || sscanf(e->d_name, "step-%12lld%n", &s, &used) != 1 ||
            used != 17 || s < 0)
            continue;
        if (committed_only) {
            char p[MAX_PATH];
            struct stat st;
            snprintf(p, sizeof p, "%s/%s/manifest.json", root, e->d_name);
            if (stat(p, &st) || !S_ISREG(st.st_mode))
                continue;
        }
        if (*n == cap) {
            int64_t *nv = realloc(v, cap * 2 * sizeof *v);
            if (!nv) {
                free(v);
                v = NULL;
                break;
            }
            v = nv;
            cap *= 2;
        }
        v[(*n)++] = s;
    }
    closedir(d);
    if (v)
        qsort(v, *n, sizeof *v, cmp_i64);
    return v;
}

/* Retention: keep the newest keep_last committed steps, multiples of
 * keep_every and `protect` (the newest verified step, or -1); drop partial
 * directories older than the newest commit. */
size_t llmt__ckpt_retain(llmt_context *ctx, const char *root, int keep_last,
                         int keep_every, int64_t protect)
{
    size_t nc = 0, na = 0, removed = 0;
    int64_t *com = llmt__ckpt_scan(root, 1, &nc);
    int64_t *all = llmt__ckpt_scan(root, 0, &na);
    if (!com || !all || nc == 0)
        goto out;
    int64_t newest = com[nc - 1];
    for (size_t i = 0; i < na; i++) {
        int64_t s = all[i];
        if (s >= newest || s == protect)
            continue;
        int committed = bsearch(&s, com, nc, sizeof *com, cmp_i64) != NULL;
        int keep = 0;
        if (committed) {
            size_t rank_from_newest = 0;
            for (size_t j = 0; j < nc; j++)
                if (com[j] > s)
                    rank_from_newest++;
            keep = keep_last == 0 || (int64_t)rank_from_newest < keep_last ||
                   (keep_every > 0 && s % keep_every == 0);
        }
        if (keep)
            continue;
        char p[MAX_PATH];
        snprintf(p, sizeof p, "%s/step-%012" PRId64, root, s);
        /* Uncommit first: drop the manifest so a half-removed directory is
         * never taken for a complete checkpoint. */
        char mf[MAX_PATH];
        snprintf(mf, sizeof mf, "%s/manifest.json", p);
        unlink(mf);
        llmt__ckpt_fsync_dir(p);
        if (llmt__ckpt_rmdir(p) == 0) {
            removed++;
            llmt__log(ctx, LLMT_LOG_DEBUG, "ckpt", "retention removed %s", p);
        } else
            llmt__log(ctx, LLMT_LOG_WARN, "ckpt", "retention could not remove %s: %s", p,
                      strerror(errno));
    }
    llmt__ckpt_fsync_dir(root);
out:
    free(com);
    free(all);
    return removed;
}

/* Point root/latest at `step` unless it already names a newer one. */
static llmt_status update_latest(const char *root, int64_t step, char *err, size_t errlen)
{
    char p[MAX_PATH], *cur = NULL;
    snprintf(p, sizeof p, "%s/latest", root);
    if (llmt__ckpt_read_small(p, 64, &cur, NULL, err, errlen) == LLMT_OK) {
        long long s;
        int newer = sscanf(cur, "step-%12lld", &s) == 1 && s > step;
        free(cur);
        if (newer)
            return LLMT_OK;
    }
    char text[64];
    int n = snprintf(text, sizeof text, "step-%012" PRId64 "\n", step);
    return llmt__ckpt_write_atomic(root, "latest", text, (size_t)n, err, errlen);
}

static int committed_in(const char *dir);

/* Whether dir's manifest.json holds exactly `text`. */
static int manifest_is(const char *dir, const char *text, size_t len)
{
    char p[MAX_PATH], *cur = NULL, e[256];
    size_t n = 0;
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    int same = llmt__ckpt_read_small(p, (size_t)1 << 30, &cur, &n, e, sizeof e) == LLMT_OK &&
               n == len && memcmp(cur, text, len) == 0;
    free(cur);
    return same;
}

/* Copy a committed checkpoint to the durable directory, manifest last.
 * Every file is copied under a temporary name and renamed into place: no
 * file a committed step's manifest names is ever opened for writing (two
 * ranks that both committed the step copy it at once; the second once
 * truncated a data file the first's manifest.json already covered). A
 * step the tier holds committed with this very manifest is this commit's
 * copy already; one committed otherwise (another attempt at the step, an
 * abandoned timeline's) is uncommitted first, then replaced. */
static llmt_status copy_to_durable(llmt_ckpt *ck, const char *src, int64_t step,
                                   int32_t world, const char *manifest, size_t mlen)
{
    char dst[MAX_PATH], a[MAX_PATH], b[MAX_PATH], t[MAX_PATH], name[32];
    step_dir(dst, sizeof dst, ck->durable, step);
    if (llmt__ckpt_mkdirs(dst))
        return JOB_FAIL(LLMT_ERR_IO, "ckpt: durable tier: mkdir %s: %s", dst, strerror(errno));
    int copied = manifest_is(dst, manifest, mlen);
    if (!copied && committed_in(dst)) {
        snprintf(a, sizeof a, "%s/manifest.json", dst);
        if (unlink(a) || llmt__ckpt_fsync_dir(dst))
            return JOB_FAIL(LLMT_ERR_IO, "ckpt: durable tier: uncommit %s: %s", a,
                            strerror(errno));
        llmt__log(ck->ctx, LLMT_LOG_WARN, "ckpt",
                  "durable tier: step %" PRId64 " in %s was committed by another attempt at "
                  "it: replaced by this commit's",
                  step, dst);
    }
    for (int32_t r = 0; r < world && !copied; r++) {
        for (int j = 0; j < 2; j++) {
            snprintf(name, sizeof name, "rank-%05d.%s", (int)r, j ? "json" : "bin");
            snprintf(a, sizeof a, "%s/%s", src, name);
            snprintf(b, sizeof b, "%s/%s", dst, name);
            llmt__ckpt_tmp_name(t, sizeof t, dst, name);
            llmt_status s = llmt__ckpt_copy_file(a, t, ck->job_err, sizeof ck->job_err);
            if (s == LLMT_OK && rename(t, b))
                s = JOB_FAIL(LLMT_ERR_IO, "ckpt: durable tier: rename %s: %s", b,
                             strerror(errno));
            if (s != LLMT_OK) {
                unlink(t);
                return s;
            }
        }
    }
    if (llmt__ckpt_fsync_dir(dst))
        return JOB_FAIL(LLMT_ERR_IO, "ckpt: durable tier: fsync %s: %s", dst, strerror(errno));
    llmt_status s = copied ? LLMT_OK
                           : llmt__ckpt_write_atomic(dst, "manifest.json", manifest, mlen,
                                                     ck->job_err, sizeof ck->job_err);
    if (s == LLMT_OK)
        s = update_latest(ck->durable, step, ck->job_err, sizeof ck->job_err);
    if (s == LLMT_OK)
        llmt__ckpt_retain(ck->ctx, ck->durable, ck->opts.durable_keep_last,
                          ck->opts.durable_keep_every, -1);
    return s;
}

/* Whether part manifest `p` is still the file `was` (a stat taken before
 * it was read): not removed, set aside or replaced since. */
static int same_file(const char *p, const struct stat *was)
{
    struct stat now;
    return stat(p, &now) == 0 && now.st_ino == was->st_ino && now.st_dev == was->st_dev &&
           now.st_size == was->st_size && now.st_mtim.tv_sec == was->st_mtim.tv_sec &&
           now.st_mtim.tv_nsec == was->st_mtim.tv_nsec;
}

/* The commit point: `json` (merged from the part manifests whose stats are
 * `ids`) renamed to dir/manifest.json, unless a part manifest changed
 * since it was read (its rank's writer set it aside to replace the part,
 * save.c part_begin: the data file under it is about to change). *done:
 * committed; 0 with LLMT_OK: left to the rank replacing its part. The last
 * look is the step before the rename, and a writer sets its part aside
 * before its own last look at manifest.json, so a commit that read an old
 * part could only land with that part's data renamed over if this thread
 * stood still between the two for the whole write of the other rank's
 * data file; its hashes in manifest.json would then fail verification. */
static llmt_status commit_manifest(llmt_ckpt *ck, const char *dir, const char *json, size_t jl,
                                   const struct stat *ids, int *done)
{
    char tmp[MAX_PATH], dst[MAX_PATH], p[MAX_PATH];
    *done = 0;
    llmt_status st = llmt__ckpt_write_tmp(dir, "manifest.json", json, jl, tmp, sizeof tmp,
                                          ck->job_err, sizeof ck->job_err);
    if (st != LLMT_OK)
        return st;
    for (int32_t r = 0; r < ck->opts.world_size; r++) {
        snprintf(p, sizeof p, "%s/rank-%05d.json", dir, (int)r);
        if (!same_file(p, &ids[r])) {
            llmt__log(ck->ctx, LLMT_LOG_DEBUG, "ckpt",
                      "step %" PRId64 ": rank %d's part in %s changed while it was merged: "
                      "not committed (that rank commits it)",
                      ck->job.step, (int)r, dir);
            unlink(tmp);
            return LLMT_OK;
        }
    }
    snprintf(dst, sizeof dst, "%s/manifest.json", dir);
    if (rename(tmp, dst)) {
        st = JOB_FAIL(LLMT_ERR_IO, "ckpt: rename %s: %s", dst, strerror(errno));
        unlink(tmp);
        return st;
    }
    if (llmt__ckpt_fsync_dir(dir))
        return JOB_FAIL(LLMT_ERR_IO, "ckpt: fsync directory %s: %s", dir, strerror(errno));
    *done = 1;
    return LLMT_OK;
}

/* If every rank's part is in `dir`, merge them into manifest.json: in the
 * root (then copied to the durable tier), or with a node-local root in the
 * durable tier itself (in_durable). */
static llmt_status try_commit(llmt_ckpt *ck, const char *dir, int in_durable)
{
    const char *root = in_durable ? ck->durable : ck->root;
    int32_t w = ck->opts.world_size;
    ck_manifest *parts = calloc((size_t)w, sizeof *parts);
    ck_manifest **pp = calloc((size_t)w, sizeof *pp);
    struct stat *ids = calloc((size_t)w, sizeof *ids); /* the part manifests read */
    llmt_status st = LLMT_OK;
    int32_t have = 0;
    if (!parts || !pp || !ids) {
        st = JOB_FAIL(LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
        goto out;
    }
    for (int32_t r = 0; r < w; r++) {
        char p[MAX_PATH], *text = NULL;
        size_t len;
        snprintf(p, sizeof p, "%s/rank-%05d.json", dir, (int)r);
        char e[256];
        if (stat(p, &ids[r]) ||
            llmt__ckpt_read_small(p, (size_t)1 << 30, &text, &len, e, sizeof e) != LLMT_OK)
            goto out; /* not all parts yet: the last rank commits */
        char why[LLMT_ERR_MSG_MAX - 128];
        st = llmt__ckpt_manifest_parse(text, len, 1, &parts[r], why, sizeof why);
        free(text);
        if (st != LLMT_OK) { /* the message names the part it is about */
            st = JOB_FAIL(st, "ckpt: %.*s: %s", (int)(sizeof ck->job_err / 2), p, why);
            goto out;
        }
        have++;
        pp[r] = &parts[r];
        if (parts[r].rank != r || parts[r].step != ck->job.step) {
            st = JOB_FAIL(LLMT_ERR_FORMAT, "ckpt: part %s is not rank %d of step %" PRId64,
                          p, (int)r, ck->job.step);
            goto out;
        }
        /* an earlier attempt's part (its rank has not replaced it yet):
         * committing it would mix two attempts' data in one step; that
         * rank commits when it has written this attempt's */
        if (parts[r].attempt != ck->job.attempt) {
            llmt__log(ck->ctx, LLMT_LOG_DEBUG, "ckpt",
                      "step %" PRId64 ": rank %d's part in %s is of attempt %016" PRIx64
                      ", this save's %016" PRIx64 ": not committed until it is replaced",
                      ck->job.step, (int)r, dir, parts[r].attempt, ck->job.attempt);
            goto out;
        }
    }
    ck_manifest merged;
    st = llmt__ckpt_manifest_merge(pp, (size_t)w, &merged, ck->job_err, sizeof ck->job_err);
    if (st != LLMT_OK)
        goto out;
    char *json = llmt__ckpt_manifest_to_json(&merged);
    llmt__ckpt_manifest_free(&merged);
    if (!json) {
        st = JOB_FAIL(LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
        goto out;
    }
    size_t jl = strlen(json);
    int done = 0;
    st = commit_manifest(ck, dir, json, jl, ids, &done);
    if (st == LLMT_OK && !done) {
        free(json);
        goto out;
    }
    if (st == LLMT_OK)
        st = update_latest(root, ck->job.step, ck->job_err, sizeof ck->job_err);
    if (st == LLMT_OK) {
        llmt__log(ck->ctx, LLMT_LOG_INFO, "ckpt", "committed %s", dir);
        if (in_durable)
            llmt__ckpt_retain(ck->ctx, root, ck->opts.durable_keep_last,
                              ck->opts.durable_keep_every, -1);
        else
            llmt__ckpt_retain(ck->ctx, root, ck->opts.keep_last, ck->opts.keep_every, -1);
        if (ck->durable && !in_durable) {
            llmt_status ds = copy_to_durable(ck, dir, ck->job.step, w, json, jl);
            if (ds != LLMT_OK) /* the local commit stands; report the tier */
                llmt__log(ck->ctx, LLMT_LOG_WARN, "ckpt", "durable tier failed: %s",
                          ck->job_err);
        }
        if (ck->opts.tier_fn) {
            char dd[MAX_PATH];
            if (ck->durable && !in_durable)
                step_dir(dd, sizeof dd, ck->durable, ck->job.step);
            else
                snprintf(dd, sizeof dd, "%s", dir);
            llmt_status hs = ck->opts.tier_fn(ck->opts.tier_user, LLMT_CKPT_TIER_DURABLE,
                                              ck->job.step, dd);
            if (hs != LLMT_OK)
                llmt__log(ck->ctx, LLMT_LOG_WARN, "ckpt", "tier hook (durable) for step %"
                          PRId64 " returned %s", ck->job.step, llmt_status_string(hs));
        }
    }
    free(json);
out:
    if (parts)
        for (int32_t r = 0; r < w; r++)
            llmt__ckpt_manifest_free(&parts[r]);
    free(parts);
    free(pp);
    free(ids);
    (void)have;
    return st;
}

/* One pass over a chunk: the block hashes and the streamed whole-chunk hash. */
static void hash_chunk(const llmt_ckpt *ck, ck_chunk *k)
{
    const uint8_t *p = ck->buf + k->offset;
    XXH64_state_t *st = XXH64_createState();
    if (st)
        XXH64_reset(st, 0);
    for (uint64_t b = 0; b < k->nblocks; b++) {
        uint64_t o = b * k->block;
        uint64_t n = k->length - o < k->block ? k->length - o : k->block;
        k->bxxh[b] = XXH64(p + o, (size_t)n, 0);
        if (st)
            XXH64_update(st, p + o, (size_t)n);
    }
    k->xxh = st ? XXH64_digest(st) : XXH64(p, (size_t)k->length, 0);
    if (st)
        XXH64_freeState(st);
}

/* Hash every chunk and block of the snapshot into the job's manifest. */
void *llmt__ckpt_hash_job(void *arg)
{
    llmt_ckpt *ck = arg;
    ck_manifest *m = &ck->job;
    for (size_t i = 0; i < m->ntensors && !atomic_load(&ck->stop); i++)
        for (size_t c = 0; c < m->tensors[i].nchunks; c++)
            hash_chunk(ck, &m->tensors[i].chunks[c]);
    return NULL;
}

/* A node-local root's write buffer: its newest keep_last step directories
 * (all of them with keep_last 0) stay, older ones go. Every rank of the
 * node prunes the same root: one already removed by another is not an
 * error. */
static void prune_node_root(llmt_ckpt *ck)
{
    size_t n = 0;
    int64_t *all = llmt__ckpt_scan(ck->root, 0, &n);
    /* at least 2: a rank of the node may still write the previous step's
     * part (async saves) when another has written this one */
    int keep = ck->opts.keep_last > 0 && ck->opts.keep_last < 2 ? 2 : ck->opts.keep_last;
    for (size_t i = 0; all && keep > 0 && i + (size_t)keep < n; i++) {
        char p[MAX_PATH];
        snprintf(p, sizeof p, "%s/step-%012" PRId64, ck->root, all[i]);
        if (llmt__ckpt_rmdir(p) == 0)
            llmt__log(ck->ctx, LLMT_LOG_DEBUG, "ckpt", "retention removed %s", p);
        else
            llmt__log(ck->ctx, LLMT_LOG_WARN, "ckpt", "retention could not remove %s: %s", p,
                      strerror(errno));
    }
    free(all);
}

/* -- cancelling (llmt_ckpt_cancel) -- */

static int stop_asked(llmt_ckpt *ck)
{
    return atomic_load(&ck->stop) != 0;
}

/* Has step directory `dir` been committed (manifest.json written)? */
static int committed_in(const char *dir)
{
    char p[MAX_PATH];
    struct stat st;
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* With several ranks, this rank's part manifest once written may have
 * been read by the rank committing the step, which reads every part
 * manifest and then writes manifest.json: no withdrawal after that point
 * could be sure the commit does not happen (a part withdrawn between the
 * two leaves a committed step without it, and a cancel that said OK on a
 * rank whose step others then load). A stop asked after it is not taken,
 * and a part written is not withdrawn (WITHDRAW_PUBLISHED). */
enum { WITHDRAWN, WITHDRAW_COMMITTED, WITHDRAW_PUBLISHED };

static int stop_now(llmt_ckpt *ck, int published)
{
    return stop_asked(ck) && !(published && ck->opts.world_size > 1);
}

/* Withdraw this rank's part of `step` from tier `root`: its part manifest
 * first (a step commits only when every rank's is there), then its data
 * file, then the directory when that leaves it empty. `shared`: other
 * ranks commit in this directory, and a part manifest there is not
 * withdrawn (above). */
static int withdraw_part(llmt_ckpt *ck, const char *root, int64_t step, int shared)
{
    char dir[MAX_PATH], json[MAX_PATH], bin[MAX_PATH];
    step_dir(dir, sizeof dir, root, step);
    int r = (int)ck->opts.rank;
    snprintf(json, sizeof json, "%s/rank-%05d.json", dir, r);
    snprintf(bin, sizeof bin, "%s/rank-%05d.bin", dir, r);
    if (committed_in(dir))
        return WITHDRAW_COMMITTED;
    if (shared && access(json, F_OK) == 0)
        return WITHDRAW_PUBLISHED;
    if (unlink(json) == 0)
        llmt__ckpt_fsync_dir(dir);
    unlink(bin);
    if (rmdir(dir) == 0)
        llmt__ckpt_fsync_dir(root);
    return WITHDRAWN;
}

/* The writer gives the job up at a cancel's request, before this rank's
 * part manifest is visible to another rank (stop_now): what it wrote of
 * this rank's part (in the root and, node-local, in the durable tier) is
 * withdrawn. LLMT_OK (the job stands) when the step turned out committed
 * meanwhile (one rank alone: by an earlier attempt). */
static llmt_status job_stop(llmt_ckpt *ck, int durable_written)
{
    int64_t step = ck->job.step;
    int shared = ck->opts.world_size > 1;
    if (durable_written && withdraw_part(ck, ck->durable, step, shared) != WITHDRAWN)
        return LLMT_OK;
    /* not yet copied: a part of this rank there is an earlier attempt's,
     * which commit_durable would have replaced; it must not commit in this
     * attempt's name */
    if (!durable_written && ck->node_local &&
        withdraw_part(ck, ck->durable, step, 0) != WITHDRAWN)
        return LLMT_OK;
    /* a node-local root is never committed in: all of the part goes */
    if (withdraw_part(ck, ck->root, step, shared && !ck->node_local) != WITHDRAWN)
        return LLMT_OK;
    ck->job_state = CK_JOB_STOPPED;
    if (ck->job_err[0]) /* the data file's write says where it stopped */
        return LLMT_ERR_ABORTED;
    return JOB_FAIL(LLMT_ERR_ABORTED, "ckpt: the save of step %" PRId64 " was cancelled", step);
}

/* The save's step directory `dir` turned out committed before this rank
 * wrote anything of it: another rank committed it with this rank's part of
 * an earlier attempt (a stale part carries no attempt identity the ranks
 * share, llmt__ckpt_set_attempt). It is left as it is. */
static llmt_status committed_meanwhile(llmt_ckpt *ck, const char *dir)
{
    return JOB_FAIL(LLMT_ERR_STATE,
                    "ckpt: step %" PRId64 " in %s was committed before rank %d wrote its part "
                    "of this save: another rank committed it with rank %d's part of an "
                    "earlier attempt at the step, which this save does not rewrite (the "
                    "step is that attempt's). Before saving a step again after a restart "
                    "or rollback, move the uncommitted newer steps aside on one rank "
                    "(llmt_ckpt_quarantine_newer) while no rank saves",
                    ck->job.step, dir, (int)ck->opts.rank, (int)ck->opts.rank);
}

/* -- this rank's part published in a step directory: never a committed
 * step's files opened for writing. The old part manifest is set aside
 * first (no rank commits it with new data), the new files are written
 * under temporary names, and renamed into place only after a last look
 * at the step's manifest: the data file, then the part manifest (a rank
 * that reads the new part manifest finds the new data). A commit another
 * rank makes meanwhile with this rank's old part (possible only without
 * attempt identities) gets that part back as it was, and its bytes stay
 * those its manifest hashed. -- */

typedef struct part_files {
    char bin[MAX_PATH], json[MAX_PATH];   /* the part's names in `dir` */
    char tbin[MAX_PATH], tjson[MAX_PATH]; /* the new files' temporary names */
    char aside[MAX_PATH];                 /* the old part manifest, set aside */
    int moved;                            /* an old part manifest was set aside */
} part_files;

/* The names of rank `rank`'s part in `dir`; the old part manifest set
 * aside (renamed, not removed: put back if the step turns out committed
 * with it, part_keep_old). */
static void part_begin(part_files *f, const char *dir, int rank)
{
    char name[32];
    snprintf(f->bin, sizeof f->bin, "%s/rank-%05d.bin", dir, rank);
    snprintf(f->json, sizeof f->json, "%s/rank-%05d.json", dir, rank);
    snprintf(name, sizeof name, "rank-%05d.bin", rank);
    llmt__ckpt_tmp_name(f->tbin, sizeof f->tbin, dir, name);
    snprintf(name, sizeof name, "rank-%05d.json.old", rank);
    llmt__ckpt_tmp_name(f->aside, sizeof f->aside, dir, name);
    f->tjson[0] = 0;
    f->moved = rename(f->json, f->aside) == 0;
    if (f->moved)
        llmt__ckpt_fsync_dir(dir);
}

/* The save gave up before publishing: its temporary files go, and the old
 * part manifest set aside goes too, unless the step turned out committed
 * with it meanwhile (then it is put back: the commit's, as it was). */
static void part_abandon(part_files *f, const char *dir)
{
    unlink(f->tbin);
    if (f->tjson[0])
        unlink(f->tjson);
    if (f->moved && committed_in(dir) && rename(f->aside, f->json) == 0)
        llmt__ckpt_fsync_dir(dir);
    else if (f->moved)
        unlink(f->aside);
    f->moved = 0;
}

/* The new part's files renamed into place, unless the step was committed
 * meanwhile (then left as it is: LLMT_ERR_STATE). */
static llmt_status part_publish(llmt_ckpt *ck, part_files *f, const char *dir)
{
    if (committed_in(dir)) { /* the last look before a file of the step changes */
        part_abandon(f, dir);
        return committed_meanwhile(ck, dir);
    }
    if (rename(f->tbin, f->bin) || rename(f->tjson, f->json)) {
        llmt_status st =
            JOB_FAIL(LLMT_ERR_IO, "ckpt: rename into %s: %s", dir, strerror(errno));
        part_abandon(f, dir);
        return st;
    }
    if (f->moved)
        unlink(f->aside);
    f->moved = 0;
    if (llmt__ckpt_fsync_dir(dir))
        return JOB_FAIL(LLMT_ERR_IO, "ckpt: fsync directory %s: %s", dir, strerror(errno));
    return LLMT_OK;
}

/* With a node-local root: this rank's part, just written to `dir`, copied
 * into the durable tier's step directory (the data first; the part
 * manifest, which try_commit looks for, written atomically last), and the
 * step committed there by whichever rank finds every part. */
static llmt_status commit_durable(llmt_ckpt *ck, const char *dir)
{
    const ck_manifest *m = &ck->job;
    char dst[MAX_PATH], a[MAX_PATH], name[32];
    step_dir(dst, sizeof dst, ck->durable, m->step);
    if (llmt__ckpt_mkdirs(dst))
        return JOB_FAIL(LLMT_ERR_IO, "ckpt: durable tier: mkdir %s: %s", dst, strerror(errno));
    if (committed_in(dst)) /* as in run_job: never rewritten */
        return committed_meanwhile(ck, dst);
    part_files f;
    part_begin(&f, dst, (int)m->rank); /* an earlier attempt's must not commit with new data */
    snprintf(a, sizeof a, "%s/rank-%05d.bin", dir, (int)m->rank);
    llmt_status st = llmt__ckpt_copy_file(a, f.tbin, ck->job_err, sizeof ck->job_err);
    char *text = NULL;
    size_t len = 0;
    snprintf(name, sizeof name, "rank-%05d.json", (int)m->rank);
    snprintf(a, sizeof a, "%s/%s", dir, name);
    if (st == LLMT_OK)
        st = llmt__ckpt_read_small(a, (size_t)1 << 30, &text, &len, ck->job_err,
                                   sizeof ck->job_err);
    if (st == LLMT_OK)
        st = llmt__ckpt_write_tmp(dst, name, text, len, f.tjson, sizeof f.tjson, ck->job_err,
                                  sizeof ck->job_err);
    free(text);
    if (st != LLMT_OK) {
        part_abandon(&f, dst);
        return st;
    }
    if ((st = part_publish(ck, &f, dst)) != LLMT_OK)
        return st;
    if (stop_now(ck, 1)) /* the durable part manifest is written */
        return job_stop(ck, 1);
    prune_node_root(ck);
    return try_commit(ck, dst, 1);
}

/* Persist the snapshot: data file (hashed meanwhile), part manifest, commit. */
static llmt_status run_job(llmt_ckpt *ck)
{
    ck_manifest *m = &ck->job;
    char dir[MAX_PATH];
    step_dir(dir, sizeof dir, ck->root, m->step);
    /* Committed since llmt_ckpt_save checked: by another rank, with this
     * rank's part of an earlier attempt. Its files are that commit's now:
     * rewriting them would break a checkpoint that verified. */
    if (committed_in(dir))
        return stop_asked(ck) ? job_stop(ck, 0) : committed_meanwhile(ck, dir);
    if (llmt__ckpt_mkdirs(dir))
        return JOB_FAIL(LLMT_ERR_IO, "ckpt: mkdir %s: %s", dir, strerror(errno));
    /* A stale part of an earlier attempt must not be committed with new
     * data, nor be taken for this attempt's by a cancel that stops it
     * before it starts (job_stop: a part manifest there is published, the
     * job would stand, and the other ranks commit the old part): set
     * aside now, gone for good once this part is published. */
    part_files f;
    part_begin(&f, dir, (int)m->rank);
    if (stop_asked(ck)) { /* cancelled before the writer started it */
        part_abandon(&f, dir);
        return job_stop(ck, 0);
    }
    uint8_t *h = ck->buf;
    memcpy(h, CK_MAGIC, 8);
    put_u32(h + 8, CK_FORMAT_VERSION);
    put_u32(h + 12, CK_HEADER_BYTES);
    put_u64(h + 16, (uint64_t)m->step);
    put_u32(h + 24, (uint32_t)m->rank);
    put_u32(h + 28, (uint32_t)m->world_size);
    put_u64(h + 32, ck->job_bytes);
    put_u64(h + 40, m->ntensors);
    put_u64(h + 48, XXH64(h, 48, 0));
    int direct = 0;
    /* The hashes go only into the part manifest, written after the data:
     * compute them on a helper thread while the data is being written (both
     * only read the snapshot buffer). */
    pthread_t hasher;
    int threaded = pthread_create(&hasher, NULL, llmt__ckpt_hash_job, ck) == 0;
    llmt_status st = llmt__ckpt_write_file(f.tbin, ck->buf, ck->job_bytes, ck->opts.direct_io,
                                           &direct, &ck->stop, ck->job_err, sizeof ck->job_err);
    if (threaded)
        pthread_join(hasher, NULL);
    else
        llmt__ckpt_hash_job(ck);
    if (stop_asked(ck) || st != LLMT_OK) {
        /* the part manifest is not written: no rank read it; the data
         * file's space goes back (disk full), nothing refers to it */
        part_abandon(&f, dir);
        return stop_asked(ck) ? job_stop(ck, 0) : st;
    }
    /* Rank 0's part names every tensor it was given, held or not (the
     * merge takes parts in rank order, so the step's manifest lists the
     * tensors in its order: the trainer names each on every rank, in the
     * model's order); the others list what they hold. Every part naming
     * every tensor made the committing rank read world x tensors entries
     * (gigabytes at thousands of ranks). */
    char *json =
        m->rank == 0 ? llmt__ckpt_manifest_to_json(m) : llmt__ckpt_manifest_to_json_held(m);
    char name[32];
    snprintf(name, sizeof name, "rank-%05d.json", (int)m->rank);
    st = json ? llmt__ckpt_write_tmp(dir, name, json, strlen(json), f.tjson, sizeof f.tjson,
                                     ck->job_err, sizeof ck->job_err)
              : JOB_FAIL(LLMT_ERR_OUT_OF_MEMORY, "ckpt: out of memory");
    free(json);
    if (st != LLMT_OK) {
        part_abandon(&f, dir);
        return st;
    }
    if ((st = part_publish(ck, &f, dir)) != LLMT_OK)
        return st;
    llmt__log(ck->ctx, LLMT_LOG_DEBUG, "ckpt", "wrote %s (%" PRIu64 " bytes, %s)", f.bin,
              ck->job_bytes, direct ? "O_DIRECT" : "buffered");
    if (ck->opts.tier_fn) {
        llmt_status hs =
            ck->opts.tier_fn(ck->opts.tier_user, LLMT_CKPT_TIER_PEER, m->step, f.bin);
        if (hs != LLMT_OK)
            llmt__log(ck->ctx, LLMT_LOG_WARN, "ckpt", "tier hook (peer) for step %" PRId64
                      " returned %s", m->step, llmt_status_string(hs));
    }
    /* the last point before the commit; a node-local root's part
     * manifest is this node's only */
    if (stop_now(ck, !ck->node_local))
        return job_stop(ck, 0);
    return ck->node_local ? commit_durable(ck, dir) : try_commit(ck, dir, 0);
}

static void *writer_main(void *arg)
{
    llmt_ckpt *ck = arg;
    pthread_mutex_lock(&ck->mu);
    for (;;) {
        while (!ck->pending && !ck->quit)
            pthread_cond_wait(&ck->cv, &ck->mu);
        if (ck->pending) {
            pthread_mutex_unlock(&ck->mu);
            ck->job_err[0] = 0;
            llmt_status st = run_job(ck);
            if (st != LLMT_OK && ck->job_state == CK_JOB_STOPPED)
                llmt__log(ck->ctx, LLMT_LOG_INFO, "ckpt",
                          "save of step %" PRId64 " cancelled (%s): nothing of it committed",
                          ck->job.step, ck->job_err);
            else if (st != LLMT_OK)
                llmt__log(ck->ctx, LLMT_LOG_ERROR, "ckpt", "save of step %" PRId64
                          " failed: %s", ck->job.step, ck->job_err);
            pthread_mutex_lock(&ck->mu);
            ck->job_status = st;
            if (st == LLMT_OK)
                ck->last_step = ck->job.step;
            ck->pending = 0;
            pthread_cond_broadcast(&ck->cv);
            continue;
        }
        if (ck->quit)
            break;
    }
    pthread_mutex_unlock(&ck->mu);
    return NULL;
}

static llmt_status wait_locked(llmt_ckpt *ck, int64_t timeout_ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    if (timeout_ms >= 0) {
        dl.tv_sec += timeout_ms / 1000;
        dl.tv_nsec += (timeout_ms % 1000) * 1000000;
        if (dl.tv_nsec >= 1000000000) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000;
        }
    }
    while (ck->pending) {
        if (timeout_ms < 0)
            pthread_cond_wait(&ck->cv, &ck->mu);
        else if (pthread_cond_timedwait(&ck->cv, &ck->mu, &dl) == ETIMEDOUT && ck->pending)
            return LLMT_ERR_TIMEOUT;
    }
    return LLMT_OK;
}

static llmt_status job_result(llmt_ckpt *ck)
{
    if (ck->job_status != LLMT_OK)
        return llmt__err_set(&ck->err, ck->job_status, "%s", ck->job_err);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_ckpt_save(llmt_ckpt *ck, int32_t async)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    if (async != 0 && async != 1) /* 2 was taken as 1 */
        return llmt__err_set(&ck->err, LLMT_ERR_INVALID_ARGUMENT,
                             "ckpt: save: async is %d, must be 0 (wait until durable) or 1",
                             (int)async);
    if (!ck->begun)
        return llmt__err_set(&ck->err, LLMT_ERR_STATE, "ckpt: save before llmt_ckpt_begin");
    pthread_mutex_lock(&ck->mu);
    wait_locked(ck, -1); /* the buffer is reused: the previous save must end */
    pthread_mutex_unlock(&ck->mu);
    llmt_status q = llmt__ckpt_prepare_step(ck, ck->step);
    if (q != LLMT_OK)
        return q;
    if (ck->open_mem) /* the buffer is about to change under it */
        llmt__ckpt_close_open(ck);
    llmt__ckpt_close_files(ck); /* retention may delete what they hold */
    llmt_status s = snapshot(ck);
    if (s != LLMT_OK)
        return s;
    pthread_mutex_lock(&ck->mu);
    ck->pending = 1;
    ck->job_status = LLMT_OK;
    ck->job_state = CK_JOB_QUEUED;
    ck->prev_last_step = ck->last_step;
    atomic_store(&ck->stop, 0);
    pthread_cond_broadcast(&ck->cv);
    if (!async)
        wait_locked(ck, -1);
    pthread_mutex_unlock(&ck->mu);
    ck->begun = 0;
    if (!async)
        return job_result(ck);
    return LLMT_OK;
}

LLMT_API llmt_status llmt_ckpt_save_status(llmt_ckpt *ck, int64_t *step)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    pthread_mutex_lock(&ck->mu);
    int pending = ck->pending;
    int64_t last = ck->last_step;
    pthread_mutex_unlock(&ck->mu);
    if (step)
        *step = last;
    if (pending)
        return LLMT_ERR_IN_PROGRESS;
    return job_result(ck);
}

LLMT_API llmt_status llmt_ckpt_wait(llmt_ckpt *ck, int64_t timeout_ms)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    pthread_mutex_lock(&ck->mu);
    llmt_status s = wait_locked(ck, timeout_ms);
    pthread_mutex_unlock(&ck->mu);
    if (s != LLMT_OK)
        return llmt__err_set(&ck->err, s, "ckpt: save still in flight after %" PRId64 " ms",
                             timeout_ms);
    return job_result(ck);
}

/* The last save is withdrawn: as if it had never been made. */
static llmt_status cancelled(llmt_ckpt *ck)
{
    pthread_mutex_lock(&ck->mu);
    ck->job_state = CK_JOB_CANCELLED;
    ck->job_status = LLMT_OK;
    ck->job_err[0] = 0;
    ck->last_step = ck->prev_last_step;
    pthread_mutex_unlock(&ck->mu);
    ck->have_snapshot = 0; /* not a save: the host tier does not offer it */
    llmt__log(ck->ctx, LLMT_LOG_INFO, "ckpt",
              "cancelled the save of step %" PRId64 ": never committed", ck->job.step);
    return LLMT_OK;
}

/* Cancel after the last save's job ended (before the cancel reached it,
 * or long before): withdrawn if this rank's part waits for the others',
 * else LLMT_ERR_STATE naming what became of it. `note` ends the message
 * (what else the cancel did). */
static llmt_status cancel_ended(llmt_ckpt *ck, int raced, const char *note)
{
    int64_t step = ck->job.step;
    const char *when = raced ? " before the cancel reached it" : "";
    if (ck->job_state == CK_JOB_NONE)
        return llmt__err_set(&ck->err, LLMT_ERR_STATE,
                             "ckpt: cancel: no save to cancel: nothing was begun "
                             "(llmt_ckpt_begin) or saved on this handle");
    if (ck->job_state != CK_JOB_QUEUED)
        return llmt__err_set(&ck->err, LLMT_ERR_STATE,
                             "ckpt: cancel: no save to cancel: the save of step %" PRId64
                             " was cancelled already and nothing was begun since",
                             step);
    if (ck->job_status != LLMT_OK)
        return llmt__err_set(&ck->err, LLMT_ERR_STATE,
                             "ckpt: cancel: the save of step %" PRId64 " had failed%s (%s): "
                             "nothing to cancel%s",
                             step, when, ck->job_err, note);
    char dir[MAX_PATH];
    step_dir(dir, sizeof dir, ck->node_local ? ck->durable : ck->root, step);
    int shared = ck->opts.world_size > 1;
    int w = withdraw_part(ck, ck->node_local ? ck->durable : ck->root, step, shared);
    if (w == WITHDRAWN && ck->node_local)
        w = withdraw_part(ck, ck->root, step, 0);
    if (w == WITHDRAW_COMMITTED)
        return llmt__err_set(&ck->err, LLMT_ERR_STATE,
                             "ckpt: cancel: step %" PRId64
                             " was committed%s (%s/manifest.json): "
                             "a committed checkpoint is not withdrawn%s",
                             step, when, dir, note);
    if (w == WITHDRAW_PUBLISHED)
        return llmt__err_set(&ck->err, LLMT_ERR_STATE,
                             "ckpt: cancel: rank %d's part of step %" PRId64
                             " is written (%s/rank-%05d.json) and other ranks may have read "
                             "it: with world_size %d a save can be cancelled only until its "
                             "part manifest is written (the rank committing the step reads "
                             "every part manifest, then writes manifest.json); the step "
                             "commits when every rank's part is there, else stays an "
                             "uncommitted directory that resume ignores%s",
                             (int)ck->opts.rank, step, dir, (int)ck->opts.rank,
                             (int)ck->opts.world_size, note);
    return cancelled(ck);
}

LLMT_API llmt_status llmt_ckpt_cancel(llmt_ckpt *ck)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    if (ck->thread_started && pthread_equal(pthread_self(), ck->thread))
        return llmt__err_set(&ck->err, LLMT_ERR_STATE,
                             "ckpt: cancel called on the writer thread (from the tier hook): "
                             "it would wait for itself; cancel from the thread that saves");
    char note[96] = "";
    int dropped = ck->begun;
    if (dropped)
        snprintf(note, sizeof note, " (the description of step %" PRId64 " was dropped)",
                 ck->step);
    clear_desc(ck);
    pthread_mutex_lock(&ck->mu);
    int in_flight = ck->pending;
    if (in_flight)
        atomic_store(&ck->stop, 1);
    pthread_mutex_unlock(&ck->mu);
    if (in_flight) /* not under the lock: the host's log sink may call us */
        llmt__log(ck->ctx, LLMT_LOG_DEBUG, "ckpt",
                  "cancel: stopping the save of step %" PRId64 " in flight", ck->job.step);
    pthread_mutex_lock(&ck->mu);
    wait_locked(ck, -1);
    atomic_store(&ck->stop, 0);
    int stopped = ck->job_state == CK_JOB_STOPPED;
    pthread_mutex_unlock(&ck->mu);
    if (in_flight && stopped)
        return cancelled(ck);
    if (!in_flight && dropped) { /* the newest save was only described */
        llmt__log(ck->ctx, LLMT_LOG_INFO, "ckpt",
                  "cancelled the save of step %" PRId64
                  " before llmt_ckpt_save: nothing written",
                  ck->step);
        return LLMT_OK;
    }
    return cancel_ended(ck, in_flight, note);
}

LLMT_API llmt_status llmt_ckpt_list(llmt_ckpt *ck, int64_t *steps, size_t cap,
                                    size_t *count)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    LLMT__NONNULL(&ck->err, "ckpt: list", count);
    if (cap)
        LLMT__NONNULL(&ck->err, "ckpt: list", steps);
    size_t n = 0;
    int64_t *v = llmt__ckpt_scan(ck->root, 1, &n);
    if (!v)
        return llmt__err_set(&ck->err, LLMT_ERR_IO, "ckpt: cannot list %s", ck->root);
    for (size_t i = 0; i < n && i < cap; i++)
        steps[i] = v[i];
    *count = n;
    free(v);
    return LLMT_OK;
}

/* The newest step of `root` that verifies completely (every hash), or -1. */
static int64_t newest_verified(llmt_ckpt *ck, const char *root)
{
    size_t n = 0;
    int64_t *v = llmt__ckpt_scan(root, 1, &n), found = -1;
    llmt_err keep = ck->err; /* a probe, not an error of the call */
    for (size_t i = n; v && i-- > 0 && found < 0;) {
        char d[MAX_PATH];
        snprintf(d, sizeof d, "%s/step-%012" PRId64, root, v[i]);
        if (llmt__ckpt_check_dir(ck, d, 1) == LLMT_OK)
            found = v[i];
    }
    ck->err = keep;
    free(v);
    return found;
}

LLMT_API llmt_status llmt_ckpt_prune(llmt_ckpt *ck, size_t *removed)
{
    if (!ck)
        return LLMT_ERR_NULL_POINTER;
    pthread_mutex_lock(&ck->mu);
    wait_locked(ck, -1);
    pthread_mutex_unlock(&ck->mu);
    /* keep_last counts committed directories, and a corrupt newest one
     * would otherwise push the last good step out of the window */
    size_t r = llmt__ckpt_retain(ck->ctx, ck->root, ck->opts.keep_last, ck->opts.keep_every,
                                 newest_verified(ck, ck->root));
    if (ck->durable)
        r += llmt__ckpt_retain(ck->ctx, ck->durable, ck->opts.durable_keep_last,
                               ck->opts.durable_keep_every, newest_verified(ck, ck->durable));
    if (removed)
        *removed = r;
    return LLMT_OK;
}

/* llmt_loader_ckpt_add / _read: the loader's state through a real
 * checkpoint. A resumed loader continues exactly where the saved one was
 * (also under another dp layout); missing or malformed keys, a mid-step
 * save and another dataset's state fail with the loader's message. */
#include "check.h"
#include "util.h"

#define T 8

static llmt_loader *mk(llmt_dataset *ds, int32_t rank, int32_t size, int32_t B)
{
    llmt_loader_opts o;
    llmt_loader_opts_init(&o, sizeof o);
    o.seq_len = T;
    o.micro_batch = B;
    o.dp_rank = rank;
    o.dp_size = size;
    o.seed = 77;
    llmt_loader *l = NULL;
    CHECK_STATUS(llmt_loader_create(ds, &o, &l), LLMT_OK);
    return l;
}

static int64_t next_id(llmt_loader *l, int32_t B, int64_t *ids)
{
    int32_t in[4 * T], tg[4 * T];
    CHECK(B <= 4);
    CHECK_STATUS(llmt_loader_next(l, in, tg, ids), LLMT_OK);
    return ids[0];
}

int main(void)
{
    char *dir = tu_mkdtemp();
    char p[4200], root[4200];
    snprintf(p, sizeof p, "%s/a.tok", dir);
    free(tu_write_shard(p, 300, 4001, 50, 1, NULL));
    snprintf(p, sizeof p, "%s/b.tok", dir);
    free(tu_write_shard(p, 300, 2501, 50, 2, NULL));
    llmt_dataset *ds = NULL;
    CHECK_STATUS(llmt_dataset_open(NULL, dir, 1, &ds), LLMT_OK);
    snprintf(root, sizeof root, "%s/ckpt", dir);
    llmt_ckpt *ck = NULL;
    llmt_ckpt_opts co;
    llmt_ckpt_opts_init(&co, sizeof co);
    co.direct_io = 0;
    CHECK_STATUS(llmt_ckpt_create(NULL, root, &co, &ck), LLMT_OK);

    /* reference: one rank, B=4, 10 steps */
    int64_t ref[40], ids[4];
    llmt_loader *r = mk(ds, 0, 1, 4);
    for (int s = 0; s < 10; s++) {
        next_id(r, 4, ids);
        memcpy(ref + 4 * s, ids, sizeof ids);
    }
    llmt_loader_destroy(r);

    /* two ranks of B=2 for 4 steps, then save (rank 0's keys; both equal) */
    llmt_loader *a = mk(ds, 0, 2, 2), *b = mk(ds, 1, 2, 2);
    for (int s = 0; s < 4; s++) {
        int64_t ia[4], ib[4];
        next_id(a, 2, ia);
        next_id(b, 2, ib);
        CHECK(ia[0] == ref[4 * s] && ia[1] == ref[4 * s + 1]);
        CHECK(ib[0] == ref[4 * s + 2] && ib[1] == ref[4 * s + 3]);
    }
    CHECK_STATUS(llmt_ckpt_begin(ck, 4), LLMT_OK);
    CHECK_STATUS(llmt_loader_ckpt_add(a, ck), LLMT_OK);
    CHECK_STATUS(llmt_loader_ckpt_add(b, ck), LLMT_OK); /* same values */
    CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_OK);

    /* resume on one rank of B=4: steps 5..10 equal the reference */
    int64_t step = -1;
    CHECK_STATUS(llmt_ckpt_open_latest(ck, &step), LLMT_OK);
    CHECK_EQ_INT(step, 4);
    llmt_loader *c = mk(ds, 0, 1, 4);
    CHECK_STATUS(llmt_loader_ckpt_read(c, ck), LLMT_OK);
    for (int s = 4; s < 10; s++) {
        next_id(c, 4, ids);
        CHECK(!memcmp(ids, ref + 4 * s, sizeof ids));
    }

    /* a save in the middle of a step is refused with the loader's reason */
    llmt_loader *m = mk(ds, 0, 1, 1);
    CHECK_STATUS(llmt_ckpt_begin(ck, 5), LLMT_OK);
    {
        /* grad_accum 2: one next() is half a step */
        llmt_loader_opts o;
        llmt_loader_opts_init(&o, sizeof o);
        o.seq_len = T;
        o.micro_batch = 1;
        o.grad_accum = 2;
        llmt_loader *h = NULL;
        CHECK_STATUS(llmt_loader_create(ds, &o, &h), LLMT_OK);
        next_id(h, 1, ids);
        CHECK_STATUS(llmt_loader_ckpt_add(h, ck), LLMT_ERR_STATE);
        CHECK(strstr(llmt_loader_last_error(h), "step") != NULL);
        llmt_loader_destroy(h);
    }

    /* missing and malformed keys */
    CHECK_STATUS(llmt_ckpt_set_kv(ck, "data.seed", "77"), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_open_step(ck, 5), LLMT_OK);
    CHECK(llmt_loader_ckpt_read(m, ck) != LLMT_OK);
    CHECK(strstr(llmt_loader_last_error(m), "data.epoch") != NULL);
    CHECK_STATUS(llmt_ckpt_begin(ck, 6), LLMT_OK);
    CHECK_STATUS(llmt_loader_ckpt_add(c, ck), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_set_kv(ck, "data.cursor", "12x"), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_OK);
    CHECK_STATUS(llmt_ckpt_open_step(ck, 6), LLMT_OK);
    CHECK_STATUS(llmt_loader_ckpt_read(m, ck), LLMT_ERR_FORMAT);
    CHECK(strstr(llmt_loader_last_error(m), "data.cursor") != NULL);

    /* another dataset's state: the fingerprint check of set_state */
    snprintf(p, sizeof p, "%s/other", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/other/c.tok", dir);
    free(tu_write_shard(p, 300, 6502, 50, 3, NULL));
    snprintf(p, sizeof p, "%s/other", dir);
    llmt_dataset *ds2 = NULL;
    CHECK_STATUS(llmt_dataset_open(NULL, p, 0, &ds2), LLMT_OK);
    llmt_loader *o2 = mk(ds2, 0, 1, 4);
    CHECK_STATUS(llmt_ckpt_open_step(ck, 4), LLMT_OK);
    CHECK_STATUS(llmt_loader_ckpt_read(o2, ck), LLMT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llmt_loader_last_error(o2), "fingerprint") != NULL ||
          strstr(llmt_loader_last_error(o2), "samples per epoch") != NULL);
    CHECK_STATUS(llmt_loader_ckpt_add(NULL, ck), LLMT_ERR_NULL_POINTER);
    CHECK_STATUS(llmt_loader_ckpt_read(o2, NULL), LLMT_ERR_NULL_POINTER);

    /* the sample order and window length: a shuffled loader's state set on
     * one in file order is refused (its cursor counts other samples); a
     * checkpoint of an older writer (no data.seq_len / data.order) loads */
    llmt_loader_state cs;
    memset(&cs, 0, sizeof cs);
    cs.struct_size = sizeof cs;
    CHECK_STATUS(llmt_loader_get_state(c, &cs), LLMT_OK);
    CHECK_EQ_INT(cs.order, 2);
    CHECK_EQ_INT(cs.seq_len, T);
    {
        llmt_loader_opts o;
        llmt_loader_opts_init(&o, sizeof o);
        o.seq_len = T;
        o.micro_batch = 1;
        o.seed = 77;
        o.shuffle = 0;
        llmt_loader *fo = NULL;
        CHECK_STATUS(llmt_loader_create(ds, &o, &fo), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_begin(ck, 7), LLMT_OK);
        CHECK_STATUS(llmt_loader_ckpt_add(c, ck), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_open_step(ck, 7), LLMT_OK);
        CHECK_STATUS(llmt_loader_ckpt_read(fo, ck), LLMT_ERR_INVALID_ARGUMENT);
        CHECK(strstr(llmt_loader_last_error(fo), "shuffle") != NULL);
        CHECK_STATUS(llmt_loader_ckpt_read(m, ck), LLMT_OK); /* shuffled, as saved */
        /* an older writer's five keys */
        char v[5][32];
        snprintf(v[0], sizeof v[0], "%llu", (unsigned long long)cs.seed);
        snprintf(v[1], sizeof v[1], "%lld", (long long)cs.epoch);
        snprintf(v[2], sizeof v[2], "%lld", (long long)cs.cursor);
        snprintf(v[3], sizeof v[3], "%lld", (long long)cs.samples_per_epoch);
        snprintf(v[4], sizeof v[4], "%llu", (unsigned long long)cs.fingerprint);
        static const char *const k5[5] = {"data.seed", "data.epoch", "data.cursor",
                                          "data.samples_per_epoch", "data.fingerprint"};
        CHECK_STATUS(llmt_ckpt_begin(ck, 8), LLMT_OK);
        for (int k = 0; k < 5; k++)
            CHECK_STATUS(llmt_ckpt_set_kv(ck, k5[k], v[k]), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_open_step(ck, 8), LLMT_OK);
        CHECK_STATUS(llmt_loader_ckpt_read(fo, ck), LLMT_OK); /* not recorded: not checked */
        /* a malformed order */
        CHECK_STATUS(llmt_ckpt_begin(ck, 9), LLMT_OK);
        CHECK_STATUS(llmt_loader_ckpt_add(c, ck), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_set_kv(ck, "data.order", "-1"), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_save(ck, 0), LLMT_OK);
        CHECK_STATUS(llmt_ckpt_open_step(ck, 9), LLMT_OK);
        CHECK_STATUS(llmt_loader_ckpt_read(m, ck), LLMT_ERR_FORMAT);
        CHECK(strstr(llmt_loader_last_error(m), "data.order") != NULL);
        llmt_loader_destroy(fo);
    }

    llmt_loader_destroy(o2);
    llmt_dataset_destroy(ds2);
    llmt_loader_destroy(m);
    llmt_loader_destroy(c);
    llmt_loader_destroy(a);
    llmt_loader_destroy(b);
    llmt_ckpt_destroy(ck);
    llmt_dataset_destroy(ds);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir); /* the checkpoint steps are deep */
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    free(dir);
    return check_exit("data-loader-ckpt");
}

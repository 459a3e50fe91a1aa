/* Child of the crash test: resume from the newest complete checkpoint in
 * ROOT (or start at step 0), then train and save every step asynchronously
 * as two simulated ranks until STEPS or until SIGKILL. Prints "ready STEP"
 * once resumed. Exit 0 when it reached STEPS. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "crash_state.h"
#include "llmtrain.h"

static int add_rank(llmt_ckpt *ck, cr_state *st, uint32_t *bulk, int r)
{
    llmt_tensor p, rng, b;
    int64_t np = CR_PARAMS, nr = 2, nb = CR_BULK;
    int64_t gp = CR_PARAMS * CR_RANKS, gr = 2 * CR_RANKS, gb = (int64_t)CR_BULK * CR_RANKS;
    int64_t op = (int64_t)r * CR_PARAMS, orr = 2 * r, ob = (int64_t)r * CR_BULK;
    llmt_tensor_init(&p, sizeof p, LLMT_DTYPE_FP32, 1, &np, st->p[r], LLMT_DEVICE_CPU, 0);
    llmt_tensor_init(&rng, sizeof rng, LLMT_DTYPE_INT64, 1, &nr, st->rng[r], LLMT_DEVICE_CPU, 0);
    llmt_tensor_init(&b, sizeof b, LLMT_DTYPE_INT32, 1, &nb, bulk, LLMT_DEVICE_CPU, 0);
    char cur[32];
    snprintf(cur, sizeof cur, "%" PRIu64, st->cursor);
    return llmt_ckpt_add_tensor(ck, "params", &p, &gp, &op) ||
           llmt_ckpt_add_tensor(ck, "rng", &rng, &gr, &orr) ||
           llmt_ckpt_add_tensor(ck, "bulk", &b, &gb, &ob) ||
           (r == 0 && llmt_ckpt_set_kv(ck, "loader.cursor", cur));
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    const char *root = argv[1];
    int64_t steps = atoll(argv[2]);
    static cr_state st;
    static uint32_t bulk[CR_RANKS][CR_BULK];
    llmt_ckpt *ck[CR_RANKS];
    for (int r = 0; r < CR_RANKS; r++) {
        llmt_ckpt_opts o;
        llmt_ckpt_opts_init(&o, sizeof o);
        o.rank = r;
        o.world_size = CR_RANKS;
        o.keep_last = 3;
        if (llmt_ckpt_create(NULL, root, &o, &ck[r]))
            return 3;
    }
    cr_init(&st);
    int64_t step;
    llmt_status s = llmt_ckpt_open_latest(ck[0], &step);
    if (s == LLMT_OK) {
        /* resume: every rank reads its own block */
        for (int r = 0; r < CR_RANKS; r++) {
            llmt_tensor p, rng;
            int64_t np = CR_PARAMS, nr = 2, op = (int64_t)r * CR_PARAMS, orr = 2 * r;
            llmt_tensor_init(&p, sizeof p, LLMT_DTYPE_FP32, 1, &np, st.p[r], LLMT_DEVICE_CPU, 0);
            llmt_tensor_init(&rng, sizeof rng, LLMT_DTYPE_INT64, 1, &nr, st.rng[r],
                             LLMT_DEVICE_CPU, 0);
            if (llmt_ckpt_read(ck[0], "params", &p, &op) || llmt_ckpt_read(ck[0], "rng", &rng, &orr)) {
                fprintf(stderr, "child: resume read failed: %s\n", llmt_ckpt_last_error(ck[0]));
                return 4;
            }
        }
        char buf[32];
        if (llmt_ckpt_get_kv(ck[0], "loader.cursor", buf, sizeof buf, NULL))
            return 4;
        st.cursor = strtoull(buf, NULL, 10);
        st.step = step;
    } else if (s != LLMT_ERR_NOT_FOUND) {
        fprintf(stderr, "child: open_latest: %s\n", llmt_ckpt_last_error(ck[0]));
        return 4;
    }
    printf("ready %" PRId64 "\n", st.step);
    fflush(stdout);
    while (st.step < steps) {
        cr_step(&st);
        for (int r = 0; r < CR_RANKS; r++) {
            cr_bulk(bulk[r], st.step, r);
            if (llmt_ckpt_begin(ck[r], st.step) || add_rank(ck[r], &st, bulk[r], r) ||
                llmt_ckpt_save(ck[r], 1)) {
                fprintf(stderr, "child: save %" PRId64 ": %s\n", st.step,
                        llmt_ckpt_last_error(ck[r]));
                return 5;
            }
        }
    }
    for (int r = 0; r < CR_RANKS; r++) {
        if (llmt_ckpt_wait(ck[r], -1))
            return 6;
        llmt_ckpt_destroy(ck[r]);
    }
    return 0;
}

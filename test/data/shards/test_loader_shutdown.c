/* The prefetch thread stops cleanly: destroy right after create, in the
 * middle of an epoch with the ring full or being filled, after set_state
 * (which restarts the thread), many times over. Under ASan/TSan-free
 * builds this is a hang or leak check; meson's timeout catches a hang. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "llmtrain.h"
#include "util.h"

int main(void)
{
    char *dir = tu_mkdtemp();
    char p[4200];
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/s%d.tok", dir, i);
        free(tu_write_shard(p, 50257, 200000 + 1000 * i, 5000, (uint64_t)i, NULL));
    }
    llmt_dataset *ds = NULL;
    CHECK_STATUS(llmt_dataset_open(NULL, dir, 0, &ds), LLMT_OK);
    int B = 8, T = 128;
    int32_t *in = malloc((size_t)B * T * sizeof *in), *tg = malloc((size_t)B * T * sizeof *tg);
    int ok = 1;
    for (int round = 0; round < 200; round++) {
        llmt_loader_opts o;
        llmt_loader_opts_init(&o, sizeof o);
        o.seq_len = T;
        o.micro_batch = B;
        o.prefetch = 1 + round % 17;
        o.seed = (uint64_t)round;
        llmt_loader *l = NULL;
        if (llmt_loader_create(ds, &o, &l) != LLMT_OK) {
            ok = 0;
            break;
        }
        int reads = round % 7;
        for (int i = 0; i < reads; i++)
            ok &= llmt_loader_next(l, in, tg, NULL) == LLMT_OK;
        if (round % 5 == 1) {
            /* Let the ring fill up so destroy meets a thread that waits. */
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
        if (round % 3 == 2) {
            llmt_loader_state st;
            memset(&st, 0, sizeof st);
            st.struct_size = sizeof st;
            ok &= llmt_loader_get_state(l, &st) == LLMT_OK;
            st.cursor = (st.cursor + 17) % st.samples_per_epoch;
            ok &= llmt_loader_set_state(l, &st) == LLMT_OK;
            ok &= llmt_loader_next(l, in, tg, NULL) == LLMT_OK;
        }
        llmt_loader_destroy(l);
    }
    CHECK(ok);
    free(in);
    free(tg);
    llmt_dataset_destroy(ds);
    tu_rmtree(dir);
    free(dir);
    return check_exit("data-loader-shutdown");
}

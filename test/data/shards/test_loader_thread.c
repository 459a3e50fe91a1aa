/* The prefetch thread cannot be started (pthread_create fails: a thread or
 * memory limit): set_state and next report it, and the loader never waits
 * for a thread that does not run. Once threads can be created again, next
 * serves the same micro-batches as a loader without prefetch. The test
 * defines pthread_create itself, so the library's calls come here and can
 * be made to fail; the real one is found with dlsym(RTLD_NEXT). A hang is
 * caught by alarm(). */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "llmtrain.h"
#include "util.h"

#define T 32
#define B 4

static int fail_create; /* pthread_create fails while set */
static int interposed;  /* the library's calls reach ours */

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    interposed = 1;
    if (fail_create)
        return EAGAIN;
    create_fn real = (create_fn)(uintptr_t)dlsym(RTLD_NEXT, "pthread_create");
    return real ? real(th, attr, fn, arg) : ENOSYS;
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "data-loader-thread: hung waiting for the prefetch thread\n";
    if (write(2, msg, sizeof msg - 1) < 0)
        _exit(1);
    _exit(1);
}

static llmt_loader *make_loader(llmt_dataset *ds, int prefetch)
{
    llmt_loader_opts o;
    llmt_loader_opts_init(&o, sizeof o);
    o.seq_len = T;
    o.micro_batch = B;
    o.prefetch = prefetch;
    o.seed = 7;
    llmt_loader *l = NULL;
    if (llmt_loader_create(ds, &o, &l) != LLMT_OK) {
        fprintf(stderr, "loader_create: %s\n", llmt_dataset_last_error(ds));
        exit(1);
    }
    return l;
}

/* The next micro-batch of l equals the next of the reference loader. */
static int same_next(llmt_loader *l, llmt_loader *ref)
{
    int32_t in[B * T], tg[B * T], in2[B * T], tg2[B * T];
    if (llmt_loader_next(l, in, tg, NULL) != LLMT_OK) {
        fprintf(stderr, "  next: %s\n", llmt_loader_last_error(l));
        return 0;
    }
    if (llmt_loader_next(ref, in2, tg2, NULL) != LLMT_OK)
        return 0;
    return !memcmp(in, in2, sizeof in) && !memcmp(tg, tg2, sizeof tg);
}

int main(void)
{
    signal(SIGALRM, on_alarm);
    alarm(30);
    char *dir = tu_mkdtemp();
    char p[4200];
    snprintf(p, sizeof p, "%s/s.tok", dir);
    free(tu_write_shard(p, 50257, 20000, 50, 3, NULL));
    llmt_dataset *ds = NULL;
    CHECK_STATUS(llmt_dataset_open(NULL, dir, 0, &ds), LLMT_OK);
    llmt_loader *ref = make_loader(ds, 0);
    llmt_loader *l = make_loader(ds, 3);
    if (!interposed) {
        fprintf(stderr, "data-loader-thread: pthread_create is not interposed here; skip\n");
        llmt_loader_destroy(l);
        llmt_loader_destroy(ref);
        llmt_dataset_destroy(ds);
        tu_rmtree(dir);
        free(dir);
        return 77;
    }
    CHECK(same_next(l, ref));
    llmt_loader_state st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    CHECK_STATUS(llmt_loader_get_state(l, &st), LLMT_OK);
    CHECK_EQ_INT(st.cursor, B);

    /* set_state cannot restart the thread: said so, naming the thread. */
    fail_create = 1;
    CHECK_STATUS(llmt_loader_set_state(l, &st), LLMT_ERR_INTERNAL);
    CHECK(strstr(llmt_loader_last_error(l), "prefetch thread") != NULL);
    /* next while threads still fail: an error, not a wait without end. */
    int32_t in[B * T], tg[B * T];
    CHECK_STATUS(llmt_loader_next(l, in, tg, NULL), LLMT_ERR_INTERNAL);
    CHECK(strstr(llmt_loader_last_error(l), "prefetch thread") != NULL);
    fail_create = 0;
    /* Then the run goes on from the state, nothing skipped or repeated. */
    for (int i = 0; i < 20; i++)
        CHECK(same_next(l, ref));
    CHECK_STATUS(llmt_loader_get_state(l, &st), LLMT_OK);
    CHECK_EQ_INT(st.cursor, 21 * B);

    /* A micro-batch that fails (the shard cut short under the loader)
     * restarts the thread; when that fails too, the next call reports it
     * and a later one, with threads back, goes on from the failed one. */
    llmt_loader_destroy(l);
    l = make_loader(ds, 3);
    llmt_loader_destroy(ref);
    ref = make_loader(ds, 0);
    CHECK(same_next(l, ref));
    CHECK(truncate(p, 200) == 0);
    fail_create = 1;
    llmt_status s = LLMT_OK;
    for (int i = 0; i < 10 && s == LLMT_OK; i++)
        s = llmt_loader_next(l, in, tg, NULL);
    CHECK_STATUS(s, LLMT_ERR_FORMAT);
    CHECK_STATUS(llmt_loader_next(l, in, tg, NULL), LLMT_ERR_INTERNAL);
    fail_create = 0;
    CHECK_STATUS(llmt_loader_next(l, in, tg, NULL), LLMT_ERR_FORMAT);

    llmt_loader_destroy(l);
    llmt_loader_destroy(ref);
    llmt_dataset_destroy(ds);
    tu_rmtree(dir);
    free(dir);
    return check_exit("data-loader-thread");
}

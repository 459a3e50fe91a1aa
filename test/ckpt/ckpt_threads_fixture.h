/* The phased in-process rank tests' threads (test_open_shared.c,
 * test_peer.c): their world (a scratch directory, the ranks'
 * communicators and roots) made and ended, and in each phase every rank
 * a thread that makes its handle on its root, runs the test's phase on
 * it, keeps the handle's last error and destroys it; the phase ends when
 * all have joined. Each test keeps only its phases and its checks. Header
 * only. */
#ifndef LLMT_TEST_CKPT_THREADS_FIXTURE_H
#define LLMT_TEST_CKPT_THREADS_FIXTURE_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "ckpt_util.h"
#include "llmtrain.h"

/* The fields every phased rank has, first in each test's per-rank struct
 * (CK_RANK_FIELDS first of them, for inproc_ranks): the phase it runs and
 * its status. */
#define CK_PHASE_FIELDS \
    CK_RANK_FIELDS;     \
    int phase;          \
    llmt_status st
typedef struct ck_phase_rank {
    CK_PHASE_FIELDS;
} ck_phase_rank;

/* What a rank does in a phase on its handle; its status. */
typedef llmt_status (*ck_phase_fn)(void *k, llmt_ckpt *ck);

/* One rank's phase: its struct, the world's size, the handles' keep_last,
 * what it does, and where its error goes in its struct. */
typedef struct ck_phase_call {
    void *k;
    int world, keep_last;
    ck_phase_fn fn;
    size_t err_off, errn;
} ck_phase_call;

/* A rank's thread: its handle of world on its root into k->st, and
 * nothing more where that failed; else fn's status into k->st and the
 * handle's last error into its err, the handle destroyed. */
static inline void *ck_phase_thread(void *arg)
{
    const ck_phase_call *c = arg;
    ck_phase_rank *h = c->k;
    llmt_ckpt *ck = NULL;
    h->st = rank_ckpt(h->rank, c->world, h->root, c->keep_last, &ck);
    if (h->st != LLMT_OK)
        return NULL;
    h->st = c->fn(c->k, ck);
    snprintf((char *)c->k + c->err_off, c->errn, "%s", llmt_ckpt_last_error(ck));
    llmt_ckpt_destroy(ck);
    return NULL;
}

/* The n ranks of ks (sz bytes each, CK_PHASE_FIELDS first, an error
 * string of errn bytes at err_off) run phase: each a thread doing fn on
 * its handle (keep_last as given), all joined. */
static inline void ck_phases(void *ks, size_t sz, int n, int phase, int keep_last,
                             ck_phase_fn fn, size_t err_off, size_t errn)
{
    ck_phase_call c[64];
    for (int r = 0; r < n && r < 64; r++) {
        ((ck_phase_rank *)((char *)ks + (size_t)r * sz))->phase = phase;
        c[r] = (ck_phase_call){(char *)ks + (size_t)r * sz, n, keep_last, fn, err_off, errn};
    }
    run_threads(ck_phase_thread, c, sizeof c[0], n);
}

/* The test's world: a scratch directory (tmpdir_make's, of tag),
 * returned, and under it the n ranks of ks (sz bytes each) with their
 * communicators and roots as inproc_ranks gives them (one check). */
static inline char *ck_phases_begin(void *ks, size_t sz, int n, llmt_comm **comms,
                                    const char *tag, const char *name, int per_rank)
{
    char *base = tmpdir_make(NULL, tag);
    CHECK_STATUS(inproc_ranks(ks, sz, n, comms, base, name, per_rank), LLMT_OK);
    return base;
}

/* The end of the test's world: its n communicators destroyed, the
 * scratch directory base (tmpdir_make's) removed and freed. */
static inline void ck_phases_end(llmt_comm **comms, int n, char *base)
{
    for (int r = 0; r < n; r++)
        llmt_comm_destroy(comms[r]);
    tmpdir_remove(base);
    free(base);
}

#endif

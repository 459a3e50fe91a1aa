/* Host memory per data-parallel rank by category (llmt_trainer_memory_usage)
 * for the model of doc/comm.md's table: a 6-layer GPT-2, width 384,
 * vocabulary 8192 (13.9 M parameters), micro-batch 4 x 256 tokens, default
 * bucket_bytes, at dp 1 (no communicator), 2 and 4 (threads over an
 * in-process communicator) x ZeRO 0-3. Prints the table in MiB (rank 0's
 * row; the spread over the ranks, which only the rounding of the shares
 * makes, is printed below it). No step is run: the figures are the sizes
 * of the buffers the trainer holds once attached, which a step does not
 * change; "params resident" is what ZeRO-3 keeps of the parameter buffer
 * between uses (attaching already releases every unit, as the end of a
 * step does), and "total resident" the total with it instead of the
 * buffer. On Linux the resident pages of the parameter buffer are also
 * counted with mincore(2) and printed below the table (stderr), a check
 * of "params resident" independent of the library's bookkeeping.
 *
 *     build/bench/comm/bench_dp_memory
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "llmtrain.h"

#define MAXDP 4

static llmt_model_config cfg;
static llmt_trainer_opts topts;

typedef struct rank_job {
    llmt_comm *c; /* NULL: one rank without a communicator */
    int zero;
    llmt_trainer_memory m;
    int64_t measured; /* bytes of the parameter buffer's pages resident; -1: unknown */
    llmt_status st;
} rank_job;

/* Bytes of the pages holding [p, p + n) that are resident (mincore). */
static int64_t resident_bytes(const void *p, size_t n)
{
#ifdef __linux__
    uintptr_t P = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p / P * P, b = ((uintptr_t)p + n + P - 1) / P * P;
    size_t np = (b - a) / P;
    unsigned char *vec = malloc(np ? np : 1);
    int64_t r = -1;
    if (vec && mincore((void *)a, b - a, vec) == 0) {
        r = 0;
        for (size_t i = 0; i < np; i++) r += (vec[i] & 1) ? (int64_t)P : 0;
    }
    free(vec);
    return r;
#else
    (void)p;
    (void)n;
    return -1;
#endif
}

static void *rank_main(void *p)
{
    rank_job *j = p;
    llmt_model *m = NULL;
    llmt_trainer *tr = NULL;
    j->st = llmt_model_create(NULL, &cfg, &m);
    if (j->st == LLMT_OK) j->st = llmt_trainer_create(m, &topts, &tr);
    if (j->st == LLMT_OK && j->c) {
        llmt_dp_opts o;
        llmt_dp_opts_init(&o, sizeof o);
        o.zero_stage = j->zero;
        j->st = llmt_trainer_set_comm(tr, j->c, &o);
    }
    memset(&j->m, 0, sizeof j->m);
    j->m.struct_size = sizeof j->m;
    if (j->st == LLMT_OK) j->st = llmt_trainer_memory_usage(tr, &j->m);
    j->measured = -1;
    if (j->st == LLMT_OK) {
        llmt_tensor v; /* parameter 0 starts the buffer */
        if (llmt_model_param(m, 0, NULL, &v) == LLMT_OK)
            j->measured = resident_bytes(v.data, (size_t)j->m.params);
    }
    if (j->st != LLMT_OK)
        fprintf(stderr, "bench_dp_memory: %s\n",
                tr ? llmt_trainer_last_error(tr) : "model or trainer create failed");
    llmt_trainer_destroy(tr);
    llmt_model_destroy(m);
    return NULL;
}

static double mib(int64_t b) { return (double)b / (1024.0 * 1024.0); }

static int row(int dp, int zero)
{
    rank_job j[MAXDP];
    pthread_t th[MAXDP];
    llmt_comm *c[MAXDP];
    memset(j, 0, sizeof j);
    if (zero >= 0 && llmt_comm_create_inproc(NULL, dp, NULL, c) != LLMT_OK) return 1;
    for (int r = 0; r < dp; r++) {
        j[r].c = zero >= 0 ? c[r] : NULL;
        j[r].zero = zero;
        if (zero >= 0) pthread_create(&th[r], NULL, rank_main, &j[r]);
        else rank_main(&j[r]);
    }
    int bad = 0;
    for (int r = 0; zero >= 0 && r < dp; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < dp; r++) {
        bad |= j[r].st != LLMT_OK;
        if (zero >= 0) llmt_comm_destroy(c[r]);
    }
    if (bad) return 1;
    const llmt_trainer_memory *m = &j[0].m;
    char z[16];
    if (zero < 0) snprintf(z, sizeof z, "(no comm)");
    else snprintf(z, sizeof z, "%d", zero);
    printf("| %d | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
           dp, z, mib(m->params), mib(m->params_resident), mib(m->grads),
           mib(m->optimizer), mib(m->activations), mib(m->comm_buffers),
           mib(m->total), mib(m->total - m->params + m->params_resident));
    int64_t lo = m->total, hi = m->total;
    int64_t rlo = m->params_resident, rhi = m->params_resident;
    for (int r = 1; r < dp; r++) {
        if (j[r].m.total < lo) lo = j[r].m.total;
        if (j[r].m.total > hi) hi = j[r].m.total;
        if (j[r].m.params_resident < rlo) rlo = j[r].m.params_resident;
        if (j[r].m.params_resident > rhi) rhi = j[r].m.params_resident;
    }
    if (hi != lo)
        fprintf(stderr, "  dp %d ZeRO %d: totals over the ranks %lld..%lld bytes\n",
                dp, zero, (long long)lo, (long long)hi);
    if (zero == 3 && m->params_resident != m->params)
        fprintf(stderr, "  dp %d ZeRO %d: parameter buffer pages resident "
                "(mincore), rank 0: %.2f MiB (%lld bytes; reported %lld)\n",
                dp, zero, mib(j[0].measured), (long long)j[0].measured,
                (long long)m->params_resident);
    if (rhi != rlo)
        fprintf(stderr, "  dp %d ZeRO %d: params resident over the ranks "
                "%lld..%lld bytes\n", dp, zero, (long long)rlo, (long long)rhi);
    return 0;
}

int main(void)
{
    llmt_model_config_init(&cfg, sizeof cfg);
    cfg.vocab_size = 8192;
    cfg.max_seq_len = 256;
    cfg.layers = 6;
    cfg.width = 384;
    cfg.heads = 6;
    llmt_trainer_opts_init(&topts, sizeof topts);
    topts.micro_batch = 4;
    topts.seq_len = 256;
    topts.threads = 1;
    printf("| dp | ZeRO | params | params resident | grads | optimizer (m+v) | "
           "activations | comm staging | total | total resident |\n");
    printf("|----|------|--------|-----------------|-------|-----------------|"
           "-------------|--------------|-------|----------------|\n");
    int bad = row(1, -1);
    for (int dp = 2; dp <= MAXDP; dp += 2)
        for (int zero = 0; zero <= 3; zero++) bad |= row(dp, zero);
    return bad;
}

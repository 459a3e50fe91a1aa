/* A synthetic corpus whose entropy rate is known exactly, so a training run
 * can be judged against the floor its loss can reach. The chain is built to
 * be irreducible: each symbol's successors include the next symbol of the
 * alphabet (branching = 1 leaves only that: a deterministic cycle), so the
 * stationary distribution is unique and the generated text is ergodic. */
#include <math.h>
#include <string.h>

#include "core/internal.h"

#define SYNTH_MAX 27

static const char synth_letters[] = "etaoinshrdlucmfwypvbgkqjxz";

static uint64_t synth_rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double synth_unif(uint64_t *s)
{
    return (double)(synth_rng(s) >> 11) * 0x1.0p-53;
}

LLMT_API llmt_status llmt_data_synth_markov(uint64_t seed, int32_t alphabet,
                                            int32_t branching, char *buf,
                                            size_t len, double *entropy_rate)
{
    if ((!buf && len) || !entropy_rate)
        return LLMT_ERR_NULL_POINTER;
    if (alphabet < 2 || alphabet > SYNTH_MAX || branching < 1 ||
        branching > alphabet)
        return LLMT_ERR_INVALID_ARGUMENT;
    int A = alphabet, B = branching;
    /* Symbols: the first A-1 letters by English frequency, and space, so
     * every corpus has words whatever its size. */
    char sym[SYNTH_MAX];
    memcpy(sym, synth_letters, (size_t)(A - 1));
    sym[A - 1] = ' ';

    uint64_t st = seed ^ 0x6D61726B6F76ull; /* "markov" */
    int succ[SYNTH_MAX][SYNTH_MAX];
    double prob[SYNTH_MAX][SYNTH_MAX];
    double P[SYNTH_MAX][SYNTH_MAX];
    memset(P, 0, sizeof P);
    for (int i = 0; i < A; i++) {
        /* Successor 0 is the next symbol; the others a seeded choice among
         * the rest (partial Fisher-Yates). */
        int pool[SYNTH_MAX], np = 0;
        for (int j = 0; j < A; j++)
            if (j != (i + 1) % A)
                pool[np++] = j;
        succ[i][0] = (i + 1) % A;
        for (int k = 1; k < B; k++) {
            int r = k - 1 + (int)(synth_rng(&st) % (uint64_t)(np - (k - 1)));
            int t = pool[k - 1];
            pool[k - 1] = pool[r];
            pool[r] = t;
            succ[i][k] = pool[k - 1];
        }
        /* Weights in [0.1, 1.1): every successor keeps real mass. */
        double sum = 0;
        for (int k = 0; k < B; k++) {
            prob[i][k] = 0.1 + synth_unif(&st);
            sum += prob[i][k];
        }
        for (int k = 0; k < B; k++) {
            prob[i][k] /= sum;
            P[i][succ[i][k]] += prob[i][k];
        }
    }

    /* Stationary distribution by power iteration on the lazy chain
     * (I + P) / 2: same fixed point, but aperiodic, so the iteration
     * converges even when P is periodic (the cycle of branching = 1). */
    double pi[SYNTH_MAX], nx[SYNTH_MAX];
    for (int i = 0; i < A; i++)
        pi[i] = 1.0 / A;
    for (int it = 0; it < 200000; it++) {
        for (int j = 0; j < A; j++)
            nx[j] = 0.5 * pi[j];
        for (int i = 0; i < A; i++)
            for (int j = 0; j < A; j++)
                nx[j] += 0.5 * pi[i] * P[i][j];
        double s = 0, diff = 0;
        for (int j = 0; j < A; j++)
            s += nx[j];
        for (int j = 0; j < A; j++) {
            nx[j] /= s;
            diff += fabs(nx[j] - pi[j]);
            pi[j] = nx[j];
        }
        if (diff < 1e-13) /* a few ulps of 27 terms: converged */
            break;
    }
    double h = 0;
    for (int i = 0; i < A; i++) {
        double hi = 0;
        for (int k = 0; k < B; k++)
            if (prob[i][k] > 0)
                hi -= prob[i][k] * log(prob[i][k]);
        h += pi[i] * hi;
    }
    *entropy_rate = h;

    /* The first symbol is drawn from pi, so the text is stationary from its
     * first byte. */
    int cur = 0;
    double u = synth_unif(&st), c = 0;
    for (cur = 0; cur < A - 1; cur++) {
        c += pi[cur];
        if (u < c)
            break;
    }
    for (size_t n = 0; n < len; n++) {
        buf[n] = sym[cur];
        u = synth_unif(&st);
        c = 0;
        int k = 0;
        for (; k < B - 1; k++) {
            c += prob[cur][k];
            if (u < c)
                break;
        }
        cur = succ[cur][k];
    }
    return LLMT_OK;
}

/* The deterministic "training" of the crash test: each of two ranks holds a
 * parameter vector updated from its own xorshift RNG, plus a bulk tensor (a
 * cheap function of the step) that makes the saves large enough to be killed
 * in the middle. The parent replays it to know the exact bytes of any step. */
#ifndef LLMT_TEST_CRASH_STATE_H
#define LLMT_TEST_CRASH_STATE_H

#include <stdint.h>
#include <string.h>

#define CR_RANKS 2
#define CR_PARAMS 16384            /* floats per rank */
#define CR_BULK (1u << 20)         /* uint32 per rank: 4 MiB */

typedef struct {
    int64_t step;
    uint64_t rng[CR_RANKS][2];
    float p[CR_RANKS][CR_PARAMS];
    uint64_t cursor;               /* data loader position */
} cr_state;

static inline uint64_t cr_next(uint64_t *s)
{
    uint64_t x = s[0], y = s[1];
    s[0] = y;
    x ^= x << 23;
    s[1] = x ^ y ^ (x >> 17) ^ (y >> 26);
    return s[1] + y;
}

static inline void cr_init(cr_state *st)
{
    memset(st, 0, sizeof *st);
    for (int r = 0; r < CR_RANKS; r++) {
        st->rng[r][0] = 0x1234567ull + (uint64_t)r;
        st->rng[r][1] = 0x89abcdefull * (uint64_t)(r + 3);
        for (int i = 0; i < CR_PARAMS; i++)
            st->p[r][i] = (float)i / CR_PARAMS;
    }
}

static inline void cr_step(cr_state *st)
{
    for (int r = 0; r < CR_RANKS; r++)
        for (int i = 0; i < CR_PARAMS; i++) {
            float g = (float)(int32_t)(cr_next(st->rng[r]) >> 40) * 1e-9f;
            st->p[r][i] = st->p[r][i] * 0.9999f - 0.01f * g;
        }
    st->cursor += 8 * 1024;
    st->step++;
}

static inline void cr_bulk(uint32_t *b, int64_t step, int rank)
{
    uint32_t x = (uint32_t)(step * 2654435761u) ^ (uint32_t)rank * 40503u;
    for (uint32_t i = 0; i < CR_BULK; i++)
        b[i] = x + i * 2246822519u;
}

#endif

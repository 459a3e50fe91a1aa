/* llm.c's CPU trainer timed on our model file: compiled by
 * compare_train.sh with llm.c's train_gpt2.c (#included from its own
 * directory, main renamed; not part of the project), runs warm-up + N steps
 * of forward, zero_grad, backward, update on fixed random tokens and prints
 * the median step time and the peak RSS.
 * usage: llmc_bench MODEL.bin B T STEPS */
#include <sys/resource.h>

#include "train_gpt2.c"

#undef main
static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc != 5) return 2;
    int B = atoi(argv[2]), T = atoi(argv[3]), steps = atoi(argv[4]);
    GPT2 model;
    gpt2_build_from_checkpoint(&model, argv[1]);
    int n = B * T + 1;
    int *tok = malloc(sizeof(int) * (size_t)n);
    uint64_t r = 1;
    for (int i = 0; i < n; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int)((r >> 33) % (uint64_t)model.config.vocab_size);
    }
    double *t = malloc(sizeof(double) * (size_t)(steps + 1));
    for (int s = 0; s <= steps; s++) { /* step 0 is the warm-up */
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        gpt2_forward(&model, tok, tok + 1, B, T);
        gpt2_zero_grad(&model);
        gpt2_backward(&model);
        gpt2_update(&model, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, s + 1);
        clock_gettime(CLOCK_MONOTONIC, &b);
        t[s] = (b.tv_sec - a.tv_sec) + 1e-9 * (b.tv_nsec - a.tv_nsec);
        printf("llmc step %d: %.4f s loss %.4f\n", s, t[s], model.mean_loss);
    }
    qsort(t + 1, (size_t)steps, sizeof(double), cmpd);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("llmc median_s %.6f min_s %.6f peak_rss_mib %.1f\n", t[1 + steps / 2],
           t[1], ru.ru_maxrss / 1024.0);
    gpt2_free(&model);
    return 0;
}

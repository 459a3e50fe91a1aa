/* llm.c's CPU trainer as a reference: this file is compiled by
 * test_llmc_cross.sh together with llm.c's train_gpt2.c (which is NOT part
 * of the project: it is #included from its own directory, its main renamed
 * with -Dmain=llmc_main). It loads a GPT-2 model file, runs one training
 * step on the given tokens and prints the loss before and after the update.
 * usage: llmc_driver MODEL.bin TOKENS.bin B T LR */
#include "train_gpt2.c"

#undef main
int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: llmc_driver MODEL.bin TOKENS.bin B T LR\n");
        return 2;
    }
    int B = atoi(argv[3]), T = atoi(argv[4]);
    float lr = (float)atof(argv[5]);
    GPT2 model;
    gpt2_build_from_checkpoint(&model, argv[1]);
    int *tok = malloc(sizeof(int) * (size_t)(B * T + 1));
    FILE *f = fopen(argv[2], "rb");
    if (!f || fread(tok, sizeof(int), (size_t)(B * T + 1), f) != (size_t)(B * T + 1)) {
        fprintf(stderr, "llmc_driver: cannot read %s\n", argv[2]);
        return 1;
    }
    fclose(f);
    gpt2_forward(&model, tok, tok + 1, B, T);
    float loss0 = model.mean_loss;
    gpt2_zero_grad(&model);
    gpt2_backward(&model);
    gpt2_update(&model, lr, 0.9f, 0.95f, 1e-8f, 0.0f, 1);
    gpt2_forward(&model, tok, tok + 1, B, T);
    printf("llmc loss0 %.9g loss1 %.9g\n", loss0, model.mean_loss);
    gpt2_free(&model);
    free(tok);
    return 0;
}

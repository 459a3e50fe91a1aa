/* The accelerator table: dense peaks from the vendors' data sheets (without
 * sparsity), HBM, NVLink per GPU (both directions). A spec names a row with
 * hardware.gpu and may override any number (hardware.peak_tflops, ...), which
 * is how a user adds a GPU that is not listed here. */
#include <stddef.h>
#include <strings.h>

#include "spec/spec.h"

static const llmt_hw_entry hw_table[] = {
    /* name          bf16    fp8     fp32   HBM  TB/s  NVLink  per node */
    {"H100-SXM",     989.0,  1979.0, 67.0,  80,  3.35, 900,  8},
    {"H100-PCIe",    756.0,  1513.0, 51.0,  80,  2.0,  600,  8},
    {"H800",         989.0,  1979.0, 67.0,  80,  3.35, 400,  8},
    {"H200",         989.0,  1979.0, 67.0,  141, 4.8,  900,  8},
    {"GH200",        989.0,  1979.0, 67.0,  96,  4.0,  900,  4},
    {"B200",         2250.0, 4500.0, 80.0,  180, 8.0,  1800, 8},
    {"A100-80GB",    312.0,  0.0,    19.5,  80,  2.0,  600,  8},
    {"A100-40GB",    312.0,  0.0,    19.5,  40,  1.55, 600,  8},
    {"MI300X",       1307.0, 2615.0, 163.4, 192, 5.3,  896,  8},
    {"L40S",         362.0,  733.0,  91.6,  48,  0.86, 64,   8},
    /* A host CPU, so the planner has something to say about the CPU demo:
     * a few hundred GFLOP/s of fp32 and main memory as "HBM". */
    {"cpu",          0.5,    0.0,    0.5,   16,  0.05, 10,   1},
};

const llmt_hw_entry *llmt__hw_table(int *count)
{
    if (count)
        *count = (int)(sizeof hw_table / sizeof hw_table[0]);
    return hw_table;
}

const llmt_hw_entry *llmt__hw_lookup(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < sizeof hw_table / sizeof hw_table[0]; i++)
        if (!strcasecmp(hw_table[i].name, name))
            return &hw_table[i];
    /* Common spellings. */
    if (!strcasecmp(name, "H100") || !strcasecmp(name, "H100-SXM5"))
        return &hw_table[0];
    if (!strcasecmp(name, "A100") || !strcasecmp(name, "A100-SXM"))
        return &hw_table[6];
    return NULL;
}

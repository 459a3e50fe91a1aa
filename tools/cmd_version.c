/* llmtrain version / features: what is loaded and what it can do. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* Only --json is accepted by these two commands. */
static int parse_json_flag(const char *cmd, int argc, char **argv, int *json)
{
    *json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            *json = 1;
        else {
            fprintf(stderr, "llmtrain %s: unknown argument '%s'\n", cmd, argv[i]);
            return CLI_USAGE;
        }
    }
    return CLI_OK;
}

int cmd_version(int argc, char **argv)
{
    int json, rc = parse_json_flag("version", argc, argv, &json);
    if (rc != CLI_OK)
        return rc;
    uint32_t abi = llmt_abi_version();
    if (json)
        printf("{\"library\": \"%s\", \"header\": \"%d.%d.%d\", \"abi\": \"%u.%u\"}\n",
               llmt_version(), LLMT_VERSION_MAJOR, LLMT_VERSION_MINOR,
               LLMT_VERSION_PATCH, abi >> 16, abi & 0xffff);
    else
        printf("llmtrain %s (header %d.%d.%d, ABI %u.%u)\n", llmt_version(),
               LLMT_VERSION_MAJOR, LLMT_VERSION_MINOR, LLMT_VERSION_PATCH,
               abi >> 16, abi & 0xffff);
    if ((abi >> 16) != LLMT_ABI_VERSION_MAJOR)
        return cli_fail("version", "library ABI %u does not match header ABI %d",
                        abi >> 16, LLMT_ABI_VERSION_MAJOR);
    return CLI_OK;
}

int cmd_features(int argc, char **argv)
{
    int json, rc = parse_json_flag("features", argc, argv, &json);
    if (rc != CLI_OK)
        return rc;
    uint64_t f = llmt_build_features();
    int32_t gpus = 0;
    llmt_status gs = llmt_cuda_device_count(&gpus);
    if (json)
        printf("{\"features\": [");
    int n = 0;
    for (int bit = 0; bit < 64; bit++) {
        const char *name = llmt_feature_name(UINT64_C(1) << bit);
        if (!name)
            continue;
        int on = (f >> bit) & 1;
        if (json) {
            if (on)
                printf("%s\"%s\"", n++ ? ", " : "", name);
        } else
            printf("%-9s %s\n", name, on ? "yes" : "no");
    }
    if (json)
        printf("], \"cuda_devices\": %d, \"cuda_status\": \"%s\"}\n", (int)gpus,
               llmt_status_string(gs));
    else if (gs == LLMT_ERR_UNSUPPORTED)
        printf("cuda devices: none (built without CUDA)\n");
    else
        printf("cuda devices: %d%s\n", (int)gpus,
               gs == LLMT_OK ? "" : " (the CUDA runtime reported an error)");
    return CLI_OK;
}

/* The fp8 codecs of lib/exec/fp8.c on the command line, for
 * test_fp8_ref.py:
 *   fp8_tool decode   512 lines "FMT CODE BITS": the fp32 bits (hex) of every
 *                     code, FMT 0 = E4M3, 1 = E5M2
 *   fp8_tool encode   reads fp32 bit patterns (hex, one a line) from stdin,
 *                     writes "E4M3 E5M2" codes (hex) a line each */
#include <stdio.h>
#include <string.h>

#include "exec/fp8.h"

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "decode")) {
        for (int e = 0; e < 2; e++)
            for (int b = 0; b < 256; b++) {
                float v = llmt__fp8_decode((uint8_t)b, e);
                uint32_t bits;
                memcpy(&bits, &v, sizeof bits);
                printf("%d %02x %08x\n", e, b, (unsigned)bits);
            }
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "encode")) {
        unsigned bits;
        while (scanf("%x", &bits) == 1) {
            uint32_t b32 = bits;
            float v;
            memcpy(&v, &b32, sizeof v);
            printf("%02x %02x\n", llmt__fp8_encode(v, 0),
                   llmt__fp8_encode(v, 1));
        }
        return 0;
    }
    fprintf(stderr, "usage: fp8_tool decode|encode\n");
    return 2;
}

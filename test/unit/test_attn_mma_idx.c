/* The index arithmetic of the mma.sync attention kernels
 * (cuda/kernels/attention_mma_idx.h) on the host, no GPU needed:
 *
 * - ldmatrix is simulated from the PTX ISA's description (lanes 8i..8i+7
 *   give matrix i's row addresses; register i of lane l gets row l/4,
 *   columns 2(l%4)+{0,1}, or with .trans rows 2(l%4)+{0,1}, column l/4)
 *   on a tile whose values name their (row, column); the registers each
 *   lane ends up with must be the mma.m16n8k16 A and B fragments the PTX
 *   ISA lists, written out here independently of the header;
 * - the accumulator layout covers the 16x8 tile once, and re-packing two
 *   accumulator tiles as an A operand (the FA2 trick) puts every element
 *   where the A layout wants it;
 * - the causal tile walk: every (query, key) pair with key <= query < T is
 *   in a tile the owning warp works on, unmasked tiles hold no masked pair
 *   and skipped tiles no live one, for the forward/dQ and dK/dV loops at
 *   the kernels' block shapes and many T. */
#include <stdio.h>

#include "check.h"
#include "kernels/attention_mma_idx.h"

/* a 16x16 tile stored row-major: value = row * 16 + col */
static int at(int row, int col)
{
    return row * 16 + col;
}

/* ldmatrix.x4 on a 16x16 tile: addr_row/addr_col give each lane's row
 * address; out[lane][reg][half] = the value (row*16+col) received */
static void ldsm(int out[32][4][2], const int addr_row[32], const int addr_col[32], int trans)
{
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < 4; i++)
            for (int hf = 0; hf < 2; hf++) {
                int src, off;
                if (!trans) { /* row l/4 of matrix i, element 2(l%4)+hf */
                    src = 8 * i + l / 4;
                    off = 2 * (l % 4) + hf;
                } else { /* row 2(l%4)+hf of matrix i, element l/4 */
                    src = 8 * i + 2 * (l % 4) + hf;
                    off = l / 4;
                }
                out[l][i][hf] = at(addr_row[src], addr_col[src] + off);
            }
}

static void test_fragments(void)
{
    int ar[32], ac[32], got[32][4][2];
    /* A (16x16 row-major [row][k]): reg r = (row g + 8(r&1), k 2t + 8(r>>1) + hf) */
    for (int l = 0; l < 32; l++) {
        ar[l] = fa_lda_row(l);
        ac[l] = fa_lda_col(l);
        CHECK(ac[l] % 8 == 0); /* 16-byte aligned rows */
    }
    ldsm(got, ar, ac, 0);
    int bad = 0;
    for (int l = 0; l < 32; l++)
        for (int r = 0; r < 4; r++)
            for (int hf = 0; hf < 2; hf++)
                bad +=
                    got[l][r][hf] != at(l / 4 + 8 * (r & 1), 2 * (l % 4) + 8 * (r >> 1) + hf);
    CHECK_EQ_INT(bad, 0);
    /* B of two n8 tiles from [n][k]: regs 0,1 = b0,b1 of n 0..7, regs 2,3 of
     * n 8..15; b_j = (k 2t + 8j + hf, n g) */
    for (int l = 0; l < 32; l++) {
        ar[l] = fa_ldb_row(l);
        ac[l] = fa_ldb_col(l);
        CHECK(ac[l] % 8 == 0);
    }
    ldsm(got, ar, ac, 0);
    bad = 0;
    for (int l = 0; l < 32; l++)
        for (int r = 0; r < 4; r++)
            for (int hf = 0; hf < 2; hf++) {
                int n = l / 4 + 8 * (r >> 1), k = 2 * (l % 4) + 8 * (r & 1) + hf;
                bad += got[l][r][hf] != at(n, k);
            }
    CHECK_EQ_INT(bad, 0);
    /* the same fragments from [k][n] with .trans */
    for (int l = 0; l < 32; l++) {
        ar[l] = fa_ldbt_row(l);
        ac[l] = fa_ldbt_col(l);
        CHECK(ac[l] % 8 == 0);
    }
    ldsm(got, ar, ac, 1);
    bad = 0;
    for (int l = 0; l < 32; l++)
        for (int r = 0; r < 4; r++)
            for (int hf = 0; hf < 2; hf++) {
                int n = l / 4 + 8 * (r >> 1), k = 2 * (l % 4) + 8 * (r & 1) + hf;
                bad += got[l][r][hf] != at(k, n);
            }
    CHECK_EQ_INT(bad, 0);
    /* accumulator: (row g + 8(e>>1), col 2t + (e&1)), each of 16x8 once */
    int seen[16][8] = {{0}};
    bad = 0;
    for (int l = 0; l < 32; l++)
        for (int e = 0; e < 4; e++) {
            int row = fa_acc_row(l, e), col = fa_acc_col(l, e);
            bad += row != l / 4 + 8 * (e >> 1) || col != 2 * (l % 4) + (e & 1);
            if (row >= 0 && row < 16 && col >= 0 && col < 8)
                seen[row][col]++;
        }
    CHECK_EQ_INT(bad, 0);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 8; c++)
            bad += seen[r][c] != 1;
    CHECK_EQ_INT(bad, 0);
    /* re-pack: C tiles 0 (cols 0..7) and 1 (cols 8..15) as A (k = column) */
    bad = 0;
    for (int l = 0; l < 32; l++)
        for (int r = 0; r < 4; r++)
            for (int hf = 0; hf < 2; hf++) {
                int tile = fa_repack_tile(r), e = fa_repack_elem(r) + hf;
                CHECK(tile == 0 || tile == 1);
                int row = fa_acc_row(l, e), col = 8 * tile + fa_acc_col(l, e);
                bad += row != l / 4 + 8 * (r & 1) || col != 2 * (l % 4) + 8 * (r >> 1) + hf;
            }
    CHECK_EQ_INT(bad, 0);
}

/* forward and dQ: query blocks of br rows, warps of nr rows, key tiles of bc */
static void walk_rows(int T, int br, int nr, int bc)
{
    int miss = 0, unmasked = 0, skipped = 0;
    for (int q0 = 0; q0 < T; q0 += br) {
        int nt = fa_key_tiles(q0, br, bc, T);
        for (int rw = q0; rw < q0 + br; rw += nr) {
            if (rw >= T)
                continue; /* the kernels skip such warps */
            for (int row = rw; row < rw + nr && row < T; row++)
                for (int key = 0; key <= row; key++) {
                    int it = key / bc;
                    miss += it >= nt || !fa_tile_live(it * bc, rw, nr);
                }
            for (int it = 0; it < nt; it++) {
                int j0 = it * bc, live = fa_tile_live(j0, rw, nr);
                int diag = fa_tile_diag(j0, bc, rw);
                for (int row = rw; row < rw + nr; row++)
                    for (int key = j0; key < j0 + bc; key++) {
                        if (live && !diag)
                            unmasked += key > row;
                        if (!live)
                            skipped += key <= row && row < T;
                    }
            }
        }
    }
    CHECK_EQ_INT(miss, 0);
    CHECK_EQ_INT(unmasked, 0);
    CHECK_EQ_INT(skipped, 0);
}

/* dK/dV: key blocks of bkv rows, warps of 16 keys, query tiles of bq from
 * the block's first key, one head */
static void walk_keys(int T, int bkv, int bq)
{
    int miss = 0, unmasked = 0, skipped = 0;
    for (int j0 = 0; j0 < T; j0 += bkv) {
        int ntq = fa_query_tiles(j0, bq, T);
        for (int kw = j0; kw < j0 + bkv; kw += 16) {
            if (kw >= T)
                continue;
            for (int key = kw; key < kw + 16 && key < T; key++)
                for (int qi = key; qi < T; qi++) {
                    int t = (qi - j0) / bq;
                    miss += t >= ntq || !fa_qtile_live(j0 + t * bq, bq, kw);
                }
            for (int t = 0; t < ntq; t++) {
                int i0 = j0 + t * bq, live = fa_qtile_live(i0, bq, kw);
                int edge = fa_qtile_edge(i0, bq, kw, 16, T);
                for (int key = kw; key < kw + 16; key++)
                    for (int qi = i0; qi < i0 + bq; qi++) {
                        if (live && !edge)
                            unmasked += qi < key || qi >= T;
                        if (!live)
                            skipped += qi >= key && qi < T && key < T;
                    }
            }
        }
    }
    CHECK_EQ_INT(miss, 0);
    CHECK_EQ_INT(unmasked, 0);
    CHECK_EQ_INT(skipped, 0);
}

int main(void)
{
    test_fragments();
    /* the kernels' shapes: forward (br, warp rows, bc) = (128, 32, 64) for
     * hd 64, (128, 16, 64) for hd 128; dQ (64, 16, 64); dK/dV (128, 64) */
    int Ts[] = {1, 2, 15, 16, 17, 37, 63, 64, 65, 67, 127, 128, 129, 130, 200, 300, 1000};
    for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) {
        walk_rows(Ts[i], 128, 32, 64);
        walk_rows(Ts[i], 128, 16, 64);
        walk_rows(Ts[i], 64, 16, 64);
        walk_rows(Ts[i], 64, 32, 32);
        walk_rows(Ts[i], 128, 32, 16); /* tiles narrower than a warp's rows */
        walk_keys(Ts[i], 128, 64);
        walk_keys(Ts[i], 64, 64);
        walk_keys(Ts[i], 64, 32);
    }
    return check_exit("attn-mma-idx");
}

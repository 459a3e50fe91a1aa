/* Index arithmetic of the mma.sync attention kernels (attention_mma.cu),
 * kept pure and in one place so that test/unit/test_attn_mma_idx.c can
 * check it on the host against the PTX ISA's fragment layouts and a brute
 * force walk of the causal tiles. Plain C; the kernels include it too.
 *
 * Fragments of mma.m16n8k16 (bf16 in, fp32 accumulate), lane l, group
 * g = l / 4, thread-in-group t = l % 4 (PTX ISA, "Matrix Fragments for
 * mma.m16n8k16"):
 *   A 16x16: register r holds (row g + 8 * (r & 1), cols 2t + 8 * (r >> 1) + {0, 1})
 *   B 16x8:  register r holds (k 2t + 8 * r + {0, 1}, n g)
 *   C 16x8:  element e holds (row g + 8 * (e >> 1), col 2t + (e & 1))
 * ldmatrix .x4: lanes 8i..8i+7 give the row addresses of 8x8 matrix i,
 * which lands in register i; without .trans lane l gets (row l / 4,
 * cols 2 (l % 4) + {0, 1}) of it, with .trans (rows 2 (l % 4) + {0, 1},
 * col l / 4). */
#ifndef LLMT_CUDA_KERNELS_ATTENTION_MMA_IDX_H
#define LLMT_CUDA_KERNELS_ATTENTION_MMA_IDX_H

#ifdef __CUDACC__
#define FA_FN static __host__ __device__ __forceinline__
#else
#define FA_FN static inline
#endif

/* C fragment element e of lane: row and column inside the 16x8 tile. */
FA_FN int fa_acc_row(int lane, int e)
{
    return (lane >> 2) + 8 * (e >> 1);
}
FA_FN int fa_acc_col(int lane, int e)
{
    return 2 * (lane & 3) + (e & 1);
}

/* A fragment from a row-major [rows][k] shared tile (ldmatrix.x4): the
 * row and column, inside the 16x16 block, whose address this lane gives.
 * Matrix i = lane / 8: rows 8 (i & 1).., cols 8 (i >> 1).. (a0..a3). */
FA_FN int fa_lda_row(int lane)
{
    return (lane & 7) + 8 * ((lane >> 3) & 1);
}
FA_FN int fa_lda_col(int lane)
{
    return 8 * (lane >> 4);
}

/* B fragments of two n8 tiles from a shared tile stored [n][k]
 * (ldmatrix.x4, no .trans): registers 0, 1 are b0, b1 of n 0..7, registers
 * 2, 3 of n 8..15. Matrix i: n 8 (i >> 1).., k 8 (i & 1)... Returns the n
 * (the stored row) and the k (the stored column) this lane addresses. */
FA_FN int fa_ldb_row(int lane)
{
    return (lane & 7) + 8 * (lane >> 4);
}
FA_FN int fa_ldb_col(int lane)
{
    return 8 * ((lane >> 3) & 1);
}

/* The same two n8 tiles from a shared tile stored [k][n] (ldmatrix.x4.trans,
 * e.g. V or dO as the B of P.V): matrix i: k 8 (i & 1).., n 8 (i >> 1)...
 * Returns the k (stored row) and the n (stored column). */
FA_FN int fa_ldbt_row(int lane)
{
    return (lane & 7) + 8 * ((lane >> 3) & 1);
}
FA_FN int fa_ldbt_col(int lane)
{
    return 8 * (lane >> 4);
}

/* The FA2 register trick: A register r (a 16x16 operand whose k are the
 * columns of two 16x8 C tiles) is C tile fa_repack_tile(r)'s elements
 * fa_repack_elem(r) and fa_repack_elem(r) + 1, same lane. */
FA_FN int fa_repack_tile(int r)
{
    return r >> 1;
}
FA_FN int fa_repack_elem(int r)
{
    return 2 * (r & 1);
}

/* Causal tiles. A warp owns rows [r, r + nr) of one side, a tile the
 * columns [c, c + nc) of the other; "rows see columns" when col <= row
 * (forward and dQ: rows are queries, columns keys). */
/* the tile has a column some row sees: the warp works on it */
FA_FN int fa_tile_live(int c, int r, int nr)
{
    return c <= r + nr - 1;
}
/* some row of the warp does not see some column of the tile: mask it */
FA_FN int fa_tile_diag(int c, int nc, int r)
{
    return c + nc - 1 > r;
}
/* key tiles a query block [q0, q0 + br) walks: 0 .. (min(T, q0 + br) - 1) / bc */
FA_FN int fa_key_tiles(int q0, int br, int bc, int T)
{
    int last = q0 + br < T ? q0 + br - 1 : T - 1;
    return last / bc + 1;
}
/* dK/dV, rows are keys [k, k + nk), columns queries [i, i + nq): the tile
 * has a query at or after some key of the warp */
FA_FN int fa_qtile_live(int i, int nq, int k)
{
    return i + nq - 1 >= k;
}
/* some (query, key) pair of the tile is masked: a query before a key of the
 * warp, or a query at or past T */
FA_FN int fa_qtile_edge(int i, int nq, int k, int nk, int T)
{
    return i < k + nk - 1 || i + nq > T;
}
/* query tiles of one head that a key block starting at j0 walks */
FA_FN int fa_query_tiles(int j0, int bq, int T)
{
    return (T - j0 + bq - 1) / bq;
}

#endif

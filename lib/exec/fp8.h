/* fp8 on the host: the two OCP FP8 formats, the delayed-scaling recipe that
 * picks per-tensor scales, and a per-block (tile) quantiser that is the CPU
 * reference for a future GPU kernel. doc/fp8.md explains the recipes.
 *
 * Formats (OCP 8-bit Floating Point Specification, 2023; the `fn` variant
 * for E4M3):
 *   E4M3  sign, 4 exponent bits (bias 7), 3 mantissa bits. No infinities;
 *         S.1111.111 is NaN, so the largest finite value is 1.75 * 2^8 = 448.
 *         Smallest subnormal 2^-9, smallest normal 2^-6.
 *   E5M2  sign, 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like:
 *         S.11111.00 = inf, S.11111.{01,10,11} = NaN; largest finite
 *         1.75 * 2^15 = 57344. Smallest subnormal 2^-16, smallest normal 2^-14.
 *
 * Encoding rounds to nearest, ties to even, with subnormals, and saturates:
 * this is the CUDA quantize kernel (cuda/kernels/optim.cu) bit for bit, which
 * converts with __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...):
 *   - a finite |x| that rounds past the largest finite value, and +-inf, give
 *     +-max (0x7E/0xFE for E4M3, 0x7B/0xFB for E5M2);
 *   - any NaN gives 0x7F in both formats (the canonical NaN: sign dropped);
 *   - -0 and negative values that round to zero give 0x80 (-0).
 *
 * Scaling. A tensor x is stored as q = fp8(x * scale) and read back as
 * q * scale_inv, scale_inv = 1 / scale (the fp32 dequantisation factor the
 * fp8 GEMM takes per operand). The recipes differ in where amax comes from:
 *
 *   delayed (TransformerEngine's DelayedScaling recipe,
 *   transformer_engine.common.recipe.DelayedScaling): every tensor keeps the
 *   amaxes (max |x|) of its last H steps. After a step,
 *       a     = max(history)              (algo MAX)
 *             | the newest amax           (algo MOST_RECENT)
 *       scale = fp8_max / a / 2^margin
 *   and that scale quantises the tensor in the NEXT step. When a is 0 the
 *   previous scale is kept (as TE does: torch.where(amax > 0, sf, scale)); a
 *   scale that overflows fp32 (tiny a) becomes FLT_MAX (TE's
 *   compute_scale_from_amax). Scales start at 1.
 *   current: scale from this step's own amax (H = 1, MOST_RECENT), measured
 *   before the tensor is quantised.
 *   A non-finite measured amax (an overflow in that step) is counted and
 *   dropped: it does not enter the history and that tensor's scale stays.
 *   (TE pushes it into the history, where a NaN/inf then freezes the scale
 *   for H steps; a step with a non-finite amax is normally skipped anyway.)
 *
 *   blockwise (DeepSeek-V3 sec. 3.3, "fine-grained quantisation"): one
 *   scale per tile of br x bc elements, 1 x 128 for activations and
 *   128 x 128 for weights; scale = fp8_max / amax(tile), so one outlier only
 *   costs its own tile its precision.
 *
 * Formats per tensor: "e4m3" uses E4M3 everywhere; "hybrid" (TE's
 * Format.HYBRID, the default) uses E4M3 for forward tensors (activations,
 * weights) and E5M2, with its wider range, for gradients.
 *
 * Nothing here prints, exits or aborts; failures return llmt_status with the
 * detail on ctx (when given). */
#ifndef LLMT_EXEC_FP8_H
#define LLMT_EXEC_FP8_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"

#define LLMT__FP8_E4M3_MAX 448.0f
#define LLMT__FP8_E5M2_MAX 57344.0f

/* fp8(x) with the rounding and saturation described above; e5m2 = 0 gives
 * E4M3. */
uint8_t llmt__fp8_encode(float x, int e5m2);
/* The value of code b (exact in fp32): NaN codes give NaN, E5M2 infinities
 * give +-inf. */
float llmt__fp8_decode(uint8_t b, int e5m2);
/* The largest finite value: 448 (E4M3) or 57344 (E5M2). */
float llmt__fp8_max(int e5m2);

/* The format of one tensor under precision.fp8_format: hybrid gives E5M2 to
 * gradients, e4m3 gives E4M3 to everything. Returns the e5m2 flag. */
enum { LLMT__FP8_FORMAT_E4M3 = 0, LLMT__FP8_FORMAT_HYBRID = 1 };
int llmt__fp8_format_e5m2(int format, int is_grad);

/* ------------------------------------------------------ delayed scaling */

enum { LLMT__FP8_AMAX_MAX = 0, LLMT__FP8_AMAX_MOST_RECENT = 1 };

typedef struct llmt__fp8_delayed llmt__fp8_delayed;

/* State for `n` tensors (n >= 1): an amax history of `history` steps
 * (1..1024) per tensor, margin 0..16, algo LLMT__FP8_AMAX_*. e5m2[i] != 0
 * makes tensor i E5M2 (fp8_max 57344), else E4M3 (448); e5m2 may be NULL
 * (all E4M3). Every scale starts at 1, every history at empty. ctx (may be
 * NULL) provides the allocator and receives the error detail.
 * INVALID_ARGUMENT for a bad n/history/margin/algo, OUT_OF_MEMORY. */
llmt_status llmt__fp8_delayed_create(llmt_context *ctx, int n, int history,
                                     int margin, int algo,
                                     const unsigned char *e5m2,
                                     llmt__fp8_delayed **out);
void llmt__fp8_delayed_destroy(llmt__fp8_delayed *d); /* NULL: no-op */

/* Record the amaxes measured this step (amax_now[i] for tensor i, n values)
 * and recompute every scale from its history as above. Returns how many of
 * the n amaxes were not finite (those are dropped, their scales kept), so 0
 * means a clean step; -1 when d or amax_now is NULL. */
int llmt__fp8_delayed_update(llmt__fp8_delayed *d, const float *amax_now);

int llmt__fp8_delayed_count(const llmt__fp8_delayed *d);
/* Quantisation multipliers (x -> fp8(x * scale[i])) and their inverses
 * (dequantisation factors, for the GEMM's per-tensor scale pointers): n
 * values each, valid until the next update or destroy. */
const float *llmt__fp8_delayed_scales(const llmt__fp8_delayed *d);
const float *llmt__fp8_delayed_scale_invs(const llmt__fp8_delayed *d);
/* 1 when tensor i is E5M2. */
int llmt__fp8_delayed_e5m2(const llmt__fp8_delayed *d, int i);

/* The recipe's state as n rows of history + 2 floats (a checkpoint
 * tensor): row i = scale, the number of amaxes recorded (0..history), then
 * those amaxes oldest first, zeros after. import checks every row (scale
 * finite and > 0, count in range, amaxes finite and >= 0) before taking
 * any: INVALID_ARGUMENT names the first bad row. import recomputes each
 * scale from the imported amaxes with this state's formats and margin
 * (the saved scale where they and the saving run's agree; the saved one
 * when no amax above 0 was recorded). */
void llmt__fp8_delayed_export(const llmt__fp8_delayed *d, float *out);
llmt_status llmt__fp8_delayed_import(llmt__fp8_delayed *d, const float *in);
int llmt__fp8_delayed_history(const llmt__fp8_delayed *d);

/* The scale for one amax: fp8_max(e5m2) / amax / 2^margin, `prev` when amax
 * is 0 or not finite, FLT_MAX when the quotient overflows. */
float llmt__fp8_scale_from_amax(float amax, int e5m2, int margin, float prev);

/* ----------------------------------------------- per-block (tile) scaling */

/* Quantise row-major x[rows, cols] with one scale per br x bc tile (edge
 * tiles may be smaller): codes[rows*cols] = fp8(x * s_t), s_t = fp8_max /
 * amax(tile t), and dequant[t] = 1 / s_t for the tiles in row-major order
 * (ceil(rows/br) x ceil(cols/bc) of them). A tile whose amax is 0 or not
 * finite gets s_t = 1 (as TE's compute_scale_from_amax); its NaNs stay NaN
 * and its infinities saturate. INVALID_ARGUMENT for a non-positive size,
 * NULL_POINTER for a NULL array. */
llmt_status llmt__fp8_quantize_blocks(const float *x, int64_t rows,
                                      int64_t cols, int64_t br, int64_t bc,
                                      int e5m2, uint8_t *codes,
                                      float *dequant);
/* y[rows*cols] = decode(codes) * dequant[tile]. */
llmt_status llmt__fp8_dequantize_blocks(const uint8_t *codes, int64_t rows,
                                        int64_t cols, int64_t br, int64_t bc,
                                        int e5m2, const float *dequant,
                                        float *y);

#endif

//! Products of f64 matrices, the one place the interpreter multiplies matrices.
//!
//! Every dot product of the interpreter that reads a weight or a cache goes through here:
//! f32 values widened to f64 (a product of two f32 values is exact in f64), the sums
//! accumulated in f64 by [`rdu_dgemm`] — one chain of fused multiply-adds per element, in
//! inner order (a `linear` of at most `FEW_ROWS` rows: eight running sums instead) — the result
//! rounded to f32 once by the caller. An element's sum depends only on its two vectors and on
//! which of the two paths computes it — never on the CPU, on how the product is blocked or on
//! how many rows or columns are computed with it otherwise. The paths add the same exact
//! products in different orders, so they differ by f64 rounding (~1e-16 relative) before the
//! result is rounded to f32.

use rayon::prelude::*;
use rdu_spatial::fill::filled;
use rdu_spatial::q8::{dequant_blocks, Q8Block, QK8_0};
use std::borrow::Cow;

/// A row-major f64 matrix view: `rows × cols` elements at `data[offset + r·row_stride + c·col_stride]`.
pub(super) type View<'a> = rdu_spatial::view::View<'a, f64>;

/// `c ← a · b`, `a [m × k]`, `b [k × n]`, `c` dense row-major `[m × n]`; one thread (the
/// callers run products in parallel). Each element is one fused multiply-add chain over the
/// inner dimension in order ([`rdu_dgemm`]).
pub(super) fn gemm(a: View<'_>, b: View<'_>, c: &mut [f64]) {
    rdu_dgemm::product(a, b, c)
}

/// The f32 values widened to f64.
pub(super) fn widen(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

/// The weight rows of a `linear`, `k` values each: f32 values, or Q8_0 blocks (`k / 32` a row)
/// read as their exact values `d·q` a block of rows at a time — the whole weight is never
/// held as f32.
#[derive(Clone, Copy)]
pub(super) enum Weights<'a> {
    F32(&'a [f32]),
    Q8(&'a [Q8Block]),
}

impl<'a> Weights<'a> {
    /// Rows `j0..j1` as f32 values.
    fn rows(self, j0: usize, j1: usize, k: usize) -> Cow<'a, [f32]> {
        match self {
            Weights::F32(w) => Cow::Borrowed(&w[j0 * k..j1 * k]),
            // Runs start at whole blocks: a row holds whole blocks, and so does `fill::RUN`.
            Weights::Q8(_) => Cow::Owned(filled((j1 - j0) * k, |i, out| self.read(j0 * k + i, out))),
        }
    }

    /// The values from flat index `at` on, into `out`: for Q8_0 blocks, `at` and `out` cover
    /// whole blocks (a row holds whole blocks), each read as `dequant_block` gives it.
    fn read(self, at: usize, out: &mut [f32]) {
        match self {
            Weights::F32(w) => out.copy_from_slice(&w[at..at + out.len()]),
            Weights::Q8(blocks) => dequant_blocks(&blocks[at / QK8_0..], out),
        }
    }
}

/// At most this many rows (a decode step, a small batch), [`linear_f32`] takes each dot
/// product directly from the f32 weights: a packed product widens every weight value to f64
/// for a product that reads it a few times. Measured on a 2-core Zen 1 against the `gemm`
/// crate, the packed product then (`[n × 5120] · [5120 × 1536]`, both threads, the same run):
/// 1 row 3.7 GMAC/s here against 2.4 through `gemm`, 4 rows 8.0 against 7.3, 6 rows 6.0
/// against 8.6, 8 rows 8.5 against 10.6, 19 rows 9.7 against 14.4, 128 rows 10.2 against 19.2.
const FEW_ROWS: usize = 5;

/// Running sums of a dot product: element `i` is added into sum `i mod LANES`.
const LANES: usize = 8;
/// Weight rows one task of [`few_rows`] takes: it reads every activation row once per block.
const BLOCK_ROWS: usize = 16;
/// Inputs of a step of [`few_rows`] (a multiple of `LANES`): the activation rows' part of a
/// step stays in cache while the block's weight rows are multiplied with it.
const STEP: usize = 512;

/// `y = x Wᵀ (+ b)` for few rows of `x`, each element exactly `dot_f64` of its row and
/// column (the same sums in the same order): parallel over blocks of weight rows, each block
/// stepping through the inputs and taking two activation rows and two weight rows at a time,
/// so that every value loaded serves two sums.
fn few_rows(x64: &[f64], n: usize, w: Weights<'_>, k: usize, bias: Option<&[f32]>, y: &mut [f32]) {
    let o = y.len() / n.max(1);
    let starts: Vec<usize> = (0..o).step_by(BLOCK_ROWS).collect();
    let blocks: Vec<Vec<f64>> = starts
        .into_par_iter()
        .map(|j0| {
            let rows = BLOCK_ROWS.min(o - j0);
            let w = w.rows(j0, j0 + rows, k);
            // sums[jj·n + r]: the running sums of row r of x with weight row j0 + jj.
            let mut sums = vec![[0f64; LANES]; rows * n];
            for k0 in (0..k).step_by(STEP) {
                let k1 = (k0 + STEP).min(k);
                let x = |r: usize| &x64[r * k + k0..r * k + k1];
                let wr = |jj: usize| &w[jj * k + k0..jj * k + k1];
                let mut r = 0;
                while r < n {
                    let mut jj = 0;
                    if r + 1 < n {
                        while jj + 1 < rows {
                            tile::<2, 2>([x(r), x(r + 1)], [wr(jj), wr(jj + 1)], &mut sums, jj, r, n);
                            jj += 2;
                        }
                        if jj < rows {
                            tile::<2, 1>([x(r), x(r + 1)], [wr(jj)], &mut sums, jj, r, n);
                        }
                        r += 2;
                    } else {
                        while jj + 3 < rows {
                            tile::<1, 4>([x(r)], [wr(jj), wr(jj + 1), wr(jj + 2), wr(jj + 3)], &mut sums, jj, r, n);
                            jj += 4;
                        }
                        while jj < rows {
                            tile::<1, 1>([x(r)], [wr(jj)], &mut sums, jj, r, n);
                            jj += 1;
                        }
                        r += 1;
                    }
                }
            }
            sums.iter().map(|s| s.iter().sum()).collect()
        })
        .collect();
    for (b, block) in blocks.iter().enumerate() {
        for (jj, col) in block.chunks_exact(n).enumerate() {
            let j = b * BLOCK_ROWS + jj;
            let add = bias.map_or(0.0, |b| f64::from(b[j]));
            for (r, &v) in col.iter().enumerate() {
                y[r * o + j] = (v + add) as f32;
            }
        }
    }
}

/// Adds the products of `R` activation rows and `C` weight rows (one step's inputs, starting
/// at a multiple of `LANES`) into their running sums `sums[(jj + c)·n + r + i]`: by AVX2 and
/// FMA when the CPU has them, [`tile_plain`] otherwise and for the inputs past the last whole
/// `LANES`. Both give the same sums: a product of two values widened from f32 is exact in f64,
/// so a fused multiply-add rounds once where `a += x·w` does.
#[inline(always)]
fn tile<const R: usize, const C: usize>(
    xs: [&[f64]; R],
    ws: [&[f32]; C],
    sums: &mut [[f64; LANES]],
    jj: usize,
    r: usize,
    n: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() {
        let len = xs[0].len();
        let whole = len - len % LANES;
        let fits = xs.iter().all(|x| x.len() == len) && ws.iter().all(|w| w.len() == len);
        if fits && (jj + C - 1) * n + r + R - 1 < sums.len() {
            // SAFETY: AVX2 and FMA are present; every row holds `whole` values and every sum
            // the tile touches lies inside `sums` (both checked just above).
            unsafe { tile_avx2::<R, C>(xs, ws, sums, jj * n + r, n, whole) };
            return tile_plain::<R, C>(xs.map(|x| &x[whole..]), ws.map(|w| &w[whole..]), sums, jj, r, n);
        }
    }
    tile_plain::<R, C>(xs, ws, sums, jj, r, n)
}

/// Whether this CPU has AVX2 and FMA (asked once).
#[cfg(target_arch = "x86_64")]
fn avx2_fma() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma"))
}

/// The first `whole` (a multiple of `LANES`) products of [`tile`] added into its sums
/// (`sums[at + c·n + i]` for row `i` and weight row `c`), four lanes to a register.
///
/// # Safety
/// The CPU has AVX2 and FMA; every row holds at least `whole` values and every sum indexes `sums`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2<const R: usize, const C: usize>(
    xs: [&[f64]; R],
    ws: [&[f32]; C],
    sums: &mut [[f64; LANES]],
    at: usize,
    n: usize,
    whole: usize,
) {
    use std::arch::x86_64::*;
    use std::mem::transmute;
    // Values move in and out of registers as arrays (`transmute` between `[f64; 4]` and
    // `__m256d` is a plain move; the unaligned load intrinsics would carry the test profile's
    // pointer checks into the innermost loop).
    let quad = |v: &[f64]| -> __m256d { transmute::<[f64; 4], __m256d>(v.try_into().expect("four values")) };
    let wide =
        |v: &[f32]| -> __m256d { _mm256_cvtps_pd(transmute::<[f32; 4], __m128>(v.try_into().expect("four values"))) };
    // acc[i][c]: lanes 0–3 and 4–7 of row i's sums with weight row c.
    let mut acc: [[[__m256d; 2]; C]; R] = std::array::from_fn(|i| {
        std::array::from_fn(|c| [quad(&sums[at + c * n + i][..4]), quad(&sums[at + c * n + i][4..])])
    });
    for k in (0..whole).step_by(LANES) {
        let wv: [[__m256d; 2]; C] = std::array::from_fn(|c| [wide(&ws[c][k..k + 4]), wide(&ws[c][k + 4..k + 8])]);
        for (row, x) in acc.iter_mut().zip(&xs) {
            let xv = [quad(&x[k..k + 4]), quad(&x[k + 4..k + 8])];
            for (a, wc) in row.iter_mut().zip(&wv) {
                a[0] = _mm256_fmadd_pd(xv[0], wc[0], a[0]);
                a[1] = _mm256_fmadd_pd(xv[1], wc[1], a[1]);
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        for (c, a) in row.iter().enumerate() {
            let (lo, hi) = (transmute::<__m256d, [f64; 4]>(a[0]), transmute::<__m256d, [f64; 4]>(a[1]));
            sums[at + c * n + i] = [lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]];
        }
    }
}

/// [`tile`] in plain f64 arithmetic, lane by lane: its definition.
#[inline(always)]
fn tile_plain<const R: usize, const C: usize>(
    xs: [&[f64]; R],
    ws: [&[f32]; C],
    sums: &mut [[f64; LANES]],
    jj: usize,
    r: usize,
    n: usize,
) {
    let mut acc = [[[0f64; LANES]; C]; R];
    for (i, row) in acc.iter_mut().enumerate() {
        for (c, a) in row.iter_mut().enumerate() {
            *a = sums[(jj + c) * n + r + i];
        }
    }
    let len = xs[0].len();
    let whole = len - len % LANES;
    for at in (0..whole).step_by(LANES) {
        let lanes = |v: &[f64]| -> [f64; LANES] { v[at..at + LANES].try_into().expect("LANES values") };
        let wv: [[f64; LANES]; C] = std::array::from_fn(|c| {
            let w: &[f32; LANES] = ws[c][at..at + LANES].try_into().expect("LANES values");
            w.map(f64::from)
        });
        for (row, x) in acc.iter_mut().zip(xs) {
            let xv = lanes(x);
            for (a, wc) in row.iter_mut().zip(&wv) {
                for l in 0..LANES {
                    a[l] += xv[l] * wc[l];
                }
            }
        }
    }
    for (l, at) in (whole..len).enumerate() {
        for (i, row) in acc.iter_mut().enumerate() {
            for (c, a) in row.iter_mut().enumerate() {
                a[l] += xs[i][at] * f64::from(ws[c][at]);
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        for (c, a) in row.iter().enumerate() {
            sums[(jj + c) * n + r + i] = *a;
        }
    }
}

/// `Σ x[i]·w[i]` in f64: eight running sums (element `i` into sum `i mod 8`), added in order.
/// The definition [`few_rows`] computes with its tiles.
#[cfg(test)]
fn dot_f64(x: &[f64], w: &[f32]) -> f64 {
    let mut sums = [0f64; LANES];
    for (i, (&a, &b)) in x.iter().zip(w).enumerate() {
        sums[i % LANES] += a * f64::from(b);
    }
    sums.iter().sum()
}

/// `y = x Wᵀ (+ b)` for `x [n × k]`, `W [o × k]` (f32, row-major): each element the f64 sum
/// of its products (plus the bias, in f64), rounded to f32. Parallel over blocks of output
/// columns; each block's weight rows are widened once and multiplied with every row of `x`.
pub(super) fn linear_f32(x: &[f32], n: usize, w: Weights<'_>, o: usize, k: usize, bias: Option<&[f32]>) -> Vec<f32> {
    let mut y = vec![0f32; n * o];
    if n == 0 || o == 0 {
        return y;
    }
    let x64 = widen(x);
    if n <= FEW_ROWS {
        few_rows(&x64, n, w, k, bias, &mut y);
    } else {
        many_rows(&x64, n, w, k, bias, &mut y);
    }
    y
}

/// Weight rows `j0..j0 + count` of a `linear`, `k` values each, as [`rdu_dgemm`] reads them: a
/// block of f32 values at a time (a Q8_0 block's values as `dequant_block` gives them), widened
/// to f64 as its product packs them.
struct WeightRows<'a> {
    w: Weights<'a>,
    j0: usize,
    count: usize,
    k: usize,
}

impl rdu_dgemm::Rows for WeightRows<'_> {
    fn count(&self) -> usize {
        self.count
    }
    fn width(&self) -> usize {
        self.k
    }
    fn values(&self, j: usize, p0: usize, out: &mut [f32]) {
        // `p0` is a multiple of `rdu_dgemm::BLOCK`, itself of the Q8_0 block size.
        self.w.read((self.j0 + j) * self.k + p0, out);
    }
}

/// Output columns one task of [`many_rows`] takes at most: a block's product packs each of its
/// weight values once, so a narrow block costs nothing extra, and many blocks balance the
/// threads.
const BLOCK_COLUMNS: usize = 256;

/// `y = x Wᵀ (+ b)` through [`rdu_dgemm::product_rows`]: blocks of output columns in parallel,
/// each block's weight rows widened as the product packs them.
fn many_rows(x64: &[f64], n: usize, w: Weights<'_>, k: usize, bias: Option<&[f32]>, y: &mut [f32]) {
    let o = y.len() / n.max(1);
    let columns = BLOCK_COLUMNS.min(o.div_ceil(2 * rayon::current_num_threads())).max(16);
    let blocks: Vec<(usize, Vec<f64>)> = (0..o)
        .step_by(columns)
        .collect::<Vec<_>>()
        .into_par_iter()
        .map(|j0| {
            let cols = columns.min(o - j0);
            // c [n × cols] = x · W_blockᵀ.
            let mut c = vec![0f64; n * cols];
            rdu_dgemm::product_rows(View::dense(x64, n, k), &WeightRows { w, j0, count: cols, k }, &mut c);
            (j0, c)
        })
        .collect();
    for (j0, c) in blocks {
        let cols = c.len() / n;
        for (r, row) in c.chunks_exact(cols).enumerate() {
            for (jj, &v) in row.iter().enumerate() {
                let b = bias.map_or(0.0, |b| f64::from(b[j0 + jj]));
                y[r * o + j0 + jj] = (v + b) as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeded `x [n × k]`, `W [o × k]` and a bias of `o`, in [-0.5, 0.5).
    fn operands(n: usize, o: usize, k: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let value = |i: usize, s: usize| ((i * 2_654_435_761 + s * 40_503) % 1_000_003) as f32 / 1_000_003.0 - 0.5;
        let draw = |len: usize, s: usize| (0..len).map(|i| value(i, s)).collect();
        (draw(n * k, 1), draw(o * k, 2), draw(o, 3))
    }

    /// `few_rows` gives each element exactly `dot_f64` of its row and column (plus the bias),
    /// across odd row and column counts, partial blocks and inputs past one step.
    #[test]
    fn few_rows_is_the_lane_sum_of_every_element() {
        for (n, o, k) in [(1, 1, 1), (3, 35, 1037), (8, 16, 512), (19, 33, 2 * STEP + 13), (64, 17, 40), (2, 3, 0)] {
            let (x, w, b) = operands(n, o, k);
            let x64 = widen(&x);
            let mut y = vec![0f32; n * o];
            few_rows(&x64, n, Weights::F32(&w), k, Some(&b), &mut y);
            for r in 0..n {
                for j in 0..o {
                    let want = (dot_f64(&x64[r * k..(r + 1) * k], &w[j * k..(j + 1) * k]) + f64::from(b[j])) as f32;
                    assert_eq!(y[r * o + j].to_bits(), want.to_bits(), "n {n} o {o} k {k}: ({r}, {j})");
                }
            }
        }
    }

    /// A Q8_0 weight gives, on both paths, exactly what the same weight's values as f32 give:
    /// its blocks are widened as the product packs them (`WeightRows`), a whole block at a time
    /// across several packing blocks of a row.
    #[test]
    fn q8_weights_are_read_as_their_exact_values() {
        for (n, o, k) in [(3, 9, 64), (7, 33, 2 * rdu_dgemm::BLOCK + 96), (40, 70, 320)] {
            let (x, w, b) = operands(n, o, k);
            let blocks: Vec<Q8Block> = w.chunks_exact(QK8_0).map(Q8Block::quantize).collect();
            let values: Vec<f32> = blocks
                .iter()
                .flat_map(|block| {
                    let mut v = [0f32; QK8_0];
                    rdu_spatial::q8::dequant_block(block, &mut v);
                    v
                })
                .collect();
            let from_blocks = linear_f32(&x, n, Weights::Q8(&blocks), o, k, Some(&b));
            let from_values = linear_f32(&x, n, Weights::F32(&values), o, k, Some(&b));
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&from_blocks), bits(&from_values), "n {n} o {o} k {k}");
        }
    }

    /// `many_rows` (the `rdu_dgemm` path: blocks of weight rows widened as they are packed)
    /// gives each element its f64 sum rounded to f32: within f64 rounding of `dot_f64` before
    /// the rounding, so within one f32 rounding after it — across partial blocks, bias and a
    /// width past `rdu_dgemm`'s inner blocking.
    #[test]
    fn many_rows_are_the_f64_sums_rounded_once() {
        for (n, o, k) in [(6, 35, 1037), (19, 130, 700), (129, 17, 2 * STEP + 13), (40, 3, 1), (9, 4, 0)] {
            let (x, w, b) = operands(n, o, k);
            let x64 = widen(&x);
            let mut y = vec![f32::NAN; n * o];
            many_rows(&x64, n, Weights::F32(&w), k, Some(&b), &mut y);
            for r in 0..n {
                for j in 0..o {
                    let (xr, wj) = (&x64[r * k..(r + 1) * k], &w[j * k..(j + 1) * k]);
                    let want = dot_f64(xr, wj) + f64::from(b[j]);
                    let mass: f64 = xr.iter().zip(wj).map(|(a, &c)| (a * f64::from(c)).abs()).sum::<f64>() + 1.0;
                    let got = f64::from(y[r * o + j]);
                    let bound = want.abs() * f64::from(f32::EPSILON) / 2.0 + mass * k as f64 * f64::EPSILON;
                    assert!((got - want).abs() <= bound, "n {n} o {o} k {k}: ({r}, {j}) {got} against {want}");
                }
            }
        }
    }
}

//! Products of f64 matrices, the one place the interpreter multiplies matrices.
//!
//! Every dot product of the interpreter that reads a weight or a cache goes through here:
//! f32 values widened to f64 (a product of two f32 values is exact in f64), the sums
//! accumulated in f64 by `matrixmultiply::dgemm` (a `linear` of at most `FEW_ROWS` rows: by
//! direct running sums instead), the result rounded to f32 once by the caller. An element's
//! sum depends only on its two vectors and on which of the two paths computes it, never on
//! how many rows or columns are computed with it otherwise; the two paths add the same exact
//! products in different orders, so they differ by f64 rounding (~1e-16 relative) before the
//! result is rounded to f32.

use rayon::prelude::*;

/// A row-major f64 matrix view: `rows × cols` elements at `data[offset + r·row_stride + c·col_stride]`.
pub(super) type View<'a> = rdu_spatial::view::View<'a, f64>;

/// `c ← a · b + (c if accumulate)`, `a [m × k]`, `b [k × n]`, `c` dense row-major `[m × n]`.
pub(super) fn gemm(a: View<'_>, b: View<'_>, c: &mut [f64], accumulate: bool) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert!(b.rows == k && c.len() == m * n, "gemm: shapes [{m}×{k}]·[{}×{n}] into {}", b.rows, c.len());
    assert!(a.in_bounds() && b.in_bounds(), "gemm: a view reaches past its data");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c.fill(0.0);
        }
        return;
    }
    let stride = |s: usize| isize::try_from(s).expect("stride fits isize");
    // SAFETY: both views were checked to lie inside their slices, and `c` holds exactly
    // `m × n` elements addressed with strides (n, 1).
    unsafe {
        matrixmultiply::dgemm(
            m,
            k,
            n,
            1.0,
            a.data.as_ptr().add(a.offset),
            stride(a.row_stride),
            stride(a.col_stride),
            b.data.as_ptr().add(b.offset),
            stride(b.row_stride),
            stride(b.col_stride),
            if accumulate { 1.0 } else { 0.0 },
            c.as_mut_ptr(),
            stride(n),
            1,
        );
    }
}

/// The f32 values widened to f64.
pub(super) fn widen(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

/// At most this many rows (a decode step, a small batch), [`linear_f32`] takes each dot
/// product directly from the f32 weights: `dgemm` would widen and pack every weight row for
/// a product that reads it once.
const FEW_ROWS: usize = 8;

/// `y = x Wᵀ (+ b)` for few rows of `x`: each element the f64 sum of its `k` products in
/// order of `k` (eight running sums over `k mod 8`, added in order at the end), parallel
/// over the weight's rows.
fn few_rows(x64: &[f64], n: usize, w: &[f32], k: usize, bias: Option<&[f32]>, y: &mut [f32]) {
    let o = w.len() / k.max(1);
    let columns: Vec<Vec<f32>> = (0..o)
        .into_par_iter()
        .with_min_len(64)
        .map(|j| {
            let wj = &w[j * k..(j + 1) * k];
            let b = bias.map_or(0.0, |b| f64::from(b[j]));
            (0..n).map(|r| (dot_f64(&x64[r * k..(r + 1) * k], wj) + b) as f32).collect()
        })
        .collect();
    for (j, col) in columns.iter().enumerate() {
        for (r, &v) in col.iter().enumerate() {
            y[r * o + j] = v;
        }
    }
}

/// `Σ x[i]·w[i]` in f64: eight running sums (element `i` into sum `i mod 8`), added in order.
fn dot_f64(x: &[f64], w: &[f32]) -> f64 {
    let mut sums = [0f64; 8];
    let (xc, wc) = (x.chunks_exact(8), w.chunks_exact(8));
    let (xr, wr) = (xc.remainder(), wc.remainder());
    for (xs, ws) in xc.zip(wc) {
        for i in 0..8 {
            sums[i] += xs[i] * f64::from(ws[i]);
        }
    }
    for (i, (&a, &b)) in xr.iter().zip(wr).enumerate() {
        sums[i] += a * f64::from(b);
    }
    sums.iter().sum()
}

/// Bytes of widened weight rows one task multiplies at a time. `dgemm` packs each operand
/// once per call, so a block wide enough makes packing the activations a small part of the
/// work (blocks of 64 columns spent most of a 512-row prefill packing them).
const BLOCK_BYTES: usize = 1 << 25;

/// `y = x Wᵀ (+ b)` for `x [n × k]`, `W [o × k]` (f32, row-major): each element the f64 sum
/// of its products (plus the bias, in f64), rounded to f32. Parallel over blocks of output
/// columns; each block's weight rows are widened once and multiplied with every row of `x`.
pub(super) fn linear_f32(x: &[f32], n: usize, w: &[f32], o: usize, k: usize, bias: Option<&[f32]>) -> Vec<f32> {
    let mut y = vec![0f32; n * o];
    if n == 0 || o == 0 {
        return y;
    }
    let x64 = widen(x);
    if n <= FEW_ROWS {
        few_rows(&x64, n, w, k, bias, &mut y);
        return y;
    }
    // As many columns as rows of `x` (packing `x` then costs no more than packing the block;
    // few rows keep the block small enough to stay in cache), at most BLOCK_BYTES of widened
    // rows, and at least two blocks per thread for balance.
    let per_thread = o.div_ceil(2 * rayon::current_num_threads());
    let columns = n.max(64).min(BLOCK_BYTES / 8 / k.max(1)).min(per_thread).max(16);
    let blocks: Vec<(usize, Vec<f64>)> = (0..o)
        .step_by(columns)
        .collect::<Vec<_>>()
        .into_par_iter()
        .map(|j0| {
            let cols = columns.min(o - j0);
            let w64 = widen(&w[j0 * k..(j0 + cols) * k]);
            // c [cols × n] = W_block · xᵀ.
            let mut c = vec![0f64; cols * n];
            gemm(View::dense(&w64, cols, k), View::dense(&x64, n, k).t(), &mut c, false);
            (j0, c)
        })
        .collect();
    for (j0, c) in blocks {
        for (jj, col) in c.chunks_exact(n).enumerate() {
            let j = j0 + jj;
            let b = bias.map_or(0.0, |b| f64::from(b[j]));
            for (r, &v) in col.iter().enumerate() {
                y[r * o + j] = (v + b) as f32;
            }
        }
    }
    y
}

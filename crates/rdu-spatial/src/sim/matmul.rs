//! Row products: `rows[j] · x[r]` for a range of weight rows, dense (tight loops, or
//! `matrixmultiply` for many activation rows) or folded from Q8_0 blocks, in parallel across
//! rows when the work pays for it.

use rayon::prelude::*;

use crate::q8::{dot, dot_row, Q8Block, QK8_0};

/// Below this many multiply-adds a product runs on the calling thread.
const PAR_WORK: usize = 1 << 16;
/// From this many activation rows on, a dense product goes through `matrixmultiply`.
const GEMM_ROWS: usize = 4;

/// A weight matrix seen as rows of `cols` values, dense or as Q8_0 blocks.
#[derive(Clone, Copy)]
pub(super) enum Rows<'a> {
    Dense { data: &'a [f32], cols: usize },
    Q8 { blocks: &'a [Q8Block], cols: usize },
}

impl Rows<'_> {
    pub(super) fn cols(&self) -> usize {
        match self {
            Rows::Dense { cols, .. } | Rows::Q8 { cols, .. } => *cols,
        }
    }

    /// Row `j` times `x` (`x.len() == cols`), accumulated in f32.
    #[inline(always)]
    pub(super) fn dot(&self, j: usize, x: &[f32]) -> f32 {
        match self {
            Rows::Dense { data, cols } => dot(&data[j * cols..(j + 1) * cols], x),
            Rows::Q8 { blocks, cols } => {
                let nb = cols / QK8_0;
                dot_row(&blocks[j * nb..(j + 1) * nb], x)
            }
        }
    }
}

/// `out[(j − start)·n + r] = rows[j] · xs[r]` for `j` in `start..end`, `r` in `0..n`, where
/// `xs` holds `n` activation rows of `rows.cols()` values.
pub(super) fn products(rows: Rows<'_>, xs: &[f32], n: usize, start: usize, end: usize) -> Vec<f32> {
    let (cols, m) = (rows.cols(), end - start);
    let mut out = vec![0.0f32; m * n];
    if m == 0 || n == 0 {
        return out;
    }
    let work = m * n * cols.max(1);
    let threads = rayon::current_num_threads();
    let per = if work < PAR_WORK { m } else { m.div_ceil(threads * 4).max(1) };
    let fill = |(c, chunk): (usize, &mut [f32])| {
        let j0 = start + c * per;
        let rows_here = chunk.len() / n;
        match rows {
            Rows::Dense { data, cols } if n >= GEMM_ROWS && cols > 0 => {
                gemm_into(&data[j0 * cols..(j0 + rows_here) * cols], xs, n, cols, rows_here, chunk)
            }
            _ => dot_rows(rows, xs, n, j0, chunk),
        }
    };
    if per >= m {
        fill((0, &mut out));
    } else {
        out.par_chunks_mut(per * n).enumerate().for_each(fill);
    }
    out
}

/// `chunk[jj·n + r] = rows[j0 + jj] · xs[r]`. Q8_0 rows use the AVX2 + FMA kernel when the CPU
/// has it (chosen at run time; `q8::dot_row` is its portable reference); dense rows use
/// plain loops compiled for AVX2 when available.
fn dot_rows(rows: Rows<'_>, xs: &[f32], n: usize, j0: usize, chunk: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports AVX2 and FMA, checked just above.
        unsafe { dot_rows_avx2(rows, xs, n, j0, chunk) };
        return;
    }
    dot_rows_plain(rows, xs, n, j0, chunk);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_rows_avx2(rows: Rows<'_>, xs: &[f32], n: usize, j0: usize, chunk: &mut [f32]) {
    let Rows::Q8 { blocks, cols } = rows else { return dot_rows_plain(rows, xs, n, j0, chunk) };
    let nb = cols / QK8_0;
    for (jj, col) in chunk.chunks_exact_mut(n).enumerate() {
        let row = &blocks[(j0 + jj) * nb..(j0 + jj + 1) * nb];
        for (r, o) in col.iter_mut().enumerate() {
            // SAFETY: this function only runs on CPUs with AVX2 and FMA.
            *o = unsafe { crate::q8::dot_row_avx2(row, &xs[r * cols..(r + 1) * cols]) };
        }
    }
}

#[inline(always)]
fn dot_rows_plain(rows: Rows<'_>, xs: &[f32], n: usize, j0: usize, chunk: &mut [f32]) {
    let cols = rows.cols();
    for (jj, col) in chunk.chunks_exact_mut(n).enumerate() {
        for (r, o) in col.iter_mut().enumerate() {
            *o = rows.dot(j0 + jj, &xs[r * cols..(r + 1) * cols]);
        }
    }
}

/// `out[j·n + r] = w[j] · xs[r]` for the `m` rows of `w` through `matrixmultiply`.
fn gemm_into(w: &[f32], xs: &[f32], n: usize, k: usize, m: usize, out: &mut [f32]) {
    if w.len() < m * k || xs.len() < n * k || out.len() < m * n {
        return;
    }
    // SAFETY: C = A·B with A = xs (n × k, row-major), B = wᵀ (k × m: element (p, j) at
    // w[j·k + p]) and C (n × m: element (r, j) at out[j·n + r]); every index the strides
    // reach lies inside the three slices, whose lengths are checked above.
    unsafe {
        matrixmultiply::sgemm(
            n,
            k,
            m,
            1.0,
            xs.as_ptr(),
            k as isize,
            1,
            w.as_ptr(),
            1,
            k as isize,
            0.0,
            out.as_mut_ptr(),
            1,
            n as isize,
        );
    }
}

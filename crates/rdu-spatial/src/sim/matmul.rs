//! Row products: `rows[j] · x[r]` for a range of weight rows — dense, folded from Q8_0 blocks,
//! or read in place in a checkpoint block format — in parallel across rows when the work pays
//! for it.
//!
//! Few activation rows (decode): one row dot product per (weight row, activation row), Q8_0
//! folded block by block, other block formats widened one row at a time into a buffer on the
//! stack of the worker. Many activation rows (prefill): a panel of weight rows is widened once
//! (dense rows are used as they are) and multiplied through `matrixmultiply`.

use rayon::prelude::*;
use rdu_checkpoint::GgmlType;

#[cfg(target_arch = "x86_64")]
use super::packed::dot_widened_avx2;
use super::packed::{dot_q8_row_with, q8_kernel, widen_row, Q8Kernel};
use crate::q8::{dequant_block, dot, dot_row, Q8Block, QK8_0};

/// Below this many multiply-adds a product runs on the calling thread.
const PAR_WORK: usize = 1 << 16;
/// From this many activation rows on, a product goes through `matrixmultiply`.
const GEMM_ROWS: usize = 4;
/// Bytes of weight rows widened at a time for `matrixmultiply` (a panel that stays in L2;
/// larger panels repack the activations less often).
const PANEL_BYTES: usize = 1 << 19;

/// A weight matrix seen as rows of `cols` values: dense, Q8_0 blocks, or a block format read
/// in place.
#[derive(Clone, Copy)]
pub(super) enum Rows<'a> {
    Dense { data: &'a [f32], cols: usize },
    Q8 { blocks: &'a [Q8Block], cols: usize },
    Packed { format: GgmlType, bytes: &'a [u8], cols: usize },
}

impl Rows<'_> {
    pub(super) fn cols(&self) -> usize {
        match self {
            Rows::Dense { cols, .. } | Rows::Q8 { cols, .. } | Rows::Packed { cols, .. } => *cols,
        }
    }

    fn packed_row_bytes(format: GgmlType, cols: usize) -> usize {
        cols / format.block_size() as usize * format.type_size() as usize
    }

    /// Row `j` widened into `out` (`cols` values): the values the reference reads.
    fn widen(&self, j: usize, out: &mut [f32]) {
        match *self {
            Rows::Dense { data, cols } => out.copy_from_slice(&data[j * cols..(j + 1) * cols]),
            Rows::Q8 { blocks, cols } => {
                let nb = cols / QK8_0;
                for (b, o) in blocks[j * nb..(j + 1) * nb].iter().zip(out.chunks_exact_mut(QK8_0)) {
                    dequant_block(b, o);
                }
            }
            Rows::Packed { format, bytes, cols } => {
                let rb = Rows::packed_row_bytes(format, cols);
                widen_row(format, &bytes[j * rb..(j + 1) * rb], out);
            }
        }
    }
}

/// `out[(j − start)·n + r] = rows[j] · xs[r]` for `j` in `start..end`, `r` in `0..n`, where
/// `xs` holds `n` activation rows of `rows.cols()` values.
pub(super) fn products(rows: Rows<'_>, xs: &[f32], n: usize, start: usize, end: usize) -> Vec<f32> {
    let m = end - start;
    let mut out = vec![0.0f32; m * n];
    products_into(rows, xs, n, start, end, &mut out);
    out
}

/// [`products`] into `out` (`(end − start)·n` values).
pub(super) fn products_into(rows: Rows<'_>, xs: &[f32], n: usize, start: usize, end: usize, out: &mut [f32]) {
    let (cols, m) = (rows.cols(), end - start);
    if m == 0 || n == 0 {
        return;
    }
    let work = m * n * cols.max(1);
    let threads = rayon::current_num_threads();
    // Row dots balance over small chunks; a matrixmultiply call pays for packing the
    // activations, so each thread takes one run of rows.
    let split = if n >= GEMM_ROWS { threads } else { threads * 4 };
    let per = if work < PAR_WORK { m } else { m.div_ceil(split).max(1) };
    let kernel = q8_kernel();
    let fill = |(c, chunk): (usize, &mut [f32])| {
        let j0 = start + c * per;
        let rows_here = chunk.len() / n;
        match rows {
            Rows::Dense { data, cols } if n >= GEMM_ROWS && cols > 0 => {
                gemm_into(&data[j0 * cols..(j0 + rows_here) * cols], xs, n, cols, rows_here, chunk)
            }
            _ if n >= GEMM_ROWS && cols > 0 => panels(rows, xs, n, j0, chunk),
            _ => dot_rows(rows, kernel, xs, n, j0, chunk),
        }
    };
    if per >= m {
        fill((0, &mut out[..m * n]));
    } else {
        out[..m * n].par_chunks_mut(per * n).enumerate().for_each(fill);
    }
}

/// `chunk[jj·n + r] = rows[j0 + jj] · xs[r]`, one row dot product at a time.
fn dot_rows(rows: Rows<'_>, kernel: Q8Kernel, xs: &[f32], n: usize, j0: usize, chunk: &mut [f32]) {
    let cols = rows.cols();
    match rows {
        Rows::Dense { data, cols } => {
            for (jj, col) in chunk.chunks_exact_mut(n).enumerate() {
                let row = &data[(j0 + jj) * cols..(j0 + jj + 1) * cols];
                for (r, o) in col.iter_mut().enumerate() {
                    *o = dot(row, &xs[r * cols..(r + 1) * cols]);
                }
            }
        }
        Rows::Q8 { blocks, cols } => {
            let nb = cols / QK8_0;
            for (jj, col) in chunk.chunks_exact_mut(n).enumerate() {
                let row = &blocks[(j0 + jj) * nb..(j0 + jj + 1) * nb];
                for (r, o) in col.iter_mut().enumerate() {
                    *o = q8_dot(kernel, row, &xs[r * cols..(r + 1) * cols]);
                }
            }
        }
        Rows::Packed { format: GgmlType::Q8_0, bytes, cols } => {
            let rb = cols / QK8_0 * 34;
            for (jj, col) in chunk.chunks_exact_mut(n).enumerate() {
                let row = &bytes[(j0 + jj) * rb..(j0 + jj + 1) * rb];
                for (r, o) in col.iter_mut().enumerate() {
                    *o = dot_q8_row_with(kernel, row, &xs[r * cols..(r + 1) * cols]);
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        Rows::Packed { format: format @ (GgmlType::Q5_0 | GgmlType::Q4_K), bytes, cols }
            if kernel != Q8Kernel::Plain =>
        {
            let rb = Rows::packed_row_bytes(format, cols);
            for (jj, col) in chunk.chunks_exact_mut(n).enumerate() {
                let row = &bytes[(j0 + jj) * rb..(j0 + jj + 1) * rb];
                for (r, o) in col.iter_mut().enumerate() {
                    // SAFETY: every kernel but `Plain` is chosen only with AVX2, FMA and F16C.
                    *o = unsafe { dot_widened_avx2(format, row, &xs[r * cols..(r + 1) * cols]) }.unwrap_or(0.0);
                }
            }
        }
        Rows::Packed { .. } => {
            let mut buf = vec![0.0f32; cols];
            for (jj, col) in chunk.chunks_exact_mut(n).enumerate() {
                rows.widen(j0 + jj, &mut buf);
                for (r, o) in col.iter_mut().enumerate() {
                    *o = dot(&buf, &xs[r * cols..(r + 1) * cols]);
                }
            }
        }
    }
}

/// A `Q8Weight` row times `x`: the AVX2 kernel when the CPU has it (`q8::dot_row` is its
/// portable reference).
#[inline(always)]
fn q8_dot(kernel: Q8Kernel, row: &[Q8Block], x: &[f32]) -> f32 {
    match kernel {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `q8_kernel` picks an AVX kernel only on a CPU with AVX2 and FMA.
        Q8Kernel::Avx2 | Q8Kernel::Avx512 => unsafe { crate::q8::dot_row_avx2(row, x) },
        _ => dot_row(row, x),
    }
}

/// `chunk[jj·n + r] = rows[j0 + jj] · xs[r]` through `matrixmultiply`, a panel of weight rows
/// (`PANEL_BYTES` of f32) widened at a time.
fn panels(rows: Rows<'_>, xs: &[f32], n: usize, j0: usize, chunk: &mut [f32]) {
    let cols = rows.cols();
    let panel_rows = (PANEL_BYTES / 4 / cols.max(1)).clamp(16, 1024);
    let mut panel = vec![0.0f32; panel_rows.min(chunk.len() / n) * cols];
    for (p, out) in chunk.chunks_mut(panel_rows * n).enumerate() {
        let here = out.len() / n;
        let first = j0 + p * panel_rows;
        for (jj, dst) in panel.chunks_exact_mut(cols).take(here).enumerate() {
            rows.widen(first + jj, dst);
        }
        gemm_into(&panel[..here * cols], xs, n, cols, here, out);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
            })
            .collect()
    }

    /// Few and many activation rows (row dots and widened panels through matrixmultiply)
    /// agree with plain f64 sums of the widened values, for dense and Q8_0 rows.
    #[test]
    fn row_dots_and_panels_agree_with_the_widened_sums() {
        let (m, k) = (70, 96);
        let w = values(m * k, 5);
        let q8 = crate::q8::quantize_q8_0(&w, &[m, k]).expect("quantise");
        let wq = q8.dequantize();
        for n in [1, 3, 4, 9] {
            let xs = values(n * k, 11 + n as u32);
            for (rows, wv) in [(Rows::Dense { data: &w, cols: k }, &w), (Rows::Q8 { blocks: &q8.blocks, cols: k }, &wq)]
            {
                let got = products(rows, &xs, n, 3, m);
                for j in 3..m {
                    for r in 0..n {
                        let row = &wv[j * k..(j + 1) * k];
                        let x = &xs[r * k..(r + 1) * k];
                        let want: f64 = row.iter().zip(x).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
                        let scale: f64 = row.iter().zip(x).map(|(a, b)| f64::from((a * b).abs())).sum();
                        let g = f64::from(got[(j - 3) * n + r]);
                        assert!((g - want).abs() <= 1e-6 * scale + 1e-30, "n {n} row {j}: {g} vs {want}");
                    }
                }
            }
        }
    }
}

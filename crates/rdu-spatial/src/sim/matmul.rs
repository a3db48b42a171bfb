//! Row products: `rows[j] · x[r]` for a range of weight rows — dense, folded from Q8_0 blocks,
//! or read in place in a checkpoint block format — in parallel across rows when the work pays
//! for it.
//!
//! Few activation rows (decode; a verify step's up to 8 over file Q8_0 rows): one row dot
//! product per (weight row, activation row), Q8_0 folded block by block (a file Q8_0 row
//! widened once for all the activation rows), other block formats widened one row at a time
//! into a buffer on the stack of the worker. Some activation rows (a batched decode step, a
//! mixture-of-experts chunk's rows for one expert, a short chunk): a group of weight rows
//! widened at a time and multiplied in register tiles (`tiled`; file Q8_0 rows widened in
//! registers, `folded`). Many activation rows (prefill): a panel of weight rows is widened once
//! (dense rows are used as they are) and multiplied through `matrixmultiply`.

use rayon::prelude::*;
use rdu_checkpoint::GgmlType;

#[cfg(target_arch = "x86_64")]
use super::packed::{dot_packed_row_avx512, dot_q8_rows_avx512, dot_widened_avx2};
use super::packed::{dot_q8_row_with, q8_kernel, Q8Kernel};
use super::rows::Rows;
use crate::q8::{dot, dot_row, Q8Block, QK8_0};

/// Below this many multiply-adds a product runs on the calling thread.
const PAR_WORK: usize = 1 << 16;
/// From this many activation rows on, a product takes its weight rows a few at a time and
/// multiplies them with every activation row in tiles (`tiled`, `folded`) — except file Q8_0
/// rows under the AVX-512 kernel, which up to `MULTI_ROWS` activation rows take one row dot per
/// (weight row, activation row), each weight row widened once for all of them
/// (`dot_q8_rows_avx512`).
const GEMM_ROWS: usize = 4;
/// The most activation rows (a verify step of up to 7 drafted tokens, a small batch) a file
/// Q8_0 row is multiplied with by `dot_q8_rows_avx512` rather than in tiles: each result is the
/// one-row kernel's bit for bit, so a verify step's logits are the plain decode's (the tiles'
/// sums are a reassociation of them). `folded` would be faster from 5 rows on — Gemma 3 270M's
/// head `[262144 × 640]` on 2 threads (`benches/batched_head.rs`, Zen 5 VM): 5 rows 12.3–17.8
/// ms by row dots, 10.9 folded; 8 rows 21.0–27.9 against 16.6 — but verify steps would lose
/// that exactness. (The row dots one running sum at a time, so that four sums of eight rows
/// need not all be in registers, ran slower: 8 rows 25.5, 5 rows 15.4.)
const MULTI_ROWS: usize = 8;
/// From this many activation rows on, a product goes through `matrixmultiply` instead, whose
/// packing then pays. Measured on a 2-core Zen 1 (Q8_0 `[1536 × 5120]`, GMAC/s tiled against
/// widened panels through `matrixmultiply`): 19 rows 27 against 3.7, 128 rows 31 against 17,
/// 256 rows 31 against 23, 512 rows 24 against 27.
const TILED_ROWS: usize = 384;
/// Bytes of weight rows widened at a time for `matrixmultiply`. Each call packs the
/// activations once, so a panel of many rows makes that a small part of the work (panels of
/// 512 KiB — 24 rows of 5376 — spent most of a 512-row prefill repacking them).
const PANEL_BYTES: usize = 1 << 23;
/// Bytes of weight rows a panel may always take (it stays in L2).
const L2_BYTES: usize = 1 << 19;

/// `out[i·n + r] = rows[j_i] · xs[r]`, where `j_0, j_1, …` are the rows of `ranges` (each
/// `(start, end)`) in order and `xs` holds `n` activation rows of `rows.cols()` values.
///
/// An op passes all its tiles at once: every tile's rows are still multiplied, but a product
/// through `matrixmultiply` packs the activations once per call, and a call per tile of
/// 128 rows spent most of a 512-row prefill repacking them.
pub(super) fn products(rows: Rows<'_>, xs: &[f32], n: usize, ranges: &[(usize, usize)]) -> Vec<f32> {
    let m: usize = ranges.iter().map(|&(s, e)| e.saturating_sub(s)).sum();
    let mut out = vec![0.0f32; m * n];
    if m == 0 || n == 0 {
        return out;
    }
    let plan = Plan::new(rows, xs, n, m);
    let pieces = split_ranges(ranges, plan.per);
    let fill = |(piece, chunk): (&Vec<(usize, usize)>, &mut [f32])| plan.fill(rows, xs, piece, chunk);
    if pieces.len() == 1 {
        fill((&pieces[0], &mut out));
    } else {
        pieces.par_iter().zip(out.par_chunks_mut(plan.per * n)).for_each(fill);
    }
    out
}

/// How a product of `n` activation rows with `m` weight rows is cut and computed.
struct Plan<'a> {
    /// Few activation rows: one row dot per (weight row, activation row) (`dot_rows`).
    few: bool,
    /// Weight rows a piece (a thread's run).
    per: usize,
    kernel: Q8Kernel,
    n: usize,
    /// Whether the product runs through the register tiles (`tiled`, `folded`).
    tiles: bool,
    /// File Q8_0 rows through the tiles under AVX-512: the activation rows packed once for
    /// every piece.
    folded: Option<super::folded::Folded<'a>>,
}

impl<'a> Plan<'a> {
    fn new(rows: Rows<'a>, xs: &[f32], n: usize, m: usize) -> Plan<'a> {
        let work = m * n * rows.cols().max(1);
        let threads = rayon::current_num_threads();
        // Row dots balance over small chunks; a matrixmultiply call pays for packing the
        // activations, so each thread takes one run of rows.
        let few = few(rows, n);
        let split = if few { threads * 4 } else { threads };
        let per = if work < PAR_WORK { m } else { m.div_ceil(split).max(1) };
        let tiles = tiles(rows, n) && m > 0;
        let folded = if tiles { super::folded::Folded::new(rows, xs, n) } else { None };
        Plan { few, per, kernel: q8_kernel(), n, tiles, folded }
    }

    /// The register tiles' products of the rows of `piece` with the `n` activation rows of
    /// `xs`, each handed to `sink`: file Q8_0 rows under the AVX-512 kernel widened block by
    /// block in registers (`folded`), other rows a group at a time into a buffer (`tiled`) —
    /// the same sums.
    fn tiles_to(&self, rows: Rows<'_>, xs: &[f32], piece: &[(usize, usize)], sink: &mut impl super::tiled::Sink) {
        match &self.folded {
            Some(folded) => folded.products_to(piece, sink),
            None => super::tiled::products_to(rows, xs, self.n, piece, sink),
        }
    }

    /// `chunk[i·n + r] = rows[j_i] · xs[r]` for the rows `j_i` of `piece`.
    fn fill(&self, rows: Rows<'_>, xs: &[f32], piece: &[(usize, usize)], chunk: &mut [f32]) {
        let (few, n) = (self.few, self.n);
        match (rows, piece) {
            _ if self.tiles => self.tiles_to(rows, xs, piece, &mut super::tiled::Features { chunk, n }),
            (Rows::Dense { data, cols }, &[(j0, j1)]) if !few && cols > 0 => {
                gemm_into(&data[j0 * cols..j1 * cols], xs, n, cols, j1 - j0, chunk)
            }
            _ if !few && rows.cols() > 0 => panels(rows, xs, n, piece, chunk),
            _ => {
                let mut at = 0;
                for &(j0, j1) in piece {
                    dot_rows(rows, self.kernel, xs, n, j0, &mut chunk[at..at + (j1 - j0) * n]);
                    at += (j1 - j0) * n;
                }
            }
        }
    }
}

/// Few activation rows: one row dot per (weight row, activation row) (`dot_rows`) — file Q8_0
/// rows under the AVX-512 kernel up to `MULTI_ROWS` of them.
fn few(rows: Rows<'_>, n: usize) -> bool {
    let multi = matches!(rows, Rows::Packed { format: GgmlType::Q8_0, .. }) && q8_kernel() == Q8Kernel::Avx512;
    n < GEMM_ROWS || (multi && n <= MULTI_ROWS)
}

/// Whether a product of `n` activation rows runs through the register tiles, so that
/// [`products_into`] takes it.
pub(super) fn tiles(rows: Rows<'_>, n: usize) -> bool {
    !few(rows, n) && n < TILED_ROWS && rows.cols() > 0
}

/// `y[r·stride + j] = rows[j] · xs[r]` for every row `j` of `ranges` (disjoint, each below
/// `stride`; `y` holds `n` rows of `stride`): [`products`]' values, each written where `linear`
/// returns it by the thread that finishes it, instead of in one pass over the whole `[m, n]`
/// result afterwards (for Gemma 3's 262,144-feature head at 16 rows, that pass took 4.5 ms of a
/// 65 ms batched step, on one thread). Only where [`products`] takes the register tiles
/// (`tiled`); `None`, nothing written, elsewhere, and for ranges that overlap or reach past
/// `stride`.
pub(super) fn products_into(
    rows: Rows<'_>,
    xs: &[f32],
    n: usize,
    ranges: &[(usize, usize)],
    y: &mut [f32],
    stride: usize,
) -> Option<()> {
    let mut sorted = ranges.to_vec();
    sorted.sort_unstable();
    let disjoint = sorted.windows(2).all(|w| w[0].1 <= w[1].0) && sorted.iter().all(|&(s, e)| s <= e && e <= stride);
    let m: usize = ranges.iter().map(|&(s, e)| e.saturating_sub(s)).sum();
    if !disjoint || !tiles(rows, n) || m == 0 || y.len() < n * stride {
        return None;
    }
    let plan = Plan::new(rows, xs, n, m);
    let cells = Cells(y.as_mut_ptr());
    let run = |piece: &Vec<(usize, usize)>| plan.tiles_to(rows, xs, piece, &mut RowMajor { cells, stride });
    let pieces = split_ranges(ranges, plan.per);
    if pieces.len() == 1 {
        run(&pieces[0]);
    } else {
        pieces.par_iter().for_each(run);
    }
    Some(())
}

/// `y`'s cells, written by several threads at once, each only its own (`products_into`).
#[derive(Clone, Copy)]
struct Cells(*mut f32);

// SAFETY: `products_into` hands the pointer to threads that write disjoint cells of a slice it
// borrows mutably for as long as they run.
unsafe impl Send for Cells {}
// SAFETY: as above.
unsafe impl Sync for Cells {}

/// Products put at `y[r·stride + j]`.
struct RowMajor {
    cells: Cells,
    stride: usize,
}

impl super::tiled::Sink for RowMajor {
    #[inline(always)]
    fn put(&mut self, _: usize, j: usize, r: usize, v: f32) {
        let at = r * self.stride + j;
        // SAFETY: `products_into` checked every feature `j < stride` and `y` to hold the
        // `n` rows the tiles put (`r < n`); the pieces hold disjoint features (the ranges are
        // disjoint and `split_ranges` cuts them apart), so no other thread writes this cell.
        unsafe { *self.cells.0.add(at) = v };
    }
}

/// `ranges` cut into pieces of `per` rows (the last may be shorter), each a list of ranges.
fn split_ranges(ranges: &[(usize, usize)], per: usize) -> Vec<Vec<(usize, usize)>> {
    let mut pieces = vec![Vec::new()];
    let mut room = per;
    for &(mut s, e) in ranges {
        while s < e {
            if room == 0 {
                pieces.push(Vec::new());
                room = per;
            }
            let take = room.min(e - s);
            pieces.last_mut().expect("a piece").push((s, s + take));
            (s, room) = (s + take, room - take);
        }
    }
    pieces
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
        #[cfg(target_arch = "x86_64")]
        Rows::Packed { format: GgmlType::Q8_0, bytes, cols } if kernel == Q8Kernel::Avx512 && n > 1 => {
            let rb = cols / QK8_0 * 34;
            for (jj, col) in chunk.chunks_exact_mut(n).enumerate() {
                let row = &bytes[(j0 + jj) * rb..(j0 + jj + 1) * rb];
                dot_q8_rows(row, xs, cols, col);
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
        Rows::Packed {
            format: format @ (GgmlType::Q5_0 | GgmlType::Q4_K | GgmlType::Q6_K | GgmlType::MXFP4),
            bytes,
            cols,
        } if kernel == Q8Kernel::Avx512 => {
            let rb = Rows::packed_row_bytes(format, cols);
            for (jj, col) in chunk.chunks_exact_mut(n).enumerate() {
                let row = &bytes[(j0 + jj) * rb..(j0 + jj + 1) * rb];
                for (r, o) in col.iter_mut().enumerate() {
                    // SAFETY: `q8_kernel` chooses `Avx512` only with AVX-512 F, BW, VL, FMA and F16C.
                    *o = unsafe { dot_packed_row_avx512(format, row, &xs[r * cols..(r + 1) * cols]) }.unwrap_or(0.0);
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        Rows::Packed {
            format: format @ (GgmlType::Q5_0 | GgmlType::Q4_K | GgmlType::Q6_K | GgmlType::MXFP4),
            bytes,
            cols,
        } if kernel != Q8Kernel::Plain => {
            let rb = Rows::packed_row_bytes(format, cols);
            for (jj, col) in chunk.chunks_exact_mut(n).enumerate() {
                let row = &bytes[(j0 + jj) * rb..(j0 + jj + 1) * rb];
                for (r, o) in col.iter_mut().enumerate() {
                    // SAFETY: every kernel but `Plain` is chosen only with AVX2, FMA and F16C.
                    *o = unsafe { dot_widened_avx2(format, row, &xs[r * cols..(r + 1) * cols]) }.unwrap_or(0.0);
                }
            }
        }
        Rows::Packed { .. } | Rows::Fp8 { .. } => {
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

/// A row of file Q8_0 blocks times each of the `col.len()` activation rows of `xs` (`cols`
/// values each), up to four at a time through `dot_q8_rows_avx512`: each product the one-row
/// kernel's, bit for bit, the row widened once for four activation rows.
#[cfg(target_arch = "x86_64")]
fn dot_q8_rows(row: &[u8], xs: &[f32], cols: usize, col: &mut [f32]) {
    let x = |r: usize| &xs[r * cols..(r + 1) * cols];
    let mut r = 0;
    while r < col.len() {
        let take = (col.len() - r).min(8);
        let out = &mut col[r..r + take];
        // SAFETY: `dot_rows` takes this branch only with the `Avx512` kernel, which `q8_kernel`
        // chooses only on a CPU with AVX-512 F, BW and VL, FMA and F16C.
        unsafe {
            match take {
                1 => out.copy_from_slice(&dot_q8_rows_avx512::<1>(row, [x(r)])),
                2 => out.copy_from_slice(&dot_q8_rows_avx512::<2>(row, [x(r), x(r + 1)])),
                3 => out.copy_from_slice(&dot_q8_rows_avx512::<3>(row, std::array::from_fn(|i| x(r + i)))),
                4 => out.copy_from_slice(&dot_q8_rows_avx512::<4>(row, std::array::from_fn(|i| x(r + i)))),
                5 => out.copy_from_slice(&dot_q8_rows_avx512::<5>(row, std::array::from_fn(|i| x(r + i)))),
                6 => out.copy_from_slice(&dot_q8_rows_avx512::<6>(row, std::array::from_fn(|i| x(r + i)))),
                7 => out.copy_from_slice(&dot_q8_rows_avx512::<7>(row, std::array::from_fn(|i| x(r + i)))),
                _ => out.copy_from_slice(&dot_q8_rows_avx512::<8>(row, std::array::from_fn(|i| x(r + i)))),
            }
        }
        r += take;
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

/// `chunk[i·n + r] = rows[j_i] · xs[r]` for the rows `j_i` of `piece` through
/// `matrixmultiply`, a panel of weight rows (`PANEL_BYTES` of f32) widened at a time.
fn panels(rows: Rows<'_>, xs: &[f32], n: usize, piece: &[(usize, usize)], chunk: &mut [f32]) {
    let cols = rows.cols();
    let total = chunk.len() / n;
    // A panel as many rows as the activations (so packing them costs no more than packing
    // the panel) up to PANEL_BYTES, and never smaller than what stays in L2 (L2_BYTES): few
    // activation rows do little arithmetic per widened value, and a large panel would only
    // add memory traffic.
    let rows_in = |bytes: usize| bytes / 4 / cols.max(1);
    let panel_rows = n.min(rows_in(PANEL_BYTES)).max(rows_in(L2_BYTES)).clamp(16, 1024).min(total);
    let mut panel = vec![0.0f32; panel_rows * cols];
    let (mut filled, mut done) = (0, 0);
    for j in piece.iter().flat_map(|&(s, e)| s..e) {
        rows.widen(j, &mut panel[filled * cols..(filled + 1) * cols]);
        filled += 1;
        if filled == panel_rows || done + filled == total {
            gemm_into(&panel[..filled * cols], xs, n, cols, filled, &mut chunk[done * n..(done + filled) * n]);
            (done, filled) = (done + filled, 0);
        }
    }
}

/// A row-major f32 matrix seen in place.
pub(super) type View<'a> = crate::view::View<'a, f32>;

/// `c = a · b` through `matrixmultiply`, `c` row-major `a.rows × b.cols` with rows
/// `c_stride` apart; `None` (nothing written) when the shapes disagree or a view reaches past
/// its data.
pub(super) fn gemm(a: View<'_>, b: View<'_>, c: &mut [f32], c_stride: usize) -> Option<()> {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    let fits = b.rows == k && n <= c_stride && (m == 0 || (m - 1) * c_stride + n <= c.len());
    if !fits || !a.in_bounds() || !b.in_bounds() {
        return None;
    }
    if m == 0 || n == 0 {
        return Some(());
    }
    let stride = |s: usize| isize::try_from(s).ok();
    let (rsa, csa, rsb, csb, rsc) =
        (stride(a.row_stride)?, stride(a.col_stride)?, stride(b.row_stride)?, stride(b.col_stride)?, stride(c_stride)?);
    // SAFETY: every element the strides reach lies inside its slice: the views are checked
    // above (`in_bounds`), and `c`'s last element `(m − 1)·c_stride + n − 1` is below its length.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.data.as_ptr().add(a.offset),
            rsa,
            csa,
            b.data.as_ptr().add(b.offset),
            rsb,
            csb,
            0.0,
            c.as_mut_ptr(),
            rsc,
            1,
        );
    }
    Some(())
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
    use super::super::rows::tests::values;
    use super::*;

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
                let got = products(rows, &xs, n, &[(3, 40), (40, m)]);
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

    /// Written in place by the threads that finish them, the tiles' products are `products`'
    /// values transposed, bit for bit — dense, Q8_0 and file Q8_0 rows, 5 to 32 activation rows,
    /// tiles with a gap (whose cells stay 0); refused, nothing written, where the products do
    /// not take the tiles (one activation row, and the file Q8_0 row kernels' up to 8 under
    /// AVX-512) and for ranges that overlap or pass `stride`.
    #[test]
    fn tiled_products_written_in_place_are_the_products_transposed() {
        let (m, k) = (170, 64);
        let w = values(m * k, 21);
        let q8 = crate::q8::quantize_q8_0(&w, &[m, k]).expect("quantise");
        let file: Vec<u8> = q8.blocks.iter().flat_map(|b| b.to_bytes()).collect();
        let ranges = [(0, 100), (130, m)];
        let kinds = [
            Rows::Dense { data: &w, cols: k },
            Rows::Q8 { blocks: &q8.blocks, cols: k },
            Rows::Packed { format: GgmlType::Q8_0, bytes: &file, cols: k },
        ];
        let mut written = 0;
        for n in [1, 5, 9, 16, 32] {
            let xs = values(n * k, 31 + n as u32);
            for (kind, rows) in kinds.iter().enumerate() {
                let want = products(*rows, &xs, n, &ranges);
                let mut y = vec![0.0f32; n * m];
                if products_into(*rows, &xs, n, &ranges, &mut y, m).is_none() {
                    assert!(!tiles(*rows, n) && y.iter().all(|&v| v == 0.0), "n {n}, kind {kind}: refused, unwritten");
                    continue;
                }
                let js: Vec<usize> = ranges.iter().flat_map(|&(s, e)| s..e).collect();
                for r in 0..n {
                    for (i, &j) in js.iter().enumerate() {
                        assert_eq!(y[r * m + j].to_bits(), want[i * n + r].to_bits(), "n {n}, kind {kind}, ({j}, {r})");
                    }
                    assert!(y[r * m + 100..r * m + 130].iter().all(|&v| v == 0.0), "the gap stays 0");
                }
                written += 1;
            }
        }
        // Dense rows take the tiles from 4 activation rows on, on every CPU.
        assert!(written >= 4, "{written} products written in place");
        let xs = values(5 * k, 3);
        let mut y = vec![f32::NAN; 5 * m];
        for bad in [vec![(0, 50), (40, 60)], vec![(0, m + 1)]] {
            assert!(products_into(kinds[0], &xs, 5, &bad, &mut y, m).is_none(), "{bad:?} refused");
        }
        assert!(y.iter().all(|v| v.is_nan()), "a refused product writes nothing");
    }
}

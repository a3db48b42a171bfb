//! A weight matrix seen as rows — dense, Q8_0 blocks, a checkpoint block format read in
//! place, or FP8 with its block scales — which every product of the simulator reads
//! (`matmul`, `tiled`, `products`, `moe`).

use rdu_checkpoint::{Fp8View, GgmlType};

use super::packed::{widen_fp8_row, widen_row};
use crate::q8::{dequant_blocks, Q8Block, QK8_0};

/// A weight matrix seen as rows of `cols` values: dense, Q8_0 blocks, a ggml block format read
/// in place, or FP8 with its block scales (row `j` is row `first + j` of `view`, whose scale
/// grid starts at its first row).
#[derive(Clone, Copy)]
pub(super) enum Rows<'a> {
    Dense { data: &'a [f32], cols: usize },
    Q8 { blocks: &'a [Q8Block], cols: usize },
    Packed { format: GgmlType, bytes: &'a [u8], cols: usize },
    Fp8 { view: Fp8View<'a>, first: usize },
}

impl Rows<'_> {
    pub(super) fn cols(&self) -> usize {
        match self {
            Rows::Dense { cols, .. } | Rows::Q8 { cols, .. } | Rows::Packed { cols, .. } => *cols,
            Rows::Fp8 { view, .. } => view.cols,
        }
    }

    pub(super) fn packed_row_bytes(format: GgmlType, cols: usize) -> usize {
        cols / format.block_size() as usize * format.type_size() as usize
    }

    /// Asks the cache for the bytes of rows `j0..j1` of a weight read in place (Q8_0 blocks or
    /// a checkpoint block format), so they arrive while the rows before them are multiplied:
    /// a hint that changes no value (dense and FP8 rows are left to the hardware prefetcher).
    pub(super) fn prefetch(&self, j0: usize, j1: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            // The rows' memory as (start, length in bytes), inside the weight's slice.
            let (start, len) = match *self {
                Rows::Packed { format, bytes, cols } => {
                    let rb = Rows::packed_row_bytes(format, cols);
                    let rows = bytes.get(j0 * rb..(j1 * rb).min(bytes.len())).unwrap_or(&[]);
                    (rows.as_ptr(), rows.len())
                }
                Rows::Q8 { blocks, cols } => {
                    let nb = cols / QK8_0;
                    let rows = blocks.get(j0 * nb..(j1 * nb).min(blocks.len())).unwrap_or(&[]);
                    (rows.as_ptr().cast::<u8>(), std::mem::size_of_val(rows))
                }
                Rows::Dense { .. } | Rows::Fp8 { .. } => (std::ptr::null(), 0),
            };
            for off in (0..len).step_by(64) {
                // SAFETY: a prefetch is a hint that reads nothing and never faults, at any
                // address (this one is inside the rows' memory).
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        start.wrapping_add(off).cast::<i8>(),
                    )
                };
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (j0, j1);
    }

    /// Row `j` widened into `out` (`cols` values): the values the reference reads.
    pub(super) fn widen(&self, j: usize, out: &mut [f32]) {
        match *self {
            Rows::Dense { data, cols } => out.copy_from_slice(&data[j * cols..(j + 1) * cols]),
            Rows::Q8 { blocks, cols } => {
                let nb = cols / QK8_0;
                dequant_blocks(&blocks[j * nb..(j + 1) * nb], out);
            }
            Rows::Packed { format, bytes, cols } => {
                let rb = Rows::packed_row_bytes(format, cols);
                widen_row(format, &bytes[j * rb..(j + 1) * rb], out);
            }
            Rows::Fp8 { view, first } => widen_fp8_row(&view, first + j, out),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    /// Seeded test values in [-0.5, 0.5) (xorshift32).
    pub(in crate::sim) fn values(n: usize, seed: u32) -> Vec<f32> {
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
}

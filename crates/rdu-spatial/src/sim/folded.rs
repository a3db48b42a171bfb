//! File Q8_0 weight rows times a batch's activation rows (a 16-sequence decode step, a prefill
//! chunk) in register tiles of eight activation rows by three weight rows, each block widened
//! in registers as it streams past: no buffer of widened rows re-read for every four activation
//! rows, and a tile's 24 running sums take 11 vector loads for 24 multiply-adds where the
//! widened tiles' 4 × 4 take 8 for 16. The activation rows are packed once a product (not once
//! a thread's piece), eight rows sixteen values at a time, so a tile reads them from one
//! pointer.
//!
//! Every sum is [`tiled`](super::tiled)'s AVX-512 sum, bit for bit (tested): a block's values
//! are the reference's (`f32::from(q) · d`, exact in f32), input `k` goes into lane `k mod 16`
//! of a 512-bit running sum, the two halves are added into eight lanes at every `STEP` inputs,
//! and the eight lanes are summed in `sum8`'s order.
//!
//! Measured: Gemma 3 270M Q8_0's head `[262144 × 640]` at 16 rows in `rdu serve --profile`
//! (Zen 5 VM, 2 threads, the same hour): 25.9–27.5 ms a call through the widened tiles, 18.6–
//! 18.9 here; the kernel compiled without AVX-512 VL kept sums in memory (ymm registers 16–31
//! need VL), and written with closures or sum arrays, the compiler spilled them too.

use super::rows::Rows;
use super::tiled::{Sink, LANES, STEP};
use crate::q8::QK8_0;
use rdu_checkpoint::GgmlType;

/// Activation rows a tile.
const ROWS: usize = 8;
/// Weight rows a tile.
const TRIO: usize = 3;
/// Weight rows ahead of the tile whose bytes are prefetched.
const AHEAD: usize = 8;
/// Bytes of a file Q8_0 block: an f16 scale, then 32 int8 values.
const BLOCK: usize = rdu_checkpoint::Q8Block::BYTES;

/// A product through here: the weight's bytes, and the `n` activation rows packed once
/// for every piece the threads take.
pub(super) struct Folded<'a> {
    bytes: &'a [u8],
    cols: usize,
    n: usize,
    /// [`pack`]s of eight activation rows each.
    packs: Vec<Vec<f32>>,
}

impl<'a> Folded<'a> {
    /// The product of `rows` with the `n` activation rows of `xs`, where it goes through here:
    /// file Q8_0 rows on a CPU with the AVX-512 kernel.
    pub(super) fn new(rows: Rows<'a>, xs: &[f32], n: usize) -> Option<Folded<'a>> {
        use super::packed::{q8_kernel, Q8Kernel};
        match rows {
            Rows::Packed { format: GgmlType::Q8_0, bytes, cols }
                if q8_kernel() == Q8Kernel::Avx512 && cols > 0 && cols.is_multiple_of(QK8_0) =>
            {
                assert!(xs.len() >= n * cols, "{n} activation rows of {cols} values");
                let packs = (0..n).step_by(ROWS).map(|r0| pack(xs, cols, r0, n)).collect();
                Some(Folded { bytes, cols, n, packs })
            }
            _ => None,
        }
    }

    /// `sink.put(i, j_i, r, rows[j_i] · xs[r])` for the rows `j_i` of `piece` (in order) and
    /// every activation row `r`.
    pub(super) fn products_to(&self, piece: &[(usize, usize)], sink: &mut impl Sink) {
        let (bytes, cols, n) = (self.bytes, self.cols, self.n);
        let rb = cols / QK8_0 * BLOCK;
        assert!(piece.iter().all(|&(s, e)| s >= e || e * rb <= bytes.len()), "weight rows past the weight");
        #[cfg(target_arch = "x86_64")]
        {
            let scales = super::packed::f16_values();
            let mut i = 0;
            for &(s, e) in piece {
                let mut j = s;
                while j < e {
                    let c = (e - j).min(TRIO);
                    // Where the range has fewer than three rows left, its last row stands in for
                    // the missing ones (their products are not put).
                    let ws: [*const u8; TRIO] = std::array::from_fn(|w| bytes[(j + w.min(c - 1)) * rb..].as_ptr());
                    // The rows `AHEAD` on are asked for now, to arrive while these are multiplied.
                    let ahead = bytes.get((j + AHEAD) * rb..((j + AHEAD + c) * rb).min(bytes.len())).unwrap_or(&[]);
                    prefetch(ahead);
                    for (p, x) in self.packs.iter().enumerate() {
                        let r0 = p * ROWS;
                        // SAFETY: `new` chose this path only on a CPU with AVX-512 F, BW and VL,
                        // FMA and F16C (`q8_kernel`'s `Avx512`); each weight row holds `cols /
                        // 32` blocks (asserted above) and `x` is a pack of `cols` values.
                        let out = unsafe { tile(ws, x, cols, scales) };
                        for (cc, values) in out.iter().enumerate().take(c) {
                            for (a, &v) in values.iter().enumerate().take(n - r0) {
                                sink.put(i + cc, j + cc, r0 + a, v);
                            }
                        }
                    }
                    (i, j) = (i + c, j + c);
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (rb, n, piece, sink);
            unreachable!("`new` chooses this path only on x86-64");
        }
    }
}

/// Activation rows `r0..r0 + ROWS` (those past `n` as zeros) interleaved sixteen values at a
/// time: `pack[(k / 16)·ROWS·16 + a·16 + k % 16] = xs[r0 + a][k]`, so that a tile reads each
/// step's activations from one pointer at fixed offsets.
fn pack(xs: &[f32], cols: usize, r0: usize, n: usize) -> Vec<f32> {
    const WIDE: usize = 2 * LANES;
    let mut out = vec![0f32; cols * ROWS];
    for a in 0..ROWS.min(n - r0) {
        let row = &xs[(r0 + a) * cols..(r0 + a + 1) * cols];
        for (k, values) in row.chunks_exact(WIDE).enumerate() {
            let at = (k * ROWS + a) * WIDE;
            out[at..at + WIDE].copy_from_slice(values);
        }
    }
    out
}

/// Asks for every cache line of `bytes`: `Rows::prefetch`'s hint, inlined into the loop over
/// weight rows (called there instead, a call per three rows, the 16-row head of Gemma 3 270M in
/// `rdu serve --profile` took 23.3–25.2 ms a call against 17.9–18.9).
#[inline(always)]
fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(64) {
        // SAFETY: a prefetch reads nothing architecturally; the address lies inside `bytes`.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line.as_ptr().cast()) };
    }
}

/// The sums of the `ROWS` activation rows packed in `x` with three weight rows of `cols / 32`
/// file Q8_0 blocks each: `out[c][a]`, summed as [`tiled`](super::tiled)'s AVX-512 tiles sum
/// them.
///
/// # Safety
/// The CPU has AVX-512 F, BW and VL, FMA and F16C; each `ws[c]` points at `cols / 32` blocks and
/// `x` is a [`pack`] of `cols` values, `cols` a multiple of 32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn tile(
    ws: [*const u8; TRIO],
    x: &[f32],
    cols: usize,
    scales: &super::packed::F16Values,
) -> [[f32; ROWS]; TRIO] {
    use std::arch::x86_64::*;
    const WIDE: usize = 2 * LANES;
    // Macros, not closures: a closure does not take the function's target features, and a
    // call out of the loop would spill every running sum around it.
    // A block's scale by one u16 load (`packed::scale_of`'s two byte loads: the 16-row head 3%
    // slower in `benches/batched_head.rs`).
    macro_rules! scale {
        ($block:expr) => {
            _mm512_set1_ps(scales[usize::from($block.cast::<u16>().read_unaligned())])
        };
    }
    macro_rules! widen {
        ($block:expr, $d:expr, $h:expr) => {
            _mm512_mul_ps(
                _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128($block.add(2 + WIDE * $h) as *const __m128i))),
                $d,
            )
        };
    }
    // At every `STEP` inputs a running sum's halves are added into its low half.
    macro_rules! fold {
        ($v:expr) => {{
            let high = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd($v)));
            _mm512_zextps256_ps512(_mm256_add_ps(_mm512_castps512_ps256($v), high))
        }};
    }
    macro_rules! sum8 {
        ($v:expr) => {{
            let l: [f32; LANES] = std::mem::transmute(_mm512_castps512_ps256($v));
            ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]))
        }};
    }
    // The sixteen running sums as sixteen variables (`s_a0`, `s_a1` for activation row `a`
    // and weight rows 0 and 1): as an array, the compiler kept some of them in memory.
    macro_rules! sums {
        ($($a:literal $s0:ident $s1:ident $s2:ident)*) => {{
            $(let (mut $s0, mut $s1, mut $s2) = (_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps());)*
            let xp = x.as_ptr();
            let mut k0 = 0;
            while k0 < cols {
                let k1 = (k0 + STEP).min(cols);
                // A block a step, its two halves of sixteen inputs one after the other (a step of
                // half a block, its block's offsets worked out every time, ran 9% slower).
                for b in (k0 / QK8_0)..(k1 / QK8_0) {
                    let block = [ws[0].add(b * BLOCK), ws[1].add(b * BLOCK), ws[2].add(b * BLOCK)];
                    for h in 0..2 {
                        let w0 = widen!(block[0], scale!(block[0]), h);
                        let (w1, w2) = (widen!(block[1], scale!(block[1]), h), widen!(block[2], scale!(block[2]), h));
                        let step = xp.add((2 * b + h) * ROWS * WIDE);
                        $(
                            let xv = _mm512_loadu_ps(step.add($a * WIDE));
                            $s0 = _mm512_fmadd_ps(xv, w0, $s0);
                            $s1 = _mm512_fmadd_ps(xv, w1, $s1);
                            $s2 = _mm512_fmadd_ps(xv, w2, $s2);
                        )*
                    }
                }
                $($s0 = fold!($s0); $s1 = fold!($s1); $s2 = fold!($s2);)*
                k0 = k1;
            }
            [[$(sum8!($s0)),*], [$(sum8!($s1)),*], [$(sum8!($s2)),*]]
        }};
    }
    sums!(0 s00 s01 s02 1 s10 s11 s12 2 s20 s21 s22 3 s30 s31 s32 4 s40 s41 s42 5 s50 s51 s52 6 s60 s61 s62 7 s70 s71 s72)
}

#[cfg(test)]
mod tests {
    use super::super::rows::tests::values;
    use super::*;

    /// Products kept as `(i, j, r, v)`, in the order they are put.
    struct Kept(Vec<(usize, usize, usize, f32)>);

    impl Sink for Kept {
        fn put(&mut self, i: usize, j: usize, r: usize, v: f32) {
            self.0.push((i, j, r, v));
        }
    }

    /// `m` rows of `cols` values as file Q8_0 blocks (an f16 scale, then 32 int8 values).
    fn file_q8(m: usize, cols: usize, seed: u32) -> Vec<u8> {
        let q8 = crate::q8::quantize_q8_0(&values(m * cols, seed), &[m, cols]).expect("quantisable");
        q8.blocks.iter().flat_map(|b| b.to_bytes()).collect()
    }

    /// Every product in-register widening puts is, bit for bit, the one the widened-buffer
    /// tiles put for the same (weight row, activation row): activation counts that fill the
    /// 8-row tiles and leave a partial one, rows past one and two `STEP`s, ranges of odd
    /// lengths (weight rows left over from a tile of three).
    #[test]
    fn folded_products_are_the_widened_tiles_bit_for_bit() {
        let ranges: &[(usize, usize)] = &[(3, 8), (10, 11), (20, 27)];
        let mut compared = 0;
        for (n, cols) in [(16, 640), (9, 2 * STEP + 96), (23, 32), (32, STEP)] {
            let bytes = file_q8(27, cols, 5 + n as u32);
            let xs = values(n * cols, 17 + cols as u32);
            let rows = Rows::Packed { format: GgmlType::Q8_0, bytes: &bytes, cols };
            let mut widened = Kept(Vec::new());
            super::super::tiled::products_to(rows, &xs, n, ranges, &mut widened);
            let mut want: Vec<_> = widened.0.iter().map(|&(i, j, r, v)| (i, j, r, v.to_bits())).collect();
            want.sort_unstable();
            assert_eq!(want.len(), 13 * n, "every product once");
            let Some(product) = Folded::new(rows, &xs, n) else {
                eprintln!("no AVX-512: the widened tiles alone take file Q8_0 rows here");
                continue;
            };
            let mut folded = Kept(Vec::new());
            product.products_to(ranges, &mut folded);
            let mut got: Vec<_> = folded.0.iter().map(|&(i, j, r, v)| (i, j, r, v.to_bits())).collect();
            got.sort_unstable();
            assert_eq!(got, want, "n {n}, cols {cols}");
            compared += 1;
        }
        eprintln!("shapes compared bit for bit: {compared}");
    }
}

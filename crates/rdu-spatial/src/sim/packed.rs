//! Weights kept as their checkpoint stores them — ggml blocks along the last axis, read in
//! place (e.g. from a memory-mapped GGUF file) — and the row kernels that read them.
//!
//! A dense-declared weight kept packed is widened row by row inside the product, each value
//! exactly what [`rdu_checkpoint::dequantize_into`] (the reference's reading of the file)
//! gives; a Q8_0-declared weight kept packed is folded block by block as `Q8Weight` is.

use rdu_checkpoint::{dequantize_into, dequantize_slice, k_scale_min, Fp8View, GgmlType, GgmlWeight};

use crate::q8::{Q8Block, Q8Weight, QK8_0};

/// A weight in a ggml block format, `shape` row-major with blocks along the last axis.
#[derive(Clone, Copy, Debug)]
pub struct PackedWeight<'a> {
    pub shape: &'a [usize],
    pub format: GgmlType,
    pub bytes: &'a [u8],
}

/// Whether the simulator can read a weight of this format in place.
pub fn can_pack(format: GgmlType) -> bool {
    use GgmlType::*;
    matches!(format, F16 | BF16 | Q8_0 | Q4_0 | Q5_0 | Q4_K | Q5_K | Q6_K | MXFP4)
}

impl<'a> PackedWeight<'a> {
    /// An owned weight's view.
    pub fn of(w: &'a GgmlWeight) -> PackedWeight<'a> {
        PackedWeight { shape: &w.shape, format: w.format, bytes: &w.bytes }
    }

    /// The bytes of matrix `index` along the first axis (an expert of a stacked weight).
    pub fn expert_bytes(&self, index: usize) -> Option<&'a [u8]> {
        let n = *self.shape.first()?;
        let per = self.bytes.len().checked_div(n)?;
        self.bytes.get(index.checked_mul(per)?..index.checked_add(1)?.checked_mul(per)?)
    }

    /// Values per row (the last axis).
    pub fn cols(&self) -> usize {
        self.shape.last().copied().unwrap_or(0)
    }

    /// Rows: the product of every axis but the last.
    pub fn rows(&self) -> usize {
        self.shape.iter().rev().skip(1).product()
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.cols() / self.format.block_size() as usize * self.format.type_size() as usize
    }

    /// Why the bytes cannot hold the shape in this format, if they cannot.
    pub fn check(&self) -> Result<(), String> {
        let block = self.format.block_size() as usize;
        if !can_pack(self.format) {
            return Err(format!("{} cannot be read in place", self.format));
        }
        if self.shape.is_empty() || !self.cols().is_multiple_of(block) {
            return Err(format!("{:?} does not hold whole {} blocks along its last axis", self.shape, self.format));
        }
        let want = self.rows().checked_mul(self.row_bytes());
        if want != Some(self.bytes.len()) {
            return Err(format!("{} bytes do not hold {} {:?}", self.bytes.len(), self.format, self.shape));
        }
        if self.format == GgmlType::MXFP4 {
            rdu_checkpoint::check_mxfp4_scales(self.bytes)?;
        }
        Ok(())
    }

    /// Rows `first..first + count` as their own weight (`shape` must be `[count, cols]`).
    pub fn rows_of(&self, first: usize, count: usize, shape: &'a [usize]) -> Option<PackedWeight<'a>> {
        let rb = self.row_bytes();
        let bytes = self.bytes.get(first.checked_mul(rb)?..first.checked_add(count)?.checked_mul(rb)?)?;
        Some(PackedWeight { shape, format: self.format, bytes })
    }

    /// Row `j`'s bytes.
    pub fn row(&self, j: usize) -> &'a [u8] {
        let rb = self.row_bytes();
        &self.bytes[j * rb..(j + 1) * rb]
    }

    /// Every value as f32, as the reference reads them.
    pub fn widen_all(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.rows() * self.cols());
        dequantize_into(self.format, self.bytes, &mut out);
        out
    }

    /// The weight as owned Q8_0 blocks (a Q8_0-declared weight read by an op that needs them).
    pub fn to_q8(&self) -> Option<Q8Weight> {
        (self.format == GgmlType::Q8_0).then(|| Q8Weight {
            shape: self.shape.to_vec(),
            blocks: self.bytes.chunks_exact(34).map(Q8Block::from_bytes).collect(),
        })
    }
}

#[inline(always)]
fn f16(b: &[u8]) -> f32 {
    half::f16::from_le_bytes([b[0], b[1]]).to_f32()
}

/// Widens one row (`bytes` of `format`) into `out` (`out.len()` values): the reference's values.
pub fn widen_row(format: GgmlType, bytes: &[u8], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if format == GgmlType::Q8_0 && q8_kernel() == Q8Kernel::Avx512 {
        // SAFETY: `q8_kernel` chooses `Avx512` only on a CPU with AVX-512 F and BW, and F16C.
        return unsafe { widen_q8_row_avx512(bytes, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports AVX2 and FMA, checked just above.
        if unsafe { widen_row_avx2(format, bytes, out) } {
            return;
        }
    }
    widen_row_plain(format, bytes, out)
}

/// A row of file Q8_0 blocks widened with AVX-512, sixteen values at a time: each byte
/// sign-extended to f32 and multiplied by its block's scale, the reference's `f32::from(q) * d`
/// (one rounding), so bit for bit its values. The portable path compiles the dequantiser
/// behind a per-block call without the wide vector unit, and took 30% of a 16-row batched
/// decode step of Gemma 3 270M Q8_0 (perf, Zen 5 VM, 2 threads).
///
/// # Safety
/// The CPU must support AVX-512 F and BW, and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn widen_q8_row_avx512(bytes: &[u8], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let scales = f16_values();
    for (b, o) in bytes.chunks_exact(34).zip(out.chunks_exact_mut(QK8_0)) {
        // SAFETY: `b` holds a block's 34 bytes and `o` its 32 floats (the chunks' lengths).
        let d = _mm512_set1_ps(scale_of(scales, b.as_ptr()));
        let lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(b.as_ptr().add(2) as *const __m128i)));
        let hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(b.as_ptr().add(18) as *const __m128i)));
        _mm512_storeu_ps(o.as_mut_ptr(), _mm512_mul_ps(lo, d));
        _mm512_storeu_ps(o.as_mut_ptr().add(16), _mm512_mul_ps(hi, d));
    }
}

/// The portable widening: the reference dequantiser itself (a format `can_pack` refuses is
/// left unwidened).
pub fn widen_row_plain(format: GgmlType, bytes: &[u8], out: &mut [f32]) {
    widen_fast(format, bytes, out);
}

// SAFETY: called only where the CPU has AVX2 and FMA (`widen_row` detects them).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn widen_row_avx2(format: GgmlType, bytes: &[u8], out: &mut [f32]) -> bool {
    widen_fast(format, bytes, out)
}

/// The formats widened with `rdu_checkpoint`'s own dequantisers written into `out` (fixed-size
/// loops, inlined here, so vectorised for the caller's CPU features); `false` for a format
/// without one.
#[inline(always)]
fn widen_fast(format: GgmlType, bytes: &[u8], out: &mut [f32]) -> bool {
    dequantize_slice(format, bytes, out)
}

/// Row `j` of an FP8 weight widened into `out` (`view.cols` values): `fp8 · scale` of its
/// block, exactly [`Fp8View::widen_row`]'s values (the AVX2 kernel where the CPU has it).
pub fn widen_fp8_row(view: &Fp8View<'_>, j: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if q8_kernel() != Q8Kernel::Plain {
        // SAFETY: every kernel but `Plain` is chosen only on a CPU with AVX2, FMA and F16C.
        unsafe { widen_fp8_row_avx2(view, j, out) };
        return;
    }
    view.widen_row(j, out);
}

/// [`Fp8View::widen_row`] with AVX2, eight values at a time: an e4m3fn byte's seven low bits
/// shifted into an f32's exponent and mantissa (`eeee mmm` to bits 20..27) and its sign to bit
/// 31 are the f32 of its value times 2⁻¹²⁰ — subnormals included, as the f32 has the
/// exponent range to hold them normal — so one multiply by 2¹²⁰ (exact) gives the value,
/// and the NaN pattern `S.1111.111` is blended in; each value is then multiplied by its
/// block's scale, the one rounding the portable kernel does. Bit for bit the table's values.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub unsafe fn widen_fp8_row_avx2(view: &Fp8View<'_>, j: usize, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let (bytes, scales) = (view.row_bytes(j), view.row_scales(j));
    let bc = view.block[1];
    let pow120 = _mm256_set1_ps(f32::from_bits((120 + 127) << 23));
    let (low7, nan) = (_mm256_set1_epi32(0x7F), _mm256_set1_ps(f32::NAN));
    for (b, (o, &s)) in bytes.chunks(bc).zip(out.chunks_mut(bc).zip(scales)) {
        let sv = _mm256_set1_ps(s);
        let n8 = b.len() / 8 * 8;
        for k in (0..n8).step_by(8) {
            // SAFETY: bytes k..k+8 of `b` and floats k..k+8 of `o` are in bounds (k + 8 <= n8).
            let v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(b.as_ptr().add(k) as *const __m128i));
            let mag = _mm256_and_si256(v, low7);
            let bits = _mm256_or_si256(_mm256_slli_epi32(mag, 20), _mm256_slli_epi32(_mm256_andnot_si256(low7, v), 24));
            let value = _mm256_mul_ps(_mm256_castsi256_ps(bits), pow120);
            let is_nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, low7));
            let value = _mm256_blendv_ps(value, nan, is_nan);
            _mm256_storeu_ps(o.as_mut_ptr().add(k), _mm256_mul_ps(value, sv));
        }
        for (o, &b) in o[n8..].iter_mut().zip(&b[n8..]) {
            *o = rdu_checkpoint::fp8_e4m3_to_f32(b) * s;
        }
    }
}

/// One row of file Q8_0 blocks (34 bytes each) times `x`: the sums of `q8::dot_row`.
#[inline(always)]
pub fn dot_q8_row_plain(row: &[u8], x: &[f32]) -> f32 {
    let mut total = [0.0f32; 8];
    for (b, xs) in row.chunks_exact(34).zip(x.chunks_exact(QK8_0)) {
        let d = f16(b);
        let mut acc = [0.0f32; 8];
        for lane in 0..4 {
            for j in 0..8 {
                acc[j] += f32::from(b[2 + lane * 8 + j] as i8) * xs[lane * 8 + j];
            }
        }
        for j in 0..8 {
            total[j] += d * acc[j];
        }
    }
    ((total[0] + total[4]) + (total[1] + total[5])) + ((total[2] + total[6]) + (total[3] + total[7]))
}

/// `dot_q8_row_plain` with AVX2 and FMA, read in place: each run of eight bytes sign-extended
/// straight from memory (no shuffles), a block's four runs multiply-added into two sums (so
/// they do not wait on one chain), and blocks taken round-robin into four running sums added
/// at the end — a reassociation of the portable sum, within
/// `q8_row_kernels_agree_on_the_same_tiles`'s bound of it. Measured on a Zen 1 core, side by
/// side with the one-chain kernel it replaced: 1.05× streaming 262,144 rows of 640 (Gemma 3's
/// head), 1.0–1.09× on rows in cache.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q8_row_avx2(row: &[u8], x: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = (row.len() / 34).min(x.len() / QK8_0);
    // One block's scaled products added into `total`.
    // SAFETY: inlined into this function (its target features); `b` holds a block's 34 bytes
    // and `xp` its 32 values.
    #[inline(always)]
    unsafe fn block(b: *const u8, xp: *const f32, scales: &F16Values, total: __m256) -> __m256 {
        // Run k of the block: eight weights as f32 times x[8k..8k+8].
        let run = |k: usize| {
            let q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(b.add(2 + 8 * k) as *const __m128i)));
            (q, _mm256_loadu_ps(xp.add(8 * k)))
        };
        let ((q0, x0), (q1, x1), (q2, x2), (q3, x3)) = (run(0), run(1), run(2), run(3));
        let a0 = _mm256_fmadd_ps(q2, x2, _mm256_mul_ps(q0, x0));
        let a1 = _mm256_fmadd_ps(q3, x3, _mm256_mul_ps(q1, x1));
        _mm256_fmadd_ps(_mm256_set1_ps(scale_of(scales, b)), _mm256_add_ps(a0, a1), total)
    }
    let t = round_robin(n, 34, row.as_ptr(), x.as_ptr(), _mm256_setzero_ps(), block);
    let total = _mm256_add_ps(_mm256_add_ps(t[0], t[1]), _mm256_add_ps(t[2], t[3]));
    let mut l = [0.0f32; 8];
    _mm256_storeu_ps(l.as_mut_ptr(), total);
    ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]))
}

/// `dot_q8_row_avx2` with AVX-512: each block's 32 products in 16 lanes (two pairs a lane),
/// blocks summed round-robin into four running sums added at the end (`four_sums`) — a reassociation of
/// the same sum, within `q8_row_kernels_agree_on_the_same_tiles`'s bound of the portable one.
///
/// # Safety
/// The CPU must support AVX-512 F and BW, and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub unsafe fn dot_q8_row_avx512(row: &[u8], x: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = (row.len() / 34).min(x.len() / QK8_0);
    // One block's scaled products added into `total`.
    // SAFETY: inlined into this function (its target features); `b` holds a block's 34 bytes
    // and `xp` its 32 values.
    #[inline(always)]
    unsafe fn block(b: *const u8, xp: *const f32, scales: &F16Values, total: __m512) -> __m512 {
        let d = _mm512_set1_ps(scale_of(scales, b));
        let lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(b.add(2) as *const __m128i)));
        let hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(b.add(18) as *const __m128i)));
        let acc = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xp.add(16)), _mm512_mul_ps(lo, _mm512_loadu_ps(xp)));
        _mm512_fmadd_ps(d, acc, total)
    }
    four_sums(n, 34, row.as_ptr(), x.as_ptr(), block)
}

/// A row of file Q8_0 blocks times `R` (up to 8) activation rows at once with AVX-512 (a verify
/// step's or a small batch's rows): each block's 32 values widened once and multiplied into
/// every activation row's sums exactly as [`dot_q8_row_avx512`] multiplies them into its one
/// row's — the same operations in the same order (round-robin over four running sums), so each
/// result is that kernel's, bit for bit — while the weight row is read and widened once for
/// all `R` rows instead of `R` times.
///
/// # Safety
/// The CPU must support AVX-512 F and BW, and F16C; every `xs[r]` holds `32 · blocks` floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub unsafe fn dot_q8_rows_avx512<const R: usize>(row: &[u8], xs: [&[f32]; R]) -> [f32; R] {
    use std::arch::x86_64::*;
    let n = xs.iter().fold(row.len() / 34, |n, x| n.min(x.len() / QK8_0));
    let scales = f16_values();
    let mut t = [[_mm512_setzero_ps(); R]; 4];
    // Block `i` of the row into running sum `s` of every activation row.
    let mut block = |i: usize, s: usize| {
        let b = row.as_ptr().add(34 * i);
        let d = _mm512_set1_ps(scale_of(scales, b));
        let lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(b.add(2) as *const __m128i)));
        let hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(b.add(18) as *const __m128i)));
        for (sum, x) in t[s].iter_mut().zip(&xs) {
            let xp = x.as_ptr().add(32 * i);
            let acc = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xp.add(16)), _mm512_mul_ps(lo, _mm512_loadu_ps(xp)));
            *sum = _mm512_fmadd_ps(d, acc, *sum);
        }
    };
    let mut i = 0;
    while i + 4 <= n {
        prefetch_ahead(row.as_ptr().wrapping_add(34 * i), 4 * 34);
        for s in 0..4 {
            block(i + s, s);
        }
        i += 4;
    }
    while i < n {
        block(i, 0);
        i += 1;
    }
    std::array::from_fn(|r| {
        _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(t[0][r], t[1][r]), _mm512_add_ps(t[2][r], t[3][r])))
    })
}

/// The four running sums of the AVX2 Q8_0 and the AVX-512 Q8_0 and Q5_0 row kernels: `block`
/// (one block's products added into a sum) over blocks `0..n` (`stride` bytes of `row` and 32
/// floats of `x` each), taken round-robin from `zero`, so consecutive blocks' multiply-adds do
/// not wait on each other; blocks past the last four go into sum 0 (an index known only at run
/// time would keep the sums in memory).
///
/// # Safety
/// The caller's target features cover `block`; `row` holds `n · stride` bytes, `x` `32 · n` floats.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn round_robin<V: Copy>(
    n: usize,
    stride: usize,
    row: *const u8,
    x: *const f32,
    zero: V,
    block: unsafe fn(*const u8, *const f32, &F16Values, V) -> V,
) -> [V; 4] {
    let scales = f16_values();
    let mut t = [zero; 4];
    let mut i = 0;
    while i + 4 <= n {
        prefetch_ahead(row.wrapping_add(stride * i), 4 * stride);
        // SAFETY: blocks i..i+4 lie inside `row` and `x` (the caller's bounds).
        t[0] = block(row.add(stride * i), x.add(32 * i), scales, t[0]);
        t[1] = block(row.add(stride * (i + 1)), x.add(32 * (i + 1)), scales, t[1]);
        t[2] = block(row.add(stride * (i + 2)), x.add(32 * (i + 2)), scales, t[2]);
        t[3] = block(row.add(stride * (i + 3)), x.add(32 * (i + 3)), scales, t[3]);
        i += 4;
    }
    while i < n {
        // SAFETY: as above, block i.
        t[0] = block(row.add(stride * i), x.add(32 * i), scales, t[0]);
        i += 1;
    }
    t
}

/// How far ahead of the bytes a row kernel is reading it asks for the weight's next bytes.
/// On the Xeon VM (Sapphire Rapids, 2 cores), streaming Gemma 3's 178 MB Q8_0 head through
/// `dot_q8_row_avx512`: 5.8–6.8 GB/s a core without it (the hardware prefetcher alone), and
/// 9.8–10.8 GB/s a core 2048 bytes ahead (1024: 7.7–8.4; 4096: 8.4–9.3), 11–13 against
/// 17–19 GB/s on both cores. A hint only: no value changes.
const PREFETCH_AHEAD: usize = 2048;

/// Asks for the cache lines of the `len` bytes `PREFETCH_AHEAD` past `at` (a prefetch never
/// faults, so past the end of the weight it only wastes a request; the address is formed with
/// `wrapping_add` and never read by this program).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_ahead(at: *const u8, len: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let mut off = 0;
    while off < len {
        // SAFETY: a prefetch is a hint that reads nothing and never faults, at any address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PREFETCH_AHEAD + off) as *const i8) };
        off += 64;
    }
}

/// `round_robin` in AVX-512 vectors, its four sums added at the end.
///
/// # Safety
/// AVX-512 F (the caller's target features); `row` and `x` as `round_robin` reads them.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn four_sums(
    n: usize,
    stride: usize,
    row: *const u8,
    x: *const f32,
    block: unsafe fn(*const u8, *const f32, &F16Values, std::arch::x86_64::__m512) -> std::arch::x86_64::__m512,
) -> f32 {
    use std::arch::x86_64::*;
    let t = round_robin(n, stride, row, x, _mm512_setzero_ps(), block);
    _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(t[0], t[1]), _mm512_add_ps(t[2], t[3])))
}

/// A dense-declared Q5_0 row times `x` with AVX-512. A Q5_0 value is `d · q` with `q` a
/// 5-bit integer and `d` an f16: a product of at most 16 significant bits, exact in f32, so
/// the reference's widened values are exactly `d · q` and `Σ x·(d·q) = d · Σ x·q` is a
/// reassociation of the same sum — the Q8_0 kernel's order: each block's 32 `q·x` in 16
/// lanes, times `d`, blocks round-robin into four running sums added at the end, within
/// `q5_0_and_mxfp4_row_kernels_agree_on_the_same_tiles`'s bound of the widened row's `dot`. Each `q` is
/// looked up, not converted: a block's 16 bytes zero-extended to 32-bit lanes index a table of
/// `k − 16` by their low nibble (values 0..16) and, shifted, by their high one (16..32), and
/// 16 is added where the value's fifth bit (bit `j` of `qh`) is set. Measured on a Zen 4 core,
/// rows in cache: 1.25× the kernel that shifted and masked the nibbles as bytes, widened
/// them with `vpmovsxbd` and `vcvtdq2ps` and multiplied each by `d`.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VL, AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub unsafe fn dot_q5_0_row_avx512(row: &[u8], x: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = (row.len() / 22).min(x.len() / 32);
    // One block's 32 products, times its scale, added into `total`.
    // SAFETY: inlined into this function (its target features); `b` holds a block's 22 bytes
    // and `xp` its 32 values.
    #[inline(always)]
    unsafe fn block(b: *const u8, xp: *const f32, scales: &F16Values, total: __m512) -> __m512 {
        // Entry k: the value of a nibble k without its fifth bit.
        let table = _mm512_setr_ps(
            -16.0, -15.0, -14.0, -13.0, -12.0, -11.0, -10.0, -9.0, -8.0, -7.0, -6.0, -5.0, -4.0, -3.0, -2.0, -1.0,
        );
        let sixteen = _mm512_set1_ps(16.0);
        // The fifth bits of values 0..16 and 16..32, loaded straight into mask registers (a
        // load each, where moving them from a general register took the shuffle port).
        let (fifth_lo, fifth_hi) = (_load_mask16(b.add(2) as *const u16), _load_mask16(b.add(4) as *const u16));
        // Lane j holds byte j: value j in its low nibble, value 16 + j in its high one
        // (`vpermps` reads an index's low four bits).
        let bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(b.add(6) as *const __m128i));
        let lo = _mm512_permutexvar_ps(bytes, table);
        let lo = _mm512_mask_add_ps(lo, fifth_lo, lo, sixteen);
        let hi = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table);
        let hi = _mm512_mask_add_ps(hi, fifth_hi, hi, sixteen);
        let acc = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xp.add(16)), _mm512_mul_ps(lo, _mm512_loadu_ps(xp)));
        _mm512_fmadd_ps(_mm512_set1_ps(scale_of(scales, b)), acc, total)
    }
    four_sums(n, 22, row.as_ptr(), x.as_ptr(), block)
}

/// An MXFP4 row times `x` with AVX-512. A value is `k · 2^(e − 128)` with `k` one of ggml's
/// doubled e2m1 values (at most 12 in magnitude): exact in f32, so `Σ x·(k·d) = d · Σ x·k`
/// is a reassociation of the widened row's sum — Q5_0's order: each block's 32 `k·x` in 16
/// lanes, times `d`, blocks round-robin into four running sums added at the end, within
/// `q5_0_and_mxfp4_row_kernels_agree_on_the_same_tiles`'s bound. Each `k` is looked up by its nibble
/// from a table of the 16 (`vpermps` reads an index's low four bits: a byte's low nibble is
/// value `j`, its high one value `16 + j`).
///
/// # Safety
/// The CPU must support AVX-512 F and BW, AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub unsafe fn dot_mxfp4_row_avx512(row: &[u8], x: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = (row.len() / 17).min(x.len() / 32);
    // One block's 32 products, times its scale, added into `total`.
    // SAFETY: inlined into this function (its target features); `b` holds a block's 17 bytes
    // and `xp` its 32 values.
    #[inline(always)]
    unsafe fn block(b: *const u8, xp: *const f32, _: &F16Values, total: __m512) -> __m512 {
        let table =
            _mm512_setr_ps(0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0);
        let bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(b.add(1) as *const __m128i));
        let lo = _mm512_permutexvar_ps(bytes, table);
        let hi = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table);
        let acc = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xp.add(16)), _mm512_mul_ps(lo, _mm512_loadu_ps(xp)));
        _mm512_fmadd_ps(_mm512_set1_ps(rdu_checkpoint::e8m0_half(*b)), acc, total)
    }
    four_sums(n, 17, row.as_ptr(), x.as_ptr(), block)
}

/// A dense-declared Q4_K row times `x` with AVX-512: every value widened exactly as the
/// reference widens it (`d·q − m`, the product rounded, then the difference), sixteen values a
/// vector into four running sums (one per sixteen-value quarter of a chunk of 64) added at the
/// end — `dot_widened_avx2`'s Q4_K products, reassociated, within
/// `k_row_kernels_agree_on_the_same_tiles`'s bound of the widened row's `dot`. A sub-block's
/// 32 values take one of 16: they are computed once (`d·k − m` for k in 0..16, the
/// reference's two roundings) and each value looked up by its nibble (`vpermps` reads an
/// index's low four bits, so a byte zero-extended to a 32-bit lane indexes by its low nibble
/// and, shifted right by four, by its high one) — two operations for 16 values where
/// converting and scaling each took four (the same values in the same order, so the same
/// sum). Measured on a Zen 4 core, rows of 2048 in cache: 1.2× that kernel.
///
/// # Safety
/// The CPU must support AVX-512 F and BW, AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub unsafe fn dot_q4_k_row_avx512(row: &[u8], x: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = (row.len() / 144).min(x.len() / 256);
    let iota = _mm512_setr_ps(0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0);
    let mut t = [_mm512_setzero_ps(); 4];
    for i in 0..n {
        // SAFETY: super-block i spans bytes 144i..144(i+1) of `row` and floats 256i..256(i+1) of `x`.
        let b = std::slice::from_raw_parts(row.as_ptr().add(144 * i), 144);
        let xp = x.as_ptr().add(256 * i);
        prefetch_ahead(b.as_ptr(), 144);
        let sm = q4_k_scales(b);
        for chunk in 0..4 {
            let ((d1, m1), (d2, m2)) = (sm[2 * chunk], sm[2 * chunk + 1]);
            // The 16 values of each sub-block: sub-block 2·chunk is the low nibbles of the
            // chunk's 32 bytes, 2·chunk + 1 the high ones.
            let values = |d: f32, m: f32| _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(d), iota), _mm512_set1_ps(m));
            let (v1, v2) = (values(d1, m1), values(d2, m2));
            let q = b.as_ptr().add(16 + 32 * chunk);
            let z0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(q as *const __m128i));
            let z1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(q.add(16) as *const __m128i));
            let xs = xp.add(64 * chunk);
            t[0] = _mm512_fmadd_ps(_mm512_permutexvar_ps(z0, v1), _mm512_loadu_ps(xs), t[0]);
            t[1] = _mm512_fmadd_ps(_mm512_permutexvar_ps(z1, v1), _mm512_loadu_ps(xs.add(16)), t[1]);
            let (h0, h1) = (_mm512_srli_epi32(z0, 4), _mm512_srli_epi32(z1, 4));
            t[2] = _mm512_fmadd_ps(_mm512_permutexvar_ps(h0, v2), _mm512_loadu_ps(xs.add(32)), t[2]);
            t[3] = _mm512_fmadd_ps(_mm512_permutexvar_ps(h1, v2), _mm512_loadu_ps(xs.add(48)), t[3]);
        }
    }
    _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(t[0], t[1]), _mm512_add_ps(t[2], t[3])))
}

/// A dense-declared Q6_K row times `x` with AVX-512: every value widened exactly as the
/// reference widens it (`(d·scale)·(q − 32)`), sixteen values a vector into four running sums
/// (one per run of 32 values of a half) added at the end — `dot_widened_avx2`'s Q6_K products,
/// reassociated, within `k_row_kernels_agree_on_the_same_tiles`'s bound.
///
/// # Safety
/// The CPU must support AVX-512 F and BW, AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub unsafe fn dot_q6_k_row_avx512(row: &[u8], x: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = (row.len() / 210).min(x.len() / 256);
    let minus32 = _mm256_set1_epi8(32);
    let mut t = [_mm512_setzero_ps(); 4];
    for i in 0..n {
        // SAFETY: block i spans bytes 210i..210(i+1) of `row` and floats 256i..256(i+1) of `x`.
        let b = row.as_ptr().add(210 * i);
        let xp = x.as_ptr().add(256 * i);
        prefetch_ahead(b, 210);
        let d = f16_scale(b.add(208));
        for half in 0..2 {
            let q = q6_k_runs(b, half);
            // Run k into sum k: every index a constant (unrolled by hand).
            macro_rules! run {
                ($k:literal) => {{
                    let v = _mm256_sub_epi8(q[$k], minus32);
                    let sc = b.add(192 + 8 * half + 2 * $k);
                    // Exactly the reference's `d · scale`, then `(d · scale) · (q − 32)`.
                    let ds0 = _mm512_set1_ps(d * f32::from(*sc as i8));
                    let ds1 = _mm512_set1_ps(d * f32::from(*sc.add(1) as i8));
                    let lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(v))), ds0);
                    let hi =
                        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(v, 1))), ds1);
                    let xs = xp.add(128 * half + 32 * $k);
                    t[$k] = _mm512_fmadd_ps(
                        hi,
                        _mm512_loadu_ps(xs.add(16)),
                        _mm512_fmadd_ps(lo, _mm512_loadu_ps(xs), t[$k]),
                    );
                }};
            }
            run!(0);
            run!(1);
            run!(2);
            run!(3);
        }
    }
    _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(t[0], t[1]), _mm512_add_ps(t[2], t[3])))
}

/// The AVX-512 row kernel of a dense-declared weight kept in `format`, where there is one
/// (Q5_0 needs AVX-512 VL as well: `q8_kernel` chooses `Avx512` only with it).
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VL, AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[inline]
pub unsafe fn dot_packed_row_avx512(format: GgmlType, row: &[u8], x: &[f32]) -> Option<f32> {
    match format {
        GgmlType::Q5_0 => Some(dot_q5_0_row_avx512(row, x)),
        GgmlType::MXFP4 => Some(dot_mxfp4_row_avx512(row, x)),
        GgmlType::Q4_K => Some(dot_q4_k_row_avx512(row, x)),
        GgmlType::Q6_K => Some(dot_q6_k_row_avx512(row, x)),
        _ => None,
    }
}

/// The four runs of 32 six-bit values (0..64) of half `half` of the Q6_K block at `b`, as the
/// reference assembles them: the low or high nibble of `ql`, and two bits of `qh` above it.
///
/// # Safety
/// AVX2 (the caller's target features); `b` points at a whole 210-byte block.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn q6_k_runs(b: *const u8, half: usize) -> [std::arch::x86_64::__m256i; 4] {
    use std::arch::x86_64::*;
    let (low4, three, mid, top) =
        (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(3), _mm256_set1_epi8(0x0C), _mm256_set1_epi8(0x30));
    let ql = b.add(64 * half);
    let (ql_lo, ql_hi) = (_mm256_loadu_si256(ql as *const __m256i), _mm256_loadu_si256(ql.add(32) as *const __m256i));
    let qh = _mm256_loadu_si256(b.add(128 + 32 * half) as *const __m256i);
    [
        _mm256_or_si256(_mm256_and_si256(ql_lo, low4), _mm256_slli_epi16(_mm256_and_si256(qh, three), 4)),
        _mm256_or_si256(_mm256_and_si256(ql_hi, low4), _mm256_slli_epi16(_mm256_and_si256(qh, mid), 2)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql_lo, 4), low4), _mm256_and_si256(qh, top)),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(ql_hi, 4), low4),
            _mm256_and_si256(_mm256_srli_epi16(qh, 2), top),
        ),
    ]
}

/// The (scale, min) of each of the eight sub-blocks of the Q4_K super-block `b` (144 bytes),
/// exactly the reference's (`k_scale_min` of its `d`, `dmin` and packed scales).
/// (A plain loop: `array::from_fn` was compiled out of line, for the baseline CPU, and took a
/// fifth of the AVX-512 Q4_K kernel's time.)
#[inline(always)]
fn q4_k_scales(b: &[u8]) -> [(f32, f32); 8] {
    let (d, dmin) = (f16(&b[0..2]), f16(&b[2..4]));
    let mut out = [(0.0, 0.0); 8];
    for (j, o) in out.iter_mut().enumerate() {
        *o = k_scale_min(d, dmin, &b[4..16], j);
    }
    out
}

/// Every f16 bit pattern's value as f32 (exact: f32 holds every f16), indexed by the bits.
#[cfg(target_arch = "x86_64")]
pub(super) type F16Values = [f32; 1 << 16];

/// The table of [`F16Values`], made once. The Q8_0 and Q5_0 row kernels read a block's scale
/// from it: a load the multiply-add takes as its broadcast operand, where converting the scale
/// (`vcvtph2ps`, then a broadcast) took two operations of the shuffle port those kernels are
/// short of. Measured on the Xeon VM (one core, rows in cache): the Q5_0 kernel 8.2 → 6.4
/// cycles a block, with the fifth bits loaded into mask registers as well.
#[cfg(target_arch = "x86_64")]
pub(super) fn f16_values() -> &'static F16Values {
    use std::sync::OnceLock;
    static VALUES: OnceLock<Box<F16Values>> = OnceLock::new();
    VALUES.get_or_init(|| {
        let mut values = Box::new([0f32; 1 << 16]);
        for (bits, v) in values.iter_mut().enumerate() {
            *v = half::f16::from_bits(bits as u16).to_f32();
        }
        values
    })
}

/// The scale of the block at `b` (its first two bytes, an f16) from `values`.
///
/// # Safety
/// `b` must point at two readable bytes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn scale_of(values: &F16Values, b: *const u8) -> f32 {
    values[usize::from(u16::from_le_bytes([*b, *b.add(1)]))]
}

/// The block's f16 scale (its first two bytes) as f32.
///
/// # Safety
/// `b` must point at two readable bytes.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "f16c")]
unsafe fn f16_scale(b: *const u8) -> f32 {
    use std::arch::x86_64::*;
    let bits = u16::from_le_bytes([*b, *b.add(1)]);
    // f16 → f32 is exact, so this is the value `half` gives.
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

/// A row kept in `format` times `x`, fused (the row is never written out) for Q5_0, Q4_K,
/// Q6_K, Q8_0 and MXFP4: each value is widened exactly as the reference widens it and
/// multiply-added into the four running sums of eight lanes in the order `q8::dot_dense_avx2`
/// uses (the `k`-th run of eight values into sum `k mod 4`), so the result is bit-identical to
/// widening the row and taking `q8::dot` of it. `None` for other formats.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_widened_avx2(format: GgmlType, row: &[u8], x: &[f32]) -> Option<f32> {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_ps(); 4];
    // Eight bytes (signed) → eight f32, times the scale: exactly `f32::from(q) * d`.
    let f8 = |v: __m128i| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
    // 32 signed bytes `q` times the scales (`d0` for the first 16, `d1` for the last), each
    // product-added with `x[0..32]` into the four running sums, run by run.
    let add32 = |acc: &mut [__m256; 4], q: __m256i, d0: __m256, d1: __m256, xp: *const f32| {
        let (lo, hi) = (_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
        let runs = [(lo, d0), (_mm_srli_si128(lo, 8), d0), (hi, d1), (_mm_srli_si128(hi, 8), d1)];
        for (k, (v, d)) in runs.into_iter().enumerate() {
            acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(f8(v), d), _mm256_loadu_ps(xp.add(8 * k)), acc[k]);
        }
    };
    match format {
        GgmlType::Q5_0 => {
            for i in 0..(row.len() / 22).min(x.len() / 32) {
                let (d, q) = q5_0_block_avx2(row.as_ptr().add(22 * i));
                add32(&mut acc, q, d, d, x.as_ptr().add(32 * i));
            }
        }
        GgmlType::Q8_0 => {
            let n = (row.len() / 34).min(x.len() / 32);
            for i in 0..n {
                let (b, xp) = (row.as_ptr().add(34 * i), x.as_ptr().add(32 * i));
                let d = _mm256_set1_ps(f16_scale(b));
                add32(&mut acc, _mm256_loadu_si256(b.add(2) as *const __m256i), d, d, xp);
            }
        }
        GgmlType::MXFP4 => {
            for i in 0..(row.len() / 17).min(x.len() / 32) {
                let (d, q) = mxfp4_block_avx2(row.as_ptr().add(17 * i));
                add32(&mut acc, q, d, d, x.as_ptr().add(32 * i));
            }
        }
        GgmlType::Q4_K => {
            let n = (row.len() / 144).min(x.len() / 256);
            // Eight unsigned nibbles (as bytes) → eight f32.
            let u8f = |v: __m128i| _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
            let low4 = _mm_set1_epi8(0x0F);
            for i in 0..n {
                let b = std::slice::from_raw_parts(row.as_ptr().add(144 * i), 144);
                let xp = x.as_ptr().add(256 * i);
                let sm = q4_k_scales(b);
                for chunk in 0..4 {
                    let ((d1, m1), (d2, m2)) = (sm[2 * chunk], sm[2 * chunk + 1]);
                    let q = b.as_ptr().add(16 + 32 * chunk);
                    for (half, (dd, mm)) in [(d1, m1), (d2, m2)].into_iter().enumerate() {
                        let (dv, mv) = (_mm256_set1_ps(dd), _mm256_set1_ps(mm));
                        let xs = xp.add(64 * chunk + 32 * half);
                        for part in 0..2 {
                            let raw = _mm_loadu_si128(q.add(16 * part) as *const __m128i);
                            let nib = if half == 0 {
                                _mm_and_si128(raw, low4)
                            } else {
                                _mm_and_si128(_mm_srli_epi16(raw, 4), low4)
                            };
                            // d·q − m, rounded after the product as the reference rounds it.
                            let w0 = _mm256_sub_ps(_mm256_mul_ps(dv, u8f(nib)), mv);
                            let w1 = _mm256_sub_ps(_mm256_mul_ps(dv, u8f(_mm_srli_si128(nib, 8))), mv);
                            // Runs 4·(…) + 2·part and + 1 of the row: sums 2·part and 2·part + 1.
                            acc[2 * part] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xs.add(16 * part)), acc[2 * part]);
                            acc[2 * part + 1] =
                                _mm256_fmadd_ps(w1, _mm256_loadu_ps(xs.add(16 * part + 8)), acc[2 * part + 1]);
                        }
                    }
                }
            }
        }
        GgmlType::Q6_K => {
            let n = (row.len() / 210).min(x.len() / 256);
            let minus32 = _mm256_set1_epi8(32);
            for i in 0..n {
                let b = row.as_ptr().add(210 * i);
                let xp = x.as_ptr().add(256 * i);
                let d = f16_scale(b.add(208));
                for half in 0..2 {
                    let q = q6_k_runs(b, half);
                    for (k, q) in q.into_iter().enumerate() {
                        let sc = b.add(192 + 8 * half + 2 * k);
                        // Exactly the reference's `d · scale`, then `(d · scale) · (q − 32)`.
                        let ds0 = _mm256_set1_ps(d * f32::from(*sc as i8));
                        let ds1 = _mm256_set1_ps(d * f32::from(*sc.add(1) as i8));
                        add32(&mut acc, _mm256_sub_epi8(q, minus32), ds0, ds1, xp.add(128 * half + 32 * k));
                    }
                }
            }
        }
        _ => return None,
    }
    Some(crate::q8::fold4(acc))
}

/// The Q5_0 block at `b` (22 bytes) for [`dot_widened_avx2`]: its scale in every lane, and its
/// 32 values `q − 16` as signed bytes (value `j` in byte `j`): the low nibbles are values
/// 0..16, the high ones 16..32, each with its fifth bit from `qh`.
///
/// # Safety
/// AVX2 and F16C (the caller's target features); `b` points at a whole block.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn q5_0_block_avx2(b: *const u8) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256i) {
    use std::arch::x86_64::*;
    let shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    let bit = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
    let (low4, sixteen) = (_mm_set1_epi8(0x0F), _mm256_set1_epi8(16));
    let d = _mm256_set1_ps(f16_scale(b));
    let qh = u32::from_le_bytes([*b.add(2), *b.add(3), *b.add(4), *b.add(5)]);
    // 0xFF in byte j where bit j of qh is set.
    let bits = _mm256_shuffle_epi8(_mm256_set1_epi32(qh as i32), shuf);
    let high = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_or_si256(bits, bit), _mm256_set1_epi64x(-1)), sixteen);
    let qs = _mm_loadu_si128(b.add(6) as *const __m128i);
    let nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), low4), _mm_and_si128(qs, low4));
    (d, _mm256_sub_epi8(_mm256_or_si256(nib, high), sixteen))
}

/// The MXFP4 block at `b` (17 bytes) for [`dot_widened_avx2`]: half its scale (`e8m0_half`)
/// in every lane, and its 32 doubled e2m1 values as signed bytes (value `j` in byte `j`: the
/// low nibbles are values 0..16, the high ones 16..32), each looked up by its nibble.
///
/// # Safety
/// AVX2 (the caller's target features); `b` points at a whole block.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn mxfp4_block_avx2(b: *const u8) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256i) {
    use std::arch::x86_64::*;
    let table = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    let low4 = _mm_set1_epi8(0x0F);
    let d = _mm256_set1_ps(rdu_checkpoint::e8m0_half(*b));
    let qs = _mm_loadu_si128(b.add(1) as *const __m128i);
    let lo = _mm_shuffle_epi8(table, _mm_and_si128(qs, low4));
    let hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(qs, 4), low4));
    (d, _mm256_set_m128i(hi, lo))
}

/// Which Q8_0 row kernel this CPU runs (chosen once, at first use).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Q8Kernel {
    Plain,
    Avx2,
    Avx512,
}

/// The widest Q8_0 row kernel the CPU supports.
pub fn q8_kernel() -> Q8Kernel {
    use std::sync::OnceLock;
    static KERNEL: OnceLock<Q8Kernel> = OnceLock::new();
    *KERNEL.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vl")
                && std::arch::is_x86_feature_detected!("f16c")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Q8Kernel::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
                && std::arch::is_x86_feature_detected!("f16c")
            {
                return Q8Kernel::Avx2;
            }
        }
        Q8Kernel::Plain
    })
}

/// A row of file Q8_0 blocks times `x` with `kernel`.
#[inline(always)]
pub fn dot_q8_row_with(kernel: Q8Kernel, row: &[u8], x: &[f32]) -> f32 {
    match kernel {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `q8_kernel` chose this kernel only on a CPU that supports it.
        Q8Kernel::Avx512 => unsafe { dot_q8_row_avx512(row, x) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Q8Kernel::Avx2 => unsafe { dot_q8_row_avx2(row, x) },
        _ => dot_q8_row_plain(row, x),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic bytes with every f16 scale field set to a finite value.
    fn blocks(format: GgmlType, n: usize, seed: u32) -> Vec<u8> {
        let mut s = seed | 1;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s
        };
        let size = format.type_size() as usize;
        let mut out: Vec<u8> = (0..n * size).map(|_| next() as u8).collect();
        let scale = |v: u32| half::f16::from_f32((v % 1000) as f32 / 997.0 - 0.3).to_le_bytes();
        let scales: &[usize] = match format {
            GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0 => &[0],
            GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
            GgmlType::Q6_K => &[208],
            _ => &[],
        };
        for b in out.chunks_exact_mut(size) {
            for &at in scales {
                b[at..at + 2].copy_from_slice(&scale(next()));
            }
            if format == GgmlType::MXFP4 {
                // Scale bytes from the subnormal 0 and 1 up to 2^72, where products with the
                // tests' activations stay finite.
                b[0] = (next() % 200) as u8;
            }
        }
        if matches!(format, GgmlType::F16 | GgmlType::BF16) {
            for b in out.chunks_exact_mut(2) {
                let v = (next() % 2000) as f32 / 1000.0 - 1.0;
                let bits = if format == GgmlType::F16 {
                    half::f16::from_f32(v).to_le_bytes()
                } else {
                    half::bf16::from_f32(v).to_le_bytes()
                };
                b.copy_from_slice(&bits);
            }
        }
        out
    }

    /// Every format's widening — the vectorised kernel this CPU runs and the portable one —
    /// gives exactly the reference dequantiser's values.
    #[test]
    fn widening_is_exactly_the_reference_dequantisation() {
        use GgmlType::*;
        for format in [Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K, F16, BF16, MXFP4] {
            let cols = 512;
            let n_blocks = cols / format.block_size() as usize;
            let bytes = blocks(format, n_blocks, 7 + format as u32);
            let mut want = Vec::new();
            assert!(dequantize_into(format, &bytes, &mut want), "{format}");
            let (mut fast, mut plain) = (vec![0.0f32; cols], vec![0.0f32; cols]);
            widen_row(format, &bytes, &mut fast);
            widen_row_plain(format, &bytes, &mut plain);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&fast), bits(&want), "{format}: the dispatched kernel");
            assert_eq!(bits(&plain), bits(&want), "{format}: the portable kernel");
        }
    }

    /// The fused widen-and-dot kernels equal widening the row and `q8::dot` of it, bit for bit.
    #[test]
    fn fused_dots_equal_the_widened_dot() {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
        {
            for format in [GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::MXFP4] {
                let cols = 512;
                let bytes = blocks(format, cols / format.block_size() as usize, 9 + format as u32);
                let x: Vec<f32> = (0..cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
                let mut w = Vec::new();
                dequantize_into(format, &bytes, &mut w);
                // SAFETY: the CPU supports AVX2, FMA and F16C, checked above.
                let fused = unsafe { dot_widened_avx2(format, &bytes, &x) }.expect("a fused format");
                assert_eq!(fused.to_bits(), crate::q8::dot(&w, &x).to_bits(), "{format}");
            }
        }
    }

    /// `kernel` on rows of 12 × `cols` seeded `format` blocks (`seed`) agrees with `q8::dot`
    /// of each widened row within f32 reassociation (the bound of
    /// `q8_row_kernels_agree_on_the_same_tiles`).
    #[cfg(target_arch = "x86_64")]
    fn agrees_with_the_widened_dot(format: GgmlType, cols: usize, seed: u32, kernel: unsafe fn(&[u8], &[f32]) -> f32) {
        let bytes = blocks(format, 12 * cols / 32, seed);
        let w = PackedWeight { shape: &[12, cols], format, bytes: &bytes };
        w.check().expect("12 rows");
        let wv = w.widen_all();
        let x: Vec<f32> = (0..cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        for j in 0..12 {
            let wj = &wv[j * cols..(j + 1) * cols];
            let want = crate::q8::dot(wj, &x);
            let bound = wj.iter().zip(&x).map(|(a, b)| (a * b).abs()).sum::<f32>() * 2f32.powi(-19);
            // SAFETY: the callers run this only where `q8_kernel` chose AVX-512 (F, BW, VL,
            // FMA and F16C), every kernel passed here needs no more.
            let got = unsafe { kernel(w.row(j), &x) };
            assert!((got - want).abs() <= bound, "{format} cols {cols} row {j}: {got} vs {want} (bound {bound})");
        }
    }

    /// The AVX-512 Q5_0 and MXFP4 row kernels agree with `q8::dot` of the widened row within
    /// f32 reassociation: Q5_0 on rows of seeded blocks with every fifth-bit pattern the
    /// generator gives, MXFP4 on blocks with scale bytes from 0 to 199; 20 blocks a row
    /// (divisible by four) and 23 (a tail of three past the round-robin).
    #[test]
    fn q5_0_and_mxfp4_row_kernels_agree_on_the_same_tiles() {
        #[cfg(target_arch = "x86_64")]
        if q8_kernel() == Q8Kernel::Avx512 {
            for cols in [640, 736] {
                agrees_with_the_widened_dot(GgmlType::Q5_0, cols, 5 + cols as u32, dot_q5_0_row_avx512);
                agrees_with_the_widened_dot(GgmlType::MXFP4, cols, 11 + cols as u32, dot_mxfp4_row_avx512);
            }
        }
    }

    /// FP8 rows widen to exactly the table's values times their block's scale, through the
    /// AVX2 kernel as through the portable one: every byte pattern (NaN included), blocks
    /// whose width is not a multiple of eight, ragged edge blocks, two stacked matrices.
    #[test]
    fn fp8_widening_is_exactly_the_tables_values() {
        let (rows, cols, block) = (7, 300, [3, 37]);
        let values: Vec<u8> = (0..2 * rows * cols).map(|i| (i * 101 % 256) as u8).collect();
        let grid = rdu_checkpoint::Fp8Grid::of(&[2, rows, cols], block).unwrap();
        let scales: Vec<f32> = (0..grid.len().unwrap()).map(|g| 0.5 + g as f32 / 64.0).collect();
        let w = rdu_checkpoint::Fp8Weight { shape: vec![2, rows, cols], block, values, scales };
        assert!((0..=255u8).all(|b| w.values.contains(&b)), "every byte pattern");
        let view = w.view();
        let same = |a: &[f32], b: &[f32]| {
            a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
        };
        for j in 0..2 * rows {
            let (m, r) = (j / rows, j % rows);
            let want: Vec<f32> = (0..cols)
                .map(|c| {
                    let s = w.scales[(m * grid.rows + r / block[0]) * grid.cols + c / block[1]];
                    rdu_checkpoint::fp8_e4m3_to_f32(w.values[j * cols + c]) * s
                })
                .collect();
            let (mut plain, mut fast) = (vec![0.0f32; cols], vec![0.0f32; cols]);
            view.widen_row(j, &mut plain);
            widen_fp8_row(&view, j, &mut fast);
            assert!(same(&plain, &want), "row {j}: the portable kernel");
            assert!(same(&fast, &want), "row {j}: the dispatched kernel");
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                let mut avx2 = vec![0.0f32; cols];
                // SAFETY: the CPU supports AVX2, checked above.
                unsafe { widen_fp8_row_avx2(&view, j, &mut avx2) };
                assert!(same(&avx2, &want), "row {j}: the AVX2 kernel");
            }
        }
    }

    /// The AVX-512 Q4_K and Q6_K row kernels agree with `q8::dot` of the widened row within f32
    /// reassociation (the bound of `q8_row_kernels_agree_on_the_same_tiles`).
    #[test]
    fn k_row_kernels_agree_on_the_same_tiles() {
        #[cfg(target_arch = "x86_64")]
        if q8_kernel() == Q8Kernel::Avx512 {
            for (format, cols) in
                [(GgmlType::Q4_K, 256), (GgmlType::Q4_K, 2048), (GgmlType::Q6_K, 256), (GgmlType::Q6_K, 2048)]
            {
                let bytes = blocks(format, 12 * cols / 256, 3 + cols as u32);
                let w = PackedWeight { shape: &[12, cols], format, bytes: &bytes };
                w.check().expect("12 rows");
                let wv = w.widen_all();
                let x: Vec<f32> = (0..cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
                for j in 0..12 {
                    let wj = &wv[j * cols..(j + 1) * cols];
                    let want = crate::q8::dot(wj, &x);
                    let bound = wj.iter().zip(&x).map(|(a, b)| (a * b).abs()).sum::<f32>() * 2f32.powi(-19);
                    // SAFETY: the AVX-512 kernel is chosen only where F, BW, VL, FMA and F16C are.
                    let got = unsafe { dot_packed_row_avx512(format, w.row(j), &x) }.expect("a K format");
                    assert!(
                        (got - want).abs() <= bound,
                        "{format} cols {cols} row {j}: {got} vs {want} (bound {bound})"
                    );
                }
            }
        }
    }

    /// The multi-row AVX-512 Q8_0 kernel gives each activation row exactly the one-row
    /// kernel's result, bit for bit, for 1 to 8 rows, on rows of 23 blocks (a tail of three
    /// past the round-robin).
    #[test]
    fn q8_multi_row_kernel_is_the_one_row_kernel_row_by_row() {
        #[cfg(target_arch = "x86_64")]
        if q8_kernel() == Q8Kernel::Avx512 {
            let cols = 736;
            let bytes = blocks(GgmlType::Q8_0, 4 * cols / 32, 11);
            let w = PackedWeight { shape: &[4, cols], format: GgmlType::Q8_0, bytes: &bytes };
            w.check().expect("4 rows");
            let xs: Vec<Vec<f32>> =
                (0..8).map(|r| (0..cols).map(|i| (((i + 13 * r) * 37 % 101) as f32 - 50.0) / 7.0).collect()).collect();
            let x = |r: usize| xs[r].as_slice();
            let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            for j in 0..4 {
                // SAFETY: the AVX-512 kernels are chosen only where F, BW, VL, FMA and F16C are.
                let one: Vec<f32> = (0..8).map(|r| unsafe { dot_q8_row_avx512(w.row(j), x(r)) }).collect();
                // SAFETY: as above; every activation row holds the weight row's 736 values.
                let eight = unsafe { dot_q8_rows_avx512::<8>(w.row(j), std::array::from_fn(x)) };
                // SAFETY: as above.
                let five = unsafe { dot_q8_rows_avx512::<5>(w.row(j), std::array::from_fn(x)) };
                // SAFETY: as above.
                let two = unsafe { dot_q8_rows_avx512::<2>(w.row(j), [x(0), x(1)]) };
                assert_eq!(bits(&eight), bits(&one), "weight row {j}");
                assert_eq!(bits(&five), bits(&one[..5]), "weight row {j}");
                assert_eq!(bits(&two), bits(&one[..2]), "weight row {j}");
            }
        }
    }

    /// The Q8_0 row kernels (portable, AVX2, AVX-512 where the CPU has them) agree on the same
    /// rows within f32 reassociation: |Δ| ≤ 2⁻¹⁹ · Σ|wᵢ·xᵢ| (each of the 640 terms' rounding
    /// errors bounded by a few ulps of the running sum), and the portable one equals
    /// `q8::dot_row` on the same blocks exactly.
    #[test]
    fn q8_row_kernels_agree_on_the_same_tiles() {
        let cols = 640;
        let bytes = blocks(GgmlType::Q8_0, 20 * cols / 32, 3);
        let w = PackedWeight { shape: &[20, 640], format: GgmlType::Q8_0, bytes: &bytes };
        w.check().expect("20 rows of 640");
        let q8 = w.to_q8().expect("q8_0");
        let wv = w.widen_all();
        let x: Vec<f32> = (0..cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        for j in 0..20 {
            let row = w.row(j);
            let plain = dot_q8_row_plain(row, &x);
            assert_eq!(plain, crate::q8::dot_row(&q8.blocks[j * 20..(j + 1) * 20], &x));
            let scale: f32 = wv[j * cols..(j + 1) * cols].iter().zip(&x).map(|(a, b)| (a * b).abs()).sum();
            let bound = scale * 2f32.powi(-19);
            let mut kernels = vec![Q8Kernel::Plain];
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                    kernels.push(Q8Kernel::Avx2);
                }
                if q8_kernel() == Q8Kernel::Avx512 {
                    kernels.push(Q8Kernel::Avx512);
                }
            }
            for k in kernels {
                let got = dot_q8_row_with(k, row, &x);
                assert!((got - plain).abs() <= bound, "{k:?} row {j}: {got} vs {plain} (bound {bound})");
            }
        }
    }
}

//! The kernels that fold Q8_0 blocks: a dot product of one block with 32 activations (int8
//! values times activations, summed in f32, times the block scale) and a row dequantiser for
//! lookups — never a whole-matrix dequantisation. The blocks and the quantiser are
//! `rdu_checkpoint`'s (`Q8Block`, `Q8Weight`, `quantize_q8_0`), re-exported here.

pub use rdu_checkpoint::{quantize_q8_0, Q8Block, Q8Weight, QK8_0};

/// `Σ qs[i]·x[i]` over one block, times its scale: eight f32 partial sums, then summed.
#[inline(always)]
pub fn dot_block(block: &Q8Block, x: &[f32; QK8_0]) -> f32 {
    let mut acc = [0.0f32; 8];
    for lane in 0..4 {
        for j in 0..8 {
            acc[j] += block.qs[lane * 8 + j] as f32 * x[lane * 8 + j];
        }
    }
    block.d * sum8(&acc)
}

/// One row of Q8_0 blocks times `x` (`x.len() == 32 · row.len()`): each block's eight f32
/// partial sums are scaled by the block's scale into eight running sums, summed at the end.
#[inline(always)]
pub fn dot_row(row: &[Q8Block], x: &[f32]) -> f32 {
    let mut total = [0.0f32; 8];
    for (block, xs) in row.iter().zip(x.chunks_exact(QK8_0)) {
        let mut acc = [0.0f32; 8];
        for lane in 0..4 {
            for j in 0..8 {
                acc[j] += block.qs[lane * 8 + j] as f32 * xs[lane * 8 + j];
            }
        }
        for j in 0..8 {
            total[j] += block.d * acc[j];
        }
    }
    sum8(&total)
}

/// `dot_row` with AVX2 and FMA: the same sums (eight lanes per block, scaled into eight
/// running sums), each product-add fused.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_row_avx2(row: &[Q8Block], x: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let mut total = _mm256_setzero_ps();
    for (block, xs) in row.iter().zip(x.chunks_exact(QK8_0)) {
        // SAFETY: `qs` holds 32 bytes and `xs` 32 floats; the loads are unaligned loads.
        let (q, xp) = (block.qs.as_ptr() as *const __m128i, xs.as_ptr());
        let (lo, hi) = (_mm_loadu_si128(q), _mm_loadu_si128(q.add(1)));
        let f = |v: __m128i| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
        let mut acc = _mm256_mul_ps(f(lo), _mm256_loadu_ps(xp));
        acc = _mm256_fmadd_ps(f(_mm_srli_si128(lo, 8)), _mm256_loadu_ps(xp.add(8)), acc);
        acc = _mm256_fmadd_ps(f(hi), _mm256_loadu_ps(xp.add(16)), acc);
        acc = _mm256_fmadd_ps(f(_mm_srli_si128(hi, 8)), _mm256_loadu_ps(xp.add(24)), acc);
        total = _mm256_fmadd_ps(_mm256_set1_ps(block.d), acc, total);
    }
    let mut lanes = [0.0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), total);
    sum8(&lanes)
}

/// Dense dot product with eight f32 partial sums (the dense counterpart of `dot_row`).
#[inline(always)]
pub fn dot_dense(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for j in 0..8 {
            acc[j] += x[j] * y[j];
        }
    }
    let mut total = sum8(&acc);
    for (x, y) in ar.iter().zip(br) {
        total += x * y;
    }
    total
}

/// `dot_dense` with the widest unit the CPU has: AVX2 + FMA when present (chosen at run
/// time), the portable loop otherwise.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports AVX2 and FMA, checked just above.
        return unsafe { dot_dense_avx2(a, b) };
    }
    dot_dense(a, b)
}

/// `acc[i] += w · v[i]`, the product rounded before the sum (never fused), so AVX2 gives
/// the bits the plain loop gives.
pub fn add_scaled(acc: &mut [f32], w: f32, v: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        return unsafe { add_scaled_avx2(acc, w, v) };
    }
    for (a, x) in acc.iter_mut().zip(v) {
        *a += w * x;
    }
}

/// [`add_scaled`] with AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn add_scaled_avx2(acc: &mut [f32], w: f32, v: &[f32]) {
    use std::arch::x86_64::*;
    let n = acc.len().min(v.len());
    let wv = _mm256_set1_ps(w);
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n, the length of both slices at least.
        let p = acc.as_mut_ptr().add(i);
        _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), _mm256_mul_ps(wv, _mm256_loadu_ps(v.as_ptr().add(i)))));
        i += 8;
    }
    for k in i..n {
        acc[k] += w * v[k];
    }
}

/// `[dot(a0, b0), dot(a0, b1), dot(a1, b0), dot(a1, b1)]`, each bit-identical to its own `dot`
/// (the same four running sums, fold and tail), computed together so that each value loaded
/// serves two products.
pub fn dot2x2(a: [&[f32]; 2], b: [&[f32]; 2]) -> [f32; 4] {
    #[cfg(target_arch = "x86_64")]
    if a.iter().chain(&b).all(|v| v.len() == a[0].len())
        && std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
    {
        // SAFETY: the CPU supports AVX2 and FMA (and AVX-512 VL where taken), and the four
        // slices are equally long.
        return unsafe {
            if wide_registers() {
                dot2x2_avx512vl(a, b)
            } else {
                dot2x2_avx2(a, b)
            }
        };
    }
    [dot(a[0], b[0]), dot(a[0], b[1]), dot(a[1], b[0]), dot(a[1], b[1])]
}

/// Whether the CPU has AVX-512 VL: the same 256-bit kernels then have 32 vector registers
/// instead of 16, enough to keep every running sum (or weight) of `dot2x2` and
/// `add_scaled_4x4` in a register. The instructions, and so the results, are the same.
#[cfg(target_arch = "x86_64")]
fn wide_registers() -> bool {
    use std::sync::OnceLock;
    static WIDE: OnceLock<bool> = OnceLock::new();
    *WIDE.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512vl")
    })
}

/// [`dot2x2`] with AVX2 and FMA: `dot_dense_avx2`'s order for each of the four pairs.
///
/// # Safety
/// The CPU must support AVX2 and FMA, and the four slices must be equally long.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot2x2_avx2(a: [&[f32]; 2], b: [&[f32]; 2]) -> [f32; 4] {
    dot2x2_body(a, b)
}

/// [`dot2x2_avx2`] compiled with AVX-512 VL's 32 registers (the same 256-bit instructions).
///
/// # Safety
/// The CPU must support AVX2, FMA, AVX-512 F and VL, and the four slices must be equally long.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
unsafe fn dot2x2_avx512vl(a: [&[f32]; 2], b: [&[f32]; 2]) -> [f32; 4] {
    dot2x2_body(a, b)
}

/// The body of the `dot2x2` kernels: the four pairs' running sums `k` and `k + 1` (runs of
/// eight values `k, k + 4, k + 8, …`) in one pass over the values, sums 0 and 1 then sums 2
/// and 3 — each sum's chain of fused multiply-adds in the order `dot_dense_avx2` takes it, so
/// each pair's result is its `dot`; eight sums at a time stay in registers.
///
/// # Safety
/// AVX2 and FMA (the caller's target features), four equally long slices.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn dot2x2_body(a: [&[f32]; 2], b: [&[f32]; 2]) -> [f32; 4] {
    use std::arch::x86_64::*;
    let n = a[0].len();
    let (a0, a1, b0, b1) = (a[0].as_ptr(), a[1].as_ptr(), b[0].as_ptr(), b[1].as_ptr());
    // acc[pair][sum], pairs in the order (a0,b0), (a0,b1), (a1,b0), (a1,b1).
    let mut acc = [[_mm256_setzero_ps(); 4]; 4];
    // The run at `i` product-added into sum `sum` of every pair. A macro, not a closure: a
    // closure would not inherit the caller's target features, and its intrinsics would not
    // inline.
    // SAFETY (every load): i + 8 <= n, the length of all four slices.
    macro_rules! run {
        ($i:expr, $sum:expr) => {{
            let (i, sum) = ($i, $sum);
            let (x0, x1) = (_mm256_loadu_ps(a0.add(i)), _mm256_loadu_ps(a1.add(i)));
            let (y0, y1) = (_mm256_loadu_ps(b0.add(i)), _mm256_loadu_ps(b1.add(i)));
            acc[0][sum] = _mm256_fmadd_ps(x0, y0, acc[0][sum]);
            acc[1][sum] = _mm256_fmadd_ps(x0, y1, acc[1][sum]);
            acc[2][sum] = _mm256_fmadd_ps(x1, y0, acc[2][sum]);
            acc[3][sum] = _mm256_fmadd_ps(x1, y1, acc[3][sum]);
        }};
    }
    // Every index into `acc` a constant, so the sums live in registers (an index known only
    // at run time keeps the whole array in memory).
    let full = n / 32 * 32;
    let mut i = 0;
    while i < full {
        run!(i, 0);
        run!(i + 8, 1);
        i += 32;
    }
    let mut i = 0;
    while i < full {
        run!(i + 16, 2);
        run!(i + 24, 3);
        i += 32;
    }
    // Runs past the last full 32, into sums 0, 1, 2 in turn (after each sum's own chain).
    let tail = (n - full) / 8;
    if tail > 0 {
        run!(full, 0);
    }
    if tail > 1 {
        run!(full + 8, 1);
    }
    if tail > 2 {
        run!(full + 16, 2);
    }
    let i = full + 8 * tail;
    let mut out = [0.0f32; 4];
    for (p, o) in out.iter_mut().enumerate() {
        let (x, y) = (a[p / 2], b[p % 2]);
        *o = fold4(acc[p]);
        for k in i..n {
            *o += x[k] * y[k];
        }
    }
    out
}

/// `add_scaled(acc[h], w[h][e], v[e])` for every `h` of the four accumulators (`acc` holds them
/// one after another, `acc.len() / 4` values each) and, for each, every `e` of the four vectors
/// in order: bit-identical to those calls (each product rounded, then added), computed together
/// so that each accumulator is loaded and stored once per four vectors.
pub fn add_scaled_4x4(acc: &mut [f32], w: [[f32; 4]; 4], v: [&[f32]; 4]) {
    let len = acc.len() / 4;
    #[cfg(target_arch = "x86_64")]
    if acc.len() == 4 * len && v.iter().all(|v| v.len() == len) && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (and AVX-512 VL where taken); `acc` holds four runs
        // of `len` and every `v[e]` `len`.
        return unsafe {
            if wide_registers() {
                add_scaled_4x4_avx512vl(acc, w, v)
            } else {
                add_scaled_4x4_avx2(acc, w, v)
            }
        };
    }
    for (h, a) in acc.chunks_exact_mut(len.max(1)).take(4).enumerate() {
        for e in 0..4 {
            add_scaled(a, w[h][e], v[e]);
        }
    }
}

/// [`add_scaled_4x4`] with AVX2.
///
/// # Safety
/// The CPU must support AVX2; `acc` must hold `4 · len` values and every `v[e]` `len`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn add_scaled_4x4_avx2(acc: &mut [f32], w: [[f32; 4]; 4], v: [&[f32]; 4]) {
    add_scaled_hx4_body(acc, w, v)
}

/// [`add_scaled_4x4_avx2`] compiled with AVX-512 VL's 32 registers, which hold all sixteen
/// weights (the same 256-bit instructions).
///
/// # Safety
/// The CPU must support AVX2, AVX-512 F and VL; `acc` must hold `4 · len` values and every
/// `v[e]` `len`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f,avx512vl")]
unsafe fn add_scaled_4x4_avx512vl(acc: &mut [f32], w: [[f32; 4]; 4], v: [&[f32]; 4]) {
    add_scaled_hx4_body(acc, w, v)
}

/// [`add_scaled_4x4`] for the `w.len()` (1 to 4) accumulators `acc` holds: the heads of a run
/// past its last four. Bit-identical to the `add_scaled` calls, each accumulator loaded and
/// stored once per four vectors.
pub fn add_scaled_nx4(acc: &mut [f32], w: &[[f32; 4]], v: [&[f32]; 4]) {
    let len = acc.len() / w.len().max(1);
    #[cfg(target_arch = "x86_64")]
    if acc.len() == w.len() * len && v.iter().all(|v| v.len() == len) && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2; `acc` holds `w.len()` runs of `len`, every `v[e]` `len`.
        unsafe {
            match *w {
                [a] => return add_scaled_nx4_avx2(acc, [a], v),
                [a, b] => return add_scaled_nx4_avx2(acc, [a, b], v),
                [a, b, c] => return add_scaled_nx4_avx2(acc, [a, b, c], v),
                [a, b, c, d] => return add_scaled_nx4_avx2(acc, [a, b, c, d], v),
                _ => {}
            }
        }
    }
    for (a, wh) in acc.chunks_exact_mut(len.max(1)).zip(w) {
        for (e, ve) in v.iter().enumerate() {
            add_scaled(a, wh[e], ve);
        }
    }
}

/// [`add_scaled_nx4`] with AVX2, for `H` accumulators.
///
/// # Safety
/// The CPU must support AVX2; `acc` must hold `H · len` values and every `v[e]` `len`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn add_scaled_nx4_avx2<const H: usize>(acc: &mut [f32], w: [[f32; 4]; H], v: [&[f32]; 4]) {
    add_scaled_hx4_body(acc, w, v)
}

/// The body of the `add_scaled_4x4` and `add_scaled_nx4` kernels, for `H` accumulators: each
/// product rounded, then added, in order of `e`.
///
/// # Safety
/// AVX2 (the caller's target features); `acc` holds `H · len` values and every `v[e]` `len`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn add_scaled_hx4_body<const H: usize>(acc: &mut [f32], w: [[f32; 4]; H], v: [&[f32]; 4]) {
    use std::arch::x86_64::*;
    let len = acc.len() / H;
    // Plain loops, not closures (which would not inherit the caller's target features).
    let mut ws = [[_mm256_setzero_ps(); 4]; H];
    for (wsh, wh) in ws.iter_mut().zip(&w) {
        for (x, &we) in wsh.iter_mut().zip(wh) {
            *x = _mm256_set1_ps(we);
        }
    }
    let (vp, ap) = ([v[0].as_ptr(), v[1].as_ptr(), v[2].as_ptr(), v[3].as_ptr()], acc.as_mut_ptr());
    let mut i = 0;
    while i + 8 <= len {
        // SAFETY (every access): i + 8 <= len; accumulator h starts at h·len.
        let mut vs = [_mm256_setzero_ps(); 4];
        for (x, p) in vs.iter_mut().zip(vp) {
            *x = _mm256_loadu_ps(p.add(i));
        }
        for (h, wsh) in ws.iter().enumerate() {
            let p = ap.add(h * len + i);
            let mut a = _mm256_loadu_ps(p);
            for (we, ve) in wsh.iter().zip(&vs) {
                a = _mm256_add_ps(a, _mm256_mul_ps(*we, *ve));
            }
            _mm256_storeu_ps(p, a);
        }
        i += 8;
    }
    for (h, wh) in w.iter().enumerate() {
        for k in i..len {
            for (e, ve) in v.iter().enumerate() {
                acc[h * len + k] += wh[e] * ve[k];
            }
        }
    }
}

/// `dot_dense` with AVX2 and FMA: eight lanes in four running sums — the `k`-th run of eight
/// values is product-added (fused) into sum `k mod 4`, so four chains of FMAs are in flight
/// instead of one — the sums added lane by lane as `(s0 + s1) + (s2 + s3)`, the lanes as
/// `sum8`, then the tail past the last run of eight. `sim::packed::dot_widened_avx2` keeps
/// exactly this order (its results are bit-identical to this of the widened row).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_dense_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let mut acc = [_mm256_setzero_ps(); 4];
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY (every load): i + 8·(k+1) <= n for the run loaded, so both loads are inside the slices.
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i + 8 * k)), _mm256_loadu_ps(pb.add(i + 8 * k)), *acc);
        }
        i += 32;
    }
    let mut k = 0;
    while i + 8 <= n {
        acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc[k]);
        (i, k) = (i + 8, k + 1);
    }
    let mut total = fold4(acc);
    for k in i..n {
        total += a[k] * b[k];
    }
    total
}

/// Four running sums of eight lanes as one value: `(s0 + s1) + (s2 + s3)` lane by lane, then
/// the lanes as `sum8`.
///
/// # Safety
/// The CPU must support AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
pub unsafe fn fold4(acc: [std::arch::x86_64::__m256; 4]) -> f32 {
    use std::arch::x86_64::*;
    let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut lanes = [0.0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), sum);
    sum8(&lanes)
}

/// A block's 32 values as f32 (a fixed count, so the loop is vectorised).
#[inline(always)]
pub fn dequant_block(block: &Q8Block, out: &mut [f32; QK8_0]) {
    for (o, q) in out.iter_mut().zip(block.qs) {
        *o = block.d * q as f32;
    }
}

/// The values of `blocks` into `out` (whole blocks, as many as both hold), compiled for AVX2
/// where the CPU has it: the crates' own code targets the baseline x86-64, whose 8-bit to f32
/// conversion is a chain of unpacks and scalar steps. Every value `d·q` is exact (an f16 scale
/// times an 8-bit integer), so any instructions give the same values.
pub fn dequant_blocks(blocks: &[Q8Block], out: &mut [f32]) {
    #[inline(always)]
    fn each(blocks: &[Q8Block], out: &mut [f32]) {
        for (o, block) in out.as_chunks_mut::<QK8_0>().0.iter_mut().zip(blocks) {
            dequant_block(block, o);
        }
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: called only where the CPU has AVX2 (detected just above).
        #[target_feature(enable = "avx2")]
        unsafe fn avx2(blocks: &[Q8Block], out: &mut [f32]) {
            each(blocks, out)
        }
        // SAFETY: the CPU has AVX2.
        return unsafe { avx2(blocks, out) };
    }
    each(blocks, out)
}

#[inline(always)]
fn sum8(acc: &[f32; 8]) -> f32 {
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `dequant_blocks` (AVX2 where the CPU has it) is `dequant_block` block by block.
    #[test]
    fn dequant_blocks_is_each_blocks_values() {
        let blocks: Vec<Q8Block> = (0..37)
            .map(|b| Q8Block {
                d: half::f16::from_f32(0.01 * (b as f32 - 18.0)).to_f32(),
                qs: std::array::from_fn(|i| ((i * 37 + b * 11) % 255) as i32 as i8),
            })
            .collect();
        let mut got = vec![0f32; blocks.len() * QK8_0];
        dequant_blocks(&blocks, &mut got);
        for (b, values) in blocks.iter().zip(got.chunks(QK8_0)) {
            let mut want = [0f32; QK8_0];
            dequant_block(b, &mut want);
            assert_eq!(values, want);
        }
    }

    #[test]
    fn dot2x2_add_scaled_4x4_and_nx4_are_their_single_calls_bit_for_bit() {
        let v = |n: usize, seed: u32| -> Vec<f32> {
            (0..n)
                .map(|i| ((i as u32).wrapping_mul(2654435761) ^ seed) % 1000)
                .map(|v| v as f32 / 997.0 - 0.5)
                .collect()
        };
        // Lengths with and without full runs of 32, with runs of eight past them, and a tail.
        for n in [0, 5, 8, 37, 64, 88, 91, 576] {
            let (a0, a1, b0, b1) = (v(n, 1), v(n, 2), v(n, 3), v(n, 4));
            let got = dot2x2([&a0, &a1], [&b0, &b1]);
            let want = [dot(&a0, &b0), dot(&a0, &b1), dot(&a1, &b0), dot(&a1, &b1)];
            assert_eq!(got.map(f32::to_bits), want.map(f32::to_bits), "dot2x2, n {n}");
            // Both compilations of the kernel where the CPU has them (the dispatch takes one).
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                // SAFETY: AVX2 and FMA checked; four equally long slices.
                let narrow = unsafe { dot2x2_avx2([&a0, &a1], [&b0, &b1]) };
                assert_eq!(narrow.map(f32::to_bits), want.map(f32::to_bits), "dot2x2 (16 registers), n {n}");
                let w = [[0.5, -1.0, 0.25, 2.0]; 4];
                let vs = [&b0[..], &b1[..], &a0[..], &a1[..]];
                let (mut x, mut y) = (v(4 * n, 11), v(4 * n, 11));
                // SAFETY: AVX2 checked; `x` holds four runs of n, every vector n.
                unsafe { add_scaled_4x4_avx2(&mut x, w, vs) };
                add_scaled_4x4(&mut y, w, vs);
                assert_eq!(
                    x.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    y.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                );
            }
            let vs = [v(n, 5), v(n, 6), v(n, 7), v(n, 8)];
            let w = [[0.3, -1.7, 0.01, 2.5], [1.1, 0.0, -0.4, 0.9], [-2.0, 0.5, 0.25, -0.125], [0.7, 0.7, -0.7, 3.0]];
            let mut got = v(4 * n, 9);
            let mut want = got.clone();
            add_scaled_4x4(&mut got, w, [&vs[0], &vs[1], &vs[2], &vs[3]]);
            for (h, acc) in want.chunks_exact_mut(n.max(1)).enumerate() {
                for e in 0..4 {
                    add_scaled(acc, w[h][e], &vs[e]);
                }
            }
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "add_scaled_4x4, n {n}");
            for heads in 1..=4 {
                let mut few = v(heads * n, 12);
                let mut want = few.clone();
                add_scaled_nx4(&mut few, &w[..heads], [&vs[0], &vs[1], &vs[2], &vs[3]]);
                for (h, acc) in want.chunks_exact_mut(n.max(1)).enumerate() {
                    for (e, ve) in vs.iter().enumerate() {
                        add_scaled(acc, w[h][e], ve);
                    }
                }
                assert_eq!(bits(&few), bits(&want), "add_scaled_nx4, {heads} heads, n {n}");
            }
        }
    }

    #[test]
    fn add_scaled_is_the_plain_loop_bit_for_bit() {
        let v: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut got: Vec<f32> = (0..37).map(|i| (i as f32 * 0.11).cos()).collect();
        let mut want = got.clone();
        add_scaled(&mut got, 0.2917, &v);
        want.iter_mut().zip(&v).for_each(|(a, x)| *a += 0.2917 * x);
        assert_eq!(
            got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn dot_row_is_the_blockwise_sum() {
        let mut qs = [0i8; 32];
        qs[0] = 2;
        qs[31] = -3;
        let row = [Q8Block { d: 0.5, qs }, Q8Block { d: 2.0, qs: [1; 32] }];
        let x: Vec<f32> = (0..64).map(|i| i as f32).collect();
        // block 0: 0.5·(2·0 − 3·31) = −46.5; block 1: 2·Σ(32..64) = 2·1520.
        assert_eq!(dot_row(&row, &x), -46.5 + 3040.0);
        assert_eq!(dot_dense(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]), 32.0);
    }

    #[test]
    fn the_avx2_kernel_agrees_with_the_portable_one() {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            let data: Vec<f32> = (0..256).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
            let w = quantize_q8_0(&data, &[1, 256]).expect("quantise");
            let x: Vec<f32> = (0..256).map(|i| (i as f32 * 0.11).cos()).collect();
            let plain = dot_row(&w.blocks, &x);
            // SAFETY: the CPU supports AVX2 and FMA, checked above.
            let fast = unsafe { dot_row_avx2(&w.blocks, &x) };
            let scale: f32 = w.dequantize().iter().zip(&x).map(|(a, b)| (a * b).abs()).sum();
            assert!((plain - fast).abs() <= 1e-6 * scale, "{plain} vs {fast}");
        }
        let (a, b): (Vec<f32>, Vec<f32>) = (0..77).map(|i| ((i as f32).sin(), (i as f32 * 0.3).cos())).unzip();
        let scale: f32 = a.iter().zip(&b).map(|(x, y)| (x * y).abs()).sum();
        assert!((dot(&a, &b) - dot_dense(&a, &b)).abs() <= 1e-6 * scale);
        let row = [Q8Block { d: 1.0, qs: [1; 32] }];
        assert_eq!(dot_row(&row, &[1.0; 32]), 32.0);
    }
}

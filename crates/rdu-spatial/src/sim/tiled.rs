//! Products of a few activation rows (a mixture-of-experts chunk's rows for one expert, a
//! small batch) with weight rows, without packing: a group of weight rows is widened once
//! into a buffer, then multiplied with every activation row in tiles of four activation rows
//! by two weight rows (four with AVX-512), so each value loaded into a register serves
//! several sums.
//!
//! Each sum is eight f32 running sums (element `i` into lane `i mod 8`) folded as `sum8`
//! does. The AVX2 and AVX-512 kernels fuse each multiply-add; [`tile_plain`], their portable
//! reference, rounds the product first, so they agree to f32 rounding (a test holds them to it).

use super::rows::Rows;

/// Lanes of a running sum.
pub(super) const LANES: usize = 8;
/// Weight rows widened at a time (a group's buffer stays in L2).
pub(super) const GROUP: usize = 8;
/// Inputs of a step (a multiple of `LANES`): the activation rows' part of a step stays in
/// cache while the group's weight rows are multiplied with it.
pub(super) const STEP: usize = 1024;

/// Where [`products_to`] puts the product of the `i`-th row of its piece (weight row `j`) and
/// activation row `r`.
pub(super) trait Sink {
    fn put(&mut self, i: usize, j: usize, r: usize, v: f32);
}

/// `chunk[i·n + r]`: a feature's `n` activation rows together (`matmul::products`' order).
pub(super) struct Features<'a> {
    pub(super) chunk: &'a mut [f32],
    pub(super) n: usize,
}

impl Sink for Features<'_> {
    #[inline(always)]
    fn put(&mut self, i: usize, _: usize, r: usize, v: f32) {
        self.chunk[i * self.n + r] = v;
    }
}

/// `rows[j_i] · xs[r]` for the rows `j_i` of `piece`, in groups of `GROUP` widened into a
/// buffer, each handed to `sink` as it is finished.
pub(super) fn products_to(rows: Rows<'_>, xs: &[f32], n: usize, piece: &[(usize, usize)], sink: &mut impl Sink) {
    let cols = rows.cols();
    let mut buf = vec![0f32; GROUP * cols];
    let mut sums = vec![[0f32; LANES]; GROUP * n];
    let js: Vec<usize> = piece.iter().flat_map(|&(s, e)| s..e).collect();
    let wide = super::packed::q8_kernel() == super::packed::Q8Kernel::Avx512;
    // Sums a tile's last step already finished (`final_tile`).
    let mut written = vec![false; GROUP * n];
    for (g, group) in js.chunks(GROUP).enumerate() {
        for (i, &j) in group.iter().enumerate() {
            rows.widen(j, &mut buf[i * cols..(i + 1) * cols]);
        }
        // The next group's rows are asked for now, to arrive while this group is multiplied.
        if let Some(next) = js.get((g + 1) * GROUP..((g + 2) * GROUP).min(js.len())) {
            next.iter().for_each(|&j| rows.prefetch(j, j + 1));
        }
        let m = group.len();
        sums[..m * n].fill([0.0; LANES]);
        written.fill(false);
        for k0 in (0..cols).step_by(STEP) {
            let k1 = (k0 + STEP).min(cols);
            let x = |r: usize| &xs[r * cols + k0..r * cols + k1];
            let w = |i: usize| &buf[i * cols + k0..i * cols + k1];
            let mut r = 0;
            while r < n {
                let take = (n - r).min(4);
                let mut i = 0;
                while i < m {
                    // Four weight rows a tile where the CPU has 32 vector registers (16 sums).
                    if wide && take == 4 && m - i >= 4 {
                        let (xs, ws) = ([x(r), x(r + 1), x(r + 2), x(r + 3)], [w(i), w(i + 1), w(i + 2), w(i + 3)]);
                        let last = if k1 == cols { final_tile(xs, ws, &sums, i, r, n) } else { None };
                        match last {
                            Some(done) => {
                                for (c, values) in done.iter().enumerate() {
                                    for (a, &v) in values.iter().enumerate() {
                                        sink.put(g * GROUP + i + c, group[i + c], r + a, v);
                                    }
                                    written[(i + c) * n + r..(i + c) * n + r + 4].fill(true);
                                }
                            }
                            None => tile::<4, 4>(xs, ws, &mut sums, i, r, n),
                        }
                        i += 4;
                        continue;
                    }
                    let pair = m - i >= 2;
                    match (take, pair) {
                        (4, true) => {
                            tile::<4, 2>([x(r), x(r + 1), x(r + 2), x(r + 3)], [w(i), w(i + 1)], &mut sums, i, r, n)
                        }
                        (4, false) => tile::<4, 1>([x(r), x(r + 1), x(r + 2), x(r + 3)], [w(i)], &mut sums, i, r, n),
                        (3, true) => tile::<3, 2>([x(r), x(r + 1), x(r + 2)], [w(i), w(i + 1)], &mut sums, i, r, n),
                        (3, false) => tile::<3, 1>([x(r), x(r + 1), x(r + 2)], [w(i)], &mut sums, i, r, n),
                        (2, true) => tile::<2, 2>([x(r), x(r + 1)], [w(i), w(i + 1)], &mut sums, i, r, n),
                        (2, false) => tile::<2, 1>([x(r), x(r + 1)], [w(i)], &mut sums, i, r, n),
                        (_, true) => tile::<1, 2>([x(r)], [w(i), w(i + 1)], &mut sums, i, r, n),
                        (_, false) => tile::<1, 1>([x(r)], [w(i)], &mut sums, i, r, n),
                    }
                    i += if pair { 2 } else { 1 };
                }
                r += take;
            }
        }
        for (i, lanes) in sums[..m * n].chunks_exact(n).enumerate() {
            for (r, l) in lanes.iter().enumerate() {
                if !written[i * n + r] {
                    sink.put(g * GROUP + i, group[i], r, sum8(l));
                }
            }
        }
    }
}

/// The eight lanes as one value, in `q8::sum8`'s order.
fn sum8(acc: &[f32; LANES]) -> f32 {
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// Adds the products of `R` activation rows and `C` weight rows (one step's inputs) into
/// their running sums `sums[(i + c)·n + r + a]`: by AVX2 and FMA when the CPU has them (the
/// inputs past the last whole `LANES` by [`tile_plain`]), by [`tile_plain`] otherwise.
#[inline(always)]
fn tile<const R: usize, const C: usize>(
    xs: [&[f32]; R],
    ws: [&[f32]; C],
    sums: &mut [[f32; LANES]],
    i: usize,
    r: usize,
    n: usize,
) {
    // Every kernel but `Plain` is chosen only on a CPU with AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    if super::packed::q8_kernel() != super::packed::Q8Kernel::Plain {
        let len = xs[0].len();
        let whole = len - len % LANES;
        let fits = xs.iter().all(|x| x.len() == len) && ws.iter().all(|w| w.len() == len);
        if fits && (i + C - 1) * n + r + R - 1 < sums.len() {
            if super::packed::q8_kernel() == super::packed::Q8Kernel::Avx512 {
                // SAFETY: `Avx512` is chosen only on a CPU with AVX-512 F (and AVX2 and FMA);
                // the rows and sums as below.
                unsafe { tile_avx512::<R, C>(xs, ws, sums, i * n + r, n, whole) };
            } else {
                // SAFETY: AVX2 and FMA are present; every row holds `whole` values and every
                // sum the tile touches lies inside `sums` (both checked just above).
                unsafe { tile_avx2::<R, C>(xs, ws, sums, i * n + r, n, whole) };
            }
            return tile_plain::<R, C>(xs.map(|x| &x[whole..]), ws.map(|w| &w[whole..]), sums, i, r, n);
        }
    }
    tile_plain::<R, C>(xs, ws, sums, i, r, n)
}

/// The first `whole` (a multiple of `LANES`) products of [`tile`] added into its sums
/// (`sums[at + c·n + a]` for activation row `a` and weight row `c`), one register a sum.
///
/// # Safety
/// The CPU has AVX2 and FMA; every row holds at least `whole` values and every sum indexes `sums`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2<const R: usize, const C: usize>(
    xs: [&[f32]; R],
    ws: [&[f32]; C],
    sums: &mut [[f32; LANES]],
    at: usize,
    n: usize,
    whole: usize,
) {
    use std::arch::x86_64::*;
    use std::mem::transmute;
    // Values move in and out of registers as arrays (`transmute` between `[f32; 8]` and
    // `__m256` is a plain move; the unaligned load intrinsics would carry the test profile's
    // pointer checks into the innermost loop).
    let eight = |v: &[f32]| -> __m256 { transmute::<[f32; LANES], __m256>(v.try_into().expect("eight values")) };
    let mut acc: [[__m256; C]; R] =
        std::array::from_fn(|a| std::array::from_fn(|c| transmute::<[f32; LANES], __m256>(sums[at + c * n + a])));
    for k in (0..whole).step_by(LANES) {
        let wv: [__m256; C] = std::array::from_fn(|c| eight(&ws[c][k..k + LANES]));
        for (row, x) in acc.iter_mut().zip(&xs) {
            let xv = eight(&x[k..k + LANES]);
            for (a, w) in row.iter_mut().zip(&wv) {
                *a = _mm256_fmadd_ps(xv, *w, *a);
            }
        }
    }
    for (a, row) in acc.iter().enumerate() {
        for (c, v) in row.iter().enumerate() {
            sums[at + c * n + a] = transmute::<__m256, [f32; LANES]>(*v);
        }
    }
}

/// [`tile_avx2`] in AVX-512 vectors: sixteen inputs a step into the low and high halves of a
/// sum's register, input `k` still into lane `k mod 8` of one half, and the two halves added
/// into the sum's eight lanes at the end (a reassociation of the AVX2 kernel's lane sums; the
/// last eight inputs of an odd count into the low half alone). `products` gives it tiles of
/// four weight rows (16 sums in registers; AVX2 has too few for that). Measured on the Xeon VM
/// (Sapphire Rapids, two 512-bit FMA units), Gemma 3 270M's 168-token Q8_0 prompt through
/// `rdu run` on 2 threads, A/B in one run: 175–216 tok/s with the AVX2 kernel, 214–255 with
/// this one on 4×2 tiles, 272–304 on 4×4 tiles loading through pointers (the first version,
/// indexing arrays, spilled a sum to the stack and kept a bounds check a load).
///
/// # Safety
/// The CPU has AVX-512 F, AVX2 and FMA; every row holds at least `whole` values (a multiple of
/// `LANES`) and every sum indexes `sums`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn tile_avx512<const R: usize, const C: usize>(
    xs: [&[f32]; R],
    ws: [&[f32]; C],
    sums: &mut [[f32; LANES]],
    at: usize,
    n: usize,
    whole: usize,
) {
    use std::arch::x86_64::*;
    use std::mem::transmute;
    const WIDE: usize = 2 * LANES;
    let mut acc: [[__m512; C]; R] = std::array::from_fn(|a| {
        std::array::from_fn(|c| _mm512_zextps256_ps512(transmute::<[f32; LANES], __m256>(sums[at + c * n + a])))
    });
    // Loads through raw pointers: each reads `k + WIDE ≤ whole` values, within every row (the
    // caller's contract); `wrapping_add` keeps the test profile's pointer checks out of the loop.
    let (xp, wp) = (xs.map(<[f32]>::as_ptr), ws.map(<[f32]>::as_ptr));
    let mut k = 0;
    while k + WIDE <= whole {
        let wv: [__m512; C] = std::array::from_fn(|c| _mm512_loadu_ps(wp[c].wrapping_add(k)));
        for a in 0..R {
            let xv = _mm512_loadu_ps(xp[a].wrapping_add(k));
            for c in 0..C {
                acc[a][c] = _mm512_fmadd_ps(xv, wv[c], acc[a][c]);
            }
        }
        k += WIDE;
    }
    if k < whole {
        // The last eight values, into the low half.
        let eight = |p: *const f32| _mm512_zextps256_ps512(_mm256_loadu_ps(p.wrapping_add(k)));
        let wv: [__m512; C] = std::array::from_fn(|c| eight(wp[c]));
        for a in 0..R {
            let xv = eight(xp[a]);
            for c in 0..C {
                acc[a][c] = _mm512_fmadd_ps(xv, wv[c], acc[a][c]);
            }
        }
    }
    for (a, row) in acc.iter().enumerate() {
        for (c, v) in row.iter().enumerate() {
            let high = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(*v)));
            sums[at + c * n + a] = transmute::<__m256, [f32; LANES]>(_mm256_add_ps(_mm512_castps512_ps256(*v), high));
        }
    }
}

/// A 4 × 4 tile's last step (its inputs a whole number of `LANES`) with AVX-512, its sums
/// then finished in registers: `out[c][a]` is `sum8` of the sum of weight row `i + c` and
/// activation row `r + a` — the values [`tile`] and `products`' own `sum8` would give, bit for
/// bit, without storing the sixteen sums' lanes and adding them one by one (a tenth of a 16-row
/// batched step of Gemma 3 270M). `None` where the kernel does not apply.
#[inline(always)]
fn final_tile(
    xs: [&[f32]; 4],
    ws: [&[f32]; 4],
    sums: &[[f32; LANES]],
    i: usize,
    r: usize,
    n: usize,
) -> Option<[[f32; 4]; 4]> {
    #[cfg(target_arch = "x86_64")]
    {
        let len = xs[0].len();
        let fits = len.is_multiple_of(LANES)
            && xs.iter().all(|x| x.len() == len)
            && ws.iter().all(|w| w.len() == len)
            && (i + 3) * n + r + 3 < sums.len();
        if fits && super::packed::q8_kernel() == super::packed::Q8Kernel::Avx512 {
            // SAFETY: `Avx512` is chosen only on a CPU with AVX-512 F (and AVX2 and FMA); every
            // row holds `len` values (a multiple of `LANES`) and the sums are in bounds (all
            // checked just above).
            return Some(unsafe { final_tile_avx512(xs, ws, sums, i * n + r, n) });
        }
    }
    let _ = (xs, ws, sums, i, r, n);
    None
}

/// [`tile_avx512`] over a 4 × 4 tile's whole last step, then each sum's eight lanes added in
/// `sum8`'s order — `(l0+l4, l1+l5, l2+l6, l3+l7)`, then the pairs of those (`hadd`), then the
/// pairs of the pairs (`hadd` again) — four activation rows' sums at once, for weight row `c`
/// in `out[c]`.
///
/// # Safety
/// The CPU has AVX-512 F, AVX2 and FMA; every row holds `xs[0].len()` values, a multiple of
/// `LANES`; sums `at + c·n + a` index `sums`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn final_tile_avx512(
    xs: [&[f32]; 4],
    ws: [&[f32]; 4],
    sums: &[[f32; LANES]],
    at: usize,
    n: usize,
) -> [[f32; 4]; 4] {
    use std::arch::x86_64::*;
    let whole = xs[0].len();
    // The tile's running sums, then this step's products into them (`tile_avx512` on a copy).
    let mut local = [[0f32; LANES]; 16];
    for a in 0..4 {
        for c in 0..4 {
            local[c * 4 + a] = sums[at + c * n + a];
        }
    }
    tile_avx512::<4, 4>(xs, ws, &mut local, 0, 4, whole);
    let mut out = [[0f32; 4]; 4];
    for (row, o) in local.chunks_exact(4).zip(out.iter_mut()) {
        let half = |l: &[f32; LANES]| {
            let v = _mm256_loadu_ps(l.as_ptr());
            _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v))
        };
        let (h0, h1) = (_mm_hadd_ps(half(&row[0]), half(&row[1])), _mm_hadd_ps(half(&row[2]), half(&row[3])));
        _mm_storeu_ps(o.as_mut_ptr(), _mm_hadd_ps(h0, h1));
    }
    out
}

/// [`tile`] in plain f32 arithmetic, lane by lane (each product rounded, then added): the
/// portable reference of the AVX2 kernel.
#[inline(always)]
fn tile_plain<const R: usize, const C: usize>(
    xs: [&[f32]; R],
    ws: [&[f32]; C],
    sums: &mut [[f32; LANES]],
    i: usize,
    r: usize,
    n: usize,
) {
    for (a, x) in xs.iter().enumerate() {
        for (c, w) in ws.iter().enumerate() {
            let s = &mut sums[(i + c) * n + r + a];
            for (k, (xv, wv)) in x.iter().zip(w.iter()).enumerate() {
                s[k % LANES] += xv * wv;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::rows::tests::values;
    use super::*;

    /// The AVX2 and AVX-512 kernels and the plain one, run on the same tiles, agree to f32
    /// rounding of the sums (every tile shape the products use, inputs past one step, past a
    /// whole `LANES` and with an odd run of eight for the AVX-512 kernel); each vector kernel
    /// runs where the CPU has it, and `tile` dispatches to the widest.
    #[test]
    fn the_vector_tiles_agree_with_the_plain_ones() {
        let (n, k) = (4, STEP + 37);
        let xs = values(n * k, 3);
        let ws = values(4 * k, 4);
        let x = |r: usize| &xs[r * k..(r + 1) * k];
        let w = |c: usize| &ws[c * k..(c + 1) * k];
        let whole = k - k % LANES;
        let check = |plain: &[[f32; LANES]], fast: &[[f32; LANES]], kernel: &str| {
            for (s, (p, f)) in plain.iter().zip(fast).enumerate() {
                let scale: f32 = (0..k).map(|i| (xs[(s % n) * k + i] * ws[(s / n) * k + i]).abs()).sum();
                let (p, f) = (sum8(p), sum8(f));
                assert!((p - f).abs() <= 1e-6 * scale, "{kernel} sum {s}: plain {p}, fast {f}");
            }
        };
        let xs4 = [x(0), x(1), x(2), x(3)];
        let mut plain = vec![[0f32; LANES]; 4 * n];
        tile_plain::<4, 4>(xs4, [w(0), w(1), w(2), w(3)], &mut plain, 0, 0, n);
        // Through the dispatch, with the tail past `whole` by the plain kernel.
        let mut fast = vec![[0f32; LANES]; 4 * n];
        tile::<4, 4>(xs4, [w(0), w(1), w(2), w(3)], &mut fast, 0, 0, n);
        check(&plain, &fast, "tile 4x4");
        let mut pairs = vec![[0f32; LANES]; 4 * n];
        tile::<4, 2>(xs4, [w(0), w(1)], &mut pairs, 0, 0, n);
        tile::<4, 2>(xs4, [w(2), w(3)], &mut pairs, 2, 0, n);
        check(&plain, &pairs, "tile 4x2");
        let mut one = vec![[0f32; LANES]; 4 * n];
        tile::<1, 1>([x(3)], [w(1)], &mut one, 1, 3, n);
        assert_eq!(sum8(&one[n + 3]), sum8(&pairs[n + 3]), "a 1×1 tile sums as the 4×2 one does");
        // Each vector kernel alone, on the first `whole` values (the plain kernel on as many).
        let (x, w) = (|r: usize| &xs[r * k..r * k + whole], |c: usize| &ws[c * k..c * k + whole]);
        let mut plain = vec![[0f32; LANES]; 4 * n];
        tile_plain::<4, 4>([x(0), x(1), x(2), x(3)], [w(0), w(1), w(2), w(3)], &mut plain, 0, 0, n);
        #[cfg(target_arch = "x86_64")]
        {
            let mut ran = 0;
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                let mut fast = vec![[0f32; LANES]; 4 * n];
                // SAFETY: AVX2 and FMA are present; every row holds `whole` values; the sums fit.
                unsafe {
                    tile_avx2::<4, 4>([x(0), x(1), x(2), x(3)], [w(0), w(1), w(2), w(3)], &mut fast, 0, n, whole)
                };
                check(&plain, &fast, "avx2");
                ran += 1;
            }
            if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("fma") {
                let mut fast = vec![[0f32; LANES]; 4 * n];
                // SAFETY: AVX-512 F, AVX2 and FMA are present; as above.
                unsafe {
                    tile_avx512::<4, 4>([x(0), x(1), x(2), x(3)], [w(0), w(1), w(2), w(3)], &mut fast, 0, n, whole)
                };
                check(&plain, &fast, "avx512");
                ran += 1;
            }
            eprintln!("vector tile kernels compared with the plain one: {ran}");
        }
    }

    /// A 4 × 4 tile's last step finished in registers (`final_tile`) gives, bit for bit, the
    /// `sum8` of the sums `tile` leaves, over sums carried from an earlier step; it gives
    /// nothing only where the AVX-512 kernel does not run.
    #[test]
    fn a_final_tile_is_the_tile_then_its_sums() {
        let (n, k) = (6, 3 * LANES * 5);
        let xs = values(n * k, 11);
        let ws = values(4 * k, 12);
        let x = |r: usize| &xs[r * k..(r + 1) * k];
        let w = |c: usize| &ws[c * k..(c + 1) * k];
        // Sums carried in from an earlier step.
        let carried: Vec<[f32; LANES]> =
            values(4 * n * LANES, 13).chunks_exact(LANES).map(|l| l.try_into().unwrap()).collect();
        let (xt, wt) = ([x(1), x(2), x(3), x(4)], [w(0), w(1), w(2), w(3)]);
        let mut sums = carried.clone();
        tile::<4, 4>(xt, wt, &mut sums, 0, 1, n);
        match final_tile(xt, wt, &carried, 0, 1, n) {
            Some(out) => {
                for c in 0..4 {
                    for a in 0..4 {
                        let want = sum8(&sums[c * n + 1 + a]);
                        assert_eq!(out[c][a].to_bits(), want.to_bits(), "weight row {c}, activation row {a}");
                    }
                }
            }
            None => assert_ne!(super::super::packed::q8_kernel(), super::super::packed::Q8Kernel::Avx512),
        }
    }

    /// A product through the tiles is each row's f64 dot product within f32 rounding, for
    /// row and weight counts that leave partial tiles and groups.
    #[test]
    fn tiled_products_are_the_dot_products() {
        for (n, m, k) in [(1, 1, 8), (5, 11, 96), (9, 17, 2 * STEP + 64), (19, 3, 40)] {
            let xs = values(n * k, 7 + n as u32);
            let w = values(m * k, 9 + m as u32);
            let mut out = vec![0f32; m * n];
            products_to(Rows::Dense { data: &w, cols: k }, &xs, n, &[(0, m)], &mut Features { chunk: &mut out, n });
            for j in 0..m {
                for r in 0..n {
                    let (row, x) = (&w[j * k..(j + 1) * k], &xs[r * k..(r + 1) * k]);
                    let want: f64 = row.iter().zip(x).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
                    let scale: f64 = row.iter().zip(x).map(|(a, b)| f64::from((a * b).abs())).sum();
                    let got = f64::from(out[j * n + r]);
                    assert!(
                        (got - want).abs() <= 1e-6 * scale + 1e-30,
                        "n {n} m {m} k {k} ({j}, {r}): {got} vs {want}"
                    );
                }
            }
        }
    }
}

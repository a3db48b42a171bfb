//! Products of a few activation rows (a mixture-of-experts chunk's rows for one expert, a
//! small batch) with weight rows, without packing: a group of weight rows is widened once
//! into a buffer, then multiplied with every activation row in tiles of four activation rows
//! by two weight rows, so each value loaded into a register serves several sums.
//!
//! Each sum is eight f32 running sums (element `i` into lane `i mod 8`) folded as `sum8`
//! does. The AVX2 kernel fuses each multiply-add; [`tile_plain`], its portable reference,
//! rounds the product first, so the two agree to f32 rounding (a test holds them to it).

use super::matmul::Rows;

/// Lanes of a running sum.
const LANES: usize = 8;
/// Weight rows widened at a time (a group's buffer stays in L2).
pub(super) const GROUP: usize = 8;
/// Inputs of a step (a multiple of `LANES`): the activation rows' part of a step stays in
/// cache while the group's weight rows are multiplied with it.
const STEP: usize = 1024;

/// `chunk[i·n + r] = rows[j_i] · xs[r]` for the rows `j_i` of `piece`, in groups of `GROUP`.
pub(super) fn products(rows: Rows<'_>, xs: &[f32], n: usize, piece: &[(usize, usize)], chunk: &mut [f32]) {
    let cols = rows.cols();
    let mut buf = vec![0f32; GROUP * cols];
    let mut sums = vec![[0f32; LANES]; GROUP * n];
    let js: Vec<usize> = piece.iter().flat_map(|&(s, e)| s..e).collect();
    for (g, group) in js.chunks(GROUP).enumerate() {
        for (i, &j) in group.iter().enumerate() {
            rows.widen(j, &mut buf[i * cols..(i + 1) * cols]);
        }
        let m = group.len();
        sums[..m * n].fill([0.0; LANES]);
        for k0 in (0..cols).step_by(STEP) {
            let k1 = (k0 + STEP).min(cols);
            let x = |r: usize| &xs[r * cols + k0..r * cols + k1];
            let w = |i: usize| &buf[i * cols + k0..i * cols + k1];
            let mut r = 0;
            while r < n {
                let take = (n - r).min(4);
                let mut i = 0;
                while i < m {
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
                chunk[(g * GROUP + i) * n + r] = sum8(l);
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
            // SAFETY: AVX2 and FMA are present; every row holds `whole` values and every sum
            // the tile touches lies inside `sums` (both checked just above).
            unsafe { tile_avx2::<R, C>(xs, ws, sums, i * n + r, n, whole) };
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
    use super::super::matmul::tests::values;
    use super::*;

    /// The AVX2 kernel and the plain one, run on the same tiles, agree to f32 rounding of
    /// the sums (every tile shape the products use, inputs past one step and past a whole
    /// `LANES`).
    #[test]
    fn the_avx2_tiles_agree_with_the_plain_ones() {
        let (n, k) = (4, STEP + 37);
        let xs = values(n * k, 3);
        let ws = values(2 * k, 4);
        let x = |r: usize| &xs[r * k..(r + 1) * k];
        let w = |c: usize| &ws[c * k..(c + 1) * k];
        let mut plain = vec![[0f32; LANES]; 2 * n];
        tile_plain::<4, 2>([x(0), x(1), x(2), x(3)], [w(0), w(1)], &mut plain, 0, 0, n);
        let mut fast = vec![[0f32; LANES]; 2 * n];
        tile::<4, 2>([x(0), x(1), x(2), x(3)], [w(0), w(1)], &mut fast, 0, 0, n);
        let mut one = vec![[0f32; LANES]; 2 * n];
        tile::<1, 1>([x(3)], [w(1)], &mut one, 1, 3, n);
        for (s, (p, f)) in plain.iter().zip(&fast).enumerate() {
            let scale: f32 = (0..k).map(|i| (xs[(s % n) * k + i] * ws[(s / n) * k + i]).abs()).sum();
            let (p, f) = (sum8(p), sum8(f));
            assert!((p - f).abs() <= 1e-6 * scale, "sum {s}: plain {p}, avx2 {f}");
        }
        assert_eq!(sum8(&one[n + 3]), sum8(&fast[n + 3]), "a 1×1 tile sums as the 4×2 one does");
    }

    /// A product through the tiles is each row's f64 dot product within f32 rounding, for
    /// row and weight counts that leave partial tiles and groups.
    #[test]
    fn tiled_products_are_the_dot_products() {
        for (n, m, k) in [(1, 1, 8), (5, 11, 96), (9, 17, 2 * STEP + 64), (19, 3, 40)] {
            let xs = values(n * k, 7 + n as u32);
            let w = values(m * k, 9 + m as u32);
            let mut out = vec![0f32; m * n];
            products(Rows::Dense { data: &w, cols: k }, &xs, n, &[(0, m)], &mut out);
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

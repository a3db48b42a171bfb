//! The interpreter's f64 matrix product, `c ← a · b` on strided views: each element of `c` is
//! one chain of fused multiply-adds over the inner dimension in order,
//! `s ← fma(a[i][p], b[p][j], s)` for `p = 0, 1, …` from `s = +0`, and nothing else
//! ([`product_plain`], the definition). The chain does not depend on how the product is blocked,
//! on the CPU's caches or on which kernel runs it, so the result is the same bits on every
//! machine and at every size.
//!
//! The fast path is the textbook packed product (Goto and van de Geijn, "Anatomy of
//! high-performance matrix multiplication", ACM TOMS 2008): blocks of `b` and `a` copied into
//! panels laid out in the order a register tile reads them (zeros past the edges), and a
//! register tile of `MR × NR` sums that continues each element's chain across `KC` inner
//! values at a time. A tile's kernel is chosen at run time: AVX-512F (8 × 24 sums in 24
//! registers), AVX2 and FMA (4 × 12 in 12), or [`product_plain`] on a CPU with neither.

pub use rdu_spatial::view::View;

/// Inner values a register tile adds per visit (its panels stay in the first two caches).
const KC: usize = 256;
/// Rows of `a` packed at a time (a multiple of every kernel's `MR`).
const MC: usize = 64;
/// Columns of `b` packed at a time (a multiple of every kernel's `NR`): `KC × NC` values, about
/// 1 MB, stay in the second-level cache while every row block of `a` passes them.
const NC: usize = 480;

/// `c ← a · b`, `a [m × k]`, `b [k × n]`, `c` dense row-major `[m × n]`, one thread: the
/// fastest kernel this CPU has, every element exactly [`product_plain`]'s.
pub fn product(a: View<'_, f64>, b: View<'_, f64>, c: &mut [f64]) {
    check(&a, &b, c);
    match tiles().first() {
        // SAFETY: `tiles` lists only tiles whose features the CPU has.
        Some(&tile) => unsafe { packed_with(tile, a, b, c) },
        None => product_plain(a, b, c),
    }
}

/// A register tile's kernel.
#[derive(Clone, Copy, Debug)]
enum Isa {
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

/// The tiles this CPU can run, widest first.
fn tiles() -> Vec<Isa> {
    #[allow(unused_mut)]
    let mut tiles = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            tiles.push(Isa::Avx512);
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            tiles.push(Isa::Avx2);
        }
    }
    tiles
}

/// [`packed`] with `tile`.
///
/// # Safety
/// The CPU has `tile`'s features.
unsafe fn packed_with(tile: Isa, a: View<'_, f64>, b: View<'_, f64>, c: &mut [f64]) {
    // SAFETY: this function's contract.
    unsafe {
        match tile {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => packed::<x86::Avx512>(a, b, c),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => packed::<x86::Avx2>(a, b, c),
        }
    }
}

/// [`rows_packed`] with `tile`.
///
/// # Safety
/// The CPU has `tile`'s features.
unsafe fn rows_packed_with(tile: Isa, x: View<'_, f64>, w: &dyn Rows, c: &mut [f64]) {
    // SAFETY: this function's contract.
    unsafe {
        match tile {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => rows_packed::<x86::Avx512>(x, w, c),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => rows_packed::<x86::Avx2>(x, w, c),
        }
    }
}

/// The definition: each element one fused multiply-add chain in inner order from `+0`.
pub fn product_plain(a: View<'_, f64>, b: View<'_, f64>, c: &mut [f64]) {
    check(&a, &b, c);
    let at = |v: &View<'_, f64>, r: usize, col: usize| v.data[v.offset + r * v.row_stride + col * v.col_stride];
    let n = b.cols;
    for i in 0..a.rows {
        for j in 0..n {
            c[i * n + j] = (0..a.cols).fold(0.0, |s, p| at(&a, i, p).mul_add(at(&b, p, j), s));
        }
    }
}

/// The rows of a matrix `W [o × k]` of f32 values in whatever form they are stored (f32
/// values, quantised blocks): a product reads `Wᵀ` through them, widening each value to f64
/// once, as it packs it.
pub trait Rows: Sync {
    /// `o`.
    fn count(&self) -> usize;
    /// `k`.
    fn width(&self) -> usize;
    /// Values `p0..p0 + out.len()` of row `j`. A product asks for whole blocks of `BLOCK`
    /// values (`p0` a multiple of it), the last block of a row possibly shorter.
    fn values(&self, j: usize, p0: usize, out: &mut [f32]);
}

/// The inner values a [`Rows`] source is asked for at a time (a multiple of 32, so a row of
/// Q8_0 blocks is widened a whole block at a time).
pub const BLOCK: usize = KC;

/// `c ← x · Wᵀ`, `x [n × k]`, `W [o × k]` given by its rows, `c` dense row-major `[n × o]`: each
/// element exactly [`product_plain`]'s chain over the widened values, one thread.
pub fn product_rows(x: View<'_, f64>, w: &dyn Rows, c: &mut [f64]) {
    let (n, k, o) = (x.rows, x.cols, w.count());
    assert!(w.width() == k && c.len() == n * o, "product: shapes [{n}×{k}]·[{}×{o}]ᵀ into {}", w.width(), c.len());
    assert!(x.in_bounds(), "product: a view reaches past its data");
    match tiles().first() {
        // SAFETY: `tiles` lists only tiles whose features the CPU has.
        Some(&tile) => unsafe { rows_packed_with(tile, x, w, c) },
        None => rows_plain(x, w, c),
    }
}

/// Value `p` of line `l` (`lines[l·KC + p]`, `G` lines) widened into `out[p·stride + l]`.
#[inline(always)]
fn interleave<const G: usize>(lines: &[f32], kc: usize, out: &mut [f64], stride: usize) {
    let lines: [&[f32]; G] = std::array::from_fn(|l| &lines[l * KC..l * KC + kc]);
    for (p, dst) in out.chunks_mut(stride).take(kc).enumerate() {
        let dst: &mut [f64; G] = (&mut dst[..G]).try_into().expect("G values");
        *dst = std::array::from_fn(|l| f64::from(lines[l][p]));
    }
}

/// [`product_rows`]'s definition: `W` widened whole, transposed, then [`product_plain`].
fn rows_plain(x: View<'_, f64>, w: &dyn Rows, c: &mut [f64]) {
    let (k, o) = (x.cols, w.count());
    let mut line = vec![0f32; k];
    let mut wt = vec![0f64; k * o];
    for j in 0..o {
        for p0 in (0..k).step_by(BLOCK) {
            let len = BLOCK.min(k - p0);
            w.values(j, p0, &mut line[..len]);
            for (p, &v) in line[..len].iter().enumerate() {
                wt[(p0 + p) * o + j] = f64::from(v);
            }
        }
    }
    product_plain(x, View::dense(&wt, k, o), c)
}

/// [`product_rows`] with tile `T`: the rows of `W` widened into the right operand's panels.
///
/// # Safety
/// The CPU has the features of `T`'s kernel.
unsafe fn rows_packed<T: Tile>(x: View<'_, f64>, w: &dyn Rows, c: &mut [f64]) {
    let o = w.count();
    // A third of a panel's rows of `W` at a time (8 or 4), fetched whole, then interleaved into
    // the panel: each inner value's widened values one contiguous store.
    let group = T::NR / 3;
    let mut lines = vec![0f32; group * KC];
    let mut pack_b = |pc: usize, kc: usize, jc: usize, nc: usize, out: &mut [f64]| {
        for (q, panel) in out[..nc.next_multiple_of(T::NR) * kc].chunks_exact_mut(T::NR * kc).enumerate() {
            for l0 in (0..T::NR).step_by(group) {
                for (l, line) in lines.chunks_exact_mut(KC).enumerate() {
                    let j = jc + q * T::NR + l0 + l;
                    if j < jc + nc {
                        w.values(j, pc, &mut line[..kc]);
                    } else {
                        line[..kc].fill(0.0);
                    }
                }
                if group == 8 {
                    interleave::<8>(&lines, kc, &mut panel[l0..], T::NR);
                } else {
                    interleave::<4>(&lines, kc, &mut panel[l0..], T::NR);
                }
            }
        }
    };
    // SAFETY: this function's contract.
    unsafe { driver::<T>(x, o, &mut pack_b, c, o, 1) }
}

fn check(a: &View<'_, f64>, b: &View<'_, f64>, c: &[f64]) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert!(b.rows == k && c.len() == m * n, "product: shapes [{m}×{k}]·[{}×{n}] into {}", b.rows, c.len());
    assert!(a.in_bounds() && b.in_bounds(), "product: a view reaches past its data");
}

/// A register tile of `MR × NR` sums.
trait Tile {
    const MR: usize;
    const NR: usize;
    /// Continues the chains of the tile at `c` (row stride `ldc`, column stride 1) over `kc`
    /// inner values: row `i`'s value `p` of the left operand at `a[i·ars + p·aps]` (a packed
    /// panel, or rows read in place), `b` `kc` groups of `NR` values.
    ///
    /// # Safety
    /// The CPU has the kernel's features; `a` holds every `a[i·ars + p·aps]`, `b` `kc·NR`
    /// values, and `c` the `MR` rows of `NR` values at stride `ldc`.
    unsafe fn run(kc: usize, a: *const f64, ars: usize, aps: usize, b: *const f64, c: *mut f64, ldc: usize);
}

/// The packed product of views with tile `T`, or of their transposes (`cᵀ = bᵀ aᵀ`, written
/// into `c` column-major) when that fills the tiles much better: by a fifth. A transposed
/// product writes every tile through a copy and usually packs its left operand at a stride —
/// attention's weights times values, `[512 × 4096] · [4096 × 128]`, ran at 18 GMAC/s transposed
/// (8% fewer padded tiles) and 28 as it is (one thread, Xeon VM, interleaved runs).
///
/// # Safety
/// The CPU has the features of `T`'s kernel.
unsafe fn packed<T: Tile>(a: View<'_, f64>, b: View<'_, f64>, c: &mut [f64]) {
    let (m, n) = (a.rows, b.cols);
    let waste = |rows: usize, cols: usize| rows.next_multiple_of(T::MR) * cols.next_multiple_of(T::NR);
    let (a, b, rs, cs) = if waste(n, m) * 5 < waste(m, n) * 4 { (b.t(), a.t(), 1, n) } else { (a, b, n, 1) };
    let mut pack_b = |pc, kc, jc, nc, out: &mut [f64]| pack::<true>(&b, pc, kc, jc, nc, T::NR, out);
    // SAFETY: this function's contract.
    unsafe { driver::<T>(a, b.cols, &mut pack_b, c, rs, cs) }
}

/// Packs inner values `pc..pc + kc` of columns `jc..jc + nc` of the right operand into panels of
/// a tile's `NR` columns (zeros past the last column).
type PackB<'p> = dyn FnMut(usize, usize, usize, usize, &mut [f64]) + 'p;

/// `c ← a · b` with tile `T`: `b` (`a.cols × n`) given by `pack_b`, element (i, j) of `c` at
/// `c[i·rs + j·cs]`. The chains start at `+0` (`c` zeroed) and each block of `KC` inner values
/// continues them where they stand, so blocking changes nothing in any element.
///
/// # Safety
/// The CPU has the features of `T`'s kernel.
unsafe fn driver<T: Tile>(a: View<'_, f64>, n: usize, pack_b: &mut PackB<'_>, c: &mut [f64], rs: usize, cs: usize) {
    let (m, k) = (a.rows, a.cols);
    c.fill(0.0);
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    let (kc_max, nc_max, mc_max) = (KC.min(k), NC.min(n.next_multiple_of(T::NR)), MC.min(m.next_multiple_of(T::MR)));
    let mut bpack = vec![0f64; kc_max * nc_max];
    let mut apack = vec![0f64; kc_max * mc_max];
    let mut tile = vec![0f64; T::MR * T::NR];
    // Rows of `a` whole along the inner dimension are read in place (a panel of them is MR
    // streams); others are packed.
    let in_place = a.col_stride == 1;
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            pack_b(pc, kc, jc, nc, &mut bpack);
            for ic in (0..m).step_by(MC) {
                let mc = MC.min(m - ic);
                // A partial last panel is packed (zeros past the last row) even when in place.
                let whole = if in_place { mc - mc % T::MR } else { 0 };
                if whole < mc {
                    pack::<false>(&a, pc, kc, ic + whole, mc - whole, T::MR, &mut apack);
                }
                for jr in (0..nc).step_by(T::NR) {
                    let bp = &bpack[jr * kc..(jr + T::NR) * kc];
                    for ir in (0..mc).step_by(T::MR) {
                        // Row i of the panel, value p: at a_at + i·ars + p·aps of `a_data`.
                        let (a_data, a_at, ars, aps) = if ir < whole {
                            (a.data, a.offset + (ic + ir) * a.row_stride + pc, a.row_stride, 1)
                        } else {
                            (&apack[..], (ir - whole) * kc, 1, T::MR)
                        };
                        assert!(a_at + (T::MR - 1) * ars + (kc - 1) * aps < a_data.len());
                        let ap = a_data[a_at..].as_ptr();
                        let (i0, j0) = (ic + ir, jc + jr);
                        let (rows, cols) = (T::MR.min(m - i0), T::NR.min(n - j0));
                        if rows == T::MR && cols == T::NR && cs == 1 {
                            let at = i0 * rs + j0;
                            // The tile's last element, (MR − 1, NR − 1), lies inside `c`.
                            assert!(at + (T::MR - 1) * rs + T::NR <= c.len());
                            // SAFETY: the CPU has T's features (this function's contract); the
                            // left operand's values lie in `a_data` (asserted), the panel of `b`
                            // holds kc groups of NR values, and the tile's rows lie inside `c`
                            // (asserted).
                            unsafe { T::run(kc, ap, ars, aps, bp.as_ptr(), c.as_mut_ptr().add(at), rs) };
                        } else {
                            // A partial tile or a column-major `c`: through a dense tile.
                            for r in 0..rows {
                                for q in 0..cols {
                                    tile[r * T::NR + q] = c[(i0 + r) * rs + (j0 + q) * cs];
                                }
                            }
                            // SAFETY: as above; `tile` holds MR rows of NR values.
                            unsafe { T::run(kc, ap, ars, aps, bp.as_ptr(), tile.as_mut_ptr(), T::NR) };
                            for r in 0..rows {
                                for q in 0..cols {
                                    c[(i0 + r) * rs + (j0 + q) * cs] = tile[r * T::NR + q];
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Packs inner values `p0..p0 + kc` of lines `l0..l0 + len` of `v` into `out` as panels of
/// `width` lines: panel `q` holds, for each inner value, its `width` lines' values (zero past
/// the last line). The lines are `v`'s columns when `COLUMNS` (the right operand), else its rows.
fn pack<const COLUMNS: bool>(
    v: &View<'_, f64>,
    p0: usize,
    kc: usize,
    l0: usize,
    len: usize,
    width: usize,
    out: &mut [f64],
) {
    let (inner, line) = if COLUMNS { (v.row_stride, v.col_stride) } else { (v.col_stride, v.row_stride) };
    let base = v.offset + p0 * inner + l0 * line;
    for (q, panel) in out[..len.next_multiple_of(width) * kc].chunks_exact_mut(width * kc).enumerate() {
        let lines = width.min(len - q * width);
        if line == 1 {
            // The lines side by side: each inner value's `lines` values one contiguous copy.
            for (p, dst) in panel.chunks_exact_mut(width).enumerate() {
                let start = base + q * width + p * inner;
                dst[..lines].copy_from_slice(&v.data[start..start + lines]);
                dst[lines..].fill(0.0);
            }
            continue;
        }
        for l in 0..width {
            if l < lines {
                let start = base + (q * width + l) * line;
                for p in 0..kc {
                    panel[p * width + l] = v.data[start + p * inner];
                }
            } else {
                for p in 0..kc {
                    panel[p * width + l] = 0.0;
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Tile;
    use std::arch::x86_64::*;

    /// 8 × 24 sums: 24 AVX-512 registers, three loads of `b` and eight broadcasts of `a` per
    /// inner value.
    pub(super) struct Avx512;

    impl Tile for Avx512 {
        const MR: usize = 8;
        const NR: usize = 24;
        // SAFETY: a caller holds `Tile::run`'s contract (the CPU's features, the operands' bounds).
        unsafe fn run(kc: usize, a: *const f64, ars: usize, aps: usize, b: *const f64, c: *mut f64, ldc: usize) {
            // SAFETY: the caller's contract.
            unsafe { avx512(kc, a, ars, aps, b, c, ldc) }
        }
    }

    // SAFETY: called by `Avx512::run` only, under `Tile::run`'s contract: the CPU has AVX-512F.
    #[target_feature(enable = "avx512f")]
    unsafe fn avx512(kc: usize, a: *const f64, ars: usize, aps: usize, b: *const f64, c: *mut f64, ldc: usize) {
        // SAFETY (the whole body): the caller's contract bounds every pointer read and written.
        unsafe {
            let mut acc = [[_mm512_setzero_pd(); 3]; 8];
            for (i, row) in acc.iter_mut().enumerate() {
                for (j, s) in row.iter_mut().enumerate() {
                    *s = _mm512_loadu_pd(c.add(i * ldc + j * 8));
                }
            }
            // Offsets and steps worked out before the loop: no multiplication (checked, in a
            // test build) per inner value.
            let rows: [usize; 8] = std::array::from_fn(|i| i * ars);
            let (mut ap, mut bp) = (a, b);
            for _ in 0..kc {
                let bv = [_mm512_loadu_pd(bp), _mm512_loadu_pd(bp.add(8)), _mm512_loadu_pd(bp.add(16))];
                for (row, &at) in acc.iter_mut().zip(&rows) {
                    let x = _mm512_set1_pd(*ap.add(at));
                    for (s, &y) in row.iter_mut().zip(&bv) {
                        *s = _mm512_fmadd_pd(x, y, *s);
                    }
                }
                ap = ap.add(aps);
                bp = bp.add(24);
            }
            for (i, row) in acc.iter().enumerate() {
                for (j, &s) in row.iter().enumerate() {
                    _mm512_storeu_pd(c.add(i * ldc + j * 8), s);
                }
            }
        }
    }

    /// 4 × 12 sums: 12 AVX2 registers, three loads of `b` and four broadcasts of `a` per inner
    /// value.
    pub(super) struct Avx2;

    impl Tile for Avx2 {
        const MR: usize = 4;
        const NR: usize = 12;
        // SAFETY: a caller holds `Tile::run`'s contract (the CPU's features, the operands' bounds).
        unsafe fn run(kc: usize, a: *const f64, ars: usize, aps: usize, b: *const f64, c: *mut f64, ldc: usize) {
            // SAFETY: the caller's contract.
            unsafe { avx2(kc, a, ars, aps, b, c, ldc) }
        }
    }

    // SAFETY: called by `Avx2::run` only, under `Tile::run`'s contract: the CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn avx2(kc: usize, a: *const f64, ars: usize, aps: usize, b: *const f64, c: *mut f64, ldc: usize) {
        // SAFETY (the whole body): the caller's contract bounds every pointer read and written.
        unsafe {
            let mut acc = [[_mm256_setzero_pd(); 3]; 4];
            for (i, row) in acc.iter_mut().enumerate() {
                for (j, s) in row.iter_mut().enumerate() {
                    *s = _mm256_loadu_pd(c.add(i * ldc + j * 4));
                }
            }
            // Offsets and steps worked out before the loop: no multiplication (checked, in a
            // test build) per inner value.
            let rows: [usize; 4] = std::array::from_fn(|i| i * ars);
            let (mut ap, mut bp) = (a, b);
            for _ in 0..kc {
                let bv = [_mm256_loadu_pd(bp), _mm256_loadu_pd(bp.add(4)), _mm256_loadu_pd(bp.add(8))];
                for (row, &at) in acc.iter_mut().zip(&rows) {
                    let x = _mm256_set1_pd(*ap.add(at));
                    for (s, &y) in row.iter_mut().zip(&bv) {
                        *s = _mm256_fmadd_pd(x, y, *s);
                    }
                }
                ap = ap.add(aps);
                bp = bp.add(12);
            }
            for (i, row) in acc.iter().enumerate() {
                for (j, &s) in row.iter().enumerate() {
                    _mm256_storeu_pd(c.add(i * ldc + j * 4), s);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeded values in [-1, 1) with a spread of exponents, so that the order of the additions
    /// shows in the last bits.
    fn values(len: usize, seed: u64) -> Vec<f64> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let unit = (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
                unit * f64::powi(2.0, (s % 9) as i32 - 4)
            })
            .collect()
    }

    /// Every kernel this CPU has gives every element exactly the plain chain's bits: across
    /// partial tiles on both edges, inner widths past one and two blocks, both orientations
    /// (a product whose transpose fills the tiles better) and transposed, strided operands.
    #[test]
    fn every_kernel_is_the_plain_chain_bit_for_bit() {
        let shapes = [
            (1, 1, 1),
            (3, 5, 7),
            (8, 24, 256),
            (19, 512, 300),
            (512, 19, 300),
            (97, 50, 2 * KC + 3),
            (130, 490, 40),
            (48, 2 * KC + 5, 9),
        ];
        for (case, &(m, k, n)) in shapes.iter().enumerate() {
            let (x, y) = (values(m * k + 3, case as u64), values(k * n * 2, case as u64 + 100));
            // a dense with an offset; b the transpose of a [n × k] matrix read at every other column.
            let a = View { data: &x[..], offset: 3, rows: m, cols: k, row_stride: k, col_stride: 1 };
            let b = View { data: &y[..], offset: 0, rows: k, cols: n, row_stride: 2, col_stride: 2 * k };
            check_kernels(a, b);
            // a the transpose of a [k × m] matrix, b dense: panels packed from lines side by side.
            let a = View { data: &x[..], offset: 3, rows: m, cols: k, row_stride: 1, col_stride: m };
            let b = View::dense(&y[..k * n], k, n);
            check_kernels(a, b);
        }
    }

    /// [`every_kernel_is_the_plain_chain_bit_for_bit`] on one pair of operands.
    fn check_kernels(a: View<'_, f64>, b: View<'_, f64>) {
        let (m, k, n) = (a.rows, a.cols, b.cols);
        let mut want = vec![f64::NAN; m * n];
        product_plain(a, b, &mut want);
        type Kernel = Box<dyn Fn(View<'_, f64>, View<'_, f64>, &mut [f64])>;
        let mut kernels: Vec<(String, Kernel)> = vec![("dispatched".into(), Box::new(product))];
        for tile in tiles() {
            // SAFETY: `tiles` lists only tiles whose features the CPU has.
            kernels.push((format!("{tile:?}"), Box::new(move |a, b, c| unsafe { packed_with(tile, a, b, c) })));
        }
        for (name, kernel) in kernels {
            let mut got = vec![f64::NAN; m * n];
            kernel(a, b, &mut got);
            for (e, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.to_bits(), w.to_bits(), "{name} [{m}×{k}]·[{k}×{n}] element {e}: {g} against {w}");
            }
        }
    }

    /// `W [o × k]` as f32 rows, asked for in whole blocks.
    struct F32Rows<'a> {
        values: &'a [f32],
        o: usize,
        k: usize,
    }

    impl Rows for F32Rows<'_> {
        fn count(&self) -> usize {
            self.o
        }
        fn width(&self) -> usize {
            self.k
        }
        fn values(&self, j: usize, p0: usize, out: &mut [f32]) {
            assert!(
                p0.is_multiple_of(BLOCK) && (out.len() == BLOCK || p0 + out.len() == self.k),
                "asked for {p0}+{}",
                out.len()
            );
            out.copy_from_slice(&self.values[j * self.k + p0..][..out.len()]);
        }
    }

    /// `product_rows` on every kernel this CPU has gives exactly the plain chains over the
    /// widened rows: few and many rows of `x`, partial tiles and inner widths past two blocks.
    #[test]
    fn a_product_with_rows_is_the_plain_chain_bit_for_bit() {
        for (case, &(n, k, o)) in
            [(1, 3, 1), (19, 2 * BLOCK + 40, 70), (64, 300, 491), (8, BLOCK, 24)].iter().enumerate()
        {
            let x = values(n * k, case as u64 + 7);
            let w: Vec<f32> = values(o * k, case as u64 + 70).iter().map(|&v| v as f32).collect();
            let rows = &F32Rows { values: &w, o, k };
            let x = View::dense(&x, n, k);
            let mut want = vec![f64::NAN; n * o];
            rows_plain(x, rows, &mut want);
            let wide: Vec<f64> = w.iter().map(|&v| f64::from(v)).collect();
            let mut plain = vec![f64::NAN; n * o];
            product_plain(x, View::dense(&wide, o, k).t(), &mut plain);
            assert_eq!(want, plain, "rows_plain is product_plain over the widened rows");
            type Kernel<'k> = Box<dyn Fn(&mut [f64]) + 'k>;
            let mut kernels: Vec<(String, Kernel)> =
                vec![("dispatched".into(), Box::new(|c| product_rows(x, rows, c)))];
            for tile in tiles() {
                // SAFETY: `tiles` lists only tiles whose features the CPU has.
                let kernel: Kernel = Box::new(move |c| unsafe { rows_packed_with(tile, x, rows, c) });
                kernels.push((format!("{tile:?}"), kernel));
            }
            for (name, kernel) in kernels {
                let mut got = vec![f64::NAN; n * o];
                kernel(&mut got);
                for (e, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), w.to_bits(), "{name} [{n}×{k}]·[{o}×{k}]ᵀ element {e}: {g} against {w}");
                }
            }
        }
    }

    /// An empty inner dimension gives zeros; an empty result touches nothing.
    #[test]
    fn empty_dimensions() {
        let x = [1.0, 2.0];
        let mut c = vec![f64::NAN; 4];
        product(View::dense(&x[..0], 2, 0), View::dense(&x[..0], 0, 2), &mut c);
        assert_eq!(c, [0.0; 4]);
        product(View::dense(&x[..], 0, 2), View::dense(&x[..], 2, 1), &mut []);
    }
}

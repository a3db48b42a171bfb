//! FP8 block-scaled weights as DeepSeek-V3 and GLM store them: `weight` as `float8_e4m3fn`
//! `[out, in]` and `weight_scale_inv` as f32 `[ceil(out/bo), ceil(in/bi)]`, one scale per
//! `bo × bi` block (`quantization_config.weight_block_size`, `[bo, bi]`); a value is
//! `fp8 · scale` of its block (the edge blocks of a dimension the block does not divide are
//! ragged). The simulator folds these blocks; every reader here gives exactly these values.

/// The largest finite e4m3fn value.
pub const FP8_E4M3_MAX: f32 = 448.0;

/// The value of one e4m3fn byte: a sign, four exponent bits biased by 7 and three mantissa
/// bits; no infinities, and `S.1111.111` is NaN. Exact in f32.
const fn e4m3(byte: u8) -> f32 {
    let sign = if byte & 0x80 != 0 { -1.0 } else { 1.0 };
    let (exp, man) = ((byte >> 3) & 0xF, byte & 0x7);
    if exp == 0xF && man == 0x7 {
        return f32::NAN;
    }
    // Subnormal: man/8 · 2^-6; normal: (1 + man/8) · 2^(exp-7). Both exact products of a
    // small integer and a power of two.
    let (int, pow2) = if exp == 0 { (man as f32, -9) } else { ((8 + man) as f32, exp as i32 - 10) };
    let mut scale = 1.0f32;
    let mut k = pow2;
    while k < 0 {
        scale /= 2.0;
        k += 1;
    }
    while k > 0 {
        scale *= 2.0;
        k -= 1;
    }
    sign * int * scale
}

const fn e4m3_table() -> [f32; 256] {
    let mut table = [0.0f32; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = e4m3(b as u8);
        b += 1;
    }
    table
}

/// Every e4m3fn byte's value, indexed by the byte.
pub static FP8_E4M3: [f32; 256] = e4m3_table();

/// The value of an e4m3fn byte (see [`FP8_E4M3`]).
#[inline(always)]
pub fn fp8_e4m3_to_f32(byte: u8) -> f32 {
    FP8_E4M3[usize::from(byte)]
}

/// Whether the byte is e4m3fn's NaN (`S.1111.111`).
#[inline(always)]
pub fn fp8_e4m3_is_nan(byte: u8) -> bool {
    byte & 0x7F == 0x7F
}

/// An FP8 weight kept as stored: e4m3fn bytes, row-major in numpy order, and one f32 scale
/// per `block[0] × block[1]` block of each matrix (the last two axes; a leading axis stacks
/// matrices — experts — each with its own grid of `ceil(rows/block[0]) × ceil(cols/block[1])`
/// scales, row-major, the grids in the matrices' order).
#[derive(Clone, Debug, PartialEq)]
pub struct Fp8Weight {
    pub shape: Vec<usize>,
    pub block: [usize; 2],
    pub values: Vec<u8>,
    pub scales: Vec<f32>,
}

/// The scale grid of a weight: how many matrices, and each one's grid rows and columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fp8Grid {
    pub matrices: usize,
    pub rows: usize,
    pub cols: usize,
}

impl Fp8Grid {
    /// The grid of `shape` in blocks of `block`, or why there is none (fewer than two axes, an
    /// empty block, an element count that overflows).
    pub fn of(shape: &[usize], block: [usize; 2]) -> Result<Fp8Grid, String> {
        if shape.len() < 2 {
            return Err(format!(
                "an fp8 block-scaled weight has at least two axes; shape {shape:?} has {}",
                shape.len()
            ));
        }
        if block.contains(&0) {
            return Err(format!("the fp8 block {}×{} is empty", block[0], block[1]));
        }
        let n = shape.len();
        let matrices = shape[..n - 2].iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let matrices = matrices.ok_or_else(|| format!("shape {shape:?} overflows"))?;
        Ok(Fp8Grid { matrices, rows: shape[n - 2].div_ceil(block[0]), cols: shape[n - 1].div_ceil(block[1]) })
    }

    /// Scales in all: every matrix's grid.
    pub fn len(&self) -> Option<usize> {
        self.matrices.checked_mul(self.rows)?.checked_mul(self.cols)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }
}

impl Fp8Weight {
    /// The weight, checked: `values` holds every element of `shape`, `scales` the grid of
    /// `block`, and every scale is finite. The error is one line naming what differs.
    pub fn new(shape: Vec<usize>, block: [usize; 2], values: Vec<u8>, scales: Vec<f32>) -> Result<Fp8Weight, String> {
        let grid = Fp8Grid::of(&shape, block)?;
        let numel = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if numel != Some(values.len()) {
            return Err(format!("{} fp8 values do not fill shape {shape:?}", values.len()));
        }
        if grid.len() != Some(scales.len()) {
            let n = shape.len();
            return Err(format!(
                "{} scales do not cover shape {shape:?} in {}×{} blocks: the grid is {}{}×{} ({} scales)",
                scales.len(),
                block[0],
                block[1],
                if n > 2 { format!("{}× ", grid.matrices) } else { String::new() },
                grid.rows,
                grid.cols,
                grid.len().unwrap_or(usize::MAX),
            ));
        }
        if let Some((i, s)) = scales.iter().enumerate().find(|(_, s)| !s.is_finite()) {
            return Err(format!("scale {i} is {s}, not a finite number"));
        }
        Ok(Fp8Weight { shape, block, values, scales })
    }

    /// The whole weight as rows of its last axis.
    pub fn view(&self) -> Fp8View<'_> {
        let n = self.shape.len();
        let at = |k: usize| n.checked_sub(k).and_then(|i| self.shape.get(i)).copied().unwrap_or(0);
        let block = self.block.map(|b| b.max(1));
        Fp8View { rows: at(2), cols: at(1), block, values: &self.values, scales: &self.scales }
    }

    /// The same weight in blocks of `block`, each dividing this weight's block: the FP8 values
    /// untouched, each finer block's scale that of the block it lies in (read, never
    /// recomputed), so every dequantised value is the same. What a tensor-parallel chip holds
    /// when its share cuts a block: whole finer blocks that share their block's scale. The
    /// values move, never copied.
    pub fn refined(self, block: [usize; 2]) -> Result<Fp8Weight, String> {
        if block == self.block {
            return Ok(self);
        }
        let [r0, c0] = self.block;
        if block.contains(&0) || !r0.is_multiple_of(block[0]) || !c0.is_multiple_of(block[1]) {
            return Err(format!("fp8 blocks of {}×{} cannot be cut into {}×{} blocks", r0, c0, block[0], block[1]));
        }
        let (coarse, fine) = (Fp8Grid::of(&self.shape, self.block)?, Fp8Grid::of(&self.shape, block)?);
        let (fr, fc) = (r0 / block[0], c0 / block[1]);
        let mut scales = Vec::with_capacity(fine.len().unwrap_or(0));
        for m in 0..fine.matrices {
            for r in 0..fine.rows {
                let row = (m * coarse.rows + r / fr) * coarse.cols;
                scales.extend((0..fine.cols).map(|c| self.scales[row + c / fc]));
            }
        }
        Fp8Weight::new(self.shape, block, self.values, scales)
    }

    /// Every value as f32, row-major: `fp8 · scale` of its block.
    pub fn dequantize(&self) -> Vec<f32> {
        let view = self.view();
        let mut out = vec![0.0f32; self.values.len()];
        for (j, row) in out.chunks_exact_mut(view.cols.max(1)).enumerate() {
            view.widen_row(j, row);
        }
        out
    }
}

/// Rows of an FP8 weight (one matrix or a stack of them) borrowed in place: `rows` rows of
/// `cols` values a matrix, each matrix's scale grid after the one before.
#[derive(Clone, Copy, Debug)]
pub struct Fp8View<'a> {
    pub rows: usize,
    pub cols: usize,
    pub block: [usize; 2],
    pub values: &'a [u8],
    pub scales: &'a [f32],
}

impl<'a> Fp8View<'a> {
    /// Scale-grid columns of a matrix.
    pub fn grid_cols(&self) -> usize {
        self.cols.div_ceil(self.block[1])
    }

    /// The scales of row `j` (counted over every matrix), one per block of columns.
    #[inline(always)]
    pub fn row_scales(&self, j: usize) -> &'a [f32] {
        let (m, r) = (j / self.rows.max(1), j % self.rows.max(1));
        let (grid_rows, gc) = (self.rows.div_ceil(self.block[0]), self.grid_cols());
        let at = (m * grid_rows + r / self.block[0]) * gc;
        &self.scales[at..at + gc]
    }

    /// Row `j`'s bytes.
    #[inline(always)]
    pub fn row_bytes(&self, j: usize) -> &'a [u8] {
        &self.values[j * self.cols..(j + 1) * self.cols]
    }

    /// Row `j` (counted over every matrix) as f32 into `out` (`cols` values): `fp8 · scale`.
    #[inline(always)]
    pub fn widen_row(&self, j: usize, out: &mut [f32]) {
        let (bytes, scales) = (self.row_bytes(j), self.row_scales(j));
        for ((o, b), s) in out.chunks_mut(self.block[1]).zip(bytes.chunks(self.block[1])).zip(scales) {
            for (o, &b) in o.iter_mut().zip(b) {
                *o = fp8_e4m3_to_f32(b) * s;
            }
        }
    }

    /// Matrix `index` of a stack (`rows` rows each) as its own view.
    pub fn matrix(&self, index: usize) -> Option<Fp8View<'a>> {
        let per = self.rows.checked_mul(self.cols)?;
        let grid = self.rows.div_ceil(self.block[0]).checked_mul(self.grid_cols())?;
        let values = self.values.get(index.checked_mul(per)?..index.checked_add(1)?.checked_mul(per)?)?;
        let scales = self.scales.get(index.checked_mul(grid)?..index.checked_add(1)?.checked_mul(grid)?)?;
        Some(Fp8View { values, scales, ..*self })
    }
}

/// Rounds `v` to the nearest e4m3fn value (ties to even), saturating at ±448; NaN stays NaN.
pub fn fp8_e4m3_from_f32(v: f32) -> u8 {
    if v.is_nan() {
        return 0x7F;
    }
    let sign = if v.is_sign_negative() { 0x80u8 } else { 0 };
    let a = v.abs().min(FP8_E4M3_MAX);
    // The nearest of the 127 non-negative finite values, ties to the even byte (the one whose
    // mantissa's last bit is 0): the finite values ascend with their byte.
    let mut lo = 0u8;
    let mut hi = 0x7Eu8;
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if FP8_E4M3[usize::from(mid)] <= a {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let (dl, dh) = (a - FP8_E4M3[usize::from(lo)], FP8_E4M3[usize::from(hi)] - a);
    let byte = if dl < dh || (dl == dh && lo.is_multiple_of(2)) { lo } else { hi };
    let byte = if FP8_E4M3[usize::from(hi)] <= a { hi } else { byte };
    sign | byte
}

/// Quantises `values` (row-major, `shape`) to FP8 in `block` blocks as DeepSeek's and
/// transformers' block quantisers do: per block `scale = amax / 448` (1 for an all-zero
/// block), each value `v / scale` rounded to the nearest e4m3fn value.
pub fn quantize_fp8(values: &[f32], shape: &[usize], block: [usize; 2]) -> Result<Fp8Weight, String> {
    let grid = Fp8Grid::of(shape, block)?;
    let n = shape.len();
    let (rows, cols) = (shape[n - 2], shape[n - 1]);
    if rows.checked_mul(cols).and_then(|p| p.checked_mul(grid.matrices)) != Some(values.len()) {
        return Err(format!("{} values do not fill shape {shape:?}", values.len()));
    }
    let mut scales = Vec::with_capacity(grid.len().unwrap_or(0));
    let mut bytes = vec![0u8; values.len()];
    for m in 0..grid.matrices {
        let at = m * rows * cols;
        for (gr, gc) in (0..grid.rows).flat_map(|r| (0..grid.cols).map(move |c| (r, c))) {
            let (r0, c0) = (gr * block[0], gc * block[1]);
            let (r1, c1) = ((r0 + block[0]).min(rows), (c0 + block[1]).min(cols));
            let cells = || (r0..r1).flat_map(move |r| (c0..c1).map(move |c| at + r * cols + c));
            let amax = cells().fold(0.0f32, |a, i| a.max(values[i].abs()));
            let scale = if amax > 0.0 { amax / FP8_E4M3_MAX } else { 1.0 };
            for i in cells() {
                bytes[i] = fp8_e4m3_from_f32(values[i] / scale);
            }
            scales.push(scale);
        }
    }
    Fp8Weight::new(shape.to_vec(), block, bytes, scales)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_holds_the_format_landmarks() {
        assert_eq!(fp8_e4m3_to_f32(0x00), 0.0);
        assert!(fp8_e4m3_to_f32(0x80) == 0.0 && fp8_e4m3_to_f32(0x80).is_sign_negative());
        assert_eq!(fp8_e4m3_to_f32(0x01), 2f32.powi(-9), "smallest subnormal");
        assert_eq!(fp8_e4m3_to_f32(0x08), 2f32.powi(-6), "smallest normal");
        assert_eq!(fp8_e4m3_to_f32(0x38), 1.0);
        assert_eq!(fp8_e4m3_to_f32(0x7E), FP8_E4M3_MAX);
        assert_eq!(fp8_e4m3_to_f32(0xFE), -FP8_E4M3_MAX);
        assert!(fp8_e4m3_to_f32(0x7F).is_nan() && fp8_e4m3_to_f32(0xFF).is_nan());
        assert!((0..=255u8).filter(|&b| fp8_e4m3_to_f32(b).is_nan()).eq([0x7F, 0xFF]));
        assert!((0..=255u8).all(|b| fp8_e4m3_is_nan(b) == fp8_e4m3_to_f32(b).is_nan()));
    }

    #[test]
    fn rounding_to_fp8_inverts_the_table_and_ties_to_even() {
        for b in (0..=255u8).filter(|&b| !fp8_e4m3_is_nan(b)) {
            let v = fp8_e4m3_to_f32(b);
            let back = fp8_e4m3_from_f32(v);
            assert_eq!(fp8_e4m3_to_f32(back), v, "byte {b:#04x}");
        }
        // 1.0 (0x38) and 1.125 (0x39): the midpoint goes to the even byte, 0x38.
        assert_eq!(fp8_e4m3_from_f32(1.0625), 0x38);
        // 1.125 and 1.25 (0x3A): to 0x3A.
        assert_eq!(fp8_e4m3_from_f32(1.1875), 0x3A);
        assert_eq!(fp8_e4m3_from_f32(1e9), 0x7E, "saturates");
        assert_eq!(fp8_e4m3_from_f32(-1e9), 0xFE);
    }

    #[test]
    fn ragged_blocks_take_their_own_scales() {
        // [3, 5] in 2×3 blocks: a 2×2 grid whose last row and column are ragged.
        let values: Vec<f32> = (0..15).map(|i| (i as f32 - 7.0) * 0.75).collect();
        let w = quantize_fp8(&values, &[3, 5], [2, 3]).unwrap();
        assert_eq!(w.scales.len(), 4);
        let back = w.dequantize();
        for (i, (&a, &b)) in values.iter().zip(&back).enumerate() {
            let (r, c) = (i / 5, i % 5);
            let scale = w.scales[(r / 2) * 2 + c / 3];
            assert_eq!(b, fp8_e4m3_to_f32(w.values[i]) * scale, "element {i}");
            assert!((a - b).abs() <= scale * 32.0, "element {i}: {a} against {b}");
        }
        let err = Fp8Weight::new(vec![3, 5], [2, 3], w.values.clone(), w.scales[..3].to_vec()).unwrap_err();
        assert_eq!(err, "3 scales do not cover shape [3, 5] in 2×3 blocks: the grid is 2×2 (4 scales)");
    }

    /// Finer blocks keep every value and byte: a stack of two ragged [5, 12] matrices in 4×8
    /// blocks cut into 2×4 (and 4×2) ones dequantises exactly as before, each finer scale
    /// read from its block; a size that does not divide the block is refused.
    #[test]
    fn refined_blocks_share_their_blocks_scales() {
        let values: Vec<f32> = (0..120).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.03).collect();
        let w = quantize_fp8(&values, &[2, 5, 12], [4, 8]).unwrap();
        for block in [[2, 4], [4, 2], [1, 1], [4, 8]] {
            let fine = w.clone().refined(block).unwrap();
            assert_eq!((fine.block, &fine.values), (block, &w.values), "{block:?}");
            assert_eq!(fine.dequantize(), w.dequantize(), "{block:?}");
        }
        assert_eq!(w.clone().refined([2, 4]).unwrap().scales.len(), 2 * 3 * 3);
        assert_eq!(w.refined([3, 8]).unwrap_err(), "fp8 blocks of 4×8 cannot be cut into 3×8 blocks");
    }
}

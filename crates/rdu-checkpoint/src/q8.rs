//! Q8_0 kept as blocks (`Q8Weight`) and ggml's reference Q8_0 quantiser for dense checkpoints:
//! the one block type and the one quantiser of the workspace (the simulator folds these blocks,
//! `rdu_spatial::q8`; the compiler's certification quantises with them).

use crate::error::{CheckpointError, Result};
use half::f16;

/// Elements per Q8_0 block (ggml's `QK8_0`).
pub const QK8_0: usize = 32;

/// One Q8_0 block: 32 values `d * qs[i]`. `d` is the file's f16 scale widened to f32, so it
/// is always exactly representable as f16.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Q8Block {
    pub d: f32,
    pub qs: [i8; QK8_0],
}

/// A Q8_0 tensor in numpy shape order; blocks run along the last axis, row-major, so row `r`
/// owns blocks `r * last/32 .. (r + 1) * last/32`.
#[derive(Clone, Debug, PartialEq)]
pub struct Q8Weight {
    pub shape: Vec<usize>,
    pub blocks: Vec<Q8Block>,
}

/// Quantises `values` (row-major, `shape` in numpy order) the way ggml's
/// `quantize_row_q8_0_ref` does: per block `d = max|x| / 127`, stored as f16, and
/// `qs[i] = round(x[i] * (1/d))` with the f32 `d` before its f16 rounding, rounding half away
/// from zero. An all-zero block gets `d = 0` and zero quants.
pub fn quantize_q8_0(values: &[f32], shape: &[usize]) -> Result<Q8Weight> {
    let fail = |reason| CheckpointError::QuantizeShape { shape: shape.to_vec(), len: values.len(), reason };
    let n_elements = shape
        .iter()
        .try_fold(1usize, |acc, &dim| acc.checked_mul(dim))
        .ok_or_else(|| fail("the shape's element count overflows"))?;
    if n_elements != values.len() {
        return Err(fail("the value count does not match the shape"));
    }
    match shape.last() {
        Some(last) if last % QK8_0 == 0 => {}
        _ => return Err(fail("the last axis must be a nonzero multiple of 32")),
    }
    let blocks = values.chunks_exact(QK8_0).map(Q8Block::quantize).collect();
    Ok(Q8Weight { shape: shape.to_vec(), blocks })
}

/// `roundf(v)` clamped to `[-128, 127]`, as an `i8` (NaN gives 0, as `NaN as i8` does).
/// Clamped first — `round` is monotone and the bounds are integers, so clamping before
/// rounding is clamping after — then rounded with a truncating conversion, exact on the
/// clamped range (`c − t` is exact below 2²³), without a branch, so the quantiser's loop
/// vectorises: `f32::round` is a call into libm on baseline x86-64.
#[inline(always)]
fn round_clamp_i8(v: f32) -> i8 {
    // NaN to 0 (a select, not a branch): `c` is then finite, in [-128, 127].
    let c = v.clamp(-128.0, 127.0);
    let c = if c.is_nan() { 0.0 } else { c };
    // SAFETY: `c` is finite and within i32's range, so the truncation is defined (the
    // saturating `as` would keep the loop scalar).
    let t = unsafe { c.to_int_unchecked::<i32>() };
    let frac = c - t as f32;
    // Wrapping: `t` lies in [-128, 127] and moves by at most one back into it, so nothing wraps;
    // checked arithmetic (the test profile's) would keep the loop scalar.
    t.wrapping_add(i32::from(frac >= 0.5)).wrapping_sub(i32::from(frac <= -0.5)) as i8
}

impl Q8Block {
    /// Quantises one block of 32 values (see [`quantize_q8_0`]); uses the first 32 of `x`,
    /// padding with zeros if there are fewer.
    pub fn quantize(x: &[f32]) -> Q8Block {
        let amax = x.iter().take(QK8_0).fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0i8; QK8_0];
        for (q, &v) in qs.iter_mut().zip(x) {
            *q = round_clamp_i8(v * id);
        }
        Q8Block { d: f16::from_f32(d).to_f32(), qs }
    }

    /// Bytes of a block as a file stores it: an f16 scale, then 32 int8 values.
    pub const BYTES: usize = 2 + QK8_0;

    /// The block as a file stores it ([`Q8Block::from_bytes`]'s inverse for a scale f16 holds).
    pub fn to_bytes(&self) -> [u8; Q8Block::BYTES] {
        let mut out = [0u8; Q8Block::BYTES];
        out[..2].copy_from_slice(&f16::from_f32(self.d).to_le_bytes());
        for (o, &q) in out[2..].iter_mut().zip(&self.qs) {
            *o = q as u8;
        }
        out
    }

    /// Reads a 34-byte `{f16 d; i8 qs[32]}` block (the f16 scale widened to f32).
    #[inline(always)]
    pub fn from_bytes(bytes: &[u8]) -> Q8Block {
        let d = f16::from_le_bytes([bytes[0], bytes[1]]).to_f32();
        let mut qs = [0i8; QK8_0];
        for (q, &b) in qs.iter_mut().zip(&bytes[2..2 + QK8_0]) {
            *q = b as i8;
        }
        Q8Block { d, qs }
    }

    /// The 32 values this block stands for.
    pub fn dequantize(&self) -> [f32; QK8_0] {
        self.qs.map(|q| f32::from(q) * self.d)
    }
}

impl Q8Weight {
    /// Number of elements (the product of `shape`).
    pub fn n_elements(&self) -> usize {
        self.blocks.len() * QK8_0
    }

    /// Dense f32 values, row-major.
    pub fn dequantize(&self) -> Vec<f32> {
        self.blocks.iter().flat_map(|b| b.dequantize()).collect()
    }
}

#[cfg(test)]
mod round_tests {
    use super::round_clamp_i8;

    /// `roundf`, clamped, as `i8`: what the quantiser must give.
    fn want(x: f32) -> i8 {
        x.round().clamp(-128.0, 127.0) as i8
    }

    #[test]
    fn round_clamp_i8_is_roundf_clamped() {
        let mut v = -200.0f32;
        while v < 200.0 {
            // Every f32 step near the halves, and a dense grid elsewhere.
            let h = v + 0.5;
            for x in [v, h, h.next_up(), h.next_down()] {
                assert_eq!(round_clamp_i8(x), want(x), "{x}");
            }
            v += 0.125;
        }
        let edges = [0.499_999_97f32, -0.499_999_97, 0.5, -0.5, 1.5, -2.5, 126.5, 127.49, -127.5, -128.5, -128.49];
        for x in edges.into_iter().chain([8_388_607.5, 3e9, -3e9, f32::INFINITY, f32::NEG_INFINITY, -0.0]) {
            assert_eq!(round_clamp_i8(x), want(x), "{x}");
        }
        assert_eq!(round_clamp_i8(f32::NAN), f32::NAN.round() as i8);
    }
}

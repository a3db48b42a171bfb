//! MXFP4 (OCP Microscaling, FP4): blocks of 32 e2m1 values sharing one e8m0 scale
//! (`2^(e − 127)`), as ggml stores it (`GGML_TYPE_MXFP4`: the scale byte, then 16 bytes whose
//! low nibbles are values 0..16 and high nibbles 16..32) and as the gpt-oss HF checkpoints
//! store it (`*_blocks` `[..., rows, cols/32, 16]`, two values a byte, the low nibble first,
//! and `*_scales` `[..., rows, cols/32]`). Weights are kept in ggml's layout
//! ([`GgmlWeight`]); an HF tensor is regrouped into it, value for value.

use crate::ggml::GgmlType;
pub use crate::quants::{e8m0_half, MXFP4_DOUBLED, MXFP4_MAX_SCALE};

/// Values per MXFP4 block.
pub const QK_MXFP4: usize = 32;

/// Bytes per MXFP4 block: the e8m0 scale and 16 bytes of nibbles.
pub const MXFP4_BLOCK_BYTES: usize = 17;

/// A weight kept in a ggml block format, row-major in numpy order with blocks along the last
/// axis (what a GGUF file holds, owned).
#[derive(Clone, Debug, PartialEq)]
pub struct GgmlWeight {
    pub shape: Vec<usize>,
    pub format: GgmlType,
    pub bytes: Vec<u8>,
}

impl GgmlWeight {
    /// The weight, checked: the last axis holds whole blocks and `bytes` every block of
    /// `shape`; an MXFP4 weight's scales are in range ([`check_mxfp4_scales`]).
    pub fn new(shape: Vec<usize>, format: GgmlType, bytes: Vec<u8>) -> Result<GgmlWeight, String> {
        let w = GgmlWeight { shape, format, bytes };
        w.check()?;
        Ok(w)
    }

    /// Why the bytes cannot be this weight, if they cannot.
    pub fn check(&self) -> Result<(), String> {
        let (block, size) = (self.format.block_size() as usize, self.format.type_size() as usize);
        let cols = self.shape.last().copied().unwrap_or(0);
        if self.shape.is_empty() || !cols.is_multiple_of(block) {
            return Err(format!(
                "shape {:?} does not hold whole {} blocks of {block} along its last axis",
                self.shape, self.format
            ));
        }
        let numel = self.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let want = numel.and_then(|n| (n / block).checked_mul(size));
        if want != Some(self.bytes.len()) {
            let blocks = self.bytes.len() / size;
            let want_blocks = numel.map_or(usize::MAX, |n| n / block);
            return Err(format!(
                "{} bytes ({blocks} {} blocks) do not hold shape {:?} ({want_blocks} blocks)",
                self.bytes.len(),
                self.format,
                self.shape
            ));
        }
        if self.format == GgmlType::MXFP4 {
            check_mxfp4_scales(&self.bytes)?;
        }
        Ok(())
    }

    /// Bytes of one row (the last axis).
    pub fn row_bytes(&self) -> usize {
        let cols = self.shape.last().copied().unwrap_or(0);
        cols / self.format.block_size() as usize * self.format.type_size() as usize
    }

    /// Every value as f32 (ggml's dequantiser; empty for a format without one here).
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = Vec::new();
        crate::ggml::dequantize_into(self.format, &self.bytes, &mut out);
        out
    }
}

/// Refuses an MXFP4 scale byte above [`MXFP4_MAX_SCALE`] (255 is NaN in the OCP format; from
/// 253 a block's values overflow f32), naming the block.
pub fn check_mxfp4_scales(bytes: &[u8]) -> Result<(), String> {
    match bytes.chunks_exact(MXFP4_BLOCK_BYTES).position(|b| b[0] > MXFP4_MAX_SCALE) {
        Some(i) => {
            let e = bytes[i * MXFP4_BLOCK_BYTES];
            let what = if e == 255 { "NaN in e8m0".to_string() } else { format!("2^{}", i32::from(e) - 127) };
            Err(format!("MXFP4 block {i} has scale byte {e} ({what}); scales are at most {MXFP4_MAX_SCALE} (2^125)"))
        }
        None => Ok(()),
    }
}

/// An MXFP4 weight from the gpt-oss HF layout: `blocks` `[..., rows, groups, 16]` (value
/// `2j` in the low nibble of byte `j`, `2j + 1` in the high one) and `scales`
/// `[..., rows, groups]` e8m0 bytes, regrouped into ggml blocks; the weight is
/// `[..., rows, groups · 32]`. The error is one line naming what does not fit.
pub fn mxfp4_from_hf(
    blocks: &[u8],
    blocks_shape: &[usize],
    scales: &[u8],
    scales_shape: &[usize],
) -> Result<GgmlWeight, String> {
    let n = blocks_shape.len();
    if n < 2 || blocks_shape[n - 1] != QK_MXFP4 / 2 {
        return Err(format!("blocks of shape {blocks_shape:?} are not [..., groups, 16]"));
    }
    if scales_shape != &blocks_shape[..n - 1] {
        return Err(format!(
            "scales of shape {scales_shape:?} do not match blocks of shape {blocks_shape:?} (want {:?}: one per block)",
            &blocks_shape[..n - 1]
        ));
    }
    let count = scales_shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if count != Some(scales.len()) || count.and_then(|c| c.checked_mul(16)) != Some(blocks.len()) {
        return Err(format!(
            "{} block bytes and {} scales do not fill blocks {blocks_shape:?} and scales {scales_shape:?}",
            blocks.len(),
            scales.len()
        ));
    }
    let mut bytes = Vec::with_capacity(scales.len() * MXFP4_BLOCK_BYTES);
    for (packed, &e) in blocks.chunks_exact(16).zip(scales) {
        let nibble = |v: usize| if v.is_multiple_of(2) { packed[v / 2] & 0xF } else { packed[v / 2] >> 4 };
        bytes.push(e);
        bytes.extend((0..16).map(|j| nibble(j) | (nibble(j + 16) << 4)));
    }
    let mut shape = blocks_shape[..n - 1].to_vec();
    shape[n - 2] *= QK_MXFP4;
    GgmlWeight::new(shape, GgmlType::MXFP4, bytes)
}

/// Quantises `values` (row-major, `shape`, blocks of 32 along the last axis) to MXFP4 as
/// ggml's `quantize_row_mxfp4_ref` does: per block the scale byte `floor(log2(amax)) − 2 +
/// 127` (0 for an all-zero block) and each value the nearest of the doubled e2m1 values
/// times half the scale, the first on ties.
pub fn quantize_mxfp4(values: &[f32], shape: &[usize]) -> Result<GgmlWeight, String> {
    let numel = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if numel != Some(values.len()) || shape.last().is_none_or(|d| d % QK_MXFP4 != 0) {
        return Err(format!("cannot quantise {} values of shape {shape:?} to MXFP4 blocks of 32", values.len()));
    }
    let mut bytes = Vec::with_capacity(values.len() / QK_MXFP4 * MXFP4_BLOCK_BYTES);
    for x in values.chunks_exact(QK_MXFP4) {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let e = if amax > 0.0 {
            (amax.log2().floor() - 2.0 + 127.0).clamp(0.0, f32::from(MXFP4_MAX_SCALE)) as u8
        } else {
            0
        };
        let d = e8m0_half(e);
        let nearest = |v: f32| {
            let err = |i: usize| (f32::from(MXFP4_DOUBLED[i]) * d - v).abs();
            (1..16).fold(0usize, |best, i| if err(i) < err(best) { i } else { best }) as u8
        };
        bytes.push(e);
        bytes.extend((0..16).map(|j| nearest(x[j]) | (nearest(x[j + 16]) << 4)));
    }
    GgmlWeight::new(shape.to_vec(), GgmlType::MXFP4, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e8m0_half_is_two_to_the_byte_less_128() {
        for e in 0..=254u8 {
            assert_eq!(e8m0_half(e), 2f64.powi(i32::from(e) - 128) as f32, "byte {e}");
        }
    }

    #[test]
    fn the_hf_layout_regroups_value_for_value() {
        // One row of 64 values: value v of the row is nibble v of the HF row.
        let nibbles: Vec<u8> = (0..64).map(|v| (v * 7 % 16) as u8).collect();
        let packed: Vec<u8> = nibbles.chunks(2).map(|p| p[0] | (p[1] << 4)).collect();
        let w = mxfp4_from_hf(&packed, &[1, 2, 16], &[127, 130], &[1, 2]).unwrap();
        assert_eq!(w.shape, vec![1, 64]);
        let values = w.dequantize();
        for (v, &x) in values.iter().enumerate() {
            let scale = if v < 32 { 1.0 } else { 8.0 };
            assert_eq!(x, f32::from(MXFP4_DOUBLED[usize::from(nibbles[v])]) / 2.0 * scale, "value {v}");
        }
        let err = mxfp4_from_hf(&packed, &[1, 2, 16], &[127], &[1, 1]).unwrap_err();
        assert_eq!(err, "scales of shape [1, 1] do not match blocks of shape [1, 2, 16] (want [1, 2]: one per block)");
        let err = mxfp4_from_hf(&packed, &[1, 2, 16], &[127, 255], &[1, 2]).unwrap_err();
        assert_eq!(err, "MXFP4 block 1 has scale byte 255 (NaN in e8m0); scales are at most 252 (2^125)");
    }
}

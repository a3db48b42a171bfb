//! Dequantisation of the 32-element block formats Q8_0, Q4_0, Q5_0 and MXFP4, and the f16 scale
//! reading every block format shares (`kquants` too). Each writes one block into a slice of
//! exactly its values with fixed-size loops, inlined into the caller, so a consumer widening
//! in place (the simulator's packed weights) runs these very functions, vectorised for its CPU.

use half::f16;

/// Reads the little-endian f16 at `at` as f32.
#[inline(always)]
pub(crate) fn f16_at(block: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([block[at], block[at + 1]]).to_f32()
}

/// `{f16 d; i8 qs[32]}`: `y[i] = d * qs[i]`.
#[inline(always)]
pub(crate) fn q8_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    for (o, &q) in out.iter_mut().zip(&block[2..34]) {
        *o = f32::from(q as i8) * d;
    }
}

/// `{f16 d; u8 qs[16]}`: low nibbles are elements 0..16, high nibbles 16..32, offset by 8.
#[inline(always)]
pub(crate) fn q4_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let qs = &block[2..18];
    let (lo, hi) = out[..32].split_at_mut(16);
    for j in 0..16 {
        lo[j] = f32::from(i16::from(qs[j] & 0xF) - 8) * d;
        hi[j] = f32::from(i16::from(qs[j] >> 4) - 8) * d;
    }
}

/// `{f16 d; u8 qh[4]; u8 qs[16]}`: as Q4_0 with a fifth bit from the little-endian u32 `qh`
/// (bit j for element j, bit j+16 for element j+16), offset by 16.
#[inline(always)]
pub(crate) fn q5_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
    let qs = &block[6..22];
    let (lo, hi) = out[..32].split_at_mut(16);
    for j in 0..16 {
        let high = (((qh >> j) & 1) << 4) as u8;
        lo[j] = f32::from(i16::from((qs[j] & 0xF) | high) - 16) * d;
        let high = (((qh >> (j + 16)) & 1) << 4) as u8;
        hi[j] = f32::from(i16::from((qs[j] >> 4) | high) - 16) * d;
    }
}

/// The largest scale byte whose block values all stay finite in f32: `6 · 2^(e − 127)` is
/// finite up to `e = 252`; 255 is NaN in the OCP format.
pub const MXFP4_MAX_SCALE: u8 = 252;

/// The e2m1 values of the 16 nibbles, doubled to integers as ggml keeps them
/// (`kvalues_mxfp4`: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives, times two).
pub const MXFP4_DOUBLED: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// Half the scale a block's e8m0 byte stands for, `2^(e − 128)` (ggml's
/// `GGML_E8M0_TO_FP32_HALF`: the doubled values times half the scale are the e2m1 values
/// times the scale). Exact; bytes 0 and 1 give subnormals.
#[inline(always)]
pub fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 { 0x0020_0000u32 << e } else { (u32::from(e) - 1) << 23 };
    f32::from_bits(bits)
}

/// One ggml MXFP4 block (17 bytes) into its 32 values: `kvalues[nibble] · e8m0_half(e)`.
#[inline(always)]
pub(crate) fn mxfp4(block: &[u8], out: &mut [f32]) {
    let d = e8m0_half(block[0]);
    let qs = &block[1..17];
    let (lo, hi) = out[..32].split_at_mut(16);
    for j in 0..16 {
        lo[j] = f32::from(MXFP4_DOUBLED[usize::from(qs[j] & 0xF)]) * d;
        hi[j] = f32::from(MXFP4_DOUBLED[usize::from(qs[j] >> 4)]) * d;
    }
}

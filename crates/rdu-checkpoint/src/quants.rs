//! Dequantisation of the 32-element block formats Q8_0, Q4_0 and Q5_0, and the f16 scale
//! reading every block format shares (`kquants` too).

use half::f16;

/// Reads the little-endian f16 at `at` as f32.
pub(crate) fn f16_at(block: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([block[at], block[at + 1]]).to_f32()
}

/// `{f16 d; i8 qs[32]}`: `y[i] = d * qs[i]`.
pub(crate) fn q8_0(block: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(block, 0);
    out.extend(block[2..34].iter().map(|&q| f32::from(q as i8) * d));
}

/// `{f16 d; u8 qs[16]}`: low nibbles are elements 0..16, high nibbles 16..32, offset by 8.
pub(crate) fn q4_0(block: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(block, 0);
    let qs = &block[2..18];
    out.extend(qs.iter().map(|&q| f32::from(i16::from(q & 0xF) - 8) * d));
    out.extend(qs.iter().map(|&q| f32::from(i16::from(q >> 4) - 8) * d));
}

/// `{f16 d; u8 qh[4]; u8 qs[16]}`: as Q4_0 with a fifth bit from the little-endian u32 `qh`
/// (bit j for element j, bit j+16 for element j+16), offset by 16.
pub(crate) fn q5_0(block: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(block, 0);
    let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
    let qs = &block[6..22];
    let value = |low: u8, bit: usize| {
        let high = (((qh >> bit) & 1) << 4) as u8;
        f32::from(i16::from(low | high) - 16) * d
    };
    out.extend(qs.iter().enumerate().map(|(j, &q)| value(q & 0xF, j)));
    out.extend(qs.iter().enumerate().map(|(j, &q)| value(q >> 4, j + 16)));
}

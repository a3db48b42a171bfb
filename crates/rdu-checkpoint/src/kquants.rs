//! Dequantisation of the 256-element k-quant super-blocks Q4_K, Q5_K and Q6_K (not their quantisation).

use crate::quants::f16_at;

/// `{f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}`: 8 sub-blocks of 32 with 6-bit scales/mins.
pub(crate) fn q4_k(block: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(block, 0);
    let dmin = f16_at(block, 2);
    let scales = &block[4..16];
    let qs = &block[16..144];
    for chunk in 0..4 {
        let q = &qs[32 * chunk..32 * chunk + 32];
        let (d1, m1) = sub_block(d, dmin, scales, 2 * chunk);
        let (d2, m2) = sub_block(d, dmin, scales, 2 * chunk + 1);
        out.extend(q.iter().map(|&x| d1 * f32::from(x & 0xF) - m1));
        out.extend(q.iter().map(|&x| d2 * f32::from(x >> 4) - m2));
    }
}

/// `{f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}`: as Q4_K with a fifth bit per
/// element: for chunk c, element `64c+l` takes bit `2c` of `qh[l]`, element `64c+32+l` bit `2c+1`.
pub(crate) fn q5_k(block: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(block, 0);
    let dmin = f16_at(block, 2);
    let scales = &block[4..16];
    let qh = &block[16..48];
    let qs = &block[48..176];
    for chunk in 0..4 {
        let q = &qs[32 * chunk..32 * chunk + 32];
        let (d1, m1) = sub_block(d, dmin, scales, 2 * chunk);
        let (d2, m2) = sub_block(d, dmin, scales, 2 * chunk + 1);
        let high = |l: usize, bit: usize| ((qh[l] >> bit) & 1) << 4;
        out.extend(q.iter().enumerate().map(|(l, &x)| d1 * f32::from((x & 0xF) | high(l, 2 * chunk)) - m1));
        out.extend(q.iter().enumerate().map(|(l, &x)| d2 * f32::from((x >> 4) | high(l, 2 * chunk + 1)) - m2));
    }
}

/// `{u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}`: 16 sub-blocks of 16 with 8-bit scales,
/// 6-bit quants (4 low bits in `ql`, 2 high bits in `qh`) offset by 32.
pub(crate) fn q6_k(block: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(block, 208);
    let scales = &block[192..208];
    let start = out.len();
    out.resize(start + 256, 0.0);
    let y = &mut out[start..];
    for half in 0..2 {
        let ql = &block[64 * half..64 * half + 64];
        let qh = &block[128 + 32 * half..128 + 32 * half + 32];
        for l in 0..32 {
            let quants = [
                (ql[l] & 0xF) | ((qh[l] & 3) << 4),
                (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4),
                (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4),
            ];
            for (k, &q) in quants.iter().enumerate() {
                let idx = 128 * half + l + 32 * k;
                let scale = f32::from(scales[idx / 16] as i8);
                y[idx] = d * scale * f32::from(i16::from(q) - 32);
            }
        }
    }
}

/// Scale `d*sc` and offset `dmin*m` of sub-block `j` from the 12 packed 6-bit scale bytes.
fn sub_block(d: f32, dmin: f32, scales: &[u8], j: usize) -> (f32, f32) {
    let (sc, m) = if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        ((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4), (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))
    };
    (d * f32::from(sc), dmin * f32::from(m))
}
